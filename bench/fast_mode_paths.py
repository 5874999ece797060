"""Why fast mode's speed on one short answer moves from round to round: the quick suite's
multi_turn_chat item (Qwen2.5-Coder-0.5B, 64 tokens) in fast mode, once as a fresh engine
prices it and once with the cost model's scale set to 1.18 (a value the suite's engine
reached after other workloads), each compared with plain greedy decoding:

    .venv-stock/bin/python bench/fast_mode_paths.py [SCALE ...] [--model NAME] [--max-draft N]
    .venv-stock/bin/python bench/fast_mode_paths.py --suite-order

Prints, per run, the passes, whether the text is plain greedy's, where it first differs,
and the trace (source, draft tokens verified, accepted) of every pass. ``--suite-order``:
instead, the quick suite's workloads in order, 3 rounds, in one fast-mode engine (as
``ngramspec bench`` runs them), printing the cost model's scale before each run of the
item and that run's passes.
"""
from __future__ import annotations

import argparse
from typing import Any

from ngramspec.models import load_llama
from ngramspec.suite.loading import make_engine
from ngramspec.suite.sources import build


def suite_order(llm: Any, workloads: list[Any], caps: dict[str, int]) -> None:
    engine = make_engine(llm, "ngramspec fast", trace=True, **caps)
    engine.prepare()
    cost = engine.policy.cost
    for round_ in range(3):
        for workload in workloads:
            for item in workload.items:
                scale = cost.scale
                llm.reset()
                g = engine.generate(item.prompt, max_tokens=item.max_tokens, stop=item.stop or None)
                if workload.name == "multi_turn_chat":
                    print(f"round {round_ + 1}: scale before {scale:.3f}, {g.stats.forward_passes} passes, "
                          f"by source {g.stats.passes_by_source}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scales", nargs="*", type=float, help="cost-model scales to run at (default 1.18)")
    ap.add_argument("--suite-order", action="store_true")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--max-draft", type=int, default=None, help="fast mode's cap on a draft (default: its own)")
    args = ap.parse_args(argv)
    caps = {} if args.max_draft is None else {"max_draft": args.max_draft}
    llm = load_llama(args.model, n_ctx=4096, seed=0, n_threads=2, verbose=False)
    workloads = build(llm, quick=True)
    if args.suite_order:
        suite_order(llm, workloads, caps)
        return
    scales = args.scales or [1.18]
    item = next(w for w in workloads if w.name == "multi_turn_chat").items[0]
    stop = item.stop or None
    llm.reset()
    out = llm.create_completion(item.prompt, max_tokens=item.max_tokens, temperature=0, stop=stop)
    plain: str = out["choices"][0]["text"]
    engine = make_engine(llm, "ngramspec fast", trace=True, **caps)
    engine.prepare()
    for scale in [None, *scales]:
        if scale is not None:
            engine.policy.cost.set_scale(scale)
        llm.reset()
        g = engine.generate(item.prompt, max_tokens=item.max_tokens, stop=stop)
        text = g.text
        diff = next((j for j in range(min(len(text), len(plain))) if text[j] != plain[j]), None)
        print(f"scale {'fresh' if scale is None else scale}: {g.stats.forward_passes} passes, plain's text: "
              f"{text == plain}, first difference at character {diff}")
        print("  trace:", [(t[0], t[2], t[3]) for t in g.stats.trace])
        if diff is not None:
            print("  plain:", repr(plain[max(0, diff - 40):diff + 40]))
            print("  fast: ", repr(text[max(0, diff - 40):diff + 40]))


if __name__ == "__main__":
    main()
