"""What a verify pass costs: r(B) = time(B tokens) / time(1 token), learned online.

r(B) = 1 + scale * extra(B). The shape extra(B) starts linear (``prior_slope``
per extra token) and, once ``calibrate`` is given a measured curve, follows the
measurement, so a kernel that gets cheaper per row at 8+ rows (fast mode) is
priced as it is. One pooled factor, ``scale``, is a moving average over every
verify pass timed since, so a single noisy timing cannot steer the choice.
"""
from __future__ import annotations

import math

__all__ = ["CostModel"]


class CostModel:
    """max_batch: the largest batch priced. prior_slope: assumed extra cost per
    extra batch token before any measurement. alpha: weight of the newest timing.
    learn: update the scale from timings (False keeps the curve fixed, for
    reproducible decisions on a machine too noisy to time)."""

    def __init__(self, max_batch: int, *, prior_slope: float = 0.4, alpha: float = 0.1, learn: bool = True) -> None:
        self.max_batch = max_batch
        self.scale = 1.0
        self.alpha = alpha
        self.learn = learn
        self._extra = [prior_slope * (b - 1) for b in range(max(max_batch, 1) + 1)]  # index = batch size
        self._costs = [1.0 + e for e in self._extra]  # r(B) by batch size, kept current
        self._timed = 0  # verify passes timed since the curve was last set
        self.single_seconds = math.nan  # moving average of a one-token decode

    def calibrate(self, relative_costs: dict[int, float], *, shape: bool = False) -> None:
        """Start the curve from measured r(B) ({B: ratio}), which a busy machine can
        spoil. So each ratio is first clipped to what is physically plausible, [1, B]
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
        self._refresh()

    def _refresh(self) -> None:
        self._costs = [1.0 + self.scale * e for e in self._extra]

    def relative_cost(self, batch: int) -> float:
        return self._costs[batch]

    @property
    def costs(self) -> list[float]:
        """r(B) indexed by batch size (index 0 unused): the list the policy reads."""
        return self._costs

    def observe(self, batch: int, seconds: float) -> None:
        """One timed decode of ``batch`` tokens."""
        a = self.alpha
        if batch == 1:
            t1 = self.single_seconds
            self.single_seconds = seconds if math.isnan(t1) else t1 + a * (seconds - t1)
        elif self.learn and not math.isnan(self.single_seconds) and self._extra[batch] > 0:
            ratio = (seconds / self.single_seconds - 1.0) / self._extra[batch]
            # A running mean over the first passes, so a few real timings quickly
            # outweigh a start-up measurement a busy machine may have spoiled;
            # then a moving average.
            self._timed += 1
            w = max(a, 1.0 / self._timed)
            self.scale += w * (min(max(ratio, 0.1), 3.0) - self.scale)
            self._refresh()
