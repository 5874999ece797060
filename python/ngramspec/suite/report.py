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

from .runner import METHODS, Run, Suite
from .summary import MethodFigures, WorkloadFigures, geomean


def _x(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.2f}x"


def _spread(values: Sequence[float]) -> str:
    return f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else ""


def _pct(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.0%}"


def machine(suite: Suite) -> str:
    import llama_cpp

    from ..provenance import cpu_name

    return (f"{cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"llama-cpp-python {llama_cpp.__version__} (built by scripts/install_llama_cpp.py), "
            f"n_threads={suite.threads}")


def slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", Path(model).stem if os.path.sep in model else model).strip("-").lower()


def to_markdown(suite: Suite, figs: Sequence[WorkloadFigures], rounds: int, command: str, commit: str,
                rss: dict[str, float], plots: Sequence[str]) -> str:
    methods = suite.methods
    others = [m for m in methods if m != "plain"]
    cost = suite.cost
    exact = [b for b in range(1, len(cost.relative) + 1)
             if b == 1 or (suite.invariance.results.get(b) and suite.invariance.results[b].invariant)]
    lines = [
        f"# Benchmark suite: {suite.model}{' (quick)' if suite.quick else ''}",
        "",
        f"- Machine: {machine(suite)}.",
        f"- Commit: {commit}. Command: `{command}`.",
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
        from .plots import draw_all

        plots = draw_all(out_dir, name, suite, figs)
    md = out_dir / f"{name}.md"
    md.write_text(to_markdown(suite, figs, rounds, command, commit, rss, plots))
    data = _finite(to_json(suite, figs, runs, command, commit, rss))
    (out_dir / f"{name}.json").write_text(json.dumps(data, indent=1, allow_nan=False))
    return md
