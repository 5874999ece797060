"""Exceptions that callers tell apart by type, not by message."""
from __future__ import annotations

__all__ = ["ContextTooSmall", "MissingChatTemplate", "PromptTooLong", "UserError"]


class UserError(Exception):
    """A mistake in the command line or its inputs: the command reports it in one
    line on stderr, without a traceback, and exits with status 2."""


class ContextTooSmall(ValueError):
    """The context cannot hold what a measurement needs (the invariance check's
    probe, the cost curve's batch): raise n_ctx or lower the batch size."""


class PromptTooLong(ValueError):
    """The prompt does not fit in the context window (llama-cpp-python's message)."""


class MissingChatTemplate(ValueError):
    """The model's GGUF metadata has no chat template, so chat prompts cannot be
    formatted for it (the benchmark's chat workloads need one)."""
