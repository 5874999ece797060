"""The speculative decoding engine: draft, verify in one batch, keep the longest
matching prefix, roll the rest back. ``ngramspec.engine`` keeps its old public names."""
from __future__ import annotations

from ngramspec.engine.speculative_engine import DEFAULT_MAX_DRAFT, Generation, SpeculativeEngine, prompt_tokens_for

__all__ = ["DEFAULT_MAX_DRAFT", "Generation", "SpeculativeEngine", "prompt_tokens_for"]
