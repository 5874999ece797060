"""The interface every source of draft tokens implements.

In the spirit of llama.cpp's ``common_speculative`` (begin / draft / accept) and
vLLM's proposers: a proposer only guesses how the text goes on. It knows nothing
about verification, batch sizes, costs or the KV cache; the ``Drafter`` decides
how much of which proposal to verify, and the generation loop verifies it.

Lifecycle of one generation:
  * ``begin(prompt)``: the prompt's tokens (the text so far);
  * ``propose(k)``: up to ``k`` tokens that would follow the text so far;
  * ``accept(tokens)``: the tokens the model emitted after the text so far (the
    text grows by exactly these, whether or not they came from a draft);
  * ``end(output)``: the generation is over (all its emitted tokens).
``propose`` may be called any number of times between two ``accept`` calls, or
not at all.

Source keys: each proposer declares ``source_priors``, the prior acceptance of
each of its own buckets (for example the n-gram share buckets, or the copy
match-length buckets). The ``Drafter`` gives it ``source_base``, the index of its
first bucket in the policy's acceptance table, and the proposer tags each draft
token with ``source_base + bucket``, so the policy learns every bucket of every
source side by side without knowing what the buckets mean. By default each
generation starts again from the priors (the next prompt may be another kind of
text); a proposer whose text spans generations (a Memory) sets the optional
class attribute ``keeps_acceptance = True`` and keeps what its buckets learned.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

__all__ = ["EMPTY_TOKENS", "Proposal", "Proposer"]

EMPTY_TOKENS = np.empty(0, dtype=np.int32)


@dataclass
class Proposal:
    """A proposer's guess at the next tokens.

    tokens: the draft, int32.
    sources: one source key per token (``Proposer.source_base`` + bucket): what
        the policy learns acceptance on. Token i is only judged if tokens 0..i-1
        were accepted, so its key may assume they were.
    name: the proposer's name, for stats ("ngram", "copy", "prediction", ...).
    match_length: how much context the guess rests on (the eager rule prefers
        the proposal with the longest; 0 when nothing matched).
    draft_probs: for a sampled draft model, each token's draft distribution q as
        a sparse (ids, probs) pair; None means one-hot (q(token) = 1), which
        is what every model-free proposer and a greedy draft model give.
    """
    tokens: np.ndarray
    sources: list[int]
    name: str
    match_length: int = 0
    draft_probs: list[tuple[np.ndarray, np.ndarray]] | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def head(self, n: int) -> Proposal:
        """The first ``n`` tokens of this proposal."""
        if n >= len(self.tokens):
            return self
        probs = None if self.draft_probs is None else self.draft_probs[:n]
        return Proposal(self.tokens[:n], self.sources[:n], self.name, self.match_length, probs)

    @staticmethod
    def none(name: str = "plain") -> Proposal:
        return Proposal(EMPTY_TOKENS, [], name)


@runtime_checkable
class Proposer(Protocol):
    """A source of draft tokens (see the module docstring)."""

    name: ClassVar[str]
    # Prior acceptance of each of this proposer's source buckets, before any outcome is seen.
    source_priors: Sequence[float]
    # Index of this proposer's first bucket in the policy's table; set by the Drafter.
    source_base: int

    def begin(self, prompt: Sequence[int]) -> None: ...

    def propose(self, k: int) -> Proposal: ...

    def accept(self, tokens: Sequence[int]) -> None: ...

    def end(self, output: Sequence[int]) -> None: ...


def describe(proposer: Any) -> str:
    """A short name for messages."""
    return getattr(proposer, "name", type(proposer).__name__)
