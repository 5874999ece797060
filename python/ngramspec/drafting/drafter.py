"""The one place that answers "what do we verify this pass".

A ``Drafter`` holds the proposers, the batch sizes verification may use, and the
policy. Each pass it asks every proposer for a draft, lets the policy choose one
proposal and its length, and returns that draft. After verification it tells the
policy what happened (``verified``), and after emission it tells the proposers
and the policy what the text became (``accept``); a generation that can draft
nothing skips both, token by token. The generation loop never sees
a proposer's insides, and ``bench/replay.py`` drives this same class on recorded
outputs, so what the replay prices is the code that ships.

The draft length is decided here and only here (``draft``): the cap the loop
gives (room left in max_tokens and the context), ``max_draft``, the proposals'
lengths, and the policy's choice among the allowed batch sizes.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ngramspec.drafting.cost_gate import CostlyGate
from ngramspec.drafting.policy_protocol import Policy
from ngramspec.proposers.base import CostlyProposer, Proposal, Proposer

__all__ = ["Drafter", "source_bases"]

_PLAIN = Proposal.none()


def source_bases(proposers: Sequence[Proposer]) -> tuple[list[int], int]:
    """Where each proposer's buckets start in the policy's one table, in order, and
    the table's size."""
    bases, base = [], 0
    for p in proposers:
        bases.append(base)
        base += len(p.source_priors)
    return bases, base


class Drafter:
    """proposers: the sources of drafts, in priority order (ties go to the first).
    policy: a ``Policy`` (``CostAwarePolicy`` or ``EagerPolicy``).
    allowed: allowed[b] is True when a verify batch of b tokens may be used.
    max_draft: most draft tokens per pass.
    gates: the ``CostlyGate`` of each costly proposer, kept by the caller so that a
        gate's probe interval runs across generations (the engine keeps one per
        costly proposer); a costly proposer without one gets a fresh gate here."""

    def __init__(self, proposers: Sequence[Proposer], policy: Policy, allowed: np.ndarray, max_draft: int,
                 gates: Mapping[Proposer, CostlyGate] | None = None) -> None:
        self.proposers = list(proposers)
        self.policy = policy
        self.allowed = allowed
        sizes = np.flatnonzero(allowed[2:])   # batch sizes above one token that may be used
        # Nothing longer than the largest allowed batch can be verified: with none
        # (exact mode on a build where no size is exact) nothing is drafted at all.
        self.max_draft = min(max_draft, int(sizes[-1]) + 1 if len(sizes) else 0)
        # A generation that can draft nothing decodes plainly: its proposers and the
        # policy have nothing to learn from it token by token (each still gets begin
        # and end, which is where a memory records the answer). Skipping their
        # per-token calls took ngramspec's own work per plainly decoded token from
        # 0.25-0.26 ms to 0.22-0.25 ms (bench/results/plain-path-cost.md).
        self._idle = self.max_draft <= 0
        # One table for the policy: each proposer's buckets from its base on.
        self._bases = source_bases(self.proposers)[0]
        gates = gates or {}
        self._gates: list[CostlyGate | None] = [
            (gates.get(p) or CostlyGate()) if isinstance(p, CostlyProposer) else None for p in self.proposers]
        for p, base in zip(self.proposers, self._bases):
            policy.declare_sources(base, p.source_priors, keep=p.keeps_acceptance)
        self._offered: list[Proposal] = []
        self._which = 0
        self._output: list[int] = []

    def begin(self, prompt: Sequence[int]) -> None:
        for p in self.proposers:
            p.begin(prompt)
        for g in self._gates:
            if g is not None:
                g.new_generation()
        self.policy.new_generation()
        self._offered, self._output = [], []

    def draft(self, cap: int) -> Proposal:
        """The draft to verify after the token just emitted: at most ``cap`` tokens
        (what the output and the context still have room for); empty means decode
        plainly."""
        k = min(self.max_draft, cap)
        if k <= 0 or not self.proposers:
            self._offered = []
            return _PLAIN
        bases = self._bases
        offered = [_PLAIN if g is not None else p.propose(k).placed(base)
                   for p, g, base in zip(self.proposers, self._gates, bases)]
        for i, (p, gate) in enumerate(zip(self.proposers, self._gates)):
            if gate is not None:  # priced against the free proposals before it is called
                assert isinstance(p, CostlyProposer)
                n = gate.plan(p, self.policy, self.allowed, k, offered, base=bases[i])
                offered[i] = p.propose(n).placed(bases[i]) if n else Proposal.none(p.name)
        which, n = self.policy.choose_proposal(offered, self.allowed)
        self._offered, self._which = offered, which
        return offered[which].head(n) if n else _PLAIN

    def verified(self, draft: Proposal, seconds: float, accepted: int) -> None:
        """The pass verified ``draft`` (after one bonus position) in ``seconds`` and
        accepted its first ``accepted`` tokens. What was offered and not verified
        is scored later, once the text shows it (the policy's ``defer``)."""
        if self._idle:
            return
        policy, k = self.policy, len(draft)
        policy.observe(k + 1, seconds, draft.sources, accepted)
        start = len(self._output)
        for i, p in enumerate(self._offered):
            if i != self._which:
                policy.defer(start, p.tokens.tolist(), p.sources)
            elif accepted == k:
                policy.defer(start + k, p.tokens[k:].tolist(), p.sources[k:])

    def accept(self, tokens: Sequence[int]) -> None:
        """The model emitted ``tokens`` after the text so far."""
        if self._idle:
            self._output.extend(tokens)
            return
        for p in self.proposers:
            p.accept(tokens)
        self._output.extend(tokens)
        self.policy.settle(self._output)
        self._offered = []

    def end(self) -> None:
        for p in self.proposers:
            p.end(self._output)

    @property
    def offered(self) -> list[Proposal]:
        """What every proposer offered for the latest ``draft`` (until the next
        ``accept``): for analysis, such as bench/replay.py's hindsight bound."""
        return list(self._offered)

    @property
    def output(self) -> list[int]:
        """Every token accepted since ``begin``."""
        return self._output
