"""Exceptions that callers tell apart by type, not by message."""
from __future__ import annotations

__all__ = ["ContextTooSmall", "PromptTooLong"]


class ContextTooSmall(ValueError):
    """The context cannot hold what a measurement needs (the invariance check's
    probe, the cost curve's batch): raise n_ctx or lower the batch size."""


class PromptTooLong(ValueError):
    """The prompt does not fit in the context window (llama-cpp-python's message)."""
