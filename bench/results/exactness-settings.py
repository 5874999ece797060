"""Exact mode vs plain greedy with other Llama settings (exact build, SmolLM2-135M, 4 long chats, 256 tokens).

Run from the repository root: PYTHONPATH=python:. .venv/bin/python bench/results/exactness-settings.py
(NGRAMSPEC_CACHE_DIR picks where the invariance verdicts are kept; a fresh one re-certifies.)
"""

from typing import Any

import llama_cpp

from tests.support.long_chats import conversations
from tests.support.plain import plain_tokens

from ngramspec import SpeculativeEngine, models
from ngramspec.suite import sources

SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("type_k=q8_0", {"type_k": 8}),
    ("n_ubatch=4", {"n_ubatch": 4}),
    ("n_batch=64,n_ubatch=64", {"n_batch": 64, "n_ubatch": 64}),
]
CHATS = ("code_edit", "multi_turn_refactor", "story", "code_review")


def main() -> None:
    path = str(models.fetch("smollm2-135m", quiet=True))
    convs = conversations()
    for name, kw in SETTINGS:
        llm = llama_cpp.Llama(path, n_ctx=4096, n_threads=2, seed=0, verbose=False, **kw)
        eng = SpeculativeEngine(llm)
        eng.prepare()
        chat = sources.chat_formatter(llm)
        same = drafted = 0
        for c in CHATS:
            p = chat(convs[c])
            ref = plain_tokens(llm, p, 256)
            llm.reset()
            g = eng.generate(p, max_tokens=256)
            llm.reset()
            same += g.tokens == ref
            drafted += g.stats.drafted_tokens
        verdict = eng.invariance.summary() if eng.invariance is not None else "no check"
        print(name, verdict, f"identical {same}/{len(CHATS)}, drafted {drafted}", flush=True)
        llm.close()


if __name__ == "__main__":
    main()
