"""What llama.cpp's tiled K-quant matmul switch costs: a 1,000-token prefill and the
median one-token decode (32 tokens after it), best of 3, on the model named, with
GGML_CPU_TILED_MM as the caller's environment sets it (llama.cpp reads it once per
process, so each setting runs in its own process):

    for t in 1 0; do GGML_CPU_TILED_MM=$t .venv/bin/python bench/tiled_cost.py qwen2.5-coder-1.5b; done

The text is llama-cpp-python's own llama.py (any text of that length would do).
``--tokens N`` prefills N tokens instead of 1,000.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import llama_cpp

from ngramspec import models


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="qwen2.5-coder-0.5b",
                    help="a name from ngramspec.models or a GGUF path")
    ap.add_argument("threads", nargs="?", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=1000, help="the prefill's length")
    args = ap.parse_args(argv)
    name, threads = args.model, args.threads
    llm = llama_cpp.Llama(models.resolve_model_path(name), n_ctx=2048, n_threads=threads, n_threads_batch=threads,
                          verbose=False)
    with open(os.path.join(os.path.dirname(llama_cpp.__file__), "llama.py")) as f:
        text = f.read()[:20000]
    tokens = llm.tokenize(text.encode())[:args.tokens]
    prefill, decode = [], []
    for _ in range(3):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(tokens)
        prefill.append(time.perf_counter() - t0)
        steps = []
        for token in tokens[:32]:
            t0 = time.perf_counter()
            llm.eval([token])
            steps.append(time.perf_counter() - t0)
        decode.append(statistics.median(steps))
    setting = os.environ.get("GGML_CPU_TILED_MM", "(default)")
    print(f"{name} GGML_CPU_TILED_MM={setting} threads={threads}: prefill of {len(tokens)} tokens "
          f"{min(prefill):.3f} s, one-token decode {min(decode) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
