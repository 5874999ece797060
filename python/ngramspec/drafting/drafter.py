"""The one place that answers "what do we verify this pass".

A ``Drafter`` holds the proposers, the batch sizes verification may use, and the
policy. Each pass it asks every proposer for a draft, lets the policy choose one
proposal and its length, and returns that draft. After verification it tells the
policy what happened (``verified``), and after emission it tells the proposers
and the policy what the text became (``accept``). The generation loop never sees
a proposer's insides, and ``bench/replay.py`` drives this same class on recorded
outputs, so what the replay prices is the code that ships.

The draft length is decided here and only here (``draft``): the cap the loop
gives (room left in max_tokens and the context), ``max_draft``, the proposals'
lengths, and the policy's choice among the allowed batch sizes.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ngramspec.drafting.cost_gate import gate_for
from ngramspec.drafting.policy_protocol import Policy
from ngramspec.proposers.base import Proposal, Proposer

__all__ = ["Drafter", "assign_source_bases"]

_PLAIN = Proposal.none()


def assign_source_bases(proposers: Sequence[Proposer]) -> int:
    """Give each proposer its first index in the policy's source table, in order;
    returns the table's size."""
    base = 0
    for p in proposers:
        p.source_base = base
        base += len(p.source_priors)
    return base


class Drafter:
    """proposers: the sources of drafts, in priority order (ties go to the first).
    policy: a ``Policy`` (``CostAwarePolicy`` or ``EagerPolicy``).
    allowed: allowed[b] is True when a verify batch of b tokens may be used.
    max_draft: most draft tokens per pass."""

    def __init__(self, proposers: Sequence[Proposer], policy: Policy, allowed: np.ndarray, max_draft: int) -> None:
        self.proposers = list(proposers)
        self.policy = policy
        self.allowed = allowed
        sizes = np.flatnonzero(allowed[2:])   # batch sizes above one token that may be used
        # Nothing longer than the largest allowed batch can be verified: with none
        # (exact mode on a build where no size is exact) nothing is drafted at all.
        self.max_draft = min(max_draft, int(sizes[-1]) + 1 if len(sizes) else 0)
        assign_source_bases(self.proposers)
        # A costly proposer (a draft model) carries a gate that prices it before it is called.
        self._gates = [gate_for(p) for p in self.proposers]
        for p in self.proposers:
            policy.declare_sources(p.source_base, p.source_priors, keep=getattr(p, "keeps_acceptance", False))
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
        offered = [_PLAIN if g is not None else p.propose(k) for p, g in zip(self.proposers, self._gates)]
        for i, (p, gate) in enumerate(zip(self.proposers, self._gates)):
            if gate is not None:  # priced against the free proposals before it is called
                n = gate.plan(p, self.policy, self.allowed, k, offered)
                offered[i] = p.propose(n) if n else Proposal.none(p.name)
        which, n = self.policy.choose_proposal(offered, self.allowed)
        self._offered, self._which = offered, which
        return offered[which].head(n) if n else _PLAIN

    def verified(self, draft: Proposal, seconds: float, accepted: int) -> None:
        """The pass verified ``draft`` (after one bonus position) in ``seconds`` and
        accepted its first ``accepted`` tokens. What was offered and not verified
        is scored later, once the text shows it (the policy's ``defer``)."""
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
