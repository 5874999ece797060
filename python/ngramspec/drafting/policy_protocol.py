"""What the drafting layer asks of a policy: the ``Policy`` protocol.

The ``Drafter`` calls exactly these methods each generation and pass; the
``CostlyGate`` reads a policy's prices through ``pricing()`` (a ``Pricing``: the
cost curve, the one-token time, each source's acceptance and a proposal's score),
which a policy without prices (the eager one) answers with None: then every
costly proposer runs. ``CostAwarePolicy`` and ``EagerPolicy`` satisfy it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ngramspec.proposers.base import Proposal

__all__ = ["Policy", "Pricing"]


class Pricing(Protocol):
    """What a policy prices a pass with."""

    @property
    def costs(self) -> list[float]:
        """r(B) indexed by batch size (index 0 unused)."""

    @property
    def single_seconds(self) -> float:
        """The one-token decode time the ratios are against (NaN before one was timed)."""

    def acceptance_of(self, source: int) -> float:
        """The current acceptance estimate of one source."""

    def score(self, sources: list[int], allowed: np.ndarray) -> float:
        """The best expected tokens per unit of cost of a draft with these sources
        (plain decoding: 1)."""


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

    def pricing(self) -> Pricing | None:
        """Its prices, or None for a policy that has none (every costly proposer runs)."""
