"""What one generation's run asks of the engine it runs on: the ``RunHost`` protocol.

``SpeculativeEngine`` keeps what outlives a generation (the Llama, the verify plans
and policies, the proposers, the lock, the verify batch); each generation is a
``GenerationStream`` that uses exactly these public members and nothing else, so the
run is a client of the engine, not a second half of it (and ``generation.py``
imports no engine class).
"""
from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from ngramspec import _llama
from ngramspec.calibration.audit import AuditResult, AuditRule
from ngramspec.calibration.verify_plan import VerifyPlan
from ngramspec.drafting.cost_gate import CostlyGate
from ngramspec.drafting.policy_protocol import Policy
from ngramspec.engine.stats import GenerationStats
from ngramspec.proposers.base import Proposer

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["RunHost"]


class RunHost(Protocol):
    """The engine, as a generation's run sees it."""

    #: The llama_cpp.Llama the engine drives (its context and cache).
    llm: Llama
    #: The engine's default verify mode, and its cap on draft tokens per pass.
    exact: bool
    max_draft: int
    #: Record every pass in the stats' trace.
    trace: bool
    #: Serialises the engine's work: a run holds it for each pass.
    lock: threading.RLock
    #: The reusable llama_batch every pass is verified in.
    verify_batch: _llama.Batch
    #: token -> its bytes, shared by every run's text (``OutputText``).
    token_bytes: dict[int, bytes]
    #: Exact mode's online audit, shared by the engine's runs.
    audit_rule: AuditRule

    @property
    def gates(self) -> Mapping[Proposer, CostlyGate]:
        """The gate of each costly proposer, kept across generations."""

    @property
    def can_roll_back(self) -> bool:
        """Whether the KV cache may be rolled back (False: decode plainly)."""

    def stop_rolling_back(self) -> None:
        """llama.cpp refused a rollback: this engine decodes plainly from now on."""

    def begin_generation(self) -> int:
        """A generation starts: its id, which owns the Llama's state from now on."""

    def owns(self, generation: int) -> bool:
        """Whether ``generation`` is still the one that owns the Llama's state."""

    def plan_and_policy(self, exact: bool, prompt: Sequence[int] | None = None) -> tuple[VerifyPlan, Policy]:
        """The verify plan and policy of this verify mode, built on first use; with
        ``prompt`` (a generation's), exact mode may first certify more batch sizes."""

    def proposers_for(self, prediction_tokens: list[int] | None) -> list[Proposer]:
        """This generation's proposers (a prediction adds its own)."""

    def withdraw(self, size: int, start: int, result: AuditResult, rows_checked: int, plan: VerifyPlan,
                 stats: GenerationStats) -> None:
        """The audit saw a batch of ``size`` differ from one-token decoding: never use it again."""

    def is_end_of_generation(self, token: int) -> bool:
        """Whether ``token`` ends generation (llama.cpp's end-of-generation set)."""
