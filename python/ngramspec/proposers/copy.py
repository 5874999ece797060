"""The copy proposer: long drafts copied from where the recent context occurred
before in this generation's prompt and output (SuffixMatcher).

Its source buckets are the length of the backward match a copy follows (powers of
two, because acceptance climbs with the log of the match length: 2-3, 4-7, 8-15,
16-31, 32+), each twice: for a fresh copy, and for one that continues a copy
that agreed with everything the last pass emitted. A copy resumed after an edit
has a short backward match, yet once its first tokens are accepted it is usually
right for a long way (measured on the code-editing workload: the ramp from
1-token drafts was the main loss).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ngramspec._core import SuffixMatcher
from ngramspec.proposers.base import EMPTY_TOKENS, Proposal

__all__ = ["COPY_PRIORS", "CopyProposer", "N_COPY_SOURCES", "copy_confirmed", "copy_source", "copy_sources"]

_COPY_BUCKETS = 5
N_COPY_SOURCES = 2 * _COPY_BUCKETS
# Priors before any outcome is seen: a long match is usually a real copy (code
# edits, quoting), a 2-token one often is not.
COPY_PRIORS = (0.35, 0.5, 0.65, 0.75, 0.85) + (0.6, 0.7, 0.8, 0.85, 0.9)


def copy_source(match_length: int, continuing: bool = False) -> int:
    """The bucket (0..N_COPY_SOURCES-1) of a copy draft that follows a backward
    match of this length; ``continuing``: the last copy agreed with all it emitted."""
    bucket = min(_COPY_BUCKETS - 1, max(0, match_length.bit_length() - 2))
    return bucket + (_COPY_BUCKETS if continuing else 0)


def copy_sources(match_length: int, continuing: bool, n: int, base: int = 0) -> list[int]:
    """``base`` + the buckets of a copy draft's n tokens. Token i is judged only if
    tokens 0..i-1 were accepted, and then the copy has been confirmed for i more
    tokens and its match is i tokens longer: later tokens of a long copy draw on
    the higher acceptance of longer, confirmed matches, which is what lets a copy
    that keeps being right be drafted far ahead."""
    return [base + copy_source(match_length + i, continuing or i > 0) for i in range(n)]


def copy_confirmed(copied: Any, emitted: Sequence[int]) -> bool:
    """Whether a copy draft agreed with every token a pass emitted (over their
    common length), whether or not it was the draft verified: its next tokens are
    then priced as a continuing copy."""
    n = min(len(copied), len(emitted))
    return len(copied) > 0 and all(int(copied[i]) == emitted[i] for i in range(n))


class CopyProposer:
    """Drafts what followed the longest earlier match of the current context."""

    name: ClassVar[str] = "copy"

    def __init__(self, matcher: SuffixMatcher | None = None) -> None:
        self.matcher = matcher if matcher is not None else SuffixMatcher()
        self.source_priors: Sequence[float] = COPY_PRIORS
        self.source_base = 0
        self._continuing = False
        self._last: np.ndarray = EMPTY_TOKENS   # the latest draft, until the next accept

    def begin(self, prompt: Sequence[int]) -> None:
        self.matcher.reset()
        self.matcher.update_batch(prompt)
        self._continuing, self._last = False, EMPTY_TOKENS

    def propose(self, k: int) -> Proposal:
        copied, match = self.matcher.predict(k)
        self._last = copied
        return Proposal(copied, copy_sources(match, self._continuing, len(copied), self.source_base),
                        self.name, match)

    def accept(self, tokens: Sequence[int]) -> None:
        self._continuing = copy_confirmed(self._last, tokens)
        self._last = EMPTY_TOKENS
        if len(tokens) == 1:
            self.matcher.update(tokens[0])
        else:
            self.matcher.update_batch(tokens)

    def end(self, output: Sequence[int]) -> None:
        pass
