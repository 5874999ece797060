"""When a costly proposer (one whose ``propose`` runs a model) is worth calling.

A draft model costs time per drafted token, unlike the model-free proposers, so
it is priced before each call (``CostlyGate.plan``) against what the free
proposals and plain decoding offer this pass; a refused one is still probed now
and then, within a budget, so that its prices and acceptance stay current.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ngramspec.drafting.policy_protocol import Policy
from ngramspec.proposers.base import CostlyProposer, Proposal

__all__ = ["CATCHUP_SHARE", "PROBE_BUDGET", "PROBE_INTERVAL", "PROBE_TOKENS", "CostlyGate"]

# A costly proposer the policy refuses is still called once every PROBE_INTERVAL
# passes, so that it is noticed when the text becomes one it drafts well.
PROBE_INTERVAL = 32
PROBE_TOKENS = 4
# ... and only when the probe's expected cost (its catch-up of the text the draft
# model has not seen included) is at most PROBE_BUDGET of the target decode time
# since the proposer was last called, and of the current generation's so far.
# Measured without it (Qwen2.5-Coder-0.5B
# drafting for the 1.5B, 2 threads, bench/results/draft-model-qwen2.5-coder-1.5b.md):
# one probe per short generation (3-5 s of decode) cost 8-17% of its decode time:
# the draft model's catch-up of the text since its last call plus four draft decodes.
PROBE_BUDGET = 0.05
# Before a catch-up was timed: a prompt token in a catch-up batch is priced at this
# share of a decoded draft token (batched prefill on a CPU runs several times
# faster per token than decoding; a guess on the dear side, so probes wait).
CATCHUP_SHARE = 0.25


class CostlyGate:
    """Whether, and for how many tokens, to call a costly proposer (one whose
    ``propose`` runs a model) this pass, decided before it is called.

    The expected tokens of a k-token draft, 1 + sum_j prod_{i<=j} a(source_i)
    (the policy's acceptance per source; the bonus token counts 1), are divided
    by what the pass costs in single-token target decodes: r(k + 1) for the
    verify batch plus the draft's ``expected_seconds(k)`` over the target's
    measured one-token time (``call_cost``; before those are known, ``size_ratio``
    x (k + CATCHUP_SHARE x the tokens the draft model has not seen)). The
    proposer is called for the k with the best score if that score beats
    ``best_other`` (the best the other proposers offer this pass; plain decoding
    scores 1). Otherwise it is refused, and a refused proposer is probed
    (``probe_tokens`` tokens), so that its acceptance (verified or scored in
    hindsight) and its cost stay current, at most once every ``probe_interval``
    passes, and only once the probe's expected cost, catch-up included, is at most
    ``probe_budget`` of the target time since the proposer was last called and of
    the current generation's so far (each pass counted as one target token, which
    no pass costs less than): a refused draft model costs at most that share of any
    generation's decode time, however short the generations.
    The policy is read through its prices only (``Policy.pricing()``: ``costs``,
    ``single_seconds``, ``acceptance_of(source)`` and, to price the other
    proposals, ``score(sources, allowed)``). A policy without prices (the eager
    one) has it called always.

    Exactness with a sampled draft: the choice uses sources (draft positions)
    and costs only, never the draft tokens or their q, so whether and how much
    of a sampled draft is verified does not depend on the sampled values."""

    def __init__(self, probe_interval: int = PROBE_INTERVAL, probe_tokens: int = PROBE_TOKENS,
                 probe_budget: float = PROBE_BUDGET) -> None:
        if probe_interval < 1 or probe_tokens < 1:
            raise ValueError("probe_interval and probe_tokens must be >= 1")
        if not probe_budget > 0:
            raise ValueError(f"probe_budget must be > 0, got {probe_budget!r}")
        self.probe_interval = int(probe_interval)
        self.probe_tokens = int(probe_tokens)
        self.probe_budget = float(probe_budget)
        self.refused = 0      # passes since the proposer was last called
        self.passes = 0       # passes planned in the current generation
        self.calls = 0
        self.probes = 0
        self.refusals = 0

    def plan(self, proposer: CostlyProposer, policy: Policy, allowed: np.ndarray, k: int,
             others: float | Sequence[Proposal] = 1.0, *, base: int = 0) -> int:
        """Tokens to ask ``proposer`` for this pass (0: do not call it). ``others``:
        this pass's other proposals (scored by the policy), or the best score
        among them (plain decoding scores 1). ``base``: where the proposer's buckets
        start in the policy's table."""
        if k <= 0:
            return 0
        self.passes += 1
        pricing = policy.pricing()
        if pricing is None:  # eager: no prices
            self.calls += 1
            return k
        if isinstance(others, (int, float)):
            best_other = float(others)
        else:
            best_other = max([1.0] + [pricing.score(p.sources, allowed) for p in others if len(p)])
        single = pricing.single_seconds
        costs = pricing.costs
        sources = [base + s for s in proposer.planned_sources(k)]
        best_k, best = 0, best_other
        reach = expected = 1.0
        for j in range(1, k + 1):
            reach *= pricing.acceptance_of(sources[j - 1])
            expected += reach
            if j + 1 < len(allowed) and allowed[j + 1]:
                draft_cost = self.call_cost(proposer, j, single)
                score = expected / (costs[j + 1] + draft_cost)
                if score > best:
                    best_k, best = j, score
        if best_k:
            self.refused = 0
            self.calls += 1
            return best_k
        self.refused += 1
        self.refusals += 1
        if self.refused >= self.probe_interval:
            n = min(k, self.probe_tokens)
            while n > 0 and not (n + 1 < len(allowed) and allowed[n + 1]):
                n -= 1
            # Within budget both since the last call and in this generation: a short
            # generation never carries a probe that earlier generations paid for.
            if n and self.call_cost(proposer, n, single) <= self.probe_budget * min(self.refused, self.passes):
                self.refused = 0
                self.probes += 1
                self.calls += 1
                return n
        return 0

    @staticmethod
    def call_cost(proposer: CostlyProposer, n: int, single: float) -> float:
        """What asking ``proposer`` for ``n`` tokens now costs, in target-token decodes:
        its ``expected_seconds`` (catch-up included) over the target's one-token time;
        before either is measured, ``size_ratio`` x (n + CATCHUP_SHARE x the tokens it
        has not seen)."""
        seconds = proposer.expected_seconds(n)
        if seconds is not None and single > 0:
            return float(seconds) / single
        return float(proposer.size_ratio) * (n + CATCHUP_SHARE * proposer.pending_tokens())

    def new_generation(self) -> None:
        """A generation starts (the Drafter's ``begin``): the probe budget of this
        generation starts from nothing; ``refused`` carries on across generations."""
        self.passes = 0
