"""The verify-cost curve r(B): the time of one llama_decode of B tokens (logits
on every row, as verification needs) divided by the time of one token.

This module holds the curve types (``CostCurve``, a plain sweep's curve;
``ContextCost``, times by context length; ``CostCurveResult``, a validated curve
and where it came from), the rules a measured curve must pass
(``validate_curve``, ``summarize_rounds``, ``evaluate_rounds``) and the
conservative prior used when none passes (``prior_curve``). Timing them on a
Llama is ``cost_timing``'s job (``measure_verify_cost``, ``measure_cost_curve``).
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ngramspec.json_checks import is_int, is_number

__all__ = ["CostCurve", "CostCurveResult", "ContextCost", "prior_curve", "validate_curve", "summarize_rounds",
           "evaluate_rounds", "PRIOR_SLOPE", "STATISTIC"]

# ---------------------------------------------------------------------------
# Validation rules for a measured r(B) (each a stated tolerance).
#: r(1) must be 1: the curve is normalised by the one-token time it was measured with.
R1_TOLERANCE = 1e-6
#: r may dip below the largest r of a smaller size by at most this fraction. Real
#: curves are flat in places (Qwen2.5-Coder-1.5B on the tiled kernel: r(2..4) = 1.01,
#: 1.03, 0.99; a curve timed on a quiet machine had r(2) = 0.99), so "nearly
#: non-decreasing", not strictly. Measured figures: docs/performance.md, "The
#: verify-cost curve".
MONOTONE_TOLERANCE = 0.10
#: ... except in a curve timed over rounds whose spread at both sizes is within
#: SPREAD_TOLERANCE (the bar every size must meet): there a dip of up to DIP_TOLERANCE
#: is the kernels', not noise. The exact build's batch kernels take columns in pairs on
#: AVX-512, so an odd batch pays a one-column tail: Qwen2.5-Coder-0.5B, 2 threads, three
#: measurements of 5 rounds on an AVX-512 Xeon gave r(2) = 0.82-0.93, r(3) = 1.37-1.51,
#: r(4) = 1.06-1.25, r(7) = 1.87-2.27, r(8) = 1.82-2.12; the 10% rule failed each one
#: into the linear prior. At llama-cpp-python's default threads (1 for a token, 2 for a
#: batch) 4 of 12 measurements there dipped by 11-20% at r(4), r(6) or r(8) with a spread
#: of 12-19% at one of the two sizes (a rule of 10% spread failed them): the first run of
#: README's main job then priced its drafts by the prior. Exact mode prices such a curve
#: non-decreasing among the batch sizes anyway (CostModel.calibrate's ``monotone``; a
#: batch cheaper than one token keeps its offset), so a dip only ever raises the dipped
#: size to the price of a smaller one.
DIP_TOLERANCE = 0.35
#: r(B) <= B * (1 + this): one batch of B tokens is not dearer than B one-token decodes.
UPPER_TOLERANCE = 0.10
#: Per size, the spread of the per-round ratios (median absolute deviation / median)
#: must not exceed this; a wider spread means the load changed during the rounds.
SPREAD_TOLERANCE = 0.25
#: A curve is only judged (and can only pass) with at least this many rounds.
MIN_REPEATS = 3
#: The statistic ``measure_cost_curve`` reports, recorded with every stored curve.
STATISTIC = "median over interleaved rounds of t(B)/t(1) within the round"
#: The prior used when no measurement passes: r(B) = 1 + PRIOR_SLOPE * (B - 1).
#: Slopes measured on CPUs are 0.33-0.70 per extra row (docs/performance.md, "The
#: verify-cost curve"), so 0.6 is near the dear end: it prices verification high
#: enough that a wrong prior cannot make speculation much slower than plain
#: decoding, yet below the clip r(B) = B (slope 1), which forbids every draft, so
#: drafts that are nearly always accepted (long copies) are still verified.
PRIOR_SLOPE = 0.6


@dataclass
class CostCurve:
    relative: list[float]     # relative[b - 1] = r(b); relative[0] == 1
    single_seconds: float     # median time of a one-token pass

    def __call__(self, batch: int) -> float:
        return self.relative[batch - 1]


@dataclass
class ContextCost:
    """Verify-pass times that depend on how many tokens are cached.

    Attention reads the whole cache for every row of a batch, so on a CPU a long
    context makes a B-token pass dearer relative to one token than the short-context
    curve says. Between (and beyond) the measured context lengths, each batch
    size's time is interpolated (extrapolated) linearly in the context length.

    contexts: the measured context lengths, ascending, at least one.
    seconds: seconds[j][b - 1] = time of a b-token pass after contexts[j] tokens."""
    contexts: list[int]
    seconds: list[list[float]]

    def __post_init__(self) -> None:
        if not self.contexts or len(self.contexts) != len(self.seconds):
            raise ValueError("need one curve per context length, and at least one")
        if any(b <= a for a, b in zip(self.contexts, self.contexts[1:])):
            raise ValueError("context lengths must be strictly ascending")
        if len({len(s) for s in self.seconds}) != 1:
            raise ValueError("every curve must cover the same batch sizes")

    @classmethod
    def from_curves(cls, curves: dict[int, CostCurve]) -> ContextCost:
        contexts = sorted(curves)
        return cls(contexts, [[r * curves[c].single_seconds for r in curves[c].relative] for c in contexts])

    @property
    def max_batch(self) -> int:
        return len(self.seconds[0])

    def time(self, batch: int, context: int) -> float:
        """Seconds of a ``batch``-token pass after ``context`` cached tokens (never
        below the shortest context's time, since a pass cannot get cheaper with
        more context)."""
        cs, s, b = self.contexts, self.seconds, batch - 1
        if len(cs) == 1:
            return s[0][b]
        j = 0
        while j < len(cs) - 2 and context > cs[j + 1]:
            j += 1
        lo, hi = s[j][b], s[j + 1][b]
        t = lo + (hi - lo) * (context - cs[j]) / (cs[j + 1] - cs[j])
        return max(t, min(row[b] for row in s))


# ---------------------------------------------------------------------------
# The robust curve.

@dataclass(frozen=True)
class CostCurveResult:
    """A verify-cost curve and where it came from.

    relative: {B: r(B)} over the batch sizes it prices; r(1) = 1.
    origin: "measured" (in this process), "cached" (a stored measurement that
        passed) or "prior" (no measurement passed, or none was possible).
    passed: whether ``relative`` is a measurement that passed ``validate_curve``
        (False for the prior).
    measured_at: Unix time of the measurement (None for the prior).
    repeats: interleaved rounds per measurement attempt (0 for the prior).
    statistic: how each r(B) was computed (``STATISTIC``, or the prior's formula).
    threads: (n_threads, n_threads_batch) the measurement ran with, if known.
    reason: why the prior is used (or why a measurement failed), else None.
    spread: {B: median absolute deviation / median of the per-round ratios}.
    attempts: measurements made to get this curve (0 when cached or prior by fiat).
    context_tokens: cached tokens before each timed pass.
    """
    relative: dict[int, float]
    origin: str
    passed: bool
    measured_at: float | None = None
    repeats: int = 0
    statistic: str = STATISTIC
    threads: tuple[int, int] | None = None
    reason: str | None = None
    spread: dict[int, float] = field(default_factory=dict)
    attempts: int = 0
    context_tokens: int = 0

    def __call__(self, batch: int) -> float:
        return self.relative[batch]

    @property
    def sizes(self) -> list[int]:
        return sorted(self.relative)

    def describe(self) -> str:
        """One line: which curve this is and where it came from."""
        if self.origin == "prior":
            return f"prior r(B) = 1 + {PRIOR_SLOPE} (B - 1), because {self.reason or 'nothing was measured'}"
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.measured_at)) if self.measured_at else "?"
        how = f"{self.repeats} interleaved rounds, median ratio"
        if self.threads:
            how += f", threads {self.threads[0]}/{self.threads[1]}"
        if self.origin == "cached":
            return f"cached (measured {when}; {how})"
        return f"measured now ({when}; {how}; {self.attempts} attempt{'s' if self.attempts != 1 else ''})"

    def to_json(self) -> dict[str, Any]:
        return {"relative": {str(b): r for b, r in sorted(self.relative.items())},
                "spread": {str(b): v for b, v in sorted(self.spread.items())},
                "passed": self.passed, "measured_at": self.measured_at, "repeats": self.repeats,
                "statistic": self.statistic, "threads": list(self.threads) if self.threads else None,
                "context_tokens": self.context_tokens}

    @classmethod
    def from_json(cls, data: Any) -> CostCurveResult:
        """A stored curve, validated value by value: it must be a measurement that
        passed (``passed`` is literally true, ``validate_curve`` holds again on its
        numbers, every number is finite and positive, ``measured_at`` is a real time
        not in the future, ``repeats`` >= MIN_REPEATS, the statistic is this
        version's). Anything else raises ValueError."""
        if not isinstance(data, dict):
            raise ValueError("cost curve entry is not an object")
        if data.get("passed") is not True:
            raise ValueError("stored cost curve did not pass")
        relative = _int_float_map(data.get("relative"), "relative")
        spread = _int_float_map(data.get("spread", {}), "spread", allow_zero=True)
        at = data.get("measured_at")
        if not is_number(at) or not math.isfinite(at) or at <= 0 or at > time.time() + 86400:
            raise ValueError(f"bad measured_at {at!r}")
        repeats = data.get("repeats")
        if not is_int(repeats) or repeats < MIN_REPEATS:
            raise ValueError(f"bad repeats {repeats!r}")
        if data.get("statistic") != STATISTIC:
            raise ValueError("stored cost curve uses another statistic")
        threads = data.get("threads")
        if threads is not None:
            if not (isinstance(threads, list) and len(threads) == 2 and all(is_int(t) and t > 0 for t in threads)):
                raise ValueError(f"bad threads {threads!r}")
            threads = (int(threads[0]), int(threads[1]))
        ctx = data.get("context_tokens", 0)
        if not is_int(ctx) or ctx < 0:
            raise ValueError(f"bad context_tokens {ctx!r}")
        reason = validate_curve(relative, spread, threads=threads)
        if reason is not None:
            raise ValueError(f"stored cost curve fails validation: {reason}")
        return cls(relative, "cached", True, float(at), int(repeats), STATISTIC, threads, None, spread, 0, int(ctx))

    def restricted(self, sizes: Iterable[int]) -> CostCurveResult:
        """The same curve over ``sizes`` only (each must be priced)."""
        sizes = sorted(set(sizes))
        return CostCurveResult({b: self.relative[b] for b in sizes}, self.origin, self.passed, self.measured_at,
                               self.repeats, self.statistic, self.threads, self.reason,
                               {b: v for b, v in self.spread.items() if b in sizes}, self.attempts,
                               self.context_tokens)

    def with_origin(self, origin: str) -> CostCurveResult:
        return CostCurveResult(self.relative, origin, self.passed, self.measured_at, self.repeats, self.statistic,
                               self.threads, self.reason, self.spread, self.attempts, self.context_tokens)


def _int_float_map(data: Any, what: str, *, allow_zero: bool = False) -> dict[int, float]:
    if not isinstance(data, dict):
        raise ValueError(f"{what} is not an object")
    out: dict[int, float] = {}
    for k, v in data.items():
        try:
            b = int(k)
        except (TypeError, ValueError):
            raise ValueError(f"{what}: bad batch size {k!r}") from None
        if b < 1 or str(b) != str(k).strip() or b in out:
            raise ValueError(f"{what}: bad batch size {k!r}")
        if not is_number(v) or not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
            raise ValueError(f"{what}: bad value {v!r} for B={b}")
        out[b] = float(v)
    return out


def validate_curve(relative: Mapping[int, float], spread: Mapping[int, float] | None = None, *,
                   r1_tolerance: float = R1_TOLERANCE, threads: tuple[int, int] | None = None) -> str | None:
    """None if ``relative`` ({B: r(B)}) is a plausible verify-cost curve, else the
    first reason it is not. The rules (tolerances are the module constants):

    - it prices B = 1, and |r(1) - 1| <= ``r1_tolerance``;
    - every r(B) is a finite number > 0 and B is an int >= 1;
    - nearly non-decreasing: r(B) >= (1 - MONOTONE_TOLERANCE) * max r(B') over B' < B,
      or >= (1 - DIP_TOLERANCE) * that when ``spread`` is within SPREAD_TOLERANCE at
      both sizes (a dip the rounds agree on);
    - r(B) <= B * (1 + UPPER_TOLERANCE);
    - with ``spread`` ({B: MAD / median of the per-round ratios}): each <= SPREAD_TOLERANCE.

    ``threads``: (n_threads, n_threads_batch) the curve was measured with. llama.cpp
    decodes one token on n_threads and a batch on n_threads_batch, so when they differ
    B = 1 and B >= 2 run on different thread counts: a batch may then be cheaper than
    one token (llama-cpp-python's defaults on 2 cores, 1 and 2 threads: Qwen2.5-Coder-0.5B
    r(2) = 0.82, r(9) = 2.38, spread under 3%, measured on the Xeon), which is real and
    not noise. The step from B = 1 is then only bounded by the thread ratio: r(B) >=
    (1 - MONOTONE_TOLERANCE) * n_threads / n_threads_batch and r(B) <= B * (1 +
    UPPER_TOLERANCE) * max(1, n_threads / n_threads_batch); "nearly non-decreasing"
    holds among the batch sizes >= 2.
    """
    if not relative:
        return "empty curve"
    for b, r in relative.items():
        if not is_int(b) or b < 1:
            return f"bad batch size {b!r}"
        if not is_number(r) or not math.isfinite(r) or r <= 0:
            return f"r({b}) = {r!r} is not a finite positive number"
    if 1 not in relative:
        return "r(1) is missing"
    if abs(relative[1] - 1.0) > r1_tolerance:
        return f"r(1) = {relative[1]:.3g}, not 1"
    ratio = 1.0   # n_threads / n_threads_batch: what the step from B = 1 to a batch may scale by
    if threads is not None and threads[0] > 0 and threads[1] > 0 and threads[0] != threads[1]:
        ratio = threads[0] / threads[1]
    highest, at = 0.0, 0
    for b in sorted(relative):
        r = relative[b]
        if b > 1 and r > b * (1.0 + UPPER_TOLERANCE) * max(1.0, ratio):
            return f"r({b}) = {r:.3g} exceeds {b} x (1 + {UPPER_TOLERANCE}): dearer than {b} single tokens"
        if ratio != 1.0:
            if b == 1:   # another thread count: the batch sizes are judged among themselves
                continue
            if r < ratio * (1.0 - MONOTONE_TOLERANCE):
                return (f"r({b}) = {r:.3g} is below n_threads / n_threads_batch = {ratio:.3g} by more than "
                        f"{MONOTONE_TOLERANCE:.0%}: faster than the batch threads allow")
        if r < highest * (1.0 - MONOTONE_TOLERANCE) and not _repeatable_dip(r, b, highest, at, spread):
            deeper = f"{DIP_TOLERANCE:.0%} (a dip repeated over rounds)" if _steady(spread, b, at) else \
                f"{MONOTONE_TOLERANCE:.0%}"
            return (f"r({b}) = {r:.3g} is below r({at}) = {highest:.3g} by more than {deeper}: "
                    "not nearly non-decreasing")
        if r > highest:
            highest, at = r, b
    for b, s in (spread or {}).items():
        if not is_number(s) or not math.isfinite(s) or s < 0:
            return f"spread at B={b} is {s!r}"
        if s > SPREAD_TOLERANCE:
            return f"spread across rounds at B={b} is {s:.0%} > {SPREAD_TOLERANCE:.0%}"
    return None


def _steady(spread: Mapping[int, float] | None, *sizes: int) -> bool:
    """Whether the rounds agreed at each of ``sizes``: spread known and within SPREAD_TOLERANCE."""
    return spread is not None and all(is_number(spread.get(b)) and spread[b] <= SPREAD_TOLERANCE
                                      for b in sizes)


def _repeatable_dip(r: float, b: int, highest: float, at: int, spread: Mapping[int, float] | None) -> bool:
    """A dip from r(at) = highest to r(b) = r that the rounds agree on and that is no deeper
    than DIP_TOLERANCE: the kernels' (see DIP_TOLERANCE), accepted."""
    return r >= highest * (1.0 - DIP_TOLERANCE) and _steady(spread, b, at)


def prior_curve(sizes: Iterable[int], reason: str, *, threads: tuple[int, int] | None = None,
                attempts: int = 0) -> CostCurveResult:
    """The conservative prior r(B) = 1 + PRIOR_SLOPE * (B - 1) over ``sizes`` (and 1)."""
    sizes = sorted(set(sizes) | {1})
    return CostCurveResult({b: 1.0 + PRIOR_SLOPE * (b - 1) for b in sizes}, "prior", False, None, 0,
                           f"prior 1 + {PRIOR_SLOPE} (B - 1)", threads, reason, {}, attempts, 0)


def summarize_rounds(rounds: Sequence[Mapping[int, float]]) -> tuple[dict[int, float], dict[int, float]]:
    """Per-round times ({B: seconds}, each round timing every size once) to
    (relative, spread): relative[B] = median over rounds of t(B) / t(1) of the same
    round; spread[B] = median absolute deviation of those ratios / their median."""
    if not rounds:
        raise ValueError("no rounds")
    sizes = sorted(rounds[0])
    if 1 not in sizes:
        raise ValueError("every round must time B = 1")
    relative: dict[int, float] = {}
    spread: dict[int, float] = {}
    for b in sizes:
        ratios = [r[b] / r[1] for r in rounds]
        med = statistics.median(ratios)
        relative[b] = 1.0 if b == 1 else med
        spread[b] = statistics.median(abs(x - med) for x in ratios) / med if med > 0 else math.inf
    return relative, spread


def evaluate_rounds(rounds: Sequence[Mapping[int, float]], threads: tuple[int, int] | None = None
                    ) -> tuple[dict[int, float], dict[int, float], str | None]:
    """``summarize_rounds`` plus the verdict of ``validate_curve`` (None = passed)."""
    relative, spread = summarize_rounds(rounds)
    if len(rounds) < MIN_REPEATS:
        return relative, spread, f"{len(rounds)} round(s) are too few to judge (need {MIN_REPEATS})"
    if any(not (math.isfinite(t) and t > 0) for r in rounds for t in r.values()):
        return relative, spread, "a timing was not a finite positive number"
    return relative, spread, validate_curve(relative, spread, threads=threads)
