"""Which draft to verify, and how much of it: the decision, learned online.

A verify batch of B tokens costs r(B) single-token decodes (``CostModel``), so a
draft is only worth verifying when enough of it is likely to be accepted. The
policy keeps, for each draft *source* (a bucket of one proposer: see
``proposer.py``), an exponential moving average of how often a draft token from
that source was accepted, given that the tokens before it were. It picks the
proposal and length k that maximise expected tokens per unit of verify time,
where k = 0 (a plain one-token decode, ratio 1) is always a candidate, so on text
it cannot predict it falls back to plain decoding.

It notices when the text becomes predictable without paying for it: drafts it
refused are scored in hindsight (``defer`` / ``settle``). Blind probing (verify
one token every so often) was tried and dropped: replaying the suite's outputs
(bench/replay.py) it cost up to 1% on unpredictable text and gained nothing.

``EagerPolicy`` is the rule without a cost model: verify every allowed token of
the proposal that rests on the longest match.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .copy_proposer import COPY_PRIORS, N_COPY_SOURCES
from .costmodel import CostModel
from .ngram_proposer import N_NGRAM_SOURCES
from .proposer import Proposal

__all__ = ["COPY_SOURCE_BASE", "CostAwarePolicy", "EagerPolicy", "N_SOURCES"]

# The default pipeline's source table: the n-gram proposer's buckets first, then
# the copy proposer's. Other proposers' buckets follow (``declare_sources``).
COPY_SOURCE_BASE = N_NGRAM_SOURCES
N_SOURCES = COPY_SOURCE_BASE + N_COPY_SOURCES


def _longest_allowed(n: int, allowed: np.ndarray) -> int:
    while n > 0 and not allowed[n + 1]:
        n -= 1
    return n


class CostAwarePolicy:
    """max_batch: largest verify batch the engine may use.
    prior_slope: assumed extra cost per extra batch token, relative to one token.
    prior_accept: initial acceptance estimate for every n-gram source.
    alpha: weight of the newest observation in the moving averages.
    learn_cost: update the cost scale from timings (False keeps the cost curve
        fixed, for reproducible decisions on a machine too noisy to time).
    keep_acceptance: carry the learned acceptance from one generation to the
        next (by default each generation starts again from the priors)."""

    def __init__(self, max_batch: int, *, prior_slope: float = 0.4, prior_accept: float = 0.35,
                 alpha: float = 0.1, learn_cost: bool = True, keep_acceptance: bool = False) -> None:
        self.max_batch = max_batch
        self.cost = CostModel(max_batch, prior_slope=prior_slope, alpha=alpha, learn=learn_cost)
        self._prior_acceptance = [float(prior_accept)] * COPY_SOURCE_BASE + list(COPY_PRIORS)
        self._acceptance_list = list(self._prior_acceptance)
        self.keep_acceptance = keep_acceptance
        self.alpha = alpha
        # Drafts offered but not (or not wholly) verified, waiting for the tokens
        # that really follow them: (output index of their first token, tokens, sources).
        self._pending: list[tuple[int, list[int], list[int]]] = []

    # -- sources -----------------------------------------------------------
    def declare_sources(self, base: int, priors: Sequence[float]) -> None:
        """Sources base .. base+len(priors)-1 exist, with these priors. Sources the
        table already has keep theirs (the default n-gram and copy buckets honour
        the constructor's ``prior_accept``)."""
        need = base + len(priors)
        for table in (self._prior_acceptance, self._acceptance_list):
            while len(table) < need:
                table.append(float(priors[len(table) - base]))

    # -- cost ----------------------------------------------------------------
    def calibrate(self, relative_costs: dict[int, float], *, shape: bool = False) -> None:
        """Start the cost curve from measured r(B): see ``CostModel.calibrate``."""
        self.cost.calibrate(relative_costs, shape=shape)

    def relative_cost(self, batch: int) -> float:
        return self.cost.relative_cost(batch)

    @property
    def scale(self) -> float:
        return self.cost.scale

    # -- the decision --------------------------------------------------------
    def _best(self, sources: list[int], allowed: np.ndarray) -> tuple[int, float]:
        # Plain Python floats: for at most a few dozen tokens this is several
        # times cheaper than numpy's per-call overhead, and it runs every pass.
        acceptance, costs = self._acceptance_list, self.cost.costs
        best_k, best_score = 0, 1.0
        reach, expected = 1.0, 1.0
        for k, source in enumerate(sources, 1):
            reach *= acceptance[source]      # P(draft tokens 1..k all accepted)
            expected += reach
            if allowed[k + 1]:
                score = expected / costs[k + 1]
                if score > best_score:
                    best_k, best_score = k, score
        return best_k, best_score

    def choose_among(self, candidates: list[list[int]], allowed: np.ndarray) -> tuple[int, int]:
        """(which candidate, how many of its tokens) to verify. Each candidate is
        the list of its draft tokens' sources; k = 0 means decode plainly."""
        best_i, best_k, best_score = 0, 0, 1.0
        for i, sources in enumerate(candidates):
            k, score = self._best(sources, allowed)
            if score > best_score:
                best_i, best_k, best_score = i, k, score
        return best_i, best_k

    def choose_proposal(self, proposals: list[Proposal], allowed: np.ndarray) -> tuple[int, int]:
        """(which proposal, how many of its tokens) to verify."""
        return self.choose_among([p.sources for p in proposals], allowed)

    # -- learning --------------------------------------------------------------
    def observe(self, batch: int, seconds: float, sources: np.ndarray | list[int], accepted: int) -> None:
        """One verify pass: its batch size and time, the sources of the draft
        tokens it verified, and how many of them were accepted."""
        self.cost.observe(batch, seconds)
        a, acceptance = self.alpha, self._acceptance_list
        verified = sources if isinstance(sources, list) else sources.tolist()
        for i, o in enumerate(verified[: batch - 1]):
            hit = i < accepted
            acceptance[o] += a * ((1.0 if hit else 0.0) - acceptance[o])
            if not hit:
                break

    def defer(self, start: int, tokens: list[int], sources: list[int]) -> None:
        """A draft that was offered but not verified (or the unverified tail of one
        whose verified part was accepted in full); ``start``: the output index its
        first token would take. ``settle`` scores it once those tokens are known.
        Without this, a source the policy refuses to verify would never show it
        had become reliable, and the tail beyond a short draft would never show
        how far copies really run."""
        if tokens:
            self._pending.append((start, tokens, sources))

    def settle(self, output: list[int]) -> None:
        """Scores every deferred draft whose outcome ``output`` (the tokens emitted
        so far) now decides: token by token, up to its first miss."""
        a, acceptance, known = self.alpha, self._acceptance_list, len(output)
        still = []
        for start, tokens, sources in self._pending:
            n = min(len(tokens), known - start)
            i = 0
            while i < n:
                hit = tokens[i] == output[start + i]
                o = sources[i]
                acceptance[o] += a * ((1.0 if hit else 0.0) - acceptance[o])
                if not hit:
                    break
                i += 1
            if i == n and n < len(tokens):   # all right so far, the rest not yet known
                still.append((start + n, tokens[n:], sources[n:]))
        self._pending = still

    def new_generation(self) -> None:
        """A new generation starts: drop the deferred drafts and, unless
        ``keep_acceptance``, go back to the prior acceptance. The cost model is kept.
        Which sources can be trusted is a property of the text, and the next prompt
        may be another kind of text: replaying the suite (bench/replay.py) with one
        policy carried across generations (``--keep-acceptance``) cost 2% geomean on
        Qwen2.5-Coder-0.5B and 4% on the 1.5B, with grounded QA 1.01x->0.96x and
        prose 1.00x->0.97x on the 0.5B; no model gained overall."""
        self._pending = []
        if not self.keep_acceptance:
            self._acceptance_list = list(self._prior_acceptance)

    @property
    def acceptance(self) -> np.ndarray:
        """Acceptance estimate per source (the n-gram share buckets, then the
        copy buckets from COPY_SOURCE_BASE, then any other proposer's); a copy."""
        return np.array(self._acceptance_list)

    @acceptance.setter
    def acceptance(self, values: Any) -> None:
        """Sets the estimates, and the priors each new generation starts from."""
        n = len(self._acceptance_list)
        self._acceptance_list = [float(v) for v in np.broadcast_to(np.asarray(values, dtype=float), (n,))]
        self._prior_acceptance = list(self._acceptance_list)


class EagerPolicy:
    """No cost model: verify every allowed token of the proposal resting on the
    longest match (ties go to the earlier proposer; the n-gram proposer counts
    its full context, so a copy wins only with a longer match)."""

    def declare_sources(self, base: int, priors: Sequence[float]) -> None:
        pass

    def choose_proposal(self, proposals: list[Proposal], allowed: np.ndarray) -> tuple[int, int]:
        best = 0
        for i, p in enumerate(proposals):
            if len(p) and (not len(proposals[best]) or p.match_length > proposals[best].match_length):
                best = i
        return best, _longest_allowed(len(proposals[best]) if proposals else 0, allowed)

    def observe(self, batch: int, seconds: float, sources: Any, accepted: int) -> None:
        pass

    def defer(self, start: int, tokens: list[int], sources: list[int]) -> None:
        pass

    def settle(self, output: list[int]) -> None:
        pass

    def new_generation(self) -> None:
        pass
