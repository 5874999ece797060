"""A K-quant model for the tests: SmolLM2-135M requantized to Q4_K_M with
llama.cpp's own quantizer (``llama_model_quantize``, which llama-cpp-python binds).
SmolLM2's 576-wide rows cannot hold K-quant blocks, so llama.cpp keeps those in
Q5_0/Q8_0 and only the 1,536-wide feed-forward down projections become Q4_K/Q6_K:
enough to take llama.cpp's K-quant kernels, at SmolLM2's size. Made once (about 10 s)
and kept in the model cache."""
from __future__ import annotations

import ctypes
import os
from pathlib import Path


def requantized_q4_k(source: str) -> str:
    """The path of ``source`` (a GGUF file) requantized to Q4_K_M, made on first use."""
    import llama_cpp

    from ngramspec.builds.llama_build import cache_root

    dest = cache_root() / "models" / f"{Path(source).stem}-requantized-Q4_K_M.gguf"
    if dest.is_file():
        return str(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(f".tmp-{os.getpid()}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.allow_requantize = True
    params.nthread = 1
    try:
        rc = llama_cpp.llama_model_quantize(source.encode(), str(tmp).encode(), ctypes.byref(params))
        if rc != 0:
            raise RuntimeError(f"llama_model_quantize failed with {rc}")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return str(dest)
