"""How many draft tokens to verify: cost-aware, learned online.

A verify batch of B tokens costs more than one token (on the reference CPU,
B=5 costs ~2.6x B=1), so a draft is only worth verifying when enough of it is
likely to be accepted. The policy keeps:
  * acceptance: for each draft source (below), an exponential moving average
    of how often a draft token from that source was accepted, given that the
    tokens before it were;
  * cost: r(B) = time(B) / time(1) = 1 + scale * extra(B). The shape extra(B)
    starts linear (prior_slope per extra token) and, once ``calibrate`` is given
    a measured curve (the invariance check times every batch size it decodes),
    follows the measurement, so a kernel that gets cheaper per row at 8+ rows
    (FACTS.md §3) is priced as it is. One pooled factor, ``scale``, is a moving
    average over every verify pass timed since, so a single noisy timing cannot
    steer the choice.
It picks the k that maximises expected tokens per unit of verify time, where
k = 0 (a plain one-token decode, ratio 1) is always a candidate, so on text it
cannot predict it falls back to plain decoding. It notices when the text becomes
predictable without paying for it: drafts it refused are scored in hindsight
(``defer`` / ``settle``). An optional probe (k = 1 once every ``probe_every``
refusals) is off by default: replaying the suite's outputs (bench/replay.py) it
cost up to 1% on unpredictable text and gained nothing anywhere.

Draft tokens carry a *source*. For an n-gram draft it is the guess's share of
its context in the tables (``ngram_source``): a context seen once, or always
followed by the same token, is a far safer guess than one followed by many
different tokens, and the share tells them apart where the n-gram order does
not (in JSON extraction the order-4 context `", "` is followed by every field
value; the one closing a row is always followed by the same indentation).
For a copy draft from the SuffixMatcher it is a bucket of the match length
the copy follows (``copy_source``). Acceptance is learned per source, and when
several drafts are offered the one with the best expected gain per unit time
wins.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._core import NGramPredictor

# n-gram sources, by the guess's share of its context: seen once; under a half;
# under 0.8; under 1; always this token (and seen at least twice). Replaying the
# three suite runs (bench/replay.py), these five buckets beat keying on the
# n-gram order: geomean 1.168->1.165 (SmolLM2), 1.071->1.102 (Qwen 0.5B),
# 1.074->1.117 (1.5B); JSON extraction on Qwen 0.5B 1.01x->1.16x. Adding the order
# to the key (35 sources) learned more slowly and gained less on Qwen.
N_NGRAM_SOURCES = 5
# Copy-draft sources: match lengths 2-3, 4-7, 8-15, 16-31, 32+ (powers of two,
# because acceptance climbs with the log of the match length), each twice: for a
# fresh copy, and for one that continues a copy whose whole draft was just
# accepted. A copy resumed after an edit has a short backward match, yet once
# its first tokens are accepted it is usually right for a long way (measured on
# the code-editing workload: the ramp from 1-token drafts was the main loss).
COPY_SOURCE_BASE = N_NGRAM_SOURCES
_COPY_BUCKETS = 5
N_SOURCES = COPY_SOURCE_BASE + 2 * _COPY_BUCKETS
# Priors for the copy buckets, before any outcome is seen: a long match is
# usually a real copy (code edits, quoting), a 2-token one often is not.
_COPY_PRIORS = (0.35, 0.5, 0.65, 0.75, 0.85) + (0.6, 0.7, 0.8, 0.85, 0.9)


def ngram_source(count: int, total: int) -> int:
    """The source of an n-gram draft token that followed its context ``count``
    times out of the context's ``total`` occurrences (NGramPredictor.predict_detailed)."""
    if total <= 1:
        return 0
    if 2 * count < total:
        return 1
    if 5 * count < 4 * total:
        return 2
    return 3 if count < total else 4


def ngram_sources(counts: Any, totals: Any) -> list[int]:
    """ngram_source for each token of a draft."""
    return [ngram_source(c, t) for c, t in zip(counts.tolist(), totals.tolist())]


def copy_source(match_length: int, continuing: bool = False) -> int:
    """The source index of a copy draft that follows a backward match of this
    length; ``continuing``: the previous pass was a copy accepted in full."""
    bucket = min(_COPY_BUCKETS - 1, max(0, match_length.bit_length() - 2))
    return COPY_SOURCE_BASE + bucket + (_COPY_BUCKETS if continuing else 0)


def copy_sources(match_length: int, continuing: bool, n: int) -> list[int]:
    """The sources of a copy draft's n tokens. Token i is judged only if tokens
    0..i-1 were accepted, and then the copy has been confirmed for i more tokens
    and its match is i tokens longer: later tokens of a long copy draw on the
    higher acceptance of longer, confirmed matches, which is what lets a copy
    that keeps being right be drafted far ahead."""
    return [copy_source(match_length + i, continuing or i > 0) for i in range(n)]


def copy_confirmed(copied: Any, emitted: list[int]) -> bool:
    """Whether a copy draft agreed with every token a pass emitted (over their
    common length), whether or not it was the draft verified: its next tokens are
    then priced as a continuing copy."""
    n = min(len(copied), len(emitted))
    return len(copied) > 0 and all(int(copied[i]) == emitted[i] for i in range(n))


class CostAwarePolicy:
    """max_batch: largest verify batch the engine may use.
    prior_slope: assumed extra cost per extra batch token, relative to one token.
    prior_accept: initial acceptance estimate for every n-gram source.
    alpha: weight of the newest observation in the moving averages.
    probe_every: after this many refusals to draft, verify one token anyway
        (0: never; hindsight scoring already learns from refused drafts).
    learn_cost: update the cost scale from timings (False keeps the cost curve
        fixed, for reproducible decisions on a machine too noisy to time).
    keep_acceptance: carry the learned acceptance from one generation to the
        next (by default each generation starts again from the priors)."""

    def __init__(self, max_batch: int, *, prior_slope: float = 0.4, prior_accept: float = 0.35,
                 alpha: float = 0.1, probe_every: int = 0, learn_cost: bool = True,
                 keep_acceptance: bool = False) -> None:
        self.max_batch = max_batch
        self.scale = 1.0
        self._extra = [prior_slope * (b - 1) for b in range(max(max_batch, 1) + 1)]  # index = batch size
        self._costs = [1.0 + e for e in self._extra]  # relative_cost by batch size, kept current
        self._timed = 0  # verify passes timed since the curve was last set
        self.single_seconds = math.nan  # moving average of a one-token decode
        self._prior_acceptance = [float(prior_accept)] * COPY_SOURCE_BASE + list(_COPY_PRIORS)
        self._acceptance_list = list(self._prior_acceptance)
        self.keep_acceptance = keep_acceptance
        self.alpha = alpha
        self.probe_every = probe_every
        self._refusals = 0
        self.learn_cost = learn_cost
        # Drafts offered but not (or not wholly) verified, waiting for the tokens
        # that really follow them: (output index of their first token, tokens, sources).
        self._pending: list[tuple[int, list[int], list[int]]] = []

    def calibrate(self, relative_costs: dict[int, float], *, shape: bool = False) -> None:
        """Start the cost curve from measured r(B) ({B: ratio}), e.g. the
        invariance check's one-shot timings, which a busy machine can spoil.
        So each ratio is first clipped to what is physically plausible, [1, B]
        (a batch never costs more than B single tokens); the line through r(1) = 1
        takes the median of the per-size slopes; and only with ``shape`` (a curve
        known to bend, as fast mode's does at 8+ rows) do single sizes depart from
        that line, by at most a factor of two either way. A larger batch is never
        priced below a smaller one. Online timings then scale the curve."""
        clipped = {b: min(max(r, 1.0), float(b)) for b, r in relative_costs.items()
                   if 1 < b < len(self._extra) and r == r}
        if not clipped:
            return
        slopes = sorted((r - 1.0) / (b - 1) for b, r in clipped.items())
        mid = len(slopes) // 2
        slope = slopes[mid] if len(slopes) % 2 else 0.5 * (slopes[mid - 1] + slopes[mid])
        extra = [slope * (b - 1) for b in range(len(self._extra))]
        if shape:
            for b, r in clipped.items():
                extra[b] = min(max(r - 1.0, 0.5 * extra[b]), 2.0 * extra[b])
        for b in range(2, len(extra)):
            extra[b] = max(extra[b], extra[b - 1])
        self._extra, self.scale, self._timed = extra, 1.0, 0
        self._refresh_costs()

    def _refresh_costs(self) -> None:
        self._costs = [1.0 + self.scale * e for e in self._extra]

    def relative_cost(self, batch: int) -> float:
        return self._costs[batch]

    @property
    def slope(self) -> float:
        """Average extra cost per extra token at the largest batch (for reports)."""
        top = len(self._extra) - 1
        return self.scale * self._extra[top] / top if top > 1 else 0.0

    def choose(self, sources: np.ndarray, allowed: np.ndarray) -> int:
        """Number of draft tokens to verify, given each offered token's source
        (``ngram_source``/``copy_source``) and allowed[b] (may a batch of b tokens be used)."""
        return self.choose_among([sources.tolist()], allowed)[1]

    def _best(self, sources: list[int], allowed: np.ndarray) -> tuple[int, float]:
        # Plain Python floats: for at most a few dozen tokens this is several
        # times cheaper than numpy's per-call overhead, and it runs every pass.
        acceptance, costs = self._acceptance_list, self._costs
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
        if best_k == 0:
            if not any(candidates):
                return 0, 0
            self._refusals += 1
            if self.probe_every and self._refusals >= self.probe_every and allowed[2]:
                self._refusals = 0
                # Probe with the candidate whose first token is trusted most.
                first = [self._acceptance_list[c[0]] if c else -1.0 for c in candidates]
                return first.index(max(first)), 1
        else:
            self._refusals = 0
        return best_i, best_k

    def observe(self, batch: int, seconds: float, sources: np.ndarray | list[int], accepted: int) -> None:
        """One verify pass: its batch size and time, the sources of the draft
        tokens it verified, and how many of them were accepted."""
        a = self.alpha
        if batch == 1:
            t1 = self.single_seconds
            self.single_seconds = seconds if math.isnan(t1) else t1 + a * (seconds - t1)
        elif self.learn_cost and not math.isnan(self.single_seconds) and self._extra[batch] > 0:
            ratio = (seconds / self.single_seconds - 1.0) / self._extra[batch]
            # A running mean over the first passes, so a few real timings quickly
            # outweigh a start-up measurement a busy machine may have spoiled;
            # then a moving average.
            self._timed += 1
            w = max(a, 1.0 / self._timed)
            self.scale += w * (min(max(ratio, 0.1), 3.0) - self.scale)
            self._refresh_costs()
        acceptance = self._acceptance_list
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
        copy buckets from COPY_SOURCE_BASE); a copy."""
        return np.array(self._acceptance_list)

    @acceptance.setter
    def acceptance(self, values: Any) -> None:
        """Sets the estimates, and the priors each new generation starts from."""
        self._acceptance_list = [float(v) for v in np.broadcast_to(np.asarray(values, dtype=float), (N_SOURCES,))]
        self._prior_acceptance = list(self._acceptance_list)


__all__ = ["COPY_SOURCE_BASE", "CostAwarePolicy", "N_NGRAM_SOURCES", "N_SOURCES", "NGramPredictor", "copy_confirmed",
           "copy_source", "copy_sources", "ngram_source", "ngram_sources"]
