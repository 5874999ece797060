"""One ggml mul_mat of K-quant weights by a batch of F32 columns, timed in one or more
llama-cpp-python builds (or one build under several environments) side by side: each
build's Python runs this file as a child, alternating, for several rounds; a cell is the
fastest of all its runs (a burst on a noisy machine only ever slows a run), and its ratio
to the first build. The weights are random blocks of the type (valid fp16 scales), so no
model is read; the CPU backend picks its own kernel for each batch, as in a model.

    .venv/bin/python bench/mul_mat_cost.py --type q6_K --shape 151936,1536 --sizes 8,16,32,64 \\
        stock=.venv-stock/bin/python exact=.venv/bin/python cols=GGML_CPU_TILED_MM=0@.venv/bin/python

A build is name=python, or name=VAR=VALUE[,VAR=VALUE]@python to set environment variables
for it (GGML_CPU_TILED_MM=0 keeps the tiled K-quant matmul off; GGML_CPU_BATCH_INVARIANT_MAX
overrides the exact build's threshold).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import time
from pathlib import Path

#: ggml type number, block bytes, values per block, offsets of the block's fp16 scales
TYPES = {"q4_K": (12, 144, 256, (0, 2)), "q5_K": (13, 176, 256, (0, 2)), "q6_K": (14, 210, 256, (208,)),
         "q8_0": (8, 34, 32, (0,)), "q4_1": (3, 20, 32, (0, 2)), "q5_0": (6, 22, 32, (0,))}


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def child(kind: str, rows: int, k: int, sizes: list[int], reps: int, threads: int) -> dict[int, float]:
    """In this Python's build: the fastest of ``reps`` computes of each batch size, in ms."""
    import llama_cpp
    import numpy as np

    libdir = Path(llama_cpp.__file__).parent / "lib"
    cpu, base = ctypes.CDLL(str(libdir / "libggml-cpu.so")), ctypes.CDLL(str(libdir / "libggml-base.so"))
    cpu.ggml_cpu_init()
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    base.ggml_init.argtypes, base.ggml_init.restype = [_InitParams], ptr
    base.ggml_new_tensor_2d.argtypes, base.ggml_new_tensor_2d.restype = [ptr, ctypes.c_int, i64, i64], ptr
    base.ggml_mul_mat.argtypes, base.ggml_mul_mat.restype = [ptr, ptr, ptr], ptr
    base.ggml_new_graph.argtypes, base.ggml_new_graph.restype = [ptr], ptr
    base.ggml_build_forward_expand.argtypes = [ptr, ptr]
    base.ggml_get_data.argtypes, base.ggml_get_data.restype = [ptr], ptr
    base.ggml_free.argtypes = [ptr]
    cpu.ggml_graph_compute_with_ctx.argtypes = [ptr, ptr, ctypes.c_int]
    number, block, per_block, scales = TYPES[kind]
    rng = np.random.default_rng(0)
    nblocks = rows * (k // per_block)
    weights = rng.integers(0, 256, nblocks * block, dtype=np.uint8)
    for offset in scales:
        weights.reshape(nblocks, block)[:, offset:offset + 2] = (
            rng.uniform(-0.05, 0.05, (nblocks, 1)).astype(np.float16).view(np.uint8))
    best = {}
    for size in sizes:
        acts = rng.standard_normal((size, k)).astype(np.float32)
        ctx = base.ggml_init(_InitParams(weights.nbytes + acts.nbytes + 4 * rows * size + (64 << 20), None, False))
        try:
            w, a = base.ggml_new_tensor_2d(ctx, number, k, rows), base.ggml_new_tensor_2d(ctx, 0, k, size)
            ctypes.memmove(base.ggml_get_data(w), weights.ctypes.data, weights.nbytes)
            ctypes.memmove(base.ggml_get_data(a), acts.ctypes.data, acts.nbytes)
            graph = base.ggml_new_graph(ctx)
            base.ggml_build_forward_expand(graph, base.ggml_mul_mat(ctx, w, a))
            if cpu.ggml_graph_compute_with_ctx(ctx, graph, threads) != 0:
                raise RuntimeError("ggml_graph_compute_with_ctx failed")
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                cpu.ggml_graph_compute_with_ctx(ctx, graph, threads)
                times.append(time.perf_counter() - t0)
            best[size] = min(times) * 1e3
        finally:
            base.ggml_free(ctx)
    return best


def parse_build(spec: str) -> tuple[str, dict[str, str], str]:
    """name=python or name=VAR=VALUE[,VAR=VALUE]@python."""
    name, _, rest = spec.partition("=")
    if not name or not rest:
        raise SystemExit(f"mul_mat_cost.py: a build is name=python or name=VAR=VALUE@python, not {spec!r}")
    env: dict[str, str] = {}
    if "@" in rest:
        settings, _, rest = rest.rpartition("@")
        for item in settings.split(","):
            var, eq, value = item.partition("=")
            if not eq:
                raise SystemExit(f"mul_mat_cost.py: {item!r} in {spec!r} is not VAR=VALUE")
            env[var] = value
    return name, env, rest


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="*", help="name=python or name=VAR=VALUE@python; the first is the reference")
    ap.add_argument("--type", default="q6_K", choices=sorted(TYPES))
    ap.add_argument("--shape", default="151936,1536", help="weight rows,columns (default: Qwen2.5's output matrix "
                    "at 1.5B: %(default)s)")
    ap.add_argument("--sizes", default="1,8,16,32,64", help="batch sizes (columns), comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    rows, k = (int(x) for x in opts.shape.split(","))
    sizes = [int(s) for s in opts.sizes.split(",")]
    if k % TYPES[opts.type][2]:
        raise SystemExit(f"mul_mat_cost.py: {opts.type} rows need a multiple of {TYPES[opts.type][2]} values")
    if opts.child:
        print(json.dumps(child(opts.type, rows, k, sizes, opts.reps, opts.threads)))
        return
    if not opts.builds:
        raise SystemExit("mul_mat_cost.py: name at least one build (name=python)")
    builds = [parse_build(b) for b in opts.builds]
    best: dict[str, dict[str, float]] = {name: {} for name, _, _ in builds}
    for _ in range(opts.rounds):
        for name, env, python in builds:
            out = subprocess.run([python, __file__, "--child", "--type", opts.type, "--shape", opts.shape,
                                  "--sizes", opts.sizes, "--reps", str(opts.reps), "--threads", str(opts.threads)],
                                 capture_output=True, text=True, env={**os.environ, **env})
            if out.returncode != 0:
                raise SystemExit(f"mul_mat_cost.py: {name} failed:\n{out.stderr[-2000:]}")
            for size, ms in json.loads(out.stdout.strip().splitlines()[-1]).items():
                best[name][size] = min(ms, best[name].get(size, float("inf")))
    ref = best[builds[0][0]]
    print(f"{opts.type} mul_mat, {rows} x {k} weights, {opts.threads} threads, fastest of {opts.rounds} rounds x "
          f"{opts.reps} runs, ms (ratio to {builds[0][0]})\n")
    print("| build | " + " | ".join(f"B={s}" for s in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for name, _, _ in builds:
        cells = [f"{best[name][str(s)]:.2f}" + ("" if name == builds[0][0] else
                                                 f" ({best[name][str(s)] / ref[str(s)]:.2f}x)") for s in sizes]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
