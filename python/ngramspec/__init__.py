"""ngramspec: model-free n-gram speculative decoding for llama-cpp-python."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ngramspec._core import NGramPredictor, SuffixMatcher
from ngramspec.builds.kernel_env import prefer_exact_kernels

if TYPE_CHECKING:  # the lazy exports, as type checkers should see them
    from ngramspec.calibration.invariance import InvarianceReport, check_batch_invariance
    from ngramspec.engine.generation import Generation
    from ngramspec.engine.speculative_engine import SpeculativeEngine
    from ngramspec.engine.stats import GenerationStats
    from ngramspec.integrations.ngram_draft_model import NGramDraftModel
    from ngramspec.integrations.wrapper import SpeculativeLlama, wrap
    from ngramspec.memory.file_format import MemoryFileError
    from ngramspec.memory.fingerprint import TokenizerMismatchError
    from ngramspec.memory.store import Memory
    from ngramspec.options import EngineOptions

__version__ = "0.1.0"

__all__ = [
    "NGramPredictor",
    "SuffixMatcher",
    "SpeculativeEngine",
    "EngineOptions",
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
    "prefer_exact_kernels",
    "__version__",
]


_LAZY = {
    "SpeculativeEngine": "engine.speculative_engine",
    "EngineOptions": "options",
    "Generation": "engine.generation",
    "InvarianceReport": "calibration.invariance",
    "check_batch_invariance": "calibration.invariance",
    "GenerationStats": "engine.stats",
    "SpeculativeLlama": "integrations.wrapper",
    "wrap": "integrations.wrapper",
    "NGramDraftModel": "integrations.ngram_draft_model",
    "Memory": "memory.store",
    "MemoryFileError": "memory.file_format",
    "TokenizerMismatchError": "memory.fingerprint",
}


def __getattr__(name: str) -> object:
    # The engine needs llama-cpp-python; it is imported only when asked for, so
    # the predictor works without it.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'ngramspec' has no attribute {name!r}")
