"""The one run-time kernel switch exact mode needs, set before llama.cpp first decodes.

llama.cpp's CPU backend multiplies K-quant weights (Q4_K, Q5_K, Q6_K, ...) with a
tiled kernel when a batch has 8 or more rows, and with vec_dot, row by row, below
that: on an exact build a verify batch of 8+ rows then rounds differently from
one-token decoding, so exact mode could verify at most 7 tokens on such a model.
The tiled kernel has no build flag; the environment variable ``GGML_CPU_TILED_MM=0``
turns it off, and llama.cpp reads it once per process, at its first decode.

So, on an exact build, importing ngramspec sets ``GGML_CPU_TILED_MM=0`` unless the
environment already sets it. Then every batch size is computed as one-token decoding
computes it, and plain decoding in the same process no longer depends on how much of
a prompt was cached. The price is the tiled kernel's speed on batches: prefill of a
K-quant model is slower (docs/exactness.md has the measurements). On a stock build,
where exact mode cannot speculate anyway and fast mode gains from the tiled kernel,
nothing is set. Set ``GGML_CPU_TILED_MM=1`` before importing ngramspec to keep the
tiled kernel (exact mode then verifies at most 7 tokens a pass on K-quant models).
"""
from __future__ import annotations

import os

__all__ = ["TILED_ENV", "peer_environ", "prefer_exact_kernels", "tiled_matmul_off"]

TILED_ENV = "GGML_CPU_TILED_MM"
_set_here = False   # whether prefer_exact_kernels set it (not the user)


def tiled_matmul_off() -> bool:
    """Whether this process's environment turns the tiled K-quant matmul off."""
    value = os.environ.get(TILED_ENV)
    try:
        return value is not None and int(value) == 0
    except ValueError:
        return False   # llama.cpp's atoi reads a non-number as 0, but only "0" is documented


def prefer_exact_kernels() -> bool:
    """Sets GGML_CPU_TILED_MM=0 when the installed llama-cpp-python is an exact build
    and the environment does not say otherwise. True when it set it. Never raises:
    without a usable llama-cpp-python there is nothing to set."""
    if TILED_ENV in os.environ:
        return False
    try:
        from ngramspec.builds.build_info import is_exact_build

        exact = is_exact_build()
    except Exception:   # no llama-cpp-python, or one whose library cannot load
        return False
    if exact:
        global _set_here
        os.environ[TILED_ENV] = "0"
        _set_here = True
    return exact


def peer_environ() -> dict[str, str]:
    """The environment as the user gave it, for a process that is not this build's
    (another build's worker, llama-server): without the switch if ngramspec set it,
    so a stock build or a peer keeps its default kernels."""
    env = dict(os.environ)
    if _set_here:
        env.pop(TILED_ENV, None)
    return env
