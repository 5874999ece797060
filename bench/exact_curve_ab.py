"""Does exact mode lose by pricing drafts with the invariance check's one-shot line?

Exact mode calibrates its policy from the invariance check's one-shot timings as a
line (``CostModel.calibrate(shape=False)``); fast mode measures the curve (3
interleaved rounds) and prices it as measured. This runs exact mode both ways on one
Llama of the build the running Python has, on the long workloads, alternating by
round: 'line' (the default engine) and 'measured' (a ``CostAwarePolicy`` calibrated
with the measured curve of the same build, taken from fast mode's plan, shape kept).
Both are exact; the script checks that their texts agree and prints decode tokens/s.

Run: .venv/bin/python bench/exact_curve_ab.py [MODEL] [ROUNDS]     (default: smollm2-135m 2; 2 threads)
     [--workloads a,b] [--max-draft N] [--max-tokens N]   (default: the long workloads, the engines' own
                                                          caps, each item's length)
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics

from ngramspec.drafting.policy import CostAwarePolicy
from ngramspec.suite import sources
from ngramspec.suite.in_process import InProcessMethods
from ngramspec.suite.loading import load, make_engine, model_path
from ngramspec.suite.long_sources import LONG_WORKLOADS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="smollm2-135m")
    ap.add_argument("rounds", nargs="?", type=int, default=2)
    ap.add_argument("--workloads", default=",".join(LONG_WORKLOADS))
    ap.add_argument("--max-draft", type=int, default=None, help="both engines' cap on a draft (default: their own)")
    ap.add_argument("--max-tokens", type=int, default=None, help="cap every item's answer at this many tokens")
    args = ap.parse_args(argv)
    rounds, workloads = args.rounds, [w for w in args.workloads.split(",") if w]
    caps = {} if args.max_draft is None else {"max_draft": args.max_draft}
    llm = load(model_path(args.model), "ngramspec", 4096, 2)
    line = make_engine(llm, "ngramspec", **caps)
    line.prepare()
    measured_costs = make_engine(llm, "ngramspec fast", **caps).plan(False).relative_costs
    policy = CostAwarePolicy(line.max_draft + 1)
    policy.calibrate({b: c for b, c in measured_costs.items() if b <= line.max_draft + 1}, shape=True,
                     origin="fast mode's measured curve")
    measured = make_engine(llm, "ngramspec", adaptive=policy, invariance=line.invariance, **caps)
    engines = {"line": line, "measured": measured}
    runner = InProcessMethods(llm, engines)   # times a run as the suite does: decode after the first token
    items = [(w.name, item if args.max_tokens is None else
              dataclasses.replace(item, max_tokens=min(item.max_tokens, args.max_tokens)))
             for w in sources.build(llm, True, workloads) for item in w.items]
    speeds: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        for name, item in items:
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            texts = {}
            for label in order:
                run = runner.run_once(label, name, item, r)
                tok_s, texts[label], tpp = run.decode_tokens / run.decode_s, run.text, run.stats["tokens_per_forward"]
                speeds.setdefault((name, label), []).append(tok_s)
                print(f"round {r} {name:20s} {item.label[:24]:24s} {label:8s} {tok_s:7.2f} tok/s  "
                      f"{tpp:.2f} tokens/pass", flush=True)
            if texts["line"] != texts["measured"]:
                print(f"  TEXTS DIFFER on {name} {item.label}")
    print("\nworkload               line tok/s  measured tok/s  measured/line (medians over rounds and items)")
    ratios = []
    for name in workloads:
        a = statistics.median(speeds[(name, "line")])
        b = statistics.median(speeds[(name, "measured")])
        ratios.append(b / a)
        print(f"{name:22s} {a:10.2f} {b:15.2f} {b / a:14.3f}")
    print(f"geometric mean of measured/line: {statistics.geometric_mean(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
