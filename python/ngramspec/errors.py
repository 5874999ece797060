"""The package's exceptions: one base, ``NgramspecError``, so a caller can catch every
error ngramspec raises on purpose with one ``except``; and the shared ones that
callers tell apart by type, not by message. Each also derives from the built-in
exception it was before (``ValueError``, ``RuntimeError``), so no existing ``except``
breaks.

The other exceptions live beside the code that raises them and derive from the base:
``builds.llama_build.BuildError``, ``models.ModelFetchError`` and ``ModelLoadError``,
``memory.MemoryFileError`` and ``TokenizerMismatchError``, ``server.errors.ClientError``,
and the benchmark's ``suite.workload.MissingMaterialError``,
``suite.llama_server.ServerError`` and ``suite.other_build.OtherBuildError``.
"""
from __future__ import annotations

__all__ = ["ContextTooSmallError", "MissingChatTemplateError", "NgramspecError", "PromptTooLongError", "UserError"]


class NgramspecError(Exception):
    """The base of every exception ngramspec raises on purpose."""


class UserError(NgramspecError):
    """A mistake in the command line or its inputs: the command reports it in one
    line on stderr, without a traceback, and exits with status 2."""


class ContextTooSmallError(NgramspecError, ValueError):
    """The context cannot hold what a measurement needs (the invariance check's
    probe, the cost curve's batch): raise n_ctx or lower the batch size."""


class PromptTooLongError(NgramspecError, ValueError):
    """The prompt does not fit in the context window (llama-cpp-python's message)."""


class MissingChatTemplateError(NgramspecError, ValueError):
    """The model's GGUF metadata has no chat template, so chat prompts cannot be
    formatted for it (the benchmark's chat workloads need one)."""
