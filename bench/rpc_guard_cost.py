"""What ngramspec's guard (ngramspec.rpc.guard) costs: the same model over the same
two RPC workers (``ngramspec rpc-worker`` on 127.0.0.1, 1 thread each), loaded with
``rpc=`` (through the guards) and with the workers registered directly, as
llama.cpp's ``--rpc`` does (no guard), alternately. For each: the one-token pass
time and r(B) (``measure_verify_cost``), and 32 plain greedy tokens.

Run (from the repository root):
  PYTHONPATH=.:python .venv/bin/python bench/rpc_guard_cost.py [--model smollm2-135m] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import time

import llama_cpp
from tests.support.rpc_workers import rpc_workers

from ngramspec import _llama, _rpc, models
from ngramspec.calibration.cost_timing import measure_verify_cost
from ngramspec.suite.provenance import cpu_name, git_commit

PROMPT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    path = str(models.fetch(args.model))
    print(f"{cpu_name()}, {os.cpu_count()} cores, commit {git_commit()}, load average {os.getloadavg()[0]:.1f}\n")
    print("| round | connection | one-token pass (ms) | r(2) | r(3) | r(4) | 32 plain tokens (s) | text |")
    print("|---|---|---|---|---|---|---|---|")
    reference = None
    with rpc_workers(2) as workers:
        addresses = [w.address for w in workers]
        direct: list[int] = []
        for r in range(args.rounds):
            for kind in ("guard", "direct"):
                if kind == "guard":
                    llm = models.load_llama(path, n_ctx=2048, seed=0, n_threads=1, rpc=addresses)
                else:
                    if not direct:   # registered once: ggml's registry only grows
                        direct = [d for a in addresses for d in _rpc.add_server(a)]
                    with _llama.model_devices(direct):
                        llm = llama_cpp.Llama(path, n_ctx=2048, seed=0, n_threads=1, n_threads_batch=1,
                                              n_gpu_layers=-1, verbose=False)
                curve = measure_verify_cost(llm, 4, reps=3)
                llm.reset()
                t0 = time.perf_counter()
                text = llm.create_completion(PROMPT, max_tokens=32, temperature=0)["choices"][0]["text"]
                seconds = time.perf_counter() - t0
                reference = text if reference is None else reference
                print(f"| {r + 1} | {kind} | {curve.single_seconds * 1e3:.1f} | "
                      + " | ".join(f"{x:.2f}" for x in curve.relative[1:4])
                      + f" | {seconds:.2f} | {'same' if text == reference else 'DIFFERS'} |", flush=True)
                llm.close()
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
