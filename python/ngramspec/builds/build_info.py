"""What the installed llama.cpp build and a Llama's settings mean for exactness.

``llama_cpp.llama_print_system_info()`` lists the CPU features a build was made
with. Three of them, and one context setting, make a batch of rows compute in
another order than one-token decoding (docs/exactness.md has the measurements):

- LLAMAFILE: llamafile's sgemm takes every matmul of 2+ rows it supports,
  attention's F16 products included; one-token decoding uses ggml's vec_dot.
- REPACK: repacked weights are multiplied in 4-row groups.
  Neither is a hazard on our patched build (BATCH_INVARIANT_MAX = 65 in the list):
  there a mat-mul of up to 65 rows takes the one-row kernels only.
- flash_attn=True: one-token decoding splits the KV across threads once it holds
  512+ cells (past 256 tokens), and 8+ query rows take a tiled path.
- the tiled K-quant matmul for 8+ rows (on in every build; the environment
  variable GGML_CPU_TILED_MM=0 turns it off; above 65 rows only on the patched build).

The invariance check finds which sizes survive; this module names the causes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ngramspec.builds import llama_build

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["system_info", "build_features", "invariance_hazards", "is_exact_build", "batch_invariant_max",
           "build_label", "build_tag", "INSTALL_COMMAND"]

#: The command that rebuilds llama-cpp-python with the exact flags.
INSTALL_COMMAND = "ngramspec install-llama"

_HAZARDS = {
    "LLAMAFILE": "LLAMAFILE (llamafile's sgemm: batches of 2+ rows, attention included, round differently)",
    "REPACK": "REPACK (repacked weights: batches multiplied in 4-row groups)",
}


def system_info() -> str:
    import llama_cpp

    return str(llama_cpp.llama_print_system_info().decode(errors="replace").strip())


def build_features(info: str | None = None) -> dict[str, str]:
    """{feature: value} from ``llama_print_system_info()`` ("AVX2 = 1" -> {"AVX2": "1"})."""
    return llama_build.build_features(system_info() if info is None else info)


def _flash_attn(llm: Llama) -> bool:
    cp = getattr(llm, "context_params", None)
    return bool(getattr(cp, "flash_attn_type", 0) == 1 or getattr(cp, "flash_attn", False) is True)


def invariance_hazards(llm: Llama | None = None, info: str | None = None) -> list[str]:
    """The build features (and, given a Llama, its settings) that make batched
    verification differ from one-token decoding, each with why; [] for none."""
    info = system_info() if info is None else info
    features = build_features(info)
    patched = llama_build.batch_invariant_max(info) > 0
    hazards = [] if patched else [why for name, why in _HAZARDS.items() if features.get(name) == "1"]
    if llm is not None and _flash_attn(llm):
        hazards.append("flash_attn=True (one-token decoding splits the KV over threads past 256 cached tokens; "
                       "8+ query rows take a tiled path)")
    return hazards


def is_exact_build(info: str | None = None) -> bool:
    """True for the build ``ngramspec install-llama`` makes (patched: batches up to
    BATCH_INVARIANT_MAX rows take one-row kernels) and for one with neither LLAMAFILE
    nor REPACK."""
    return llama_build.is_exact_build(system_info() if info is None else info)


def batch_invariant_max(info: str | None = None) -> int:
    """The patched build's largest batch computed with one-row kernels only (0: unpatched)."""
    return llama_build.batch_invariant_max(system_info() if info is None else info)


def build_label(info: str | None = None) -> str:
    """How doctor and install-llama name a build: patched exact, unpatched exact, or stock."""
    info = system_info() if info is None else info
    limit = batch_invariant_max(info)
    if limit:
        return f"an exact build (patched: batches of up to {limit} rows take one-row kernels)"
    return "an exact build (LLAMAFILE and REPACK off)" if is_exact_build(info) else "a stock build"


def build_tag(info: str | None = None) -> str:
    """'exact-build' or 'stock': the benchmark's short name for a build (its methods'
    prefix, e.g. "stock ngramspec fast")."""
    return "exact-build" if is_exact_build(info) else "stock"
