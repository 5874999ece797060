"""The exact build's proof at model level: every verify size 1-65 decoded as one batch
and compared bit for bit with one-token decoding of the same tokens, 8 and 600 tokens
deep, two probe texts, on each model named (the engine's own check covers 1-16 and a
geometric set above). Run it in the build's Python:

    .venv/bin/python bench/invariance_every_size.py smollm2-135m qwen2.5-coder-0.5b qwen2.5-coder-1.5b

--max-batch and --depths (comma-separated) change what is proved (default: 65 and 8,600).
"""
from __future__ import annotations

import argparse

import llama_cpp

from ngramspec import models
from ngramspec.builds.build_info import system_info
from ngramspec.calibration.invariance import check_batch_invariance


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["smollm2-135m"], help="names from ngramspec.models or GGUF paths")
    ap.add_argument("--max-batch", type=int, default=65)
    ap.add_argument("--depths", default="8,600")
    args = ap.parse_args(argv)
    depths = [int(d) for d in args.depths.split(",")]
    print(f"build: {system_info()}")
    for name in args.models:
        llm = llama_cpp.Llama(models.resolve_model_path(name), n_ctx=2048, n_threads=2, n_threads_batch=2,
                              verbose=False)
        report = check_batch_invariance(llm, args.max_batch, depths=depths, every_size=True)
        print(f"{name}: {report.summary()}", flush=True)


if __name__ == "__main__":
    main()
