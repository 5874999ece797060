"""How many draft tokens to verify: cost-aware, learned online.

A verify batch of B tokens costs more than one token (on the reference CPU,
B=5 costs ~2.6x B=1), so a draft is only worth verifying when enough of it is
likely to be accepted. The policy keeps:
  * acceptance: for each n-gram order, an exponential moving average of how
    often a draft token of that order was accepted, given that the tokens
    before it were;
  * cost: a moving average of llama_decode time for each batch size, relative
    to a single token (a linear prior until sizes have been seen).
It picks the k that maximises expected tokens per unit of verify time, where
k = 0 (a plain one-token decode, ratio 1) is always a candidate, so on text it
cannot predict it falls back to plain decoding. A rare probe (k = 1 once every
``probe_every`` refusals) lets it notice when the text becomes predictable.
"""
from __future__ import annotations

import math

import numpy as np

from ._core import NGramPredictor

_MAX_ORDER = 8


class CostAwarePolicy:
    """max_batch: largest verify batch the engine may use.
    prior_slope: assumed extra cost per extra batch token, relative to one token.
    prior_accept: initial acceptance estimate for every order.
    alpha: weight of the newest observation in the moving averages.
    probe_every: after this many refusals to draft, verify one token anyway."""

    def __init__(self, max_batch: int, *, prior_slope: float = 0.4, prior_accept: float = 0.5,
                 alpha: float = 0.1, probe_every: int = 16) -> None:
        self.max_batch = max_batch
        self.prior = 1.0 + prior_slope * (np.arange(max_batch + 1) - 1.0)
        self.seconds = np.full(max_batch + 1, math.nan)
        self.acceptance = np.full(_MAX_ORDER + 1, prior_accept)
        self.alpha = alpha
        self.probe_every = probe_every
        self._refusals = 0

    def relative_cost(self, batch: int) -> float:
        t1, tb = self.seconds[1], self.seconds[batch]
        if math.isnan(t1) or math.isnan(tb):
            return float(self.prior[batch])
        return float(tb / t1)

    def choose(self, orders: np.ndarray, allowed: np.ndarray) -> int:
        """Number of draft tokens to verify, given each offered token's order and
        allowed[b] (may a batch of b tokens be used)."""
        if len(orders) == 0:
            return 0
        reach = np.cumprod(self.acceptance[orders])  # P(draft tokens 0..i all accepted)
        expected = 1.0 + np.cumsum(reach)
        best_k, best_score = 0, 1.0
        for k in range(1, len(orders) + 1):
            if not allowed[k + 1]:
                continue
            score = expected[k - 1] / self.relative_cost(k + 1)
            if score > best_score:
                best_k, best_score = k, score
        if best_k == 0:
            self._refusals += 1
            if self._refusals >= self.probe_every and allowed[2]:
                self._refusals = 0
                return 1
        else:
            self._refusals = 0
        return best_k

    def observe(self, batch: int, seconds: float, orders: np.ndarray, accepted: int) -> None:
        old = self.seconds[batch]
        self.seconds[batch] = seconds if math.isnan(old) else old + self.alpha * (seconds - old)
        for i in range(min(len(orders), batch - 1)):
            o = orders[i]
            hit = i < accepted
            self.acceptance[o] += self.alpha * ((1.0 if hit else 0.0) - self.acceptance[o])
            if not hit:
                break


__all__ = ["CostAwarePolicy", "NGramPredictor"]
