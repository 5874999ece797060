"""What numpy's argmax of the logits row costs right after a one-token llama_decode
(the caches cold, as in the decode loop), against the decode itself: what an argmax
in the C++ core could at most save per plainly decoded token.

    .venv-stock/bin/python bench/argmax_cost.py smollm2-135m qwen2.5-coder-0.5b
"""
from __future__ import annotations

import statistics
import sys
import time

from ngramspec import _llama
from ngramspec.models import load_llama


def main() -> None:
    for name in sys.argv[1:] or ["smollm2-135m"]:
        llm = load_llama(name, n_ctx=4096, seed=0, n_threads=2, n_threads_batch=2, verbose=False)
        tokens = llm.tokenize(b"def fibonacci(n):\n    " * 20)
        llm.reset()
        llm.eval(tokens)
        decoder, batch = _llama.Decoder(llm), _llama.Batch(8)
        pos, token = len(tokens), int(_llama.last_logits(llm).argmax())
        decode_s, argmax_s = [], []
        for _ in range(200):
            t0 = time.perf_counter()
            row = decoder.decode_one(batch, token, pos)
            t1 = time.perf_counter()
            token = int(row.argmax())
            t2 = time.perf_counter()
            pos += 1
            decode_s.append(t1 - t0)
            argmax_s.append(t2 - t1)
        d, a = statistics.median(decode_s), statistics.median(argmax_s)
        print(f"{name}: n_vocab {llm.n_vocab()}, one-token decode {d * 1e3:.2f} ms, argmax after it {a * 1e6:.1f} us "
              f"(median of 200; {a / d * 100:.3f}% of the decode)")


if __name__ == "__main__":
    main()
