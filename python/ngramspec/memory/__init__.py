"""A memory of earlier requests and files that drafts from what was written before."""
from __future__ import annotations

from ngramspec.memory.store import (
    FOLLOW_WINDOW,
    MEMORY_PRIORS,
    Memory,
    MemoryFileError,
    MemoryProposer,
    PrimeReport,
    TokenizerFingerprint,
    TokenizerMismatchError,
    memory_source,
    resumed_source,
    support_source,
    tokenizer_fingerprint,
)

__all__ = ["FOLLOW_WINDOW", "MEMORY_PRIORS", "Memory", "MemoryFileError", "MemoryProposer", "PrimeReport",
           "TokenizerFingerprint", "TokenizerMismatchError", "memory_source", "resumed_source",
           "support_source", "tokenizer_fingerprint"]
