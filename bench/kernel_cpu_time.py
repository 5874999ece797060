"""CPU time of one build's kernels on one thread, 600 tokens deep: one-token decode and
B-token verify batches, the minimum over a few runs of the process's CPU time. On a
shared, loaded machine this is steadier than wall time with two threads, where OpenMP's
spinning barriers stretch each step by whatever else runs (bench/kernel_cost_ab.py is the
wall-time, two-thread comparison for a quiet machine). Run it in each build's Python:

    .venv-stock/bin/python bench/kernel_cpu_time.py qwen2.5-coder-1.5b
    .venv/bin/python bench/kernel_cpu_time.py qwen2.5-coder-1.5b
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import llama_cpp

from ngramspec.models import resolve_model_path

TEXT = b"def f(x):\n    return x * 2\n" * 60


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--depth", type=int, default=600)
    ap.add_argument("--sizes", default="1,16,64", help="batch sizes, comma-separated")
    ap.add_argument("--runs", type=int, default=3)
    opts = ap.parse_args()
    llm = llama_cpp.Llama(model_path=resolve_model_path(opts.model), n_ctx=opts.depth + 128, n_batch=512,
                          n_threads=1, n_threads_batch=1, verbose=False)
    tokens = llm.tokenize(TEXT * (1 + opts.depth // 400))[:opts.depth]
    llm.eval(tokens)
    result: dict[str, float] = {}
    for size in (int(s) for s in opts.sizes.split(",")):
        times = []
        for _ in range(opts.runs):
            llm.n_tokens = opts.depth                      # drop the last batch from the cache
            llm._ctx.kv_cache_seq_rm(-1, opts.depth, -1)
            start = time.process_time()
            llm.eval(tokens[:size])
            times.append(time.process_time() - start)
        result[str(size)] = round(min(times) * 1e3, 2)
    print(json.dumps({"python": sys.executable, "model": opts.model, "cpu_ms": result}))


if __name__ == "__main__":
    main()
