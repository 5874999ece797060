"""The driving process's threads over RPC workers on the same machine: a model with
every layer on two workers (``ngramspec rpc-worker``, 1 thread each), loaded as a
user would (the workers registered directly, ``n_gpu_layers=-1``), with 1 thread for
one-token decoding and N threads for batches; how long exact mode's preparation
(the invariance check and the cost curve) and 48 plain tokens take.

Run (from the repository root):
  PYTHONPATH=.:python .venv/bin/python bench/rpc_driver_threads.py [--model smollm2-135m] [--batch-threads 1,2]
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any

import llama_cpp
from tests.support.rpc_workers import rpc_workers

import ngramspec
from ngramspec import _llama, _rpc, models
from ngramspec.suite.provenance import cpu_name, git_commit

PROMPT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch-threads", default="1,2")
    ap.add_argument("--n-ctx", type=int, default=512)
    args = ap.parse_args()
    path = str(models.fetch(args.model))
    print(f"{cpu_name()}, {os.cpu_count()} cores, commit {git_commit()}, load average {os.getloadavg()[0]:.1f}")
    print("| n_threads_batch here | exact mode's preparation (s) | 48 plain tokens (s) | exact text = plain |")
    print("|---|---|---|---|")
    with rpc_workers(2) as workers:
        devices = [d for w in workers for d in _rpc.add_server(w.address)]
        for threads in (int(x) for x in args.batch_threads.split(",")):
            with _llama.model_devices(devices):
                llm = llama_cpp.Llama(path, n_ctx=args.n_ctx, n_gpu_layers=-1, n_threads=1,
                                      n_threads_batch=threads, seed=0, verbose=False)
            t0 = time.perf_counter()
            out: Any = llm.create_completion(PROMPT, max_tokens=48, temperature=0)
            plain = out["choices"][0]["text"]
            t_plain = time.perf_counter() - t0
            llm.reset()
            spec = ngramspec.SpeculativeEngine(llm, invariance_cache=False)
            t0 = time.perf_counter()
            spec.prepare()
            t_prepare = time.perf_counter() - t0
            same = spec.generate(PROMPT, max_tokens=48).text == plain
            print(f"| {threads} | {t_prepare:.0f} | {t_plain:.1f} | {'yes' if same else 'NO'} |", flush=True)
            llm.close()
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
