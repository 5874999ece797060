"""The base every source of draft tokens derives from.

In the spirit of llama.cpp's ``common_speculative_impl`` (begin / draft / accept,
each with a default) and vLLM's proposers: a proposer only guesses how the text goes
on. It knows nothing about verification, batch sizes, costs or the KV cache; the
``Drafter`` decides how much of which proposal to verify, and the generation loop
verifies it.

Lifecycle of one generation:
  * ``set_sampling(sampling)``: the generation's sampling parameters (None: greedy),
    before ``begin``; only a proposer that samples (a draft model) uses them;
  * ``begin(prompt)``: the prompt's tokens (the text so far);
  * ``propose(k)``: up to ``k`` tokens that would follow the text so far;
  * ``accept(tokens)``: the tokens the model emitted after the text so far (the
    text grows by exactly these, whether or not they came from a draft);
  * ``end(output)``: the generation is over (all its emitted tokens).
``propose`` may be called any number of times between two ``accept`` calls, or
not at all. A generation that can draft nothing (no batch size above one token may
be verified, or max_draft is 0) calls ``begin`` and ``end`` only: a proposer must
not need ``accept`` to make sense of ``end``'s output.

What a proposer says about itself (class attributes, with the base's defaults):
  * ``source_priors``: the prior acceptance of each of its own *buckets* (for example
    the n-gram share buckets, or the copy evidence buckets). Each draft token is
    tagged with its bucket, 0 .. len(source_priors) - 1; the ``Drafter`` places every
    proposer's buckets in one policy table, so the policy learns every bucket of
    every proposer side by side without knowing what the buckets mean;
  * ``keeps_acceptance``: its buckets carry what they learned into the next
    generation (a proposer whose text spans requests, such as a Memory); by default
    each generation starts again from the priors.
A proposer whose ``propose`` runs a model derives from ``CostlyProposer``: the
drafting layer prices each call before making it (``drafting.cost_gate``), from
what that class declares (``expected_seconds(k)``, ``planned_sources``,
``pending_tokens``, ``size_ratio``).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

__all__ = ["EMPTY_TOKENS", "CostlyProposer", "Proposal", "Proposer"]

EMPTY_TOKENS = np.empty(0, dtype=np.int32)


@dataclass
class Proposal:
    """A proposer's guess at the next tokens.

    tokens: the draft, int32.
    sources: one source key per token: the proposer's bucket, or, once the
        ``Drafter`` has placed it in the policy's table, that table's index. Token i
        is only judged if tokens 0..i-1 were accepted, so its key may assume they were.
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

    def placed(self, base: int) -> Proposal:
        """The same proposal with its buckets moved to the policy table's indices
        from ``base`` on."""
        if not base:
            return self
        return Proposal(self.tokens, [base + s for s in self.sources], self.name, self.match_length,
                        self.draft_probs)

    @staticmethod
    def none(name: str = "plain") -> Proposal:
        return Proposal(EMPTY_TOKENS, [], name)


class Proposer:
    """A source of draft tokens (see the module docstring). Subclasses give
    ``name`` and ``source_priors`` and implement ``propose``; the other steps
    default to doing nothing."""

    name: ClassVar[str] = "proposer"
    #: Prior acceptance of each of this proposer's buckets, before any outcome is seen.
    source_priors: Sequence[float] = ()
    #: Its buckets keep what they learned from one generation to the next.
    keeps_acceptance: ClassVar[bool] = False

    def set_sampling(self, sampling: Any) -> None:
        """The next generation's sampling parameters (None: greedy)."""

    def begin(self, prompt: Sequence[int]) -> None:
        """A generation starts after ``prompt``."""

    def propose(self, k: int) -> Proposal:
        raise NotImplementedError

    def accept(self, tokens: Sequence[int]) -> None:
        """The model emitted ``tokens`` after the text so far."""

    def end(self, output: Sequence[int]) -> None:
        """The generation is over; ``output`` is all it emitted."""

    def expected_seconds(self, k: int) -> float | None:
        """What a ``k``-token proposal would cost, for a costly proposer (None: not
        known yet, or a free proposer)."""
        return None


class CostlyProposer(Proposer):
    """A proposer whose ``propose`` runs a model, so it is priced before each call
    (``drafting.cost_gate.CostlyGate``) from what it says here."""

    #: Its model's size over the target's, to price a call before any was timed.
    size_ratio: float = 1.0

    def planned_sources(self, k: int) -> list[int]:
        """The buckets a proposal of ``k`` tokens will carry, known before it is made."""
        raise NotImplementedError

    def pending_tokens(self) -> int:
        """Tokens of the text it has not yet seen (a catch-up its next call pays for)."""
        return 0
