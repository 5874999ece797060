"""Exact mode vs plain greedy with other Llama settings (exact build, SmolLM2-135M, 4 long chats, 256 tokens).
Run from the repository root: PYTHONPATH=python .venv/bin/python bench/results/exactness-settings.py"""
import os, sys, time
sys.path.insert(0, "tests")
os.environ["NGRAMSPEC_CACHE_DIR"] = "/tmp/m/scache"
import llama_cpp
from ngramspec import SpeculativeEngine, models
from ngramspec.suite import sources
from long_chats import conversations
from plain import plain_tokens
path = str(models.fetch("smollm2-135m", quiet=True))
for name, kw in [("type_k=q8_0", {"type_k": 8}), ("n_ubatch=4", {"n_ubatch": 4}), ("n_batch=64,n_ubatch=64", {"n_batch": 64, "n_ubatch": 64})]:
    llm = llama_cpp.Llama(path, n_ctx=4096, n_threads=2, seed=0, verbose=False, **kw)
    eng = SpeculativeEngine(llm); eng.prepare()
    chat = sources.chat_formatter(llm)
    same = 0; drafted = 0; convs = conversations()
    for c in ("code_edit", "multi_turn_refactor", "story", "code_review"):
        p = chat(convs[c]); ref = plain_tokens(llm, p, 256); llm.reset()
        g = eng.generate(p, max_tokens=256); llm.reset()
        same += g.tokens == ref; drafted += g.stats.drafted_tokens
    print(name, eng.invariance.summary(), f"identical {same}/4, drafted {drafted}", flush=True)
    llm.close()
