"""The speculative decoding engine: draft, verify in one batch, keep the longest
matching prefix, roll the rest back. ``ngramspec.engine`` keeps its old public names."""
from __future__ import annotations

from ngramspec.engine.generation import Generation, GenerationStream
from ngramspec.engine.request import prompt_tokens_for
from ngramspec.engine.speculative_engine import DEFAULT_MAX_DRAFT, SpeculativeEngine

__all__ = ["DEFAULT_MAX_DRAFT", "Generation", "GenerationStream", "SpeculativeEngine", "prompt_tokens_for"]
