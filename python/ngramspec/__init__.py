"""ngramspec: model-free n-gram speculative decoding for llama-cpp-python."""
from __future__ import annotations

from ._core import NGramPredictor, SuffixMatcher

__version__ = "0.1.0"

__all__ = [
    "NGramPredictor",
    "SuffixMatcher",
    "SpeculativeEngine",
    "Generation",
    "GenerationStats",
    "InvarianceReport",
    "check_batch_invariance",
    "SpeculativeLlama",
    "wrap",
    "NGramDraftModel",
    "Memory",
    "MemoryFileError",
    "TokenizerMismatchError",
    "__version__",
]


_LAZY = {
    "SpeculativeEngine": "engine",
    "Generation": "engine",
    "InvarianceReport": "invariance",
    "check_batch_invariance": "invariance",
    "GenerationStats": "stats",
    "SpeculativeLlama": "wrapper",
    "wrap": "wrapper",
    "NGramDraftModel": "draft_model",
    "Memory": "memory",
    "MemoryFileError": "memory",
    "TokenizerMismatchError": "memory",
}


def __getattr__(name: str) -> object:
    # The engine needs llama-cpp-python; it is imported only when asked for, so
    # the predictor works without it.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'ngramspec' has no attribute {name!r}")
