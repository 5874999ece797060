"""Exact-mode choice: which verify batch sizes are bit-exact, and what they cost,
with the tiled K-quant matmul on (default) and off (GGML_CPU_TILED_MM=0), for the
three ngramspec.models models. Each setting runs in its own process, because
llama.cpp reads GGML_CPU_TILED_MM once per process.

Run: .venv/bin/python bench/invariance_matrix.py --out bench/results/invariance.md
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from ngramspec.suite.provenance import emit_report

MODELS = ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]

CHILD = r'''
import json, sys, time
import numpy as np, llama_cpp
from ngramspec import models, check_batch_invariance, _llama
from ngramspec.cli.common import DEFAULT_PROMPT
name, max_batch = sys.argv[1], int(sys.argv[2])
llm = llama_cpp.Llama(str(models.fetch(name)), n_ctx=1024, seed=0, verbose=False)
rep = check_batch_invariance(llm, max_batch=max_batch)
# prefill speed: one 256-token batch, the path the tiled kernel accelerates
toks = (llm.tokenize(DEFAULT_PROMPT.encode(), add_bos=False) * 20)[:256]
b = _llama.Batch(256)
pre = []
for _ in range(2):
    _llama.clear_memory(llm); b.fill(toks, 0, all_logits=False)
    t = time.perf_counter(); _llama.decode(llm, b); pre.append(time.perf_counter() - t)
cost = {}
base = 64
_llama.clear_memory(llm); b.fill(toks[:base], 0, all_logits=False); _llama.decode(llm, b)
for _ in range(3):
    for size in range(1, max_batch + 1):
        _llama.remove_from(llm, base); b.fill(toks[base:base + size], base, all_logits=True)
        t = time.perf_counter(); _llama.decode(llm, b); cost.setdefault(size, []).append(time.perf_counter() - t)
one = float(np.median(cost[1]))
print(json.dumps({"invariant": rep.invariant_sizes, "max_invariant": rep.max_invariant_batch,
                  "single_ms": one * 1e3, "cost": {s: float(np.median(v)) / one for s, v in cost.items()},
                  "prefill256_s": min(pre)}))
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for name in args.models.split(","):
        for tiled in ("default", "0"):
            env = dict(os.environ)
            env.pop("GGML_CPU_TILED_MM", None)
            if tiled == "0":
                env["GGML_CPU_TILED_MM"] = "0"
            p = subprocess.run([sys.executable, "-c", CHILD, name, str(args.max_batch)], env=env,
                               capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(p.stderr)
            r = json.loads(p.stdout.strip().splitlines()[-1])
            print(name, tiled, r, file=sys.stderr)
            rows.append((name, tiled, r))
    sizes = [1, 2, 4, 6, 8, 12, 16]
    lines = ["# Exact verification: bit-exact batch sizes and verify cost", "",
             "Command: `.venv/bin/python bench/invariance_matrix.py " + " ".join(sys.argv[1:]) + "`", "",
             "| model | GGML_CPU_TILED_MM | bit-exact sizes (1..N) | largest all-exact | 1 token (ms) | "
             + " | ".join(f"cost B={s}" for s in sizes if s <= args.max_batch) + " | prefill 256 tok (s) |",
             "|---" * (6 + len([s for s in sizes if s <= args.max_batch])) + "|"]
    for name, tiled, r in rows:
        inv = r["invariant"]
        lines.append(f"| {name} | {tiled} | {','.join(map(str, inv))} | {r['max_invariant']} | {r['single_ms']:.1f} | "
                     + " | ".join(f"{r['cost'][str(s)]:.2f}" for s in sizes if s <= args.max_batch)
                     + f" | {r['prefill256_s']:.2f} |")
    emit_report("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
