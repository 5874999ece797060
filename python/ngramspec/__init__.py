"""ngramspec: model-free n-gram speculative decoding for llama-cpp-python."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ._core import NGramPredictor, SuffixMatcher

if TYPE_CHECKING:  # the lazy exports, as type checkers should see them
    from .draft_model import NGramDraftModel
    from .engine import Generation, SpeculativeEngine
    from .invariance import InvarianceReport, check_batch_invariance
    from .memory import Memory, MemoryFileError, TokenizerMismatchError
    from .stats import GenerationStats
    from .wrapper import SpeculativeLlama, wrap

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
