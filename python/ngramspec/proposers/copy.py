"""The copy proposer: long drafts copied from where the recent context occurred
before in this generation's prompt and output (SuffixMatcher).

Its source buckets are the length of the evidence a copy token rests on, on a log
scale (2-3, 4-7, ..., 128-255, 256+), because acceptance climbs with its log: for a
fresh copy, the backward match it follows; for a copy that continues one that agreed
with everything the passes since it started emitted, the longer of that match and
the copy's *run* (how many tokens in a row it has been right), since the matcher
measures a match only up to its ``max_match`` while a whole-file edit copies right
for hundreds of tokens. Each length has two buckets, fresh and continuing: a copy
resumed after an edit has a short backward match, yet once its first tokens are
accepted it is usually right for a long way (measured on the code-editing workload:
the ramp from 1-token drafts was the main loss). Token i of a draft is judged only
if tokens 0..i-1 were accepted, so its evidence is i tokens longer: the later tokens
of a long copy draw on the higher acceptance of longer runs, which is what lets a
copy that keeps being right be drafted far ahead.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ngramspec._core import SuffixMatcher
from ngramspec.proposers.base import EMPTY_TOKENS, Proposal, Proposer

__all__ = ["COPY_PRIORS", "CopyProposer", "N_COPY_SOURCES", "copy_agreement", "copy_source", "copy_sources"]

_COPY_BUCKETS = 8
N_COPY_SOURCES = 2 * _COPY_BUCKETS
# Priors before any outcome is seen: a long match is usually a real copy (code
# edits, quoting), a 2-token one often is not; a copy right for a hundred tokens
# in a row is nearly always right for the next.
COPY_PRIORS = (0.35, 0.5, 0.65, 0.75, 0.85, 0.88, 0.9, 0.9) + (0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97)


#: A copy drafts at most max(RAMP_FLOOR, RAMP_FACTOR x its run) tokens. Replaying the
#: long-output workloads (bench/replay.py, SmolLM2-135M, a linear exact curve r(B) =
#: 1 + 0.34 (B - 1), drafts of up to 64): whole-file edit 1.88x -> 2.00x, multi-turn
#: refactor 1.61x -> 1.77x, the rest within 0.02x; factors 1 and 4, floor 16, did no better.
RAMP_FLOOR = 8
RAMP_FACTOR = 2


def copy_source(evidence: int, continuing: bool = False) -> int:
    """The bucket (0..N_COPY_SOURCES-1) of a copy draft token resting on ``evidence``
    tokens (a fresh copy's backward match; a continuing copy's longer of its match and
    its run); ``continuing``: the copy agreed with all the passes since it started emitted."""
    bucket = min(_COPY_BUCKETS - 1, max(0, evidence.bit_length() - 2))
    return bucket + (_COPY_BUCKETS if continuing else 0)


def copy_sources(match_length: int, continuing: bool, n: int, run: int = 0) -> list[int]:
    """The buckets of a copy draft's n tokens, after a backward match of
    ``match_length`` and a run of ``run`` confirmed tokens. Token i is judged only if
    tokens 0..i-1 were accepted, and then the copy has been confirmed for i more
    tokens: its evidence is i tokens longer."""
    evidence = max(match_length, run)
    return [copy_source(evidence + i, continuing or i > 0) for i in range(n)]


def copy_agreement(copied: Any, emitted: Sequence[int]) -> int:
    """How many tokens a copy draft got right over a pass's emitted tokens: their
    common length when it agreed with all of them (whether or not it was the draft
    verified), else -1 (it was wrong somewhere, or offered nothing)."""
    n = min(len(copied), len(emitted))
    if len(copied) == 0:
        return -1
    for i in range(n):   # a plain loop: a generator costs more for the one or two tokens of most passes
        if copied[i] != emitted[i]:
            return -1
    return n


class CopyProposer(Proposer):
    """Drafts what followed the longest earlier match of the current context."""

    name: ClassVar[str] = "copy"

    def __init__(self, matcher: SuffixMatcher | None = None) -> None:
        self.matcher = matcher if matcher is not None else SuffixMatcher()
        self.source_priors: Sequence[float] = COPY_PRIORS
        self._continuing = False
        self._run = 0    # tokens in a row the copies since the last miss got right
        self._last: np.ndarray = EMPTY_TOKENS   # the latest draft, until the next accept

    def begin(self, prompt: Sequence[int]) -> None:
        self.matcher.reset()
        self.matcher.update_batch(prompt)
        self._continuing, self._run, self._last = False, 0, EMPTY_TOKENS

    def propose(self, k: int) -> Proposal:
        # A copy drafts at most RAMP_FACTOR times as far ahead as it has been right (and
        # RAMP_FLOOR tokens at first): the edits a copy runs into are where it stops
        # being right, and its run is the only sign of how far off the next one is.
        k = min(k, max(RAMP_FLOOR, RAMP_FACTOR * self._run))
        copied, match = self.matcher.predict(k)
        self._last = copied
        return Proposal(copied, copy_sources(match, self._continuing, len(copied), run=self._run),
                        self.name, match)

    def accept(self, tokens: Sequence[int]) -> None:
        agreed = copy_agreement(self._last, tokens)
        self._continuing = agreed >= 0
        self._run = self._run + agreed if agreed >= 0 else 0
        self._last = EMPTY_TOKENS
        if len(tokens) == 1:
            self.matcher.update(tokens[0])
        else:
            self.matcher.update_batch(tokens)

