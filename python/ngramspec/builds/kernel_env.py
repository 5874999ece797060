"""The one run-time kernel switch exact mode needs on an unpatched exact build, set
before llama.cpp first decodes.

llama.cpp's CPU backend multiplies K-quant weights (Q4_K, Q5_K, Q6_K, ...) with a
tiled kernel when a batch has 8 or more rows, and with vec_dot, row by row, below
that: on an exact build a verify batch of 8+ rows then rounds differently from
one-token decoding, so exact mode could verify at most 7 tokens on such a model.
The tiled kernel has no build flag; the environment variable ``GGML_CPU_TILED_MM=0``
turns it off, and llama.cpp reads it once per process, at its first decode.

Turning it off is the user's choice, not a side effect of importing ngramspec:
measured on a 2-core AVX-512 Xeon, exact build, 2 threads (docs/exactness.md), it
makes a 1,000-token prefill of Qwen2.5-Coder-1.5B Q4_K_M 2.7x slower (22.2 s against
8.2 s) and of Qwen2.5-Coder-0.5B 8% slower, one-token decoding unchanged, while the
longer exact drafts it allows gained about 10% of decode speed on the long-output
workloads (replayed). So the default keeps llama.cpp's kernel (exact mode then verifies
at most 7 tokens a pass on K-quant models), and ``prefer_exact_kernels()``, called
before llama.cpp first decodes in the process, or ``GGML_CPU_TILED_MM=0`` in the
environment, turns it off: worth it for short prompts and long outputs. On a stock
build, where exact mode cannot speculate anyway, it sets nothing; nor on the patched
exact build that ``ngramspec install-llama`` makes now, where the tiled kernel takes
only batches of more than 65 rows (prompt processing), so every verify size is exact
with it on.
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
    """Sets GGML_CPU_TILED_MM=0 when the installed llama-cpp-python is an unpatched
    exact build and the environment does not say otherwise; call it before llama.cpp
    first decodes in this process (it reads the variable once). True when it set it.
    Never raises: without a usable llama-cpp-python there is nothing to set."""
    if TILED_ENV in os.environ:
        return False
    try:
        from ngramspec.builds.build_info import batch_invariant_max, is_exact_build, system_info

        info = system_info()
        exact = is_exact_build(info) and batch_invariant_max(info) == 0
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
