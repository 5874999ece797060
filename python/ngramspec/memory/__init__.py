"""A memory of earlier requests and files that drafts from what was written before."""
from __future__ import annotations

from ngramspec.memory.file_format import MemoryFileError
from ngramspec.memory.fingerprint import TokenizerFingerprint, TokenizerMismatchError, tokenizer_fingerprint
from ngramspec.memory.priming import PrimeReport
from ngramspec.memory.proposer import (
    FOLLOW_WINDOW,
    MEMORY_PRIORS,
    MemoryProposer,
    memory_source,
    resumed_source,
    support_source,
)
from ngramspec.memory.store import Memory

__all__ = ["FOLLOW_WINDOW", "MEMORY_PRIORS", "Memory", "MemoryFileError", "MemoryProposer", "PrimeReport",
           "TokenizerFingerprint", "TokenizerMismatchError", "memory_source", "resumed_source",
           "support_source", "tokenizer_fingerprint"]
