"""The suite's Markdown report and its raw JSON, written side by side with the plots."""
from __future__ import annotations

import json
import math
import os
import platform
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ngramspec.suite.headline import median_or_nan as _median
from ngramspec.suite.runner import METHODS, SERVE_METHOD, Run, Suite
from ngramspec.suite.summary import MethodFigures, WorkloadFigures, geomean


def _x(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.2f}x"


def _spread(values: Sequence[float]) -> str:
    return f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else ""


def _pct(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.0%}"


def machine(suite: Suite) -> str:
    import llama_cpp

    from ngramspec.builds.build_info import build_label
    from ngramspec.suite.provenance import cpu_name

    return (f"{cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"llama-cpp-python {llama_cpp.__version__} ({build_label()}), "
            f"n_threads={suite.threads}, n_threads_batch={suite.threads_batch}")


def builds_line(suite: Suite) -> list[str]:
    """Which methods ran on which build, when a second build took part."""
    other = suite.other
    if other is None:
        return []
    from ngramspec.builds.build_info import build_label

    return [f"- Two llama.cpp builds, side by side: 'plain', 'ngramspec' and the rest ran on this process's "
            f"({build_label()}); {', '.join(repr(m) for m in other.methods)} ran on "
            f"{build_label(other.info['system_info'])} (llama-cpp-python {other.info['version']}, "
            f"{other.info['python']}). Every speed-up is over 'plain'; each method's identity is with its own "
            "build's plain decoding."]


def slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", Path(model).stem if os.path.sep in model else model).strip("-").lower()


def to_markdown(suite: Suite, figs: Sequence[WorkloadFigures], rounds: int, command: str, commit: str,
                rss: dict[str, float], plots: Sequence[str], runs: Sequence[Run] = ()) -> str:
    methods = suite.methods
    others = [m for m in methods if m != "plain"]
    cost = suite.cost
    exact = [b for b in range(1, len(cost.relative) + 1)
             if b == 1 or suite.invariance.allows(b)]
    lines = [
        f"# Benchmark suite: {suite.model}{' (quick)' if suite.quick else ''}",
        "",
        f"- Machine: {machine(suite)}.",
        f"- Commit: {commit}. Command: `{command}`.",
        *builds_line(suite),
        f"- {rounds} interleaved round(s); within a round each prompt runs every method back to back, in an "
        "order that rotates by round. Greedy decoding. Figures are medians over rounds; "
        "(a-b) is the spread (min-max) over rounds.",
        "- Decode speed excludes prefill: it counts the tokens after the first, over the time after the "
        "first token was chosen. Speed-ups are decode tokens/s over plain's, measured round by round on "
        "the same prompts, then the median taken.",
        f"- Verify cost r(B) (llama_decode of B tokens / one token, one token = {cost.single_seconds * 1e3:.1f} ms): "
        + ", ".join(f"{b}: {c:.2f}" for b, c in enumerate(cost.relative, 1)) + ".",
        f"- Bit-exact verify batch sizes on this build: {_ranges(exact)}. ngramspec and the limits use only these.",
        "- Model-free limit: an oracle that drafts only what followed an earlier occurrence of the token just "
        "emitted in the context (prompt plus output so far) and knows how far each copy stays right, with "
        "draft lengths chosen by dynamic "
        "programming under the measured r(B) and the exact batch sizes. Perfect: every draft right. "
        "'% of limit' is a method's measured decode speed-up over the limit's.",
        "",
        "## Decode speed",
        "",
        "| workload | prompts | output tokens | plain tok/s | " + " | ".join(f"{m} speed-up" for m in others)
        + " | model-free limit | perfect | " + " | ".join(f"{m} % of limit" for m in others)
        + " | identical to plain |",
        "|---" * (6 + 2 * len(others)) + "|",
    ]
    for f in figs:
        row = [f.name, str(f.prompts), str(f.output_tokens), f"{f.methods['plain'].decode_tok_s:.1f}"]
        for m in others:
            mf = f.methods.get(m, _NOT_RUN)
            cell = _x(mf.speedup) + _spread(mf.speedups)
            if mf.failed:
                cell += f" [failed on {mf.failed} run(s)]"
            row.append(cell)
        row += [_x(f.limit.speedup), _x(f.perfect.speedup)]
        row += [_pct(f.methods.get(m, _NOT_RUN).speedup / f.limit.speedup) for m in others]
        row.append(", ".join(f"{m}: {_identity(f.methods[m])}" for m in others if m in f.methods))
        lines.append("| " + " | ".join(row) + " |")
    gm = ["**geometric mean**", "", "", ""]
    gm += [_x(geomean([f.methods[m].speedup for f in figs if m in f.methods])) for m in others]
    gm += [_x(geomean([f.limit.speedup for f in figs])), _x(geomean([f.perfect.speedup for f in figs]))]
    gm += [_pct(geomean([f.methods[m].speedup / f.limit.speedup for f in figs if m in f.methods]))
           for m in others] + [""]
    lines.append("| " + " | ".join(gm) + " |")
    drift = [m for m in others if any(f.methods[m].diverged for f in figs if m in f.methods)]
    if drift:
        lines += ["", "Runs whose text differs from plain greedy (first divergences per 1,000 generated tokens, "
                  "over every workload):"]
        for m in drift:
            n = sum(f.methods[m].diverged for f in figs if m in f.methods)
            tokens = sum(f.methods[m].tokens for f in figs if m in f.methods)
            ran = sum(len(f.methods[m].speedups) * f.prompts for f in figs if m in f.methods)
            lines.append(f"- {m}: {n} of {ran} runs, "
                         f"{1000.0 * n / tokens if tokens else math.nan:.2f} per 1,000 tokens")
    errors = {(f.name, m): f.methods[m].error for f in figs for m in others if m in f.methods and f.methods[m].error}
    if errors:
        lines += ["", "Failures (the run is left out of that method's figures):"]
        lines += [f"- {m} on {w}: `{e[:200]}`" for (w, m), e in errors.items()]

    servers = [m for m in methods if m.startswith("llama-server ") and m != "llama-server none"]
    if servers:
        lines += ["", "## ngramspec against llama.cpp's own n-gram modes", "",
                  "Absolute decode speed (tokens/s, prefill excluded). llama-server's modes run on the same "
                  "model file, llama.cpp build flags and thread count; 'llama-server none' is the server "
                  "decoding plainly.", "",
                  "| workload | ngramspec | llama-server none | best llama-server mode | its tok/s | "
                  "ngramspec / best mode |", "|---|---|---|---|---|---|"]
        ratios = []
        for f in figs:
            best = max(servers, key=lambda m: -1.0 if math.isnan(f.methods[m].decode_tok_s)
                       else f.methods[m].decode_tok_s)
            ours, theirs = f.methods["ngramspec"].decode_tok_s, f.methods[best].decode_tok_s
            ratios.append(ours / theirs)
            none = f.methods["llama-server none"].decode_tok_s if "llama-server none" in methods else math.nan
            lines.append(f"| {f.name} | {ours:.1f} | {none:.1f} | {best[len('llama-server '):]} | {theirs:.1f} | "
                         f"{_x(ours / theirs)} |")
        lines.append(f"| **geometric mean** | | | | | {_x(geomean(ratios))} |")

    if SERVE_METHOD in methods and runs:
        lines += [""] + http_section(http_overhead(suite, runs))

    lines += ["", "## ngramspec detail", "",
              "| workload | acceptance | tokens per pass | oracle tokens per pass | acceptance by draft position "
              "| verify batch sizes used (size: passes) |", "|---|---|---|---|---|---|"]
    for f in figs:
        pos = " ".join("-" if math.isnan(a) else f"{a:.2f}" for a in f.acceptance_by_position[:8])
        sizes = ", ".join(f"{b}: {n}" for b, n in f.verify_sizes.items())
        lines.append(f"| {f.name} | {_pct(f.acceptance)} | {f.tokens_per_pass:.2f} | {f.limit.tokens_per_pass:.2f} "
                     f"| {pos} | {sizes} |")

    lines += ["", "## Prefill (seconds to the first token, summed over a workload's prompts)", "",
              "| workload | prompt tokens | " + " | ".join(methods) + " |", "|---" * (2 + len(methods)) + "|"]
    for f in figs:
        lines.append(f"| {f.name} | {f.prompt_tokens} | "
                     + " | ".join(_seconds(f.methods.get(m, _NOT_RUN).prefill_s) for m in methods) + " |")

    if rss:
        lines += ["", "## Peak RSS", "",
                  "A fresh process per method loads the model and runs the longest prompt that every method "
                  "completed; its peak resident memory:",
                  "", "| " + " | ".join(rss) + " |", "|---" * len(rss) + "|",
                  "| " + " | ".join(f"{v:.0f} MiB" for v in rss.values()) + " |"]

    lines += ["", "## Workloads", "", "| workload | what | source |", "|---|---|---|"]
    lines += [f"| {w.name} | {w.description} | {w.source} |" for w in suite.workloads]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    return "\n".join(lines) + "\n"


# `ngramspec serve` (issue 18): what HTTP adds to in-process ngramspec's decode time.
HTTP_OVERHEAD_GOAL = 0.02


@dataclass
class HttpOverhead:
    """One workload's `ngramspec serve` requests, each paired with the in-process
    ngramspec run of the same item and round."""
    workload: str
    requests: int                    # server requests that completed
    inproc_tok_s: float              # in-process ngramspec decode tok/s (engine's timers), median over rounds
    server_tok_s: float              # the server's decode tok/s from its own timings, median over rounds
    latency_ms: float                # median end-to-end latency per request (client side)
    overhead_ms: float               # median of latency - (prompt_ms + predicted_ms) per request
    overhead: list[float] = field(default_factory=list)  # per paired request: that / in-process decode time

    @property
    def overhead_median(self) -> float:
        return _median(self.overhead)


def _engine_decode(r: Run) -> tuple[int, float]:
    """(decode tokens, decode seconds) by the engine's own timers, the same split as
    the server's timings (predicted_ms = time_total - time_prefill)."""
    s = r.stats
    if "predicted_ms" in s:
        return max(0, r.tokens - 1), float(s["predicted_ms"]) / 1e3
    return max(0, r.tokens - 1), max(0.0, float(s.get("time_total_s", 0.0)) - float(s.get("time_prefill_s", 0.0)))


def _engine_rate(runs: Sequence[Run]) -> float:
    """Median over rounds of decode tokens / decode seconds (the engine's timers)."""
    rates = []
    for rnd in sorted({r.round for r in runs}):
        n, t = 0, 0.0
        for r in runs:
            if r.round == rnd:
                dn, dt = _engine_decode(r)
                n, t = n + dn, t + dt
        if t > 0:
            rates.append(n / t)
    return _median(rates)


def http_overhead(suite: Suite, runs: Sequence[Run]) -> list[HttpOverhead]:
    """Per workload: `ngramspec serve`'s decode speed and end-to-end latency, and
    HTTP overhead = (latency - (prompt_ms + predicted_ms)) / in-process ngramspec's
    decode time (the runner's wall clock, after the first token) on the same item and round."""
    out = []
    for w in suite.workloads:
        mine = [r for r in runs if r.workload == w.name and not r.error]
        served = [r for r in mine if r.method == SERVE_METHOD and "latency_s" in r.stats]
        inproc = [r for r in mine if r.method == "ngramspec"]
        pair = {(r.item, r.round): r for r in inproc}
        overhead_s = [r.stats["latency_s"] - (r.stats["prompt_ms"] + r.stats["predicted_ms"]) / 1e3 for r in served]
        ratios = [o / pair[(r.item, r.round)].decode_s for r, o in zip(served, overhead_s)
                  if (r.item, r.round) in pair and pair[(r.item, r.round)].decode_s > 0]
        out.append(HttpOverhead(w.name, len(served), _engine_rate(inproc) if inproc else math.nan,
                                _engine_rate(served) if served else math.nan,
                                _median([r.stats["latency_s"] * 1e3 for r in served]),
                                _median([o * 1e3 for o in overhead_s]), ratios))
    return out


def _signed_pct(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:+.2%}"


def http_section(rows: Sequence[HttpOverhead]) -> list[str]:
    """The report's section on `ngramspec serve` against in-process ngramspec."""
    lines = ["## HTTP overhead (ngramspec serve vs in-process ngramspec)", "",
             "`ngramspec serve` in a subprocess on the same model file, n_ctx and threads, sent each prompt as a "
             "greedy /v1/completions request over loopback (Python's urllib, a new connection per request). "
             "Decode tok/s here are both by the engine's own timers (tokens after the first over time_total - "
             "time_prefill; the server reports them as timings.predicted_n / predicted_ms). Latency is end to "
             "end, measured by the client. HTTP overhead per request = (latency - (prompt_ms + predicted_ms)) / "
             "the in-process ngramspec run's decode time on the same prompt and round: what serving adds "
             "(HTTP, JSON, request validation, the wrapper, the thread hop). The server's Llama is not reset "
             "between requests, so its prefill may reuse a cached prompt prefix.", "",
             "| workload | requests | in-process decode tok/s | server decode tok/s | server / in-process | "
             "median latency per request | median overhead per request | HTTP overhead (median) |",
             "|---|---|---|---|---|---|---|---|"]
    for h in rows:
        ratio = h.server_tok_s / h.inproc_tok_s if h.inproc_tok_s > 0 else math.nan
        lines.append(f"| {h.workload} | {h.requests} | {h.inproc_tok_s:.1f} | {h.server_tok_s:.1f} | {_x(ratio)} | "
                     f"{h.latency_ms:.0f} ms | {h.overhead_ms:.1f} ms | {_signed_pct(h.overhead_median)} |")
    every = [v for h in rows for v in h.overhead]
    overall = _median(every)
    lines.append(f"| **all requests** | {sum(h.requests for h in rows)} | | | | | | {_signed_pct(overall)} |")
    if math.isnan(overall):
        verdict = "no request could be paired with an in-process ngramspec run (is 'ngramspec' among the methods?)"
    else:
        verdict = (f"median HTTP overhead {overall:.2%} of in-process decode time over {len(every)} requests: "
                   + ("under" if overall < HTTP_OVERHEAD_GOAL else "NOT under")
                   + f" the {HTTP_OVERHEAD_GOAL:.0%} goal (issue 18)")
    lines += ["", f"Goal: HTTP adds under {HTTP_OVERHEAD_GOAL:.0%} to ngramspec's in-process decode time; {verdict}."]
    return lines


# A method that did not run on a workload (the prediction methods need items with a prediction).
_NOT_RUN = MethodFigures(math.nan, math.nan, [], False)


def _identity(mf: MethodFigures) -> str:
    if mf.failed and not mf.speedups:
        return "failed"
    return "yes" if mf.identical else "NO"


def _seconds(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.2f}"


def _ranges(sizes: Sequence[int]) -> str:
    out, start = [], None
    for i, b in enumerate(sizes):
        if start is None:
            start = b
        if i + 1 == len(sizes) or sizes[i + 1] != b + 1:
            out.append(f"{start}" if start == b else f"{start}-{b}")
            start = None
    return ", ".join(out)


def to_json(suite: Suite, figs: Sequence[WorkloadFigures], runs: Sequence[Run], command: str, commit: str,
            rss: dict[str, float]) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if SERVE_METHOD in suite.methods:
        rows = http_overhead(suite, runs)
        extra["http_overhead"] = {
            "goal": HTTP_OVERHEAD_GOAL,
            "median": _median([v for h in rows for v in h.overhead]),
            "workloads": [{**asdict(h), "overhead_median": h.overhead_median} for h in rows]}
    from ngramspec.builds.build_info import build_tag

    extra["build"] = build_tag()
    if suite.other is not None:
        extra["other_build"] = {"label": suite.other.label, "methods": list(suite.other.methods),
                                "plain": suite.other.plain, "version": suite.other.info["version"],
                                "system_info": suite.other.info["system_info"]}
    return {
        "model": suite.model, "quick": suite.quick, "machine": machine(suite), "command": command,
        "commit": commit, "methods": list(suite.methods), "all_methods": list(METHODS),
        "verify_cost": suite.cost.relative, "single_token_seconds": suite.cost.single_seconds,
        "invariant_sizes": suite.invariance.invariant_sizes, "peak_rss_mib": rss,
        "workloads": [{**asdict(f), "limit_speedup": f.limit.speedup, "perfect_speedup": f.perfect.speedup}
                      for f in figs],
        # Texts only for plain's first round (the others are compared in "identical"),
        # to keep the committed JSON small.
        "runs": [{k: v for k, v in asdict(r).items()
                  if k != "output_ids" and (k != "text" or (r.method == "plain" and r.round == 0))}
                 for r in runs],
        **extra,
    }


def _finite(value: Any) -> Any:
    """NaN (a figure with nothing to measure) becomes null: strict JSON has no NaN."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write(out_dir: Path, suite: Suite, figs: Sequence[WorkloadFigures], runs: Sequence[Run], rounds: int,
          command: str, commit: str, rss: dict[str, float], plot: bool = True) -> Path:
    """Writes <slug>.md, <slug>.json and the PNG plots into out_dir; returns the .md path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    name = "suite-" + slug(suite.model) + ("-quick" if suite.quick else "")
    plots: list[str] = []
    if plot:
        from ngramspec.suite.plots import draw_all

        plots = draw_all(out_dir, name, suite, figs)
    md = out_dir / f"{name}.md"
    md.write_text(to_markdown(suite, figs, rounds, command, commit, rss, plots, runs))
    data = _finite(to_json(suite, figs, runs, command, commit, rss))
    (out_dir / f"{name}.json").write_text(json.dumps(data, indent=1, allow_nan=False))
    return md
