"""What the drafting layer asks of a policy: the ``Policy`` protocol.

The ``Drafter`` calls exactly these methods each generation and pass; the
``CostlyGate`` and ``describe_cost`` read nothing else through this type.
``CostAwarePolicy`` and ``EagerPolicy`` satisfy it. The gate's pricing API
(``cost``, ``acceptance_of``, ``score``) is optional and looked up by name: a
policy without it (the eager one) lets every costly proposer run.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ngramspec.proposers.base import Proposal

__all__ = ["Policy"]


class Policy(Protocol):
    """Chooses what to verify each pass and learns from what happened."""

    def declare_sources(self, base: int, priors: Sequence[float], *, keep: bool = False) -> None:
        """Sources base .. base+len(priors)-1 exist, with these prior acceptances;
        ``keep``: they carry what they learned into the next generation."""

    def new_generation(self) -> None:
        """A generation starts."""

    def choose_proposal(self, proposals: list[Proposal], allowed: np.ndarray) -> tuple[int, int]:
        """(which proposal, how many of its tokens) to verify; 0 tokens: decode plainly.
        ``allowed[b]``: a verify batch of b tokens may be used."""

    def observe(self, batch: int, seconds: float, sources: list[int], accepted: int) -> None:
        """One verify pass: its batch size, its time, the sources of the draft tokens
        it verified, and how many of them were accepted."""

    def defer(self, start: int, tokens: list[int], sources: list[int]) -> None:
        """A draft offered and not (wholly) verified, whose first token would take
        output index ``start``: scored by ``settle`` once the text shows it."""

    def settle(self, output: list[int]) -> None:
        """The tokens emitted so far: score the deferred drafts they decide."""
