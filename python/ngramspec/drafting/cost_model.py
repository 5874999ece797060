"""What a verify pass costs: r(B) = time(B tokens) / time(1 token), learned online.

r(B) = 1 + scale * extra(B). The shape extra(B) starts linear (``prior_slope``
per extra token) and, once ``calibrate`` is given a measured curve, follows the
measurement, so a kernel that gets cheaper per row at 8+ rows (fast mode) is
priced as it is. One pooled factor, ``scale``, is a moving average over every
verify pass timed since, so a single noisy timing cannot steer the choice.

Online correction. A curve measured under load can price every batch
at r(B) = B; then no draft pays, no batch above one token is ever timed, and the
scale could never learn that the machine is quiet again. Two things keep the
estimate alive; both are decided by the policy (``policy.py``), which knows what
would be accepted, and both are counted (``explored``):

- ``observe(..., restart=True)``: a pass verified *to measure* (an exploration)
  restarts the running mean, so that one real timing replaces a stale scale at
  once, and the passes after it average in (1/2, 1/3, ...).
- the one-token time is a moving average of plain passes. When none was timed for
  ``REFRESH_AFTER`` passes, or for ``DRIFT_AFTER`` passes while the scale moved by
  more than a factor ``DRIFT`` since the last one (the sign of a change of load,
  or of a reference timed under a load that has gone), ``single_is_stale`` says
  so: the policy then decodes one pass plainly, and that timing is taken whole
  (not averaged into an old value), so ratios are not taken against a time from
  before a change of load. A one-token timing more than DRIFT away from the
  average either way is also taken whole: the load changed.

The scale is also bounded by what is physically plausible: r(B) <= B for every
priced B (a batch is never dearer than B single tokens), so an inflated timing
cannot price drafting out by more than that.

A batch cheaper than one token. llama.cpp decodes one token on ``n_threads`` and a
batch on ``n_threads_batch``; llama-cpp-python's defaults (half the cores, every
core) make a batch run on more threads, and then r(2) < 1 (Qwen2.5-Coder-0.5B on 2
cores: r(2) = 0.82, r(9) = 2.38). A line through r(1) = 1 cannot fit that: it
priced r(2) at 1.07 and r(9) at 1.55 after online correction (the small batches'
timings pull its slope down), so short drafts looked dear and long ones cheap. So
when the measured curve's smallest batch is cheaper than one token, the batch
sizes get a line of their own: r(B) = 1 + ``batch_offset`` + scale * extra(B) for
B >= 2 (``batch_offset`` < 0 is fixed at calibration; online timings scale the
per-row part as before). Otherwise ``batch_offset`` is 0 and nothing changes.
"""
from __future__ import annotations

import math
import statistics

__all__ = ["CostModel", "MIN_BATCH_COST", "REFRESH_AFTER", "DRIFT", "DRIFT_AFTER"]

#: The cheapest a batch is priced, relative to one token, when batches run on more
#: threads than one token (r(2) = n_threads / n_threads_batch at perfect scaling;
#: 0.25 allows four times the threads).
MIN_BATCH_COST = 0.25
#: Passes without a one-token timing after which the one-token time is stale.
REFRESH_AFTER = 128
#: ... or after DRIFT_AFTER passes, if the scale moved by more than a factor DRIFT since.
DRIFT = 2.0
DRIFT_AFTER = 8


class CostModel:
    """max_batch: the largest batch priced. prior_slope: assumed extra cost per
    extra batch token before any measurement. alpha: weight of the newest timing.
    learn: update the scale from timings (False keeps the curve fixed, for
    reproducible decisions on a machine too noisy to time).
    origin: where the curve came from (stats' ``cost_curve_origin``)."""

    def __init__(self, max_batch: int, *, prior_slope: float = 0.4, alpha: float = 0.1, learn: bool = True) -> None:
        self.max_batch = max_batch
        self.scale = 1.0
        self.alpha = alpha
        self.learn = learn
        self._extra = [prior_slope * (b - 1) for b in range(max(max_batch, 1) + 1)]  # index = batch size
        self.batch_offset = 0.0  # added to r(B) for B >= 2 (< 0: a batch runs on more threads)
        self._costs = [1.0 + e for e in self._extra]  # r(B) by batch size, kept current
        self._timed = 0  # verify passes timed since the curve was last set
        self.single_seconds = math.nan  # moving average of a one-token decode
        self.passes_since_single = 0    # timed passes since the last one-token timing
        self._scale_at_single = 1.0     # the scale when the one-token time was last timed
        self.origin = f"default linear prior {prior_slope} (B - 1), not calibrated"
        self.restarts = 0               # explorations that restarted the scale
        self._max_scale = self._plausible_max()

    def calibrate(self, relative_costs: dict[int, float], *, shape: bool = False, monotone: bool = False,
                  origin: str | None = None) -> None:
        """Start the curve from measured r(B) ({B: ratio}), which a busy machine can
        spoil. So each ratio is first clipped to what is physically plausible, [1, B]
        (a batch never costs more than B single tokens); the line through r(1) = 1
        takes the median of the per-size slopes; and only with ``shape`` (a curve
        known to bend, as fast mode's does at 8+ rows, or to be jagged, as it is
        with repacked weights, where 4 rows can cost less than 3) do the measured
        sizes depart from that line, by at most a factor of two either way, with
        sizes between them interpolated and sizes beyond them on the line's slope.
        Without ``shape``, or with ``monotone``, a larger batch is never priced below a
        smaller one. Online timings then scale the curve.

        Why a shape matters beyond fast mode: the patched exact build's curve bends at
        the first batch (Qwen2.5-Coder-0.5B, one token on 1 thread and batches on 2:
        r(2) = 1.68, then 0.22 per extra row to r(65) = 15.0). The median line (slope
        0.23) priced r(2) at 1.23, so the timings of the many short drafts pulled the
        online scale to 2.0 and priced r(65) at 31, twice its cost, and long drafts of a
        good prediction were cut short.

        When the smallest priced batch costs less than one token (batches on more
        threads: see the module docstring), the batch sizes are fitted on their own:
        r(B) = r(b0) + slope (B - b0) from the smallest size b0, with the median of
        the per-size slopes from it (at most 1, so r(B) <= B beyond the sizes
        measured); ratios are first clipped to [r(b0), B], and r(b0) to at least
        MIN_BATCH_COST."""
        given = {b: r for b, r in relative_costs.items() if 1 < b < len(self._extra) and r == r}
        if not given:
            return
        first = min(given)
        low = max(given[first], MIN_BATCH_COST) if given[first] < 1.0 else 1.0
        clipped = {b: min(max(r, low), float(b)) for b, r in given.items()}
        offset = 0.0
        if low < 1.0:
            rest = [(r - low) / (b - first) for b, r in clipped.items() if b > first]
            slope = min(statistics.median(rest), 1.0) if rest else 0.0   # r(B) <= B for every B beyond
            offset = low - 1.0 - slope * (first - 1)
        else:
            slope = statistics.median([(r - 1.0) / (b - 1) for b, r in clipped.items()])
        extra = [slope * (b - 1) for b in range(len(self._extra))]
        if shape:
            # Between measured sizes the shape follows the measurement: the line is
            # scaled to meet each measured point, so a curve that bends at 8+ rows is
            # priced bent there too, not back on the median line.
            measured = sorted(b for b in clipped if b < len(extra))
            for b in measured:
                extra[b] = min(max(clipped[b] - 1.0 - offset, 0.5 * extra[b]), 2.0 * extra[b])
            for lo, hi in zip(measured, measured[1:]):
                for b in range(lo + 1, hi):
                    t = (b - lo) / (hi - lo)
                    extra[b] = extra[lo] + t * (extra[hi] - extra[lo])
            if measured:
                top, r_top = measured[-1], extra[measured[-1]]
                for b in range(top + 1, len(extra)):
                    extra[b] = r_top + slope * (b - top)
        if monotone or not shape:
            for b in range(2, len(extra)):
                extra[b] = max(extra[b], extra[b - 1])
        self._extra, self.batch_offset = extra, offset
        self.scale, self._timed, self._scale_at_single = 1.0, 0, 1.0
        if origin is not None:
            self.origin = origin
        self._max_scale = self._plausible_max()
        self._refresh()

    def _plausible_max(self) -> float:
        """The largest scale with r(B) <= B for every priced B."""
        bounds = [(b - 1 - self.batch_offset) / e for b, e in enumerate(self._extra) if b > 1 and e > 0]
        return max(1.0, min(bounds)) if bounds else math.inf

    def _refresh(self) -> None:
        off = self.batch_offset
        self._costs = [1.0 + (off if b > 1 else 0.0) + self.scale * e for b, e in enumerate(self._extra)]

    def set_scale(self, scale: float) -> None:
        """Prices the curve at ``scale`` times its start-up extra cost, as if the
        timings had moved it there (bench/fast_mode_paths.py replays a learned scale)."""
        if not (scale > 0 and math.isfinite(scale)):
            raise ValueError(f"scale must be a positive finite number, got {scale!r}")
        self.scale = scale
        self._refresh()

    def relative_cost(self, batch: int) -> float:
        return self._costs[batch]

    @property
    def costs(self) -> list[float]:
        """r(B) indexed by batch size (index 0 unused): the list the policy reads."""
        return self._costs

    def relative_costs(self) -> dict[int, float]:
        """{B: r(B)} as priced now, B = 1..max_batch."""
        return {b: round(c, 4) for b, c in enumerate(self._costs) if b >= 1}

    @property
    def single_is_stale(self) -> bool:
        """No one-token timing for the last REFRESH_AFTER timed passes, or for
        DRIFT_AFTER while the scale moved by more than a factor DRIFT."""
        n = self.passes_since_single
        if n >= REFRESH_AFTER:
            return True
        s0 = self._scale_at_single
        return n >= DRIFT_AFTER and not s0 / DRIFT <= self.scale <= s0 * DRIFT

    @property
    def corrected(self) -> bool:
        """Online timings moved the curve by more than 10% from the start-up one."""
        return abs(self.scale - 1.0) > 0.1

    def observe(self, batch: int, seconds: float, *, restart: bool = False) -> None:
        """One timed decode of ``batch`` tokens. ``restart``: it was verified to
        measure the cost again, so it replaces the scale's running mean."""
        a = self.alpha
        if not (seconds > 0 and math.isfinite(seconds)):
            return
        if batch == 1:
            t1 = self.single_seconds
            # Taken whole when stale, or when it differs from the average by more than
            # DRIFT either way: the load changed, and an average would lag behind it.
            stale = math.isnan(t1) or self.single_is_stale or not t1 / DRIFT <= seconds <= t1 * DRIFT
            self.single_seconds = seconds if stale else t1 + a * (seconds - t1)
            self.passes_since_single = 0
            self._scale_at_single = self.scale
            return
        self.passes_since_single += 1
        if self.learn and not math.isnan(self.single_seconds) and self._extra[batch] > 0:
            ratio = (seconds / self.single_seconds - 1.0 - self.batch_offset) / self._extra[batch]
            # A running mean over the first passes, so a few real timings quickly
            # outweigh a start-up measurement a busy machine may have spoiled;
            # then a moving average.
            if restart:
                self._timed = 0
                self.restarts += 1
            self._timed += 1
            w = max(a, 1.0 / self._timed)
            self.scale += w * (min(max(ratio, 0.1), 3.0) - self.scale)
            self.scale = min(self.scale, self._max_scale)
            self._refresh()
