"""ngramspec: model-free n-gram speculative decoding for llama-cpp-python."""
from __future__ import annotations

from ._core import NGramPredictor

__version__ = "0.1.0"

__all__ = ["NGramPredictor", "__version__"]
