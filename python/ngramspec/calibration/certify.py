"""Certifying verify batch sizes a few seconds at a time, smallest first.

The invariance check (``invariance.check_batch_invariance``) of every size up to 65
costs 20-50 s on a 2-core CPU (docs/exactness.md, "First use"): most of it the
one-token references of the large sizes and the prefill to 1,023 tokens. Exact
mode does not wait for all of it. A ``Certification`` runs the same check (the
same probe texts, depths and bit-for-bit comparisons, through ``run_steps``) in
*steps*: a step is one (depth, probe text) pair for a group of sizes (2-4, 5-8,
9-16, 17-33, then the rest). A size is certified only when it has passed every
step of the whole check, and only certified sizes are ever allowed in exact mode:
until a size is certified, drafts are cut to the largest certified size, or the
generation decodes plainly.

The engine runs a *slice* of steps at the start of each exact-mode generation
while sizes are left (``SpeculativeEngine.plan_and_policy``): the smallest
sizes' steps first, as many as fit ``SLICE_BUDGET_S`` by an estimate from the
timings seen so far (at least one step a slice, so every slice makes progress).
Progress is kept on disk with the verdicts (``invariance_cache``), so each
process, each engine and each request goes on where the last one stopped.
``invariance_cache.load_or_check`` (``engine.prepare()``, ``ngramspec doctor``, the
warm-up option) runs everything that is left in one pass.

A slice clears the Llama's KV cache, as the whole check does; a generation whose
prompt would reuse more than REUSE_KEEPS tokens of the cache skips its slice, so a
conversation keeps its cached prefix.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ngramspec import _llama
from ngramspec.calibration import progress as progress_lines
from ngramspec.calibration.cost_curve import CostCurveResult
from ngramspec.calibration.cost_timing import llm_threads
from ngramspec.calibration.invariance import (
    BatchSizeResult,
    InvarianceReport,
    StepsOutcome,
    check_depths,
    check_sizes,
    effective_max_batch,
    probe_streams,
    run_steps,
    size_ranges,
)
from ngramspec.calibration.invariance_cache import (
    curve_sizes,
    fingerprint,
    parse_progress,
    process_withdrawn,
    read_entry,
    store_entry,
)
from ngramspec.errors import ContextTooSmallError

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["Certification", "GROUP_TOPS", "REUSE_KEEPS", "SLICE_BUDGET_S", "size_groups"]

#: What one generation may spend certifying before its prefill (seconds, by
#: estimate; a slice always runs at least one step). The first request on a fresh
#: cache pays at most about this (docs/exactness.md has the measurements).
SLICE_BUDGET_S = 4.0
#: The size groups, in the order they are certified: sizes up to 4, up to 8, ...
#: Each group's references are decoded up to its largest size, so small drafts are
#: certified without paying for the large sizes' references.
GROUP_TOPS = (4, 8, 16, 33, 65)
#: A generation whose prompt would reuse more than this many cached tokens skips its
#: slice (the slice clears the cache; re-decoding the prompt would cost more).
REUSE_KEEPS = 256
#: Until they are timed: a prefill token costs this share of a one-token decode, and
#: a batch of B tokens 1 + PRIOR_SLOPE (B - 1) one-token decodes (both on the dear
#: side of bench/results/exact-kernels-epyc-avx512.md: 0.19-0.27 and 0.31-0.38 on
#: SmolLM2-135M and Qwen2.5-Coder-0.5B, 2 threads).
PRIOR_PREFILL_SHARE = 0.4
PRIOR_SLOPE = 0.6


def size_groups(top: int) -> list[list[int]]:
    """``check_sizes(top)`` above 1, split at GROUP_TOPS (empty groups left out)."""
    sizes = [b for b in check_sizes(top) if b > 1]
    groups: list[list[int]] = []
    low = 1
    for high in (*GROUP_TOPS, max(sizes, default=1)):
        group = [b for b in sizes if low < b <= high]
        if group:
            groups.append(group)
        low = max(low, high)
    return groups


Step = tuple[int, int]   # (depth, probe index)


class Certification:
    """The invariance check of one Llama's setup, done a slice at a time.

    report: the verdicts so far (an ``InvarianceReport`` whose results hold the
    decided sizes only: certified or failed; ``report.allows`` is False for the
    rest). ``complete``: every size of ``check_sizes(top)`` is decided.
    ``use_cache``: read and write the progress in the invariance cache."""

    def __init__(self, llm: Llama, max_batch: int, *, use_cache: bool = True) -> None:
        self.llm = llm
        self.top = effective_max_batch(llm, max_batch)
        self.sizes = check_sizes(self.top)
        self.groups = size_groups(self.top)
        n_ctx = _llama.usable_n_ctx(llm)
        self.depths = check_depths(n_ctx, self.top)
        if not self.depths:
            raise ContextTooSmallError(f"n_ctx {n_ctx} is too small for a probe of "
                                       f"{self.top + min(8, n_ctx)} tokens")
        self.probes = 2
        self.steps: list[Step] = [(d, p) for d in self.depths for p in range(self.probes)]
        self.report = InvarianceReport(threads=llm_threads(llm), depths=list(self.depths), probes=self.probes,
                                       check_seconds=0.0)
        self.passed: dict[int, set[Step]] = {}
        self.ratios: dict[int, float] = {}      # B -> its batch time over a one-token decode, first seen
        self.use_cache = use_cache
        self.slices = 0
        self.seconds = 0.0                      # spent certifying in this process
        # For the estimates: a one-token decode (the dearest seen), a prefill token.
        self._t1 = math.nan
        self._prefill_token = math.nan
        self._streams: list[list[int]] | None = None
        # The deepest probe prefix decoded in this process, its cache saved byte for byte
        # (run_steps' keep): later slices put it back instead of decoding it again.
        self._kept: tuple[int, Any] | None = None
        self._stored_curve: Any = None
        if use_cache:
            self._merge_stored()

    # -- what is known ---------------------------------------------------------
    @property
    def complete(self) -> bool:
        return all(b in self.report.results for b in self.sizes)

    @property
    def undecided(self) -> list[int]:
        return [b for b in self.sizes if b not in self.report.results]

    def certified(self) -> list[int]:
        """The sizes exact mode may use now (1 included)."""
        return [b for b in self.sizes if self.report.allows(b)]

    def stored_curve(self) -> CostCurveResult | None:
        """The cost curve stored with a complete entry, if it passed and prices every
        certified size the curve would time (doctor's or a warm-up's), else None."""
        curve = self._stored_curve
        if not isinstance(curve, CostCurveResult) or not self.complete:
            return None
        sizes = curve_sizes(self.report, self.top)
        return curve.restricted(sizes) if all(b in curve.relative for b in sizes) else None

    # -- the slices -------------------------------------------------------------
    def pending_steps(self) -> list[tuple[int, int, list[int]]]:
        """Every step left, in the order slices take them: group by group (smallest
        sizes first), each group's steps by depth, then probe text."""
        steps = []
        for group in self.groups:
            for step in self.steps:
                need = [b for b in group if b not in self.report.results and step not in self.passed.get(b, ())]
                if need:
                    steps.append((step[0], step[1], need))
        return steps

    def run_slice(self, budget_s: float | None = None, *, style: Any = "bar") -> list[int]:
        """Runs the next steps, smallest sizes first, while the estimate of the next
        one still ends within ``budget_s`` (default SLICE_BUDGET_S) of the start; at
        least one step. Returns the sizes it certified. Clears the Llama's KV cache.
        With the cache, reads first what other engines and processes certified, and
        stores the progress after."""
        budget = SLICE_BUDGET_S if budget_s is None else float(budget_s)
        started = time.perf_counter()
        if self.use_cache:
            self._merge_stored()
        before = set(self.certified())
        steps = self.pending_steps()
        if not steps:
            return []
        if self._streams is None:
            self._streams = probe_streams(self.llm, self.depths[-1] + self.top)

        def keep_going(depth: int, sizes: list[int], cached: int, seen: StepsOutcome) -> bool:
            self._learn(seen)
            reach = max(cached, seen.kept[0] if seen.kept is not None else 0)   # a kept prefix costs no decoding
            return time.perf_counter() - started + self._estimate(depth, sizes, reach) <= budget

        line = progress_lines.progress(
            None, f"exact mode: certifying verify sizes {_ranges(steps[0][2])} (once per model and setting)", style)
        try:
            out = run_steps(self.llm, self.top, self.depths, self._streams, steps, line, keep_going, keep=True,
                            kept=self._kept)
        finally:
            line.close()
        self._kept = out.kept
        self._learn(out)
        self._take(out)
        if self.complete:
            self._kept = None
        seconds = time.perf_counter() - started
        self.slices += 1
        self.seconds += seconds
        self.report.check_seconds += seconds
        if self.use_cache:
            self._store()
        return sorted(set(self.certified()) - before)

    def _learn(self, seen: StepsOutcome) -> None:
        """The timings the next estimates go by: the dearest one-token decode, a prefill token."""
        if seen.step_singles:
            self._t1 = max(s for _, s in seen.step_singles)
        tokens, seconds = seen.prefill
        if tokens >= 64:
            self._prefill_token = seconds / tokens
        for b, r in seen.ratios.items():
            self.ratios.setdefault(b, r)

    def _estimate(self, depth: int, sizes: list[int], cached: int) -> float:
        """Seconds the next step should take: the prefix from ``cached`` to its depth,
        then the one-token references and the batches."""
        t1 = self._t1
        per_token = self._prefill_token if not math.isnan(self._prefill_token) else PRIOR_PREFILL_SHARE * t1
        slope = self._slope()
        refs_and_batches = t1 * (max(sizes, default=1) + sum(1.0 + slope * (b - 1) for b in sizes))
        return per_token * max(0, depth - cached) + refs_and_batches

    def _slope(self) -> float:
        known = [(r - 1.0) / (b - 1) for b, r in self.ratios.items() if b > 1]
        return min(max(statistics.median(known), 0.05), 1.0) if known else PRIOR_SLOPE

    def _take(self, out: StepsOutcome) -> None:
        """A slice's verdicts into the report: sizes that failed, sizes that have now
        passed every step."""
        report = self.report
        if math.isnan(report.single_token_seconds):
            report.single_token_seconds = out.single_seconds
            report.results[1] = BatchSizeResult(1, True, 0, 0.0, out.single_seconds, None)
        for b, (depth, rows, diff) in out.failed.items():
            self._decide(b, False, rows, diff, depth)
        for b, passed in out.passed.items():
            have = self.passed.setdefault(b, set())
            have |= passed
            if b not in report.results and len(have) == len(self.steps):
                self._decide(b, True, 0, 0.0, None)

    def _decide(self, b: int, invariant: bool, rows: int, diff: float, failed_at: int | None) -> None:
        one = self.report.single_token_seconds
        seconds = self.ratios.get(b, 1.0 + PRIOR_SLOPE * (b - 1)) * one
        self.report.results[b] = BatchSizeResult(b, invariant, rows, diff, seconds, failed_at)
        self.passed.pop(b, None)

    # -- the cache ---------------------------------------------------------------
    def _merge_stored(self) -> None:
        """Takes in what the stored entry of this setup knows: its decided sizes, the
        steps its undecided sizes passed, the audit's withdrawals, its cost curve."""
        key = fingerprint(self.llm)
        data = read_entry(key)
        for b, seen in process_withdrawn(key).items():
            self.report.withdrawn.setdefault(b, seen)
        if data is None:
            return
        state = parse_progress(data.get("invariance"), self.depths, self.probes)
        if state is None:
            return
        stored, passed, ratios = state
        report = self.report
        if math.isnan(report.single_token_seconds):
            report.single_token_seconds = stored.single_token_seconds
        for b, r in stored.results.items():
            if b in self.sizes and (b not in report.results or not r.invariant):
                report.results[b] = r
                self.passed.pop(b, None)
        for b, steps in passed.items():
            if b in self.sizes and b not in report.results:
                self.passed.setdefault(b, set()).update(s for s in steps if s in self.steps)
        for b, ratio in ratios.items():
            self.ratios.setdefault(b, ratio)
        for b, seen in stored.withdrawn.items():
            report.withdrawn.setdefault(b, seen)
        if "cost_curve" in data:
            try:
                self._stored_curve = CostCurveResult.from_json(data["cost_curve"])
            except ValueError:
                self._stored_curve = None

    def _store(self) -> None:
        key = fingerprint(self.llm)
        extra = {"progress": {str(b): {"passed": sorted([d, p] for d, p in steps), "ratio": self.ratios.get(b)}
                              for b, steps in sorted(self.passed.items()) if steps}}
        store_entry(key, self.report, self._stored_curve if self.complete else None, extra)


def _ranges(sizes: Sequence[int]) -> str:
    return size_ranges([b for b in sizes if b > 1])

