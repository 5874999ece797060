"""Why fast mode's speed on one short answer moves from round to round: the quick suite's
multi_turn_chat item (Qwen2.5-Coder-0.5B, 64 tokens) in fast mode, once as a fresh engine
prices it and once with the cost model's scale set to 1.18 (a value the suite's engine
reached after other workloads), each compared with plain greedy decoding:

    .venv-stock/bin/python bench/fast_mode_paths.py [SCALE ...]

Prints, per run, the passes, whether the text is plain greedy's, where it first differs,
and the trace (source, draft tokens verified, accepted) of every pass.
"""
from __future__ import annotations

import sys

from ngramspec.models import load_llama
from ngramspec.suite.loading import make_engine
from ngramspec.suite.sources import build


def main() -> None:
    scales = [float(a) for a in sys.argv[1:]] or [1.18]
    llm = load_llama("qwen2.5-coder-0.5b", n_ctx=4096, seed=0, n_threads=2, verbose=False)
    item = next(w for w in build(llm, quick=True) if w.name == "multi_turn_chat").items[0]
    stop = item.stop or None
    llm.reset()
    out = llm.create_completion(item.prompt, max_tokens=item.max_tokens, temperature=0, stop=stop)
    plain: str = out["choices"][0]["text"]
    engine = make_engine(llm, "ngramspec fast", trace=True)
    engine.prepare()
    for scale in [None, *scales]:
        if scale is not None:
            engine.policy.cost.scale = scale
            engine.policy.cost._refresh()
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
