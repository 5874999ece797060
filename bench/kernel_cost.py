"""What a build's kernels cost at depth: a 600-token prefill, one-token decode and
B-token verify batches (logits on every row, each rolled back) 600 tokens deep, on
one model, in the running Python's llama-cpp-python build. One JSON line out.

Builds are compared side by side by running this once per build, alternating, in
one session (bench/kernel_cost_ab.py does that):

    .venv/bin/python bench/kernel_cost.py qwen2.5-coder-0.5b --threads 2 --reps 5
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import llama_cpp

from ngramspec import models
from ngramspec.builds.build_info import system_info
from ngramspec.calibration.cost_timing import measure_verify_cost

SIZES = (1, 2, 4, 8, 16, 32, 64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--depth", type=int, default=600)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="batch sizes to time, comma-separated "
                    "(1 is always timed: the ratios' reference)")
    opts = ap.parse_args()
    sizes = sorted({1, *(int(b) for b in opts.sizes.split(","))})
    # room for the depth and the largest batch after it (2048, as before, for the usual depths)
    n_ctx = max(2048, opts.depth + max(sizes) + 8)
    llm = llama_cpp.Llama(models.fetch(opts.model), n_ctx=n_ctx, n_threads=opts.threads,
                          n_threads_batch=opts.threads, verbose=False)
    with open(os.path.join(os.path.dirname(llama_cpp.__file__), "llama.py")) as f:
        text = f.read()[:20000]
    tokens = llm.tokenize(text.encode())[:opts.depth]
    if len(tokens) < opts.depth:
        ap.error(f"--depth {opts.depth}: the prompt text has only {len(tokens)} tokens")
    prefill = []
    for _ in range(3):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(tokens)
        prefill.append(time.perf_counter() - t0)
    llm.reset()
    curve = measure_verify_cost(llm, max(sizes), reps=opts.reps, context_tokens=opts.depth, sizes=sizes)
    print(json.dumps({"model": opts.model, "build": system_info(), "threads": opts.threads,
                      "prefill_s": statistics.median(prefill), "one_token_ms": curve.single_seconds * 1e3,
                      "batch_ms": {b: curve(b) * curve.single_seconds * 1e3 for b in sizes}}))


if __name__ == "__main__":
    main()
