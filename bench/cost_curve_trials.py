"""How often the exact engine's verify-cost curve passes validation on this machine.

Times the curve the exact engine measures (``measure_cost_curve``: interleaved
rounds, median per-round ratios) TRIALS times on one Llama, one attempt each and
no time budget, and prints each attempt's wall time, its verdict under
``validate_curve`` and r(B) / spread at the small sizes, where odd and even batches
differ. A curve that fails is priced by the linear prior, so the share that fail is
the share of first runs on a new model or setting that draft by the prior.

    python bench/cost_curve_trials.py --model qwen2.5-coder-0.5b --trials 12 \\
        --json bench/results/cost-curve-trials-qwen0.5b-xeon.json

--threads N runs one token and batches on N threads; by default both are
llama-cpp-python's (half the cores for a token, all of them for a batch), as
README's main job runs. --json keeps every round, to judge other rules offline.
"""
from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any

from ngramspec.calibration import cost_timing
from ngramspec.calibration.cost_curve import evaluate_rounds
from ngramspec.calibration.invariance_cache import CURVE_DENSE_UP_TO, CURVE_SPARSE_SIZES
from ngramspec.suite.loading import model_path

SHOWN = (2, 3, 4, 5, 6, 7, 8, 9, 17, 65)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--threads", type=int, default=None, help="default: llama-cpp-python's")
    ap.add_argument("--json", help="also write every round and verdict here")
    args = ap.parse_args(argv)
    import llama_cpp

    kwargs: dict[str, Any] = {}
    if args.threads is not None:
        kwargs = {"n_threads": args.threads, "n_threads_batch": args.threads}
    llm = llama_cpp.Llama(model_path(args.model), n_ctx=2048, seed=0, verbose=False, **kwargs)
    sizes = list(range(1, CURVE_DENSE_UP_TO + 1)) + list(CURVE_SPARSE_SIZES)   # the engine's, all exact
    threads = cost_timing.llm_threads(llm)
    print(f"{args.model}, threads {threads}, sizes {sizes}")
    print("| trial | seconds | verdict | " + " | ".join(f"r({b}) / spread" for b in SHOWN) + " |")
    print("|---" * (len(SHOWN) + 3) + "|")
    trials = []
    for t in range(args.trials):
        recorded: list[Any] = []

        def keep(s: list[int], n: int, attempt: int, seed: int = t, into: list[Any] = recorded
                 ) -> list[dict[int, float]]:
            rounds = cost_timing._time_rounds(llm, s, n, 128, random.Random(seed), False)
            into.extend(rounds)
            return rounds

        t0 = time.perf_counter()
        cost_timing.measure_cost_curve(llm, sizes, attempts=1, budget_s=None, time_rounds=keep)
        seconds = time.perf_counter() - t0
        relative, spread, reason = evaluate_rounds(recorded, threads)
        cells = " | ".join(f"{relative[b]:.2f} / {spread[b]:.2f}" for b in SHOWN)
        print(f"| {t} | {seconds:.1f} | {'passed' if reason is None else 'FAILED: ' + reason} | {cells} |", flush=True)
        trials.append({"seconds": seconds, "verdict": reason,
                       "rounds": [{str(b): s for b, s in r.items()} for r in recorded]})
    failed = sum(1 for x in trials if x["verdict"] is not None)
    print(f"{failed} of {len(trials)} failed validation")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "threads": threads, "sizes": sizes, "trials": trials}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
