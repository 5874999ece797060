"""Does fast mode lose to plain, and is it speculation that loses? Plain, exact and fast
mode alternately on the quick suite's prompts, in rotating order, with each fast-mode
verify pass priced against the one-token pass time of the same generation.

Time saved by speculation in a generation = sum over passes that verified a draft of
(accepted + 1) x t1 - the pass's time, in units of t1 (the median one-token pass of that
generation, from ``SpeculativeEngine(trace=True)``'s ``stats.trace``).

Run: python bench/fast_mode_ledger.py [--model smollm2-135m] [--rounds 5] [--threads 2]
         [--workloads a,b] [--max-draft N]   (default: the quick suite's six, the engines' own caps)
(in the venv whose llama-cpp-python build you want to measure: .venv-stock for the stock one).
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from ngramspec.builds.build_info import build_label
from ngramspec.suite import sources
from ngramspec.suite.loading import load, make_engine, model_path
from ngramspec.suite.run_record import FirstTokenClock

MODES = ("plain", "exact", "fast")


def one_run(llm: Any, engines: dict[str, Any], mode: str, item: sources.Item) -> tuple[float, list[Any] | None]:
    """Decode seconds per token after the first, and the fast engine's trace (or None)."""
    clock = FirstTokenClock()
    llm.reset()
    if mode == "plain":
        out = llm.create_completion(item.prompt, max_tokens=item.max_tokens, temperature=0.0,
                                    stop=item.stop or None, stopping_criteria=clock)
        n, trace = out["usage"]["completion_tokens"], None
    else:
        g = engines[mode].generate(item.prompt, max_tokens=item.max_tokens, stop=item.stop or None,
                                   stopping_criteria=clock)
        n, trace = len(g.tokens), g.stats.trace if mode == "fast" else None
    t1 = time.perf_counter()
    return (t1 - (clock.first or t1)) / max(1, n - 1), trace


def saved(trace: list[Any]) -> tuple[int, int, int, float]:
    """(passes, passes with a draft, drafts with nothing accepted, time saved in t1)."""
    spec = [t for t in trace if t[2] > 0]
    singles = [t[4] for t in trace if t[2] == 0]
    if not singles:
        return len(trace), len(spec), sum(t[3] == 0 for t in spec), float("nan")
    t1 = statistics.median(singles)
    return len(trace), len(spec), sum(t[3] == 0 for t in spec), sum((t[3] + 1) * t1 - t[4] for t in spec) / t1


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workloads", default=None, help="comma-separated (default: the quick suite's six)")
    ap.add_argument("--max-draft", type=int, default=None, help="both engines' cap on a draft (default: their own)")
    args = ap.parse_args(argv)
    llm = load(model_path(args.model), "plain", 4096, args.threads)
    workloads = sources.build(llm, True, args.workloads.split(",") if args.workloads else None)
    caps = {} if args.max_draft is None else {"max_draft": args.max_draft}
    engines = {"exact": make_engine(llm, "ngramspec", **caps), "fast": make_engine(llm, "ngramspec fast", **caps)}
    engines["fast"].trace = True
    for e in engines.values():
        e.prepare()
    print(f"{args.model}, {build_label()}, {args.threads} threads, {args.rounds} rounds\n")
    per_token: dict[tuple[str, str], list[float]] = {}
    ledgers: dict[str, list[tuple[int, int, int, float]]] = {}
    for r in range(args.rounds):
        for w in workloads:
            for mode in MODES[r % 3:] + MODES[: r % 3]:
                seconds, trace = one_run(llm, engines, mode, w.items[0])
                per_token.setdefault((w.name, mode), []).append(seconds)
                if trace is not None:
                    ledgers.setdefault(w.name, []).append(saved(trace))
    print("| workload | mode | median ratio over plain | per-round ratios | passes | passes with a draft "
          "| drafts with nothing accepted | time saved by speculation (t1, median) |")
    print("|---|---|---|---|---|---|---|---|")
    for w in workloads:
        plain = per_token[(w.name, "plain")]
        for mode in ("exact", "fast"):
            ratios = [p / s for p, s in zip(plain, per_token[(w.name, mode)])]
            led = ledgers[w.name]
            extra = ([str(round(statistics.median(x[i] for x in led))) for i in range(3)]
                     + [f"{statistics.median(x[3] for x in led):+.1f}"] if mode == "fast" else ["", "", "", ""])
            print(f"| {w.name} | {mode} | {statistics.median(ratios):.3f} | "
                  f"{', '.join(f'{x:.2f}' for x in ratios)} | " + " | ".join(extra) + " |")


if __name__ == "__main__":
    main()
