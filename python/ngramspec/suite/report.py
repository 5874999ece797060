"""The suite's Markdown report and its raw JSON, written side by side with the plots."""
from __future__ import annotations

import json
import math
import os
import platform
import re
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ngramspec.suite.cells import number, percent, ratio, size_ranges, spread
from ngramspec.suite.headline import median_or_nan as _median
from ngramspec.suite.http_overhead import HTTP_OVERHEAD_GOAL, http_overhead, http_section
from ngramspec.suite.methods import METHODS, SERVE_METHOD
from ngramspec.suite.run_record import Run
from ngramspec.suite.runner import Suite
from ngramspec.suite.summary import MethodFigures, WorkloadFigures, geomean


def machine(suite: Suite) -> str:
    import llama_cpp

    from ngramspec.builds.build_info import build_label
    from ngramspec.suite.provenance import cpu_name

    return (f"{cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"llama-cpp-python {llama_cpp.__version__} ({build_label()}), "
            f"n_threads={suite.threads}, n_threads_batch={suite.threads_batch}, {suite.settings.describe()}"
            + (f", the model on RPC workers {suite.rpc}" if suite.rpc else ""))


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
    lines = _header(suite, rounds, command, commit)
    lines += _decode_speed_section(figs, others)
    lines += _divergence_lines(figs, others)
    lines += _failure_lines(figs, others)
    lines += llama_server_section(figs, methods)
    if SERVE_METHOD in methods and runs:
        lines += [""] + http_section(http_overhead(suite, runs))
    lines += _detail_section(figs)
    lines += _prefill_section(figs, methods)
    lines += _rss_section(rss)
    lines += _workloads_section(suite)
    lines += _plots_section(plots)
    return "\n".join(lines) + "\n"


def _header(suite: Suite, rounds: int, command: str, commit: str) -> list[str]:
    """The title and how the figures were made: machine, commit, rounds, timing, r(B), exact sizes."""
    cost = suite.cost
    exact = [b for b in range(1, len(cost.relative) + 1)
             if b == 1 or suite.invariance.allows(b)]
    return [
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
        f"- Bit-exact verify batch sizes on this build: {size_ranges(exact)}. ngramspec and the limits use only "
        "these.",
        "- Model-free limit: an oracle that drafts only what followed an earlier occurrence of the token just "
        "emitted in the context (prompt plus output so far) and knows how far each copy stays right, with "
        "draft lengths chosen by dynamic "
        "programming under the measured r(B) and the exact batch sizes. Perfect: every draft right. "
        "'% of limit' is a method's measured decode speed-up over the limit's.",
    ]


def _decode_speed_section(figs: Sequence[WorkloadFigures], others: Sequence[str]) -> list[str]:
    """Each method's decode speed-up per workload, the limits, and the geometric means."""
    lines = [
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
            cell = ratio(mf.speedup) + spread(mf.speedups)
            if mf.failed:
                cell += f" [failed on {mf.failed} run(s)]"
            row.append(cell)
        row += [ratio(f.limit.speedup), ratio(f.perfect.speedup)]
        row += [percent(f.methods.get(m, _NOT_RUN).speedup / f.limit.speedup) for m in others]
        row.append(", ".join(f"{m}: {_identity(f.methods[m])}" for m in others if m in f.methods))
        lines.append("| " + " | ".join(row) + " |")
    gm = ["**geometric mean**", "", "", ""]
    gm += [ratio(geomean([f.methods[m].speedup for f in figs if m in f.methods])) for m in others]
    gm += [ratio(geomean([f.limit.speedup for f in figs])), ratio(geomean([f.perfect.speedup for f in figs]))]
    gm += [percent(geomean([f.methods[m].speedup / f.limit.speedup for f in figs if m in f.methods]))
           for m in others] + [""]
    lines.append("| " + " | ".join(gm) + " |")
    return lines


def _divergence_lines(figs: Sequence[WorkloadFigures], others: Sequence[str]) -> list[str]:
    """The methods whose text differed from plain greedy, and how often."""
    drift = [m for m in others if any(f.methods[m].diverged for f in figs if m in f.methods)]
    if not drift:
        return []
    lines = ["", "Runs whose text differs from plain greedy (first divergences per 1,000 generated tokens, "
             "over every workload):"]
    for m in drift:
        n = sum(f.methods[m].diverged for f in figs if m in f.methods)
        tokens = sum(f.methods[m].tokens for f in figs if m in f.methods)
        ran = sum(len(f.methods[m].speedups) * f.prompts for f in figs if m in f.methods)
        lines.append(f"- {m}: {n} of {ran} runs, "
                     f"{1000.0 * n / tokens if tokens else math.nan:.2f} per 1,000 tokens")
    return lines


def _failure_lines(figs: Sequence[WorkloadFigures], others: Sequence[str]) -> list[str]:
    """The first error of each method that failed on a workload."""
    errors = {(f.name, m): f.methods[m].error for f in figs for m in others if m in f.methods and f.methods[m].error}
    if not errors:
        return []
    return (["", "Failures (the run is left out of that method's figures):"]
            + [f"- {m} on {w}: `{e[:200]}`" for (w, m), e in errors.items()])


def llama_server_section(figs: Sequence[WorkloadFigures], methods: Sequence[str]) -> list[str]:
    """Each ngramspec method's decode speed against the best llama-server n-gram mode on its own
    llama.cpp build, per workload: one table per build that ran llama-server."""
    builds = sorted({m.split("llama-server ")[0] for m in methods if "llama-server " in m})   # '' first
    tables = [t for b in builds for t in _server_table(figs, methods, b)]
    if not tables:
        return []
    return ["", "## ngramspec against llama.cpp's own n-gram modes", "",
            "Absolute decode speed (tokens/s, prefill excluded). Each ngramspec method is set against the best "
            "llama-server n-gram mode per workload on the same llama.cpp build flags, model file and thread "
            "count; 'llama-server none' is that server decoding plainly."] + tables


def _server_table(figs: Sequence[WorkloadFigures], methods: Sequence[str], build: str) -> list[str]:
    """The table for one build: ``build`` is its methods' name prefix ('' for this process's)."""
    servers = [m for m in methods if m.startswith(f"{build}llama-server ") and m != f"{build}llama-server none"]
    ours = [m for m in methods if m.startswith(f"{build}ngramspec")]
    if not servers or not ours:
        return []
    none = f"{build}llama-server none"
    title = f"the other build (its methods named '{build.strip()} ...')" if build else "this process's build"
    lines = ["", f"On {title}:", "",
             "| workload | llama-server none | best llama-server mode | its tok/s | "
             + " | ".join(f"{m} | {m} / best mode" for m in ours) + " |",
             "|---" * (4 + 2 * len(ours)) + "|"]
    ratios: dict[str, list[float]] = {m: [] for m in ours}
    for f in figs:
        best = max(servers, key=lambda m: _tok_s(f, m, default=-1.0))
        theirs = _tok_s(f, best)
        row = [f.name, number(_tok_s(f, none)), best[len(f"{build}llama-server "):], number(theirs)]
        for m in ours:
            mine = _tok_s(f, m)
            ratios[m].append(mine / theirs)
            row += [number(mine), ratio(mine / theirs)]
        lines.append("| " + " | ".join(row) + " |")
    gm = ["**geometric mean**", "", "", ""] + [c for m in ours for c in ("", ratio(geomean(ratios[m])))]
    low = ["**lowest**", "", "", ""] + [c for m in ours for c in ("", ratio(_lowest(ratios[m])))]
    return lines + ["| " + " | ".join(gm) + " |", "| " + " | ".join(low) + " |"]


def _tok_s(f: WorkloadFigures, method: str, default: float = math.nan) -> float:
    """A method's median decode tokens/s on a workload; ``default`` where it did not run or failed."""
    mf = f.methods.get(method)
    return default if mf is None or math.isnan(mf.decode_tok_s) else mf.decode_tok_s


def _lowest(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return min(vals) if vals else math.nan


def _detail_section(figs: Sequence[WorkloadFigures]) -> list[str]:
    """ngramspec's acceptance, tokens per pass and verify batch sizes, per workload."""
    lines = ["", "## ngramspec detail", "",
             "| workload | acceptance | tokens per pass | oracle tokens per pass | acceptance by draft position "
             "| verify batch sizes used (size: passes) |", "|---|---|---|---|---|---|"]
    for f in figs:
        pos = " ".join("-" if math.isnan(a) else f"{a:.2f}" for a in f.acceptance_by_position[:8])
        sizes = ", ".join(f"{b}: {n}" for b, n in f.verify_sizes.items())
        lines.append(f"| {f.name} | {percent(f.acceptance)} | {f.tokens_per_pass:.2f} | "
                     f"{f.limit.tokens_per_pass:.2f} | {pos} | {sizes} |")
    return lines


def _prefill_section(figs: Sequence[WorkloadFigures], methods: Sequence[str]) -> list[str]:
    """Each method's time to the first token, per workload."""
    lines = ["", "## Prefill (seconds to the first token, summed over a workload's prompts)", "",
             "| workload | prompt tokens | " + " | ".join(methods) + " |", "|---" * (2 + len(methods)) + "|"]
    for f in figs:
        lines.append(f"| {f.name} | {f.prompt_tokens} | "
                     + " | ".join(number(f.methods.get(m, _NOT_RUN).prefill_s) for m in methods) + " |")
    return lines


def _rss_section(rss: dict[str, float]) -> list[str]:
    """Each method's peak resident memory, when it was measured."""
    if not rss:
        return []
    return ["", "## Peak RSS", "",
            "A fresh process per method loads the model and runs the longest prompt that every method "
            "completed; its peak resident memory:",
            "", "| " + " | ".join(rss) + " |", "|---" * len(rss) + "|",
            "| " + " | ".join(f"{v:.0f} MiB" for v in rss.values()) + " |"]


def _workloads_section(suite: Suite) -> list[str]:
    """What each workload is and where its text comes from."""
    return (["", "## Workloads", "", "| workload | what | source |", "|---|---|---|"]
            + [f"| {w.name} | {w.description} | {w.source} |" for w in suite.workloads])


def _plots_section(plots: Sequence[str]) -> list[str]:
    """The plots, as images beside the report."""
    if not plots:
        return []
    return ["", "## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots]


# A method that did not run on a workload (the prediction methods need items with a prediction).
_NOT_RUN = MethodFigures(math.nan, math.nan, [], False)


def _identity(mf: MethodFigures) -> str:
    if mf.failed and not mf.speedups:
        return "failed"
    return "yes" if mf.identical else "NO"


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
        "llama_settings": asdict(suite.settings),
        "verify_cost": suite.cost.relative, "single_token_seconds": suite.cost.single_seconds,
        "invariant_sizes": suite.invariance.invariant_sizes, "peak_rss_mib": rss,
        "workloads": [f.to_json() for f in figs],
        # Texts only for plain's first round (the others are compared in "identical"),
        # to keep the committed JSON small.
        "runs": [{k: v for k, v in asdict(r).items()
                  if k != "output_ids" and (k != "text" or (r.method == "plain" and r.round == 0))}
                 for r in runs],
        **extra,
    }


def json_safe(value: Any) -> Any:
    """NaN (a figure with nothing to measure) becomes null: strict JSON has no NaN."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write(out_dir: Path, suite: Suite, figs: Sequence[WorkloadFigures], runs: Sequence[Run], rounds: int,
          command: str, commit: str, rss: dict[str, float], plot: bool = True) -> Path:
    """Writes <slug>.md, <slug>.json and the PNG plots into out_dir; returns the .md path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    name = "suite-" + slug(suite.model) + ("-quick" if suite.quick else "")
    # The JSON (every run) first: should the plots or the Markdown fail, the runs are kept.
    data = json_safe(to_json(suite, figs, runs, command, commit, rss))
    (out_dir / f"{name}.json").write_text(json.dumps(data, indent=1, allow_nan=False))
    plots: list[str] = []
    if plot:
        from ngramspec.suite.plots import draw_all

        plots = draw_all(out_dir, name, suite, figs)
    md = out_dir / f"{name}.md"
    md.write_text(to_markdown(suite, figs, rounds, command, commit, rss, plots, runs))
    return md
