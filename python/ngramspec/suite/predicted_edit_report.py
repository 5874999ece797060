"""The predicted-edit benchmark's report: Markdown (one function per section,
the goals met or missed) and the JSON beside it."""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from ngramspec.suite.cells import number, percent, ratio, size_ranges
from ngramspec.suite.methods import PREDICTION_METHODS
from ngramspec.suite.oracle import Limit
from ngramspec.suite.predicted_edit_figures import METHODS, WORKLOAD, MethodResult, compact_trace
from ngramspec.suite.report import machine
from ngramspec.suite.run_record import Run
from ngramspec.suite.runner import Suite
from ngramspec.suite.summary import WorkloadFigures, allowed_sizes

# The goals of predicted outputs, each reported as met or missed.
GOAL_OF_PERFECT = 0.90
GOAL_TOKENS_PER_PASS = 4.0      # on Qwen2.5-Coder-0.5B, where exact batches of 7 are allowed
GOAL_WRONG = 0.98               # a wrong prediction against ngramspec without one


def to_markdown(suite: Suite, fig: WorkloadFigures, res: dict[str, MethodResult], items: list[dict[str, Any]],
                rounds: int, command: str, commit: str, load: tuple[str, str]) -> str:
    perfect = fig.perfect
    lines = _header(suite, rounds, command, commit, load)
    lines += _load_independent_section(res, fig.limit, perfect)
    lines += _timed_section(res, perfect)
    lines += ["", "## Goals", ""] + goal_lines(suite, res, perfect.speedup)
    lines += _per_item_section(items)
    lines += _sources_section(res)
    return "\n".join(lines) + "\n"


def _header(suite: Suite, rounds: int, command: str, commit: str, load: tuple[str, str]) -> list[str]:
    """The title and how the figures were made: machine, load, workload, r(B), exact sizes, units."""
    cost = suite.cost
    exact = [b for b, ok in enumerate(allowed_sizes(suite), 1) if ok]
    w = suite.workload(WORKLOAD)
    return [
        f"# Predicted outputs: {suite.model}{' (quick)' if suite.quick else ''}",
        "",
        f"- Machine: {machine(suite)}.",
        f"- Commit: {commit}. Command: `{command}`.",
        f"- Load average (1/5/15 min, `uptime`): {load[0]} at the start, {load[1]} at the end. The machine "
        f"has {_cores()} cores shared with other work: timings move with the load; tokens per pass, "
        "acceptance and the modelled speed-ups do not.",
        f"- Workload: {w.description}. Source: {w.source}. {len(w.items)} item(s), at most "
        f"{w.items[0].max_tokens} new tokens, greedy, {rounds} interleaved round(s) (methods rotated by round).",
        f"- Verify cost r(B) ({getattr(suite, 'cost_origin', 'measured in this run')}): "
        + ", ".join(f"{b}: {c:.2f}" for b, c in enumerate(cost.relative, 1)) + ".",
        f"- Bit-exact verify batch sizes on this build: {size_ranges(exact)}; every method and both ceilings use "
        f"only these. The ngramspec methods draft at most {_max_draft(suite)} tokens per pass (B <= "
        f"{_max_draft(suite) + 1}); the ceilings may use every exact size above.",
        "- Modelled speed-up: a run's tokens after the first over its forward passes priced by r(B) "
        "(plain = 1.00x): the unit of the ceilings, free of load. Perfect-drafter ceiling: every draft right "
        "(oracle.perfect_limit); model-free limit: drafts only from earlier text of the prompt and output "
        "(the prompt holds the unedited file).",
    ]


def _load_independent_section(res: dict[str, MethodResult], limit: Limit, perfect: Limit) -> list[str]:
    """Tokens per pass, acceptance and modelled speed-ups: what the machine's load does not move."""
    lines = ["", "## Load-independent figures (all items, all rounds)", "",
             "| method | tokens per forward pass | acceptance | modelled speed-up | % of perfect ceiling "
             "| accepted / rejected prediction tokens | identical to plain |",
             "|---|---|---|---|---|---|---|"]
    for m in METHODS:
        if m not in res:
            continue
        r = res[m]
        pred = (f"{r.accepted_prediction_tokens} / {r.rejected_prediction_tokens}" if m in PREDICTION_METHODS
                else "-")
        lines.append(f"| {m} | {number(r.tokens_per_pass)} | {percent(r.acceptance)} | "
                     f"{ratio(r.modelled_speedup)} | {percent(r.modelled_speedup / perfect.speedup)} | {pred} | "
                     f"{'-' if m == 'plain' else ('yes' if r.identical else 'NO')} |")
    lines.append(f"| model-free limit (oracle) | {number(limit.tokens_per_pass)} | - | {ratio(limit.speedup)} | "
                 f"{percent(limit.speedup / perfect.speedup)} | - | - |")
    lines.append(f"| perfect-drafter ceiling | {number(perfect.tokens_per_pass)} | 100% | {ratio(perfect.speedup)} | "
                 "100% | - | - |")
    return lines


def _timed_section(res: dict[str, MethodResult], perfect: Limit) -> list[str]:
    """Decode speeds and measured speed-ups over plain, which move with the load."""
    lines = ["", "## Timed figures (noisy on a shared machine)", "",
             "| method | decode tok/s (median over rounds) | measured speed-up over plain (spread over rounds) "
             "| % of perfect ceiling |", "|---|---|---|---|"]
    for m in METHODS:
        if m not in res:
            continue
        r = res[m]
        spread = f" ({min(r.speedups):.2f}-{max(r.speedups):.2f})" if len(r.speedups) > 1 and m != "plain" else ""
        lines.append(f"| {m} | {number(r.decode_tok_s)} | {ratio(r.speedup)}{spread} | "
                     f"{percent(r.speedup / perfect.speedup)} |")
    return lines


def _per_item_section(items: list[dict[str, Any]]) -> list[str]:
    """Round 0, item by item: each method's tokens per pass next to the limit's and the ceiling's."""
    lines = ["", "## Per item (round 0)", "",
             "| item | output tokens | " + " | ".join(f"{m} tokens/pass (modelled)" for m in METHODS[1:])
             + " | limit tokens/pass (speed-up) | perfect tokens/pass (speed-up) |",
             "|---" * (4 + len(METHODS[1:])) + "|"]
    for row in items:
        cells = [row["item"], str(row["output_tokens"])]
        for m in METHODS[1:]:
            mm = row["methods"].get(m)
            cells.append("-" if mm is None else f"{number(mm['tokens_per_pass'])} ({ratio(mm['modelled_speedup'])})")
        cells.append(f"{number(row['limit_tokens_per_pass'])} ({ratio(row['limit_speedup'])})")
        cells.append(f"{number(row['perfect_tokens_per_pass'])} ({ratio(row['perfect_speedup'])})")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _sources_section(res: dict[str, MethodResult]) -> list[str]:
    """Which proposer each method's passes and accepted tokens came from."""
    lines = ["", "## Where the passes went (all runs)", "",
             "| method | passes by source | accepted draft tokens by source |", "|---|---|---|"]
    for m in METHODS[1:]:
        if m in res:
            r = res[m]
            lines.append(f"| {m} | {_sources(r.passes_by_source)} | {_sources(r.accepted_by_source)} |")
    return lines


def _sources(d: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(d.items(), key=lambda kv: -kv[1])) or "-"


def _cores() -> int:
    return os.cpu_count() or 0


def _max_draft(suite: Suite) -> int:
    engine = suite.engines.get("ngramspec")
    return int(getattr(engine, "max_draft", 0))


def goal_lines(suite: Suite, res: dict[str, MethodResult], perfect: float) -> list[str]:
    pred, base, wrong = (res.get(m) for m in ("ngramspec+prediction", "ngramspec", "ngramspec+wrong-prediction"))
    if pred is None or base is None or wrong is None:
        return ["(not every method ran)"]

    def ok(flag: bool) -> str:
        return "met" if flag else "**missed**"

    qwen = "qwen2.5-coder-0.5b" in suite.model.lower()
    out = [
        f"- With the prediction, >= {GOAL_OF_PERFECT:.0%} of the perfect ceiling: modelled "
        f"{percent(pred.modelled_speedup / perfect)} ({ok(pred.modelled_speedup >= GOAL_OF_PERFECT * perfect)}), "
        f"measured {percent(pred.speedup / perfect)} ({ok(pred.speedup >= GOAL_OF_PERFECT * perfect)}).",
        f"- Tokens per forward pass with the prediction: {number(pred.tokens_per_pass)}"
        + (f" (goal >= {GOAL_TOKENS_PER_PASS:.0f} on this model: "
           f"{ok(pred.tokens_per_pass >= GOAL_TOKENS_PER_PASS)})." if qwen
           else " (the 4-per-pass goal is Qwen 0.5B's)."),
        f"- Never below ngramspec without the prediction: modelled "
        f"{ratio(pred.modelled_speedup / base.modelled_speedup)} "
        f"({ok(pred.modelled_speedup >= base.modelled_speedup)}), measured {ratio(pred.speedup / base.speedup)} "
        f"({ok(pred.speedup >= base.speedup)}).",
        f"- A wrong prediction >= {GOAL_WRONG}x of ngramspec without one: modelled "
        f"{ratio(wrong.modelled_speedup / base.modelled_speedup)} "
        f"({ok(wrong.modelled_speedup >= GOAL_WRONG * base.modelled_speedup)}), measured "
        f"{ratio(wrong.speedup / base.speedup)} ({ok(wrong.speedup >= GOAL_WRONG * base.speedup)}).",
        "- Identical to plain greedy: " + ", ".join(f"{m}: {'yes' if res[m].identical else 'NO'}"
                                                    for m in METHODS[1:] if m in res) + ".",
    ]
    return out


def to_json(suite: Suite, fig: WorkloadFigures, res: dict[str, MethodResult], items: list[dict[str, Any]],
            runs: Sequence[Run], rounds: int, command: str, commit: str, load: tuple[str, str]) -> dict[str, Any]:
    """The report's raw figures, per-item rows, round 0's traces and every run (plain's
    first-round texts only). NaN is left in: report.json_safe makes it null."""
    return {
        "model": suite.model, "quick": suite.quick, "machine": machine(suite), "command": command, "commit": commit,
        "load_average_start": load[0], "load_average_end": load[1], "rounds": rounds,
        "verify_cost": suite.cost.relative, "single_token_seconds": suite.cost.single_seconds,
        "invariant_sizes": suite.invariance.invariant_sizes,
        "limit": {"speedup": fig.limit.speedup, "tokens_per_pass": fig.limit.tokens_per_pass},
        "perfect": {"speedup": fig.perfect.speedup, "tokens_per_pass": fig.perfect.tokens_per_pass},
        "methods": {m: {**asdict(r), "tokens_per_pass": r.tokens_per_pass, "acceptance": r.acceptance,
                        "modelled_speedup": r.modelled_speedup, "speedup": r.speedup,
                        "of_perfect_modelled": r.modelled_speedup / fig.perfect.speedup,
                        "of_perfect_measured": r.speedup / fig.perfect.speedup} for m, r in res.items()},
        "items": items,
        # Round 0's per-pass traces of the ngramspec methods (source/first-token source:verified/accepted).
        "traces": {f"{r.method} | {r.item}": compact_trace(r) for r in runs
                   if r.round == 0 and r.method != "plain" and r.stats.get("trace")},
        "runs": [{k: v for k, v in asdict(r).items() if k not in ("output_ids", "stats")
                  and (k != "text" or (r.method == "plain" and r.round == 0))}
                 | {"tokens_per_pass": (r.decode_tokens / r.stats["forward_passes"]
                                        if r.stats.get("forward_passes") else None),
                    "prediction": r.stats.get("prediction")} for r in runs],
    }
