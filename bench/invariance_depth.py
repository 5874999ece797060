"""Which verify batch sizes are bit-exact at which depth, on the build this venv has.

Runs exact mode's check as the engine runs it (every depth of ``check_depths``),
then each depth alone, so the depth where a size starts to differ shows. Run it
with each venv's Python to compare builds:

    .venv/bin/python bench/invariance_depth.py smollm2-135m
    .venv/bin/python bench/invariance_depth.py smollm2-135m --flash-attn
    .venv-stock/bin/python bench/invariance_depth.py qwen2.5-coder-0.5b
"""
from __future__ import annotations

import argparse
import time

import llama_cpp

from ngramspec import models
from ngramspec.builds.build_info import invariance_hazards, system_info
from ngramspec.calibration.invariance import check_batch_invariance

DEPTHS = (8, 100, 255, 511, 1023, 2047)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a name from ngramspec.models or a GGUF path")
    ap.add_argument("--max-batch", type=int, default=17)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--flash-attn", action="store_true")
    ap.add_argument("--per-depth", action="store_true", help="also check each depth of DEPTHS alone")
    args = ap.parse_args()
    llm = llama_cpp.Llama(models.resolve_model_path(args.model), n_ctx=args.n_ctx, n_threads=args.threads,
                          n_threads_batch=args.threads, flash_attn=args.flash_attn, seed=0, verbose=False)
    print(f"{args.model}, n_ctx {args.n_ctx}, {args.threads} threads, flash_attn={args.flash_attn}")
    print(f"build: {system_info()}")
    print(f"hazards: {invariance_hazards(llm) or 'none'}")
    t0 = time.perf_counter()
    report = check_batch_invariance(llm, max_batch=args.max_batch)
    print(f"\nthe engine's check ({time.perf_counter() - t0:.1f} s):\n{report}")
    if args.per_depth:
        print("\neach depth alone:")
        for depth in DEPTHS:
            if depth + args.max_batch > args.n_ctx:
                break
            alone = check_batch_invariance(llm, max_batch=args.max_batch, depths=[depth])
            print(f"  depth {depth:>5}: bit-exact sizes {alone.invariant_sizes} ({alone.check_seconds:.1f} s)")


if __name__ == "__main__":
    main()
