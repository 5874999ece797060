"""The Drafter hands each proposer's wish to keep its learned acceptance across
generations to the policy (a Memory's text spans requests; n-gram and copy
buckets start each generation from their priors)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from ngramspec.drafting.drafter import Drafter, source_bases
from ngramspec.drafting.policy import CostAwarePolicy
from ngramspec.proposers.base import Proposal, Proposer
from ngramspec.proposers.copy import CopyProposer
from ngramspec.proposers.ngram import NGramProposer


class _Repeats(Proposer):
    """Always drafts the token 7: right every time on a text of 7s."""

    name: ClassVar[str] = "repeats"
    source_priors: Sequence[float] = (0.2,)

    def propose(self, k: int) -> Proposal:
        return Proposal(np.full(k, 7, dtype=np.int32), [0] * k, self.name, 3)


class _KeepingRepeats(_Repeats):
    keeps_acceptance: ClassVar[bool] = True


def _generation(d: Drafter, passes: int) -> None:
    d.begin([1, 2, 3])
    for _ in range(passes):
        draft = d.draft(8)
        d.verified(draft, 0.0, len(draft))
        d.accept([7] * (len(draft) + 1))
    d.end()


def test_a_proposer_that_keeps_acceptance_starts_the_next_generation_where_it_left_off():
    allowed = np.ones(10, dtype=bool)
    for keeps in (True, False):
        repeats = _KeepingRepeats() if keeps else _Repeats()
        policy = CostAwarePolicy(9, learn_cost=False)
        policy.calibrate({b: 1.0 + 0.1 * (b - 1) for b in range(1, 10)})
        proposers = [NGramProposer(), CopyProposer(), repeats]
        d = Drafter(proposers, policy, allowed, 8)
        src = source_bases(proposers)[0][2]
        _generation(d, 30)
        learned = policy.acceptance[src]
        assert learned > 0.9
        d.begin([1, 2, 3])   # the next generation
        assert policy.acceptance[src] == (learned if keeps else 0.2)


def test_without_the_copy_proposer_the_next_proposer_starts_from_its_own_priors():
    # Its buckets take the copy proposer's slots in the policy's table; they once
    # kept the copy seeds (0.35, 0.5, 0.65, ...) instead of the declared 0.2.
    allowed = np.ones(10, dtype=bool)
    for with_copy in (True, False):
        repeats, copy = _Repeats(), CopyProposer()
        policy = CostAwarePolicy(9, learn_cost=False)
        proposers = [NGramProposer(), copy, repeats] if with_copy else [NGramProposer(), repeats]
        d = Drafter(proposers, policy, allowed, 8)
        bases = source_bases(proposers)[0]
        assert policy.acceptance_of(bases[-1]) == 0.2
        if with_copy:
            assert [policy.acceptance_of(bases[1] + i) for i in range(len(copy.source_priors))] == \
                [float(x) for x in copy.source_priors]
        _generation(d, 3)
        d.begin([1, 2, 3])      # a new generation starts from the same priors
        assert policy.acceptance_of(bases[-1]) == 0.2


def test_the_policy_table_is_built_from_the_proposers_alone():
    policy = CostAwarePolicy(9)
    assert len(policy.acceptance) == 0
    proposers = [NGramProposer(), CopyProposer(), _Repeats()]
    Drafter(proposers, policy, np.ones(10, dtype=bool), 8)
    assert policy.acceptance.tolist() == [float(x) for p in proposers for x in p.source_priors]


class _Recording(_Repeats):
    """Counts what the drafter asks of it."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {"begin": 0, "propose": 0, "accept": 0, "end": 0}
        self.ended_with: list[int] | None = None

    def begin(self, prompt: Sequence[int]) -> None:
        self.calls["begin"] += 1

    def propose(self, k: int) -> Proposal:
        self.calls["propose"] += 1
        return super().propose(k)

    def accept(self, tokens: Sequence[int]) -> None:
        self.calls["accept"] += 1

    def end(self, output: Sequence[int]) -> None:
        self.calls["end"] += 1
        self.ended_with = list(output)


def test_a_generation_that_can_draft_nothing_leaves_proposers_and_policy_alone_until_its_end():
    for max_draft, allowed_above_one in ((0, True), (8, False)):
        allowed = np.ones(10, dtype=bool)
        allowed[2:] = allowed_above_one
        recording = _Recording()
        policy = CostAwarePolicy(9)
        d = Drafter([recording], policy, allowed, max_draft)
        acceptance = list(policy.acceptance)
        d.begin([1, 2, 3])
        for i in range(5):
            draft = d.draft(8)
            assert len(draft) == 0
            d.verified(draft, 0.01, 0)
            d.accept([10 + i])
        d.end()
        assert recording.calls == {"begin": 1, "propose": 0, "accept": 0, "end": 1}
        assert recording.ended_with == [10, 11, 12, 13, 14] and d.output == [10, 11, 12, 13, 14]
        assert list(policy.acceptance) == acceptance
        assert math.isnan(policy.single_seconds)   # no pass was timed into the cost model


def test_a_generation_that_can_draft_tells_its_proposers_every_token():
    recording = _Recording()
    d = Drafter([recording], CostAwarePolicy(9), np.ones(10, dtype=bool), 8)
    _generation(d, 3)
    assert recording.calls["accept"] == 3 and recording.calls["propose"] == 3
