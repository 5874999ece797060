"""Which draft to verify, and how much of it: the decision, learned online.

A verify batch of B tokens costs r(B) single-token decodes (``CostModel``), so a
draft is only worth verifying when enough of it is likely to be accepted. The
policy keeps, for each draft *source* (a bucket of one proposer: see
``proposers/base.py``), an exponential moving average of how often a draft token from
that source was accepted, given that the tokens before it were. It picks the
proposal and length k that maximise expected tokens per unit of verify time,
where k = 0 (a plain one-token decode, ratio 1) is always a candidate, so on text
it cannot predict it falls back to plain decoding.

It notices when the text becomes predictable without paying for it: drafts it
refused are scored in hindsight (``defer`` / ``settle``). Blind probing (verify
one token every so often) was tried and dropped: replaying the suite's outputs
(bench/replay.py) it cost up to 1% on unpredictable text and gained nothing.

Online correction of the cost curve: hindsight can show that refused
drafts would pay under a cheaper, plausible curve while the curve in use prices
every draft out (a curve measured under load, or a burst of load during a
generation). Then no batch above one token would ever be timed again, and the
curve could never recover. The rule (``choose_among``), with its bound:

- a pass *explores* when the current curve chooses plain decoding, yet under the
  optimistic curve min(r(B), 1 + EXPLORE_SLOPE (B - 1)) some offered draft scores
  at least EXPLORE_GAIN expected tokens per unit of verify time; it verifies that
  draft, at the length the optimistic curve picks, and its timing restarts the
  cost model's scale (``CostModel.observe(restart=True)``); it verifies at most
  EXPLORE_MAX_DRAFT (3) draft tokens, which is enough to time a batch and bounds
  what an exploration can lose where verification really is dear;
- at most one exploration per ``interval`` passes: the interval starts at
  EXPLORE_EVERY (8) and doubles, up to EXPLORE_MAX_INTERVAL (64), each time an
  exploration's timing leaves drafting priced out; it goes back to 8 when the
  timing shows drafting pays. So explored passes are at most 1/8 of all passes,
  and on a machine whose verification really is dear at most 4 in the first 120
  passes and then 1 in 64;
- on text that cannot be predicted, hindsight acceptance stays low, no draft
  reaches EXPLORE_GAIN even under the optimistic curve, and nothing is explored;
- while drafting, if no one-token pass was timed for REFRESH_AFTER (128) passes,
  one pass decodes plainly to time a fresh one-token reference (at most 1 pass in
  128), so the scale is never learned against a one-token time from before a
  change of load.

``EagerPolicy`` is the rule without a cost model: verify every allowed token of
the proposal that rests on the longest match.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ngramspec.drafting.cost_model import CostModel
from ngramspec.drafting.policy_protocol import Policy, Pricing
from ngramspec.proposers.base import Proposal

__all__ = ["CostAwarePolicy", "EagerPolicy", "EXPLORE_SLOPE", "EXPLORE_GAIN",
           "EXPLORE_EVERY", "EXPLORE_MAX_INTERVAL"]

#: The optimistic curve explorations are judged by: r(B) = 1 + EXPLORE_SLOPE (B - 1),
#: inside the range measured on CPUs (0.33-0.70 per extra row).
EXPLORE_SLOPE = 0.5
#: An exploration needs this many expected tokens per unit of verify time under
#: the optimistic curve (plain decoding scores 1).
EXPLORE_GAIN = 1.25
#: Most draft tokens an exploration verifies: enough to time a batch, little to lose
#: where verification really is dear (the curve's shape is known; its scale is measured).
EXPLORE_MAX_DRAFT = 3
#: Fewest passes between explorations, and the most the interval backs off to.
EXPLORE_EVERY = 8
EXPLORE_MAX_INTERVAL = 64

#: A draft token reached with less probability than this is not priced: each adds at
#: most this to the expected tokens of a pass, and a 64-token draft's tail would
#: otherwise be walked every pass on text that cannot be predicted.
_NEGLIGIBLE_REACH = 1e-3



def _longest_allowed(n: int, allowed: np.ndarray) -> int:
    while n > 0 and not allowed[n + 1]:
        n -= 1
    return n


class CostAwarePolicy:
    """max_batch: largest verify batch the engine may use.
    prior_slope: assumed extra cost per extra batch token, relative to one token.
    alpha: weight of the newest observation in the moving averages. (A weight that
        starts at 1 / (observations + 2) and falls to alpha, for a steadier estimate
        of high acceptances, was within 0.03x of this on every long-output workload
        replayed, either way: not kept.)
    learn_cost: update the cost scale from timings (False keeps the cost curve
        fixed, for reproducible decisions on a machine too noisy to time).
    keep_acceptance: carry the learned acceptance from one generation to the
        next (by default each generation starts again from the priors).
    explore: correct the cost curve online (module docstring); None: when
        ``learn_cost``. Without learning there is nothing to measure."""

    def __init__(self, max_batch: int, *, prior_slope: float = 0.4, alpha: float = 0.1, learn_cost: bool = True,
                 keep_acceptance: bool = False, explore: bool | None = None) -> None:
        self.max_batch = max_batch
        self.cost = CostModel(max_batch, prior_slope=prior_slope, alpha=alpha, learn=learn_cost)
        self.explore = learn_cost if explore is None else bool(explore)
        self._since_explore = 0
        self.explore_interval = EXPLORE_EVERY
        self._exploring: tuple[list[int], np.ndarray] | None = None  # the pass in flight explores this draft
        self.explored = 0            # passes chosen to measure cost, since this policy was made
        self.explored_generation = 0  # the same, in the current generation
        self._optimistic: list[float] = []   # min(r(B), the optimistic line), for costs _optimistic_of
        self._optimistic_of: list[float] | None = None
        # The acceptance table: every proposer's buckets, declared by the Drafter
        # (``declare_sources``), each from its prior.
        self._prior_acceptance: list[float] = []
        self._acceptance_list: list[float] = []
        self.keep_acceptance = keep_acceptance
        self._kept: set[int] = set()   # sources that keep their acceptance across generations (declare_sources)
        self._declared: set[int] = set()   # sources some proposer has declared (declare_sources)
        self.alpha = alpha
        # Drafts offered but not (or not wholly) verified, waiting for the tokens
        # that really follow them: (output index of their first token, tokens, sources).
        self._pending: list[tuple[int, list[int], list[int]]] = []

    # -- sources -----------------------------------------------------------
    def declare_sources(self, base: int, priors: Sequence[float], *, keep: bool = False) -> None:
        """Sources base .. base+len(priors)-1 exist, with these priors: the Drafter
        declares every proposer's buckets, so the table is built from the proposers
        alone. A source already declared keeps its prior (and what it learned).
        ``keep``: these sources carry what they learned into the next generation
        even without ``keep_acceptance`` (a source whose text spans requests, such
        as a Memory)."""
        fresh = [i for i in range(base, base + len(priors)) if i not in self._declared]
        for table in (self._prior_acceptance, self._acceptance_list):
            while len(table) < base + len(priors):
                table.append(0.0)
            for i in fresh:
                table[i] = float(priors[i - base])
        self._declared.update(fresh)
        if keep:
            self._kept.update(range(base, base + len(priors)))

    # -- cost ----------------------------------------------------------------
    def calibrate(self, relative_costs: dict[int, float], *, shape: bool = False, monotone: bool = False,
                  origin: str | None = None) -> None:
        """Start the cost curve from measured r(B): see ``CostModel.calibrate``."""
        self.cost.calibrate(relative_costs, shape=shape, monotone=monotone, origin=origin)

    def relative_cost(self, batch: int) -> float:
        return self.cost.relative_cost(batch)

    # -- prices, for the costly proposers' gate (Policy.pricing) -----------
    def pricing(self) -> Pricing:
        return self

    @property
    def costs(self) -> list[float]:
        """r(B) by batch size as priced now (index 0 unused)."""
        return self.cost.costs

    @property
    def single_seconds(self) -> float:
        """The one-token decode time the curve's ratios are against (NaN before one was timed)."""
        return self.cost.single_seconds

    @property
    def scale(self) -> float:
        return self.cost.scale

    # -- the decision --------------------------------------------------------
    def _best(self, sources: list[int], allowed: np.ndarray, costs: list[float] | None = None) -> tuple[int, float]:
        # Plain Python floats: for at most a few dozen tokens this is several
        # times cheaper than numpy's per-call overhead, and it runs every pass.
        acceptance = self._acceptance_list
        if costs is None:
            costs = self.cost.costs
        if len(sources) > len(costs) - 2:   # a policy made for shorter batches than the engine drafts
            sources = sources[:len(costs) - 2]
        best_k, best_score = 0, 1.0
        reach, expected = 1.0, 1.0
        for k, source in enumerate(sources, 1):
            reach *= acceptance[source]      # P(draft tokens 1..k all accepted)
            if reach < _NEGLIGIBLE_REACH:    # the rest of a long draft can add no more than this each
                break
            expected += reach
            if allowed[k + 1]:
                score = expected / costs[k + 1]
                if score > best_score:
                    best_k, best_score = k, score
        return best_k, best_score

    def score(self, sources: list[int], allowed: np.ndarray) -> float:
        """The best expected tokens per unit of cost of a draft whose tokens come
        from ``sources``, verifying any allowed prefix of it (plain decoding: 1)."""
        return self._best(sources, allowed)[1]

    def acceptance_of(self, source: int) -> float:
        """The current acceptance estimate of one source (no copy of the table)."""
        return self._acceptance_list[source]

    def choose_among(self, candidates: list[list[int]], allowed: np.ndarray) -> tuple[int, int]:
        """(which candidate, how many of its tokens) to verify. Each candidate is
        the list of its draft tokens' sources; k = 0 means decode plainly."""
        best_i, best_k, best_score = 0, 0, 1.0
        for i, sources in enumerate(candidates):
            k, score = self._best(sources, allowed)
            if score > best_score:
                best_i, best_k, best_score = i, k, score
        self._exploring = None
        if self.explore:
            self._since_explore += 1
            if best_k == 0:
                if self._since_explore >= self.explore_interval:
                    return self._explore(candidates, allowed, best_i)
            elif self.cost.single_is_stale:
                self.explored += 1     # one plain pass to time a fresh one-token reference
                self.explored_generation += 1
                return best_i, 0
        return best_i, best_k

    def _explore(self, candidates: list[list[int]], allowed: np.ndarray, plain_i: int) -> tuple[int, int]:
        costs = self.cost.costs
        if self._optimistic_of is not costs:   # the cost model makes a new list whenever it changes
            line = [1.0 + EXPLORE_SLOPE * (b - 1) for b in range(len(costs))]
            self._optimistic = [min(c, o) for c, o in zip(costs, line)]
            self._optimistic_of = costs
        optimistic = self._optimistic
        best_i, best_k, best_score = plain_i, 0, EXPLORE_GAIN
        for i, sources in enumerate(candidates):
            k, score = self._best(sources[:EXPLORE_MAX_DRAFT], allowed, optimistic)
            if k and score >= best_score:
                best_i, best_k, best_score = i, k, score
        if best_k:
            self._since_explore = 0
            self._exploring = (list(candidates[best_i][:best_k]), allowed)
            self.explored += 1
            self.explored_generation += 1
        return best_i, best_k

    def choose_proposal(self, proposals: list[Proposal], allowed: np.ndarray) -> tuple[int, int]:
        """(which proposal, how many of its tokens) to verify."""
        return self.choose_among([p.sources for p in proposals], allowed)

    # -- learning --------------------------------------------------------------
    def observe(self, batch: int, seconds: float, sources: np.ndarray | list[int], accepted: int) -> None:
        """One verify pass: its batch size and time, the sources of the draft
        tokens it verified, and how many of them were accepted."""
        exploring, self._exploring = self._exploring, None
        if exploring is not None and batch == len(exploring[0]) + 1:
            self.cost.observe(batch, seconds, restart=True)
            # Does drafting pay under the curve just measured? If not, back off.
            if self._best(exploring[0], exploring[1])[0]:
                self.explore_interval = EXPLORE_EVERY
            else:
                self.explore_interval = min(2 * self.explore_interval, EXPLORE_MAX_INTERVAL)
        else:
            self.cost.observe(batch, seconds)
        verified = sources if isinstance(sources, list) else sources.tolist()
        learn = self._learn
        for i, o in enumerate(verified[: batch - 1]):
            hit = i < accepted
            learn(o, hit)
            if not hit:
                break

    def _learn(self, source: int, hit: bool) -> None:
        """One outcome of one source's draft token: a moving average."""
        acc = self._acceptance_list
        acc[source] += self.alpha * ((1.0 if hit else 0.0) - acc[source])

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
        learn, known = self._learn, len(output)
        still = []
        for start, tokens, sources in self._pending:
            n = min(len(tokens), known - start)
            i = 0
            while i < n:
                hit = tokens[i] == output[start + i]
                learn(sources[i], hit)
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
        self._exploring = None
        self.explored_generation = 0
        if not self.keep_acceptance:
            learned = self._acceptance_list
            self._acceptance_list = [learned[i] if i in self._kept else prior
                                     for i, prior in enumerate(self._prior_acceptance)]

    @property
    def acceptance(self) -> np.ndarray:
        """Acceptance estimate per source, in the table's order (each proposer's
        buckets from its base: ``drafter.source_bases``); a copy."""
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

    def declare_sources(self, base: int, priors: Sequence[float], *, keep: bool = False) -> None:
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

    def pricing(self) -> None:
        """No prices: every costly proposer is called."""
        return None


if TYPE_CHECKING:  # mypy checks here that both policies satisfy the Policy protocol
    _COST_AWARE: Policy = CostAwarePolicy(2)
    _EAGER: Policy = EagerPolicy()
