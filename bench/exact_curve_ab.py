"""Does exact mode lose by pricing drafts with the invariance check's one-shot line?

Exact mode calibrates its policy from the invariance check's one-shot timings as a
line (``CostModel.calibrate(shape=False)``); fast mode measures the curve (3
interleaved rounds) and prices it as measured. This runs exact mode both ways on one
Llama of the build the running Python has, on the long workloads, alternating by
round: 'line' (the default engine) and 'measured' (a ``CostAwarePolicy`` calibrated
with the measured curve of the same build, taken from fast mode's plan, shape kept).
Both are exact; the script checks that their texts agree and prints decode tokens/s.

Run: .venv/bin/python bench/exact_curve_ab.py [MODEL] [ROUNDS]     (default: smollm2-135m 2; 2 threads)
"""
from __future__ import annotations

import statistics
import sys

from ngramspec.drafting.policy import CostAwarePolicy
from ngramspec.suite import sources
from ngramspec.suite.in_process import InProcessMethods
from ngramspec.suite.loading import load, make_engine, model_path
from ngramspec.suite.long_sources import LONG_WORKLOADS


def main(argv: list[str]) -> int:
    model = argv[1] if len(argv) > 1 else "smollm2-135m"
    rounds = int(argv[2]) if len(argv) > 2 else 2
    llm = load(model_path(model), "ngramspec", 4096, 2)
    line = make_engine(llm, "ngramspec")
    line.prepare()
    measured_costs = make_engine(llm, "ngramspec fast").plan(False).relative_costs
    policy = CostAwarePolicy(line.max_draft + 1)
    policy.calibrate({b: c for b, c in measured_costs.items() if b <= line.max_draft + 1}, shape=True,
                     origin="fast mode's measured curve")
    measured = make_engine(llm, "ngramspec", adaptive=policy, invariance=line.invariance)
    engines = {"line": line, "measured": measured}
    runner = InProcessMethods(llm, engines)   # times a run as the suite does: decode after the first token
    items = [(w.name, item) for w in sources.build(llm, True, LONG_WORKLOADS) for item in w.items]
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
    for name in LONG_WORKLOADS:
        a = statistics.median(speeds[(name, "line")])
        b = statistics.median(speeds[(name, "measured")])
        ratios.append(b / a)
        print(f"{name:22s} {a:10.2f} {b:15.2f} {b / a:14.3f}")
    print(f"geometric mean of measured/line: {statistics.geometric_mean(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
