"""The memory proposer: drafts from a ``Memory`` for one engine or wrapper, and the
source buckets its draft tokens are priced by."""
from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol

import numpy as np

from ngramspec.proposers.base import EMPTY_TOKENS, Proposal, Proposer
from ngramspec.proposers.ngram import ngram_source

__all__ = ["FOLLOW_WINDOW", "MEMORY_PRIORS", "DraftSource", "MemoryProposer", "memory_source", "resumed_source",
           "support_source"]


class DraftSource(Protocol):
    """What the proposer reads of its ``Memory`` (the store, which builds proposers,
    satisfies it; this module imports nothing of the store)."""

    prompt_tail: int

    @property
    def max_match(self) -> int: ...

    def predict_at(self, context: Sequence[int], k: int) -> tuple[np.ndarray, int, int]: ...

    def follow(self, place: int, window: int, context: Sequence[int], k: int) -> tuple[np.ndarray, int, int]: ...

    def support(self, context: Sequence[int], draft: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def add_tokens(self, tokens: Sequence[int]) -> None: ...


# Source buckets by match length: 2-3, 4-7, 8-15, 16-31, 32+,
# each twice (a fresh match; one continuing a memory draft that agreed with all
# the last pass emitted). The priors are guesses, not measured: a little below the
# copy drafter's, because a match in another request's text is weaker evidence
# than one in this request's prompt. Then three buckets for a draft that resumes
# near where the output departed from a memory draft (MemoryProposer, "following"),
# by its match length: 1, 2-3, 4+. Then five for how many stored continuations of
# the context back each draft token (``Memory.support``), as the n-gram drafter's
# share buckets: backed by one document only; by under a half of those that agreed
# so far; under 0.8; under 1; by all of them (two or more). These key every token of
# a draft that has such candidates (the match-length buckets are left for a draft
# that has none); the priors are the n-gram drafter's measured shares rounded.
# The policy learns each bucket online.
_MATCH_BUCKETS = 5
_N_MATCH_SOURCES = 2 * _MATCH_BUCKETS
_RESUME_BUCKETS = 3
_SUPPORT_BASE = _N_MATCH_SOURCES + _RESUME_BUCKETS
MEMORY_PRIORS = ((0.25, 0.4, 0.55, 0.7, 0.8) + (0.55, 0.65, 0.75, 0.8, 0.85) + (0.3, 0.45, 0.6)
                 + (0.5, 0.1, 0.4, 0.6, 0.9))
# Following: how far past the place where the output departed from a memory draft
# a resumed draft is looked for, and for how many output tokens that place is kept.
# Chosen by replaying the recorded Qwen 0.5B sequences with a prototype (windows
# 4-64 within 4% of each other on extraction and tool_calls; 8 among the best).
FOLLOW_WINDOW = 8


def memory_source(match_length: int, continuing: bool = False) -> int:
    """The bucket (0..9) of a memory draft token that follows a backward match of this
    length: 2-3, 4-7, 8-15, 16-31, 32+, fresh or continuing."""
    bucket = min(_MATCH_BUCKETS - 1, max(0, match_length.bit_length() - 2))
    return bucket + (_MATCH_BUCKETS if continuing else 0)


def support_source(agree: int, seen: int) -> int:
    """The bucket (13..17) of a memory draft token that ``agree`` of the ``seen``
    stored continuations (those that agreed with the draft before it) go on with:
    the n-gram drafter's share buckets."""
    return _SUPPORT_BASE + ngram_source(agree, seen)


def resumed_source(match_length: int) -> int:
    """The bucket (10..12) of the first token of a draft resumed near the place where
    the output departed from a memory draft, after a backward match of this length."""
    return _N_MATCH_SOURCES + min(_RESUME_BUCKETS - 1, max(0, match_length.bit_length() - 1))


class MemoryProposer(Proposer):
    """Drafts from a ``Memory`` what followed the longest match of the current
    context (prompt + accepted output) in the stored documents; stores this
    generation's output (after the prompt's last ``prompt_tail`` tokens) in the
    memory when it ends. One per engine or wrapper (it holds one generation's
    context); the Memory behind it may be shared.

    Following: it remembers where in the store its latest draft came from. When the
    output departs from it (a new value in the same JSON shape), a fresh match would
    need ``anchor`` (3) tokens of the shape again before memory drafts anything.
    Instead, for the next FOLLOW_WINDOW output tokens it also looks a few positions
    past the departure in that document for the output's newest tokens, where a
    single matching token usually means the shape resumes there, and drafts what
    follows (its own buckets, learned like the others).

    Support: a token that two or more stored continuations of the context back is
    priced by how many of them agree with it (``Memory.support``), not by the match
    length. The skeleton of a repeated JSON answer is backed by every earlier answer,
    its values by one or none, so the policy learns to draft through the skeleton and
    stop before a value.

    What following and support gave, replayed: docs/memory.md."""

    name: ClassVar[str] = "memory"
    # Its text is the earlier requests, so how far it can be trusted carries over
    # from one request to the next: starting each request from the priors, short
    # requests (a 65-token JSON answer) ended before the policy had learned that
    # memory drafts were right 70-75% of the time. Measured (memory_sequences.py,
    # Qwen 0.5B, 2 threads, extraction and tool_calls; bench/results/memory-keep-acceptance-ab.md):
    # 4% and 3% fewer passes, decode time unchanged within noise.
    keeps_acceptance: ClassVar[bool] = True

    def __init__(self, memory: DraftSource) -> None:
        self.memory = memory
        self.source_priors: Sequence[float] = MEMORY_PRIORS
        self._keep = memory.max_match  # only the context's last max_match tokens can matter
        self._context: list[int] = []
        self._prompt_tail: list[int] = []
        self._reset()

    def _reset(self) -> None:
        self._continuing = False
        self._last: np.ndarray = EMPTY_TOKENS  # the latest draft, until the next accept
        # The latest draft with one token more (so the token after it can be checked
        # too), and where it starts in the store; None: no draft.
        self._ahead: np.ndarray = EMPTY_TOKENS
        self._drafted_at: int | None = None
        # Following (see the class docstring): the place in the store the output is
        # at (synced: the next output token is expected there) or departed from
        # (not synced: the token it did not emit), and output tokens since it departed.
        self._place: int | None = None
        self._synced = False
        self._lag = 0

    def begin(self, prompt: Sequence[int]) -> None:
        prompt = [int(t) for t in prompt]
        tail = self.memory.prompt_tail
        self._prompt_tail = prompt if tail < 0 else (prompt[-tail:] if tail else [])
        self._context = prompt[-self._keep:]
        self._reset()

    def propose(self, k: int) -> Proposal:
        self._last, self._ahead, self._drafted_at = EMPTY_TOKENS, EMPTY_TOKENS, None
        if k <= 0:
            return Proposal.none(self.name)
        ahead, match, at = self.memory.predict_at(self._context, k + 1)
        resumed = False
        if self._place is not None:
            # Near the place it follows, one matching token is strong evidence; a match
            # as long elsewhere in the store is not, so ties go to the place.
            near = (self.memory.follow(self._place - 1, 1, self._context, k + 1) if self._synced
                    else self.memory.follow(self._place, FOLLOW_WINDOW, self._context, k + 1))
            if len(near[0]) and near[1] >= match:
                ahead, match, at = near
                resumed = not self._synced
        if len(ahead) == 0:
            return Proposal.none(self.name)
        self._ahead, self._drafted_at = ahead, at
        draft = self._last = ahead[:k]
        if resumed:
            sources = [resumed_source(match)] + [memory_source(match + i, True) for i in range(1, len(draft))]
        else:
            agree, seen = self.memory.support(self._context, draft)
            # Backed by two or more stored continuations: keyed on how many agree; by
            # one document (or none): on the match, as a copy is.
            sources = [support_source(int(agree[i]), int(seen[i])) if seen[i] > 1
                       else memory_source(match + i, self._continuing or i > 0)
                       for i in range(len(draft))]
        return Proposal(draft, sources, self.name, match)

    def accept(self, tokens: Sequence[int]) -> None:
        tokens = [int(t) for t in tokens]
        n = min(len(self._last), len(tokens))
        self._continuing = len(self._last) > 0 and all(int(self._last[i]) == tokens[i] for i in range(n))
        self._follow(tokens)
        self._last, self._ahead, self._drafted_at = EMPTY_TOKENS, EMPTY_TOKENS, None
        self._context.extend(tokens)
        if len(self._context) > 2 * self._keep:  # trim now and then, not on every token
            del self._context[:-self._keep]

    def _follow(self, tokens: list[int]) -> None:
        """Moves the followed place by the emitted ``tokens``."""
        ahead, at = self._ahead, self._drafted_at
        if at is not None:
            agreed = 0
            while agreed < min(len(ahead), len(tokens)) and int(ahead[agreed]) == tokens[agreed]:
                agreed += 1
            if agreed == len(tokens):       # the output is still in the document
                self._place, self._synced, self._lag = at + agreed, True, 0
                return
            if agreed == len(ahead):        # it ran past the document's end
                self._place = None
                return
            if agreed > 0 or self._place is None or self._synced:
                # It departed from this draft: the place to resume near.
                self._place, self._synced, self._lag = at + agreed, False, 0
                tokens = tokens[agreed:]
            # else a draft from elsewhere was wrong at once: keep the place already followed.
        elif self._synced:                  # nothing to draft from the place: its document ended
            self._place = None
        if self._place is not None:         # output tokens since it departed
            self._lag += len(tokens)
            if self._lag > FOLLOW_WINDOW:
                self._place = None

    def end(self, output: Sequence[int]) -> None:
        output = [int(t) for t in output]
        if output:
            self.memory.add_tokens(self._prompt_tail + output)
        self._context, self._prompt_tail = [], []
        self._reset()
