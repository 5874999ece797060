"""Choosing DEFAULT_MAX_DRAFT: speed of the adaptive engine for several caps on
the draft length, interleaved, on the benchmark workloads.

Run: .venv/bin/python bench/max_draft.py --out bench/results/max_draft.md
"""
from __future__ import annotations

import argparse
import statistics
import sys

import llama_cpp

from ngramspec import SpeculativeEngine, check_batch_invariance, models
from ngramspec.calibration.invariance_cache import price_as_measured
from ngramspec.suite.provenance import cpu_name, emit_report
from ngramspec.suite.sample_prompts import PROMPTS

WORKLOADS = ["code_edit", "json", "repetitive", "list", "chat", "prose"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--caps", default="2,4,8,12,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    caps = [int(c) for c in args.caps.split(",")]
    llm = llama_cpp.Llama(str(models.fetch(args.model)), n_ctx=2048, seed=0, verbose=False)
    # Priced as a user's engine is, by a curve timed over rounds (the check's one-shot timings
    # fall to the linear prior on a noisy machine).
    top = max(caps) + 1     # a draft of the longest cap and the token before it
    report = price_as_measured(llm, check_batch_invariance(llm, max_batch=top), top)
    engines = {c: SpeculativeEngine(llm, max_draft=c, invariance=report) for c in caps}
    times: dict[tuple[str, int], list[float]] = {}
    origins: set[str] = set()
    for r in range(args.rounds + 1):  # round 0 lets each engine's policy learn; not timed
        for w in WORKLOADS:
            for c in caps:
                llm.reset()
                gen = engines[c].generate(PROMPTS[w], max_tokens=args.max_tokens)
                origins.add(gen.stats.cost_curve_origin)
                if r:
                    times.setdefault((w, c), []).append(gen.stats.generated_tokens / gen.stats.time_total_s)
        print(f"round {r}", file=sys.stderr)
    lines = [f"# {args.model}: tokens/s of the adaptive engine by max_draft", "",
             f"Machine: {cpu_name()}; median of {args.rounds} interleaved rounds after one learning round; "
             f"max_tokens={args.max_tokens}.", "",
             "Exact mode's cost curve: " + "; ".join(sorted(origins)) + ".", "",
             "Command: `.venv/bin/python bench/max_draft.py " + " ".join(sys.argv[1:]) + "`", "",
             "| workload | " + " | ".join(f"max_draft={c}" for c in caps) + " |", "|---" * (1 + len(caps)) + "|"]
    geo = dict.fromkeys(caps, 1.0)
    for w in WORKLOADS:
        med = {c: statistics.median(times[(w, c)]) for c in caps}
        for c in caps:
            geo[c] *= med[c] ** (1 / len(WORKLOADS))
        lines.append(f"| {w} | " + " | ".join(f"{med[c]:.1f}" for c in caps) + " |")
    lines.append("| geometric mean | " + " | ".join(f"**{geo[c]:.1f}**" for c in caps) + " |")
    emit_report("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
