"""What the row rules cost per row (engine/row_rules.py): llama.cpp's grammar sampler on
one token (the check that settles most rows) against the whole vocabulary (what plain
llama-cpp-python does on every token), the penalties sampler on the tokens seen, and a
float32 log-softmax with the top logprobs. Medians of 200 rows of real logits.

    .venv/bin/python bench/row_rules_cost.py [MODEL]      # default smollm2-135m
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import llama_cpp
import numpy as np
from llama_cpp.llama_grammar import LlamaGrammar

from ngramspec import models
from ngramspec.engine.llama_samplers import SamplerState, TokenArray
from ngramspec.engine.logprobs import TokenLogprobs


def median_us(fn, n: int = 200) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m"
    llm = llama_cpp.Llama(models.fetch(name), n_ctx=512, verbose=False, logits_all=False)
    llm.eval(llm.tokenize(b"Give me a JSON object describing a cat:"))
    row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),)).copy()
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    grammar = LlamaGrammar.from_json_schema(json.dumps(schema))
    state = SamplerState.start(llm, grammar, (64, 1.1, 0.0, 0.0))
    for tok in llm.tokenize(b'{"name": "Tom', add_bos=False):
        state.accept(tok)
    whole, one, seen = TokenArray(llm.n_vocab()), TokenArray(1), TokenArray(64)
    best = np.array([int(np.argmax(row))], dtype=np.int32)
    ids = state.seen
    rec = TokenLogprobs(5)
    print(f"{name}: vocabulary {llm.n_vocab()}")
    print(f"grammar, one token:        {median_us(lambda: one.apply(state.grammar, row[best], best)):9.1f} us")
    print(f"grammar, whole vocabulary: {median_us(lambda: whole.apply(state.grammar, row), 50):9.1f} us")
    penalties = median_us(lambda: seen.apply(state.penalties, row[ids], ids))
    print(f"penalties, {len(ids)} seen tokens:   {penalties:9.1f} us")
    print(f"logprobs, top 5:           {median_us(lambda: rec.add(int(best[0]), row)):9.1f} us")
    t0 = time.perf_counter()
    for _ in range(20):
        llm.eval([int(best[0])])
    print(f"one-token decode (for scale): {(time.perf_counter() - t0) / 20 * 1e6:9.1f} us")
    llm.close()


if __name__ == "__main__":
    main()
