"""Is batched verification bit-exact on this model and build, at every depth?

Exact speculative decoding needs the logits of a k-token verify batch to equal,
bit for bit, the logits of decoding those tokens one at a time. Some llama.cpp
kernels compute a batch in another order: llamafile's sgemm (every matmul of 2+
rows it takes, attention's F16 products included), CPU repack, the tiled K-quant
matmul for 8+ rows, and flash attention's split-KV and tiled paths. Whether two
orders round a row alike depends on the values and on the KV length, so a check
a few tokens deep can pass sizes that differ hundreds of tokens deep
(docs/exactness.md has the measurements). This module measures it where
verification runs.

What is checked: every size of ``check_sizes(max_batch)`` at every depth of
``check_depths`` (a few tokens deep, across each 256-cell boundary of the KV cache
up to MAX_CHECK_DEPTH, and the deepest position the context allows), each with
two probe texts (code and prose). A size passes only if every row of every
probe at every depth is bit-identical to one-token decoding; a size that fails
once is not decoded again. A size that is not checked is absent from
``results`` and so never allowed in exact mode.

Cost: one prefill of the deepest depth (at most MAX_CHECK_DEPTH tokens), then per
depth and probe max_batch one-token decodes and the checked batches
(sum(check_sizes) tokens, at most 387). ``InvarianceReport.check_seconds`` records
it; the result is cached on disk (``invariance_cache``).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ngramspec import _llama
from ngramspec.arg_checks import checked_int
from ngramspec.calibration.cost_curve import CostCurveResult, prior_curve, validate_curve
from ngramspec.calibration.cost_timing import llm_threads
from ngramspec.errors import ContextTooSmallError

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["BatchSizeResult", "InvarianceReport", "StepsOutcome", "check_batch_invariance", "check_sizes",
           "check_depths", "covers", "probe_streams", "run_steps", "effective_max_batch", "CHECK_DENSE_UP_TO",
           "MAX_CHECK_BATCH", "MAX_CHECK_DEPTH", "SHALLOWEST_DEPTH", "size_ranges"]

#: Every batch size up to this one is checked.
CHECK_DENSE_UP_TO = 16
#: No batch size above this one is checked (nor, in exact mode, used): a draft of
#: 64 tokens and the token before it. A batch of 8 already costs 3-6x one token on
#: the CPUs measured (docs/performance.md), 65 rows ~20-25x: only a copy right for
#: nearly all of it pays there, and on a GPU, where rows are cheap, 64 is as far as
#: llama.cpp's own n-gram drafters go.
MAX_CHECK_BATCH = 65
#: Beyond CHECK_DENSE_UP_TO, only these sizes (drafts of 16, 20, 24, 32, 40 and 48
#: tokens: a ~1.25-1.5x series) are checked, then the top.
_GEOMETRIC = (17, 21, 25, 33, 41, 49)
#: One-shot timings from the check pass as a cost curve only if the check's B=1
#: batch decode is within this fraction of its median one-token decode.
ONE_SHOT_R1_TOLERANCE = 0.25
#: The shallowest depth checked (tokens already in the cache before the probe).
SHALLOWEST_DEPTH = 8
#: The deepest depth checked. The prefill to it and the probes there, where attention
#: is dearest, are most of the check's cost (docs/exactness.md has the timings);
#: passes deeper than this are covered by the engine's online audit
#: (``audit.AuditRule``), not by the check.
MAX_CHECK_DEPTH = 1024
#: llama.cpp pads the KV length it attends over to a multiple of this, so kernels
#: that choose a path by KV length change at these boundaries.
KV_PAD = 256
#: A depth inside the first KV block, past the shallow one.
_EARLY_DEPTH = 100


def check_sizes(max_batch: int) -> list[int]:
    """The batch sizes a check up to ``max_batch`` decodes: 1..min(max_batch,
    CHECK_DENSE_UP_TO), then the geometric sizes below the top, then the top,
    min(max_batch, MAX_CHECK_BATCH), itself."""
    top = min(int(max_batch), MAX_CHECK_BATCH)
    if top < 1:
        return []
    sizes = list(range(1, min(top, CHECK_DENSE_UP_TO) + 1))
    sizes += [b for b in _GEOMETRIC if CHECK_DENSE_UP_TO < b < top]
    if top > CHECK_DENSE_UP_TO:
        sizes.append(top)
    return sizes


def effective_max_batch(llm: Llama, max_batch: int) -> int:
    """``max_batch`` clamped to what the context decodes in one ubatch,
    min(n_batch, n_ubatch), and to MAX_CHECK_BATCH."""
    top: int = max(1, min(int(max_batch), llm.n_batch, llm.context_params.n_ubatch, MAX_CHECK_BATCH))
    return top

def check_depths(n_ctx: int, max_batch: int, shallowest: int = SHALLOWEST_DEPTH,
                 deepest: int = MAX_CHECK_DEPTH) -> list[int]:
    """The depths (cached tokens before the probe) a check of sizes up to ``max_batch``
    decodes at, in a context of ``n_ctx`` tokens: ``shallowest``; one inside the
    first KV block; the last position before each KV_PAD * 2^i boundary, so that
    every batch of 2+ straddles it (the first one-token reference sees the shorter
    KV, the batch and the later references the longer one); and the deepest
    position a probe fits at, capped at ``deepest``, unless a boundary depth lies
    less than KV_PAD / 2 before it."""
    last = min(int(n_ctx) - int(max_batch), int(deepest))
    if last < shallowest:
        return []
    candidates = {shallowest, _EARLY_DEPTH}
    boundary = KV_PAD
    while boundary - 1 <= last:
        candidates.add(boundary - 1)
        boundary *= 2
    # The deepest position, unless a boundary depth just before it already probes that far.
    if last - max(c for c in candidates if c <= last) >= KV_PAD // 2:
        candidates.add(last)
    return sorted(d for d in candidates if shallowest <= d <= last)


def covers(report_depths: Sequence[int], required: Sequence[int]) -> bool:
    """Whether a check made at ``report_depths`` answers for ``required`` (both from
    ``check_depths`` on one context): every required depth but the deepest was
    checked, and the deepest checked is at most MAX_CHECK_BATCH short of the
    deepest required (it moves with max_batch, by less than that)."""
    if not required:
        return True
    if not report_depths:
        return False
    return set(required[:-1]) <= set(report_depths) and max(report_depths) >= required[-1] - MAX_CHECK_BATCH


def probe_streams(llm: Llama, length: int) -> list[list[int]]:
    """Two token streams of at least ``length`` tokens: code then prose, and prose
    then code, each repeated. At every depth the check decodes the next tokens of
    each, so every depth is probed with two different texts."""
    from ngramspec.calibration.probe_texts import CODE, PROSE

    code = [int(t) for t in llm.tokenize(CODE.encode(), add_bos=False, special=False)]
    prose = [int(t) for t in llm.tokenize(PROSE.encode(), add_bos=False, special=False)]
    streams = []
    for first, second in ((code, prose), (prose, code)):
        unit = first + second
        streams.append((unit * (length // max(1, len(unit)) + 1))[:length])
    return streams


@dataclass(frozen=True)
class BatchSizeResult:
    batch_size: int
    invariant: bool
    rows_differing: int      # rows whose logits are not bit-identical to one-token decoding
    max_abs_diff: float      # largest absolute logit difference over all rows
    seconds: float = float("nan")  # time of this batch's llama_decode at the shallowest depth (a rough cost)
    failed_at: int | None = None   # the first depth where a row differed (None: none did)


@dataclass
class InvarianceReport:
    """results: {B: BatchSizeResult} for every checked size (``check_sizes``);
    a size absent from it was not checked and must not be used in exact mode.
    depths: the depths every invariant size was checked at (empty: unknown, as
    in a hand-made report). probes: probe texts per depth. check_seconds: the
    check's wall time.
    cost_curve: the verify-cost curve to price these sizes with, and where it
    came from (``load_or_check`` attaches a robust one; None on a bare check).
    withdrawn: {B: what the engine's online audit saw} for sizes the audit found
    not bit-exact in real generation; they are not allowed in exact mode."""
    results: dict[int, BatchSizeResult] = field(default_factory=dict)
    single_token_seconds: float = float("nan")  # median of the check's one-token decodes
    cost_curve: CostCurveResult | None = None
    threads: tuple[int, int] | None = None  # (n_threads, n_threads_batch) the check ran with, if known
    depths: list[int] = field(default_factory=list)
    probes: int = 0
    check_seconds: float = float("nan")
    withdrawn: dict[int, str] = field(default_factory=dict)

    def allows(self, size: int) -> bool:
        """Whether exact mode may verify with a batch of ``size`` tokens."""
        r = self.results.get(size)
        return r is not None and r.invariant and size not in self.withdrawn

    @property
    def certified_depth(self) -> int:
        """The last position the check's probes reached (0 when no depths are recorded)."""
        return max(self.depths) + max(self.results, default=1) - 1 if self.depths else 0

    @property
    def invariant_sizes(self) -> list[int]:
        return [b for b in sorted(self.results) if self.allows(b)]

    def relative_costs(self) -> dict[int, float]:
        """{B: r(B)}: ``cost_curve.relative`` when a curve is attached (see its
        ``origin``); otherwise ``one_shot_curve()``'s (the check's own timings if
        they pass validation, else the prior); {} when the report has no timings."""
        curve = self.cost_curve if self.cost_curve is not None else self.one_shot_curve()
        return dict(curve.relative) if curve is not None else {}

    def one_shot_curve(self) -> CostCurveResult | None:
        """The check's own timings (one decode per size) as a curve, if they pass
        ``validate_curve`` (with r(1) within ONE_SHOT_R1_TOLERANCE, and no spread
        to judge); else the conservative prior over the same sizes, never the
        timings clipped to [1, B]. None if the report holds no timings."""
        one = self.single_token_seconds
        timed = {b: r.seconds for b, r in sorted(self.results.items())
                 if isinstance(r.seconds, float) and np.isfinite(r.seconds) and r.seconds > 0}
        if not (isinstance(one, float) and np.isfinite(one) and one > 0) or not timed:
            return None
        relative = {b: t / one for b, t in timed.items()}
        reason = validate_curve(relative, r1_tolerance=ONE_SHOT_R1_TOLERANCE, threads=self.threads)
        if reason is not None:
            return prior_curve(self.results, f"the invariance check's one-shot timings failed validation: {reason}")
        relative[1] = 1.0
        return CostCurveResult(relative, "measured", False, None, 1, "one decode per size (the invariance check)",
                               reason="one-shot timings: plausible but not repeated")

    @property
    def max_invariant_batch(self) -> int:
        """Largest B such that every size 1..B is invariant (0 if even 1 is not)."""
        best = 0
        for b in sorted(self.results):
            if not self.allows(b):
                break
            best = b
        return best

    def summary(self) -> str:
        """One line: which sizes are exact, the depths checked and what it cost."""
        sizes = self.invariant_sizes
        above = [b for b in sizes if b > 1]
        where = (f"at depths {', '.join(map(str, self.depths))} ({self.probes} probe texts each)"
                 if self.depths else "(depths not recorded)")
        took = f", in {self.check_seconds:.1f} s" if np.isfinite(self.check_seconds) else ""
        exact = f"sizes {size_ranges(sizes)} bit-exact" if above else "no size above 1 bit-exact"
        withdrawn = f"; withdrawn by the audit: {size_ranges(sorted(self.withdrawn))}" if self.withdrawn else ""
        return f"{exact} {where}{took}{withdrawn}"

    def __str__(self) -> str:
        lines = ["batch  invariant  rows_differing  max_abs_diff  first_failing_depth"]
        for b, r in sorted(self.results.items()):
            verdict = "WITHDRAWN" if b in self.withdrawn else ("yes" if r.invariant else "NO")
            depth = "-" if r.failed_at is None else str(r.failed_at)
            lines.append(f"{b:>5}  {verdict:>9}  {r.rows_differing:>14}  {r.max_abs_diff:>12.3g}  {depth:>19}")
        lines.append(self.summary())
        for b, seen in sorted(self.withdrawn.items()):
            lines.append(f"  B={b} withdrawn: {seen}")
        return "\n".join(lines)


def size_ranges(sizes: Sequence[int]) -> str:
    """[1, 2, 3, 5, 7, 8] -> '1-3, 5, 7-8' (what the report's summary writes)."""
    out: list[str] = []
    for b in sorted(sizes):
        if out and b == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{b}"
        else:
            out.append(str(b))
    return ", ".join(out) if out else "none"


def check_batch_invariance(llm: Llama, max_batch: int = 16, *, prefix_tokens: int = SHALLOWEST_DEPTH,
                           depths: Sequence[int] | None = None, tokens: Sequence[int] | None = None,
                           progress: Any = False, every_size: bool = False,
                           sizes: Sequence[int] | None = None) -> InvarianceReport:
    """For each batch size in ``check_sizes(max_batch)`` (after clamping), at each
    depth, decode a batch of probe tokens and compare every row's logits with
    one-token-at-a-time decoding of the same tokens, bit for bit.

    The check uses ``llm``'s own context (same threads, same kernels as
    generation) and so clears its KV cache: ``llm`` is left reset, as after
    ``llm.reset()``, and its next call re-evaluates its prompt.

    max_batch: largest verify batch to test, >= 1. It is clamped to
        min(n_batch, n_ubatch) (a verify batch is never larger) and to
        MAX_CHECK_BATCH; sizes above CHECK_DENSE_UP_TO are checked only on the
        geometric set of ``check_sizes``, so the check's cost is bounded.
    prefix_tokens: the shallowest depth (tokens decoded before the first probe).
    depths: the depths to check at (default ``check_depths``: from
        ``prefix_tokens`` to as deep as the context allows, capped at MAX_CHECK_DEPTH).
    tokens: one probe stream of your own instead of the two built-in texts; it
        must hold max(depths) + max_batch tokens.
    progress: show a progress line ("bar" or True: tqdm on stderr; "log": logging
        records; ``calibration.progress``), at once.
    every_size: check every size 1..max_batch, not only ``check_sizes``' set (a
        proof of a build, e.g. bench/invariance_every_size.py; the engine's check stays bounded).
    sizes: check only these of the sizes above (the report then holds them and 1):
        the rest of a check that certified some sizes already (``certify.py``).
        The probes, depths and comparisons are the same as for the whole check.
    """
    max_batch, depths, streams = _probe_plan(llm, max_batch, prefix_tokens, depths, tokens)
    chosen = list(range(1, max_batch + 1)) if every_size else check_sizes(max_batch)
    if sizes is not None:
        wanted = {checked_int(b, "sizes", minimum=1, what="ints") for b in sizes}
        chosen = [b for b in chosen if b == 1 or b in wanted]

    from ngramspec.calibration.progress import progress as progress_line

    started = time.perf_counter()
    steps = [(depth, probe, chosen) for depth in depths for probe in range(len(streams))]
    bar = progress_line(len(steps), "batch invariance", progress, after=0.0, unit="probe")
    try:
        out = run_steps(llm, max_batch, depths, streams, steps, bar)
    finally:
        bar.close()
    report = InvarianceReport(threads=llm_threads(llm), depths=out.depths, probes=len(streams))
    report.single_token_seconds = out.single_seconds
    seconds = dict(out.seconds)
    seconds[1] = report.single_token_seconds
    for b in chosen:
        fail = out.failed.get(b)
        report.results[b] = BatchSizeResult(b, fail is None, fail[1] if fail else 0, fail[2] if fail else 0.0,
                                            seconds.get(b, float("nan")), fail[0] if fail else None)
    report.check_seconds = time.perf_counter() - started
    return report


@dataclass
class StepsOutcome:
    """What ``run_steps`` saw. passed: {B: the (depth, probe) steps where every row
    of B was bit-identical}; failed: {B: (depth, rows differing, max |diff|)} at the
    first step where a row differed; seconds: {B: its first batch's time}; ratios:
    {B: that time over the median one-token decode of the same step}; single_seconds:
    the median one-token decode of the first step run; depths: the depths probed, in
    order; step_singles: [(depth, median one-token decode)] per step run; prefill:
    (tokens, seconds) of the prefix decoded; stopped: ``keep_going`` said no."""
    passed: dict[int, set[tuple[int, int]]] = field(default_factory=dict)
    failed: dict[int, tuple[int, int, float]] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    ratios: dict[int, float] = field(default_factory=dict)
    single_seconds: float = float("nan")
    depths: list[int] = field(default_factory=list)
    step_singles: list[tuple[int, float]] = field(default_factory=list)
    prefill: tuple[int, float] = (0, 0.0)
    stopped: bool = False
    kept: tuple[int, Any] | None = None   # with keep: (depth, the deepest prefix's saved cache)


def run_steps(llm: Llama, max_batch: int, depths: Sequence[int], streams: Sequence[Sequence[int]],
              steps: Sequence[tuple[int, int, Sequence[int]]], bar: Any = None,
              keep_going: Callable[[int, list[int], int, StepsOutcome], bool] | None = None, *,
              keep: bool = False, kept: tuple[int, Any] | None = None) -> StepsOutcome:
    """The check's work, as steps: each (depth, probe index, sizes) decodes the
    probe's next tokens after ``depth`` tokens of the prefix (``streams[0]``) one at a
    time, then each size not yet failed as one batch, and compares every row bit for
    bit. Each depth must be one of ``depths``. The prefix is decoded in chunks that
    end at every depth of ``depths`` on the way (and at n_batch / n_ubatch), so the
    cache at a depth holds the same keys and values whichever steps run, and in what
    order: a step shallower than the last one cuts the cache back to its depth (as
    after each probe), a deeper one decodes the prefix on from there. A size that
    fails is not decoded again; a step whose sizes have all failed is skipped (the
    first step always runs, for its one-token timings). ``keep_going(depth, sizes,
    cached, outcome)``, asked before every step but the first: False stops there.
    ``bar``: a progress line, ticked during long steps. Clears the Llama's KV cache
    before and after.

    ``keep``: before the deepest prefix decoded leaves the cache, save it
    (``_llama.save_sequence``: its keys and values, byte for byte) in
    ``outcome.kept``; ``kept``: such a copy from an earlier call on the same Llama,
    put back (``restore_sequence``) instead of decoding the prefix up to its depth
    again. The cache then holds the very bits the prefix decoding left there, in the
    same cells, so the steps see what they would after decoding it."""
    limit = _llama.batch_limit(llm)
    batch = _llama.Batch(max(max_batch, limit))
    reference = np.empty((max_batch, llm.n_vocab()), dtype=np.float32)
    prefix = streams[0]
    out = StepsOutcome(kept=kept if keep else None)
    tick = bar.update if bar is not None else None

    def save() -> None:
        """Keeps the prefix in the cache if it is deeper than the one kept."""
        if keep and cached > (out.kept[0] if out.kept is not None else 0):
            state = _llama.save_sequence(llm)
            if state is not None:
                out.kept = (cached, state)

    try:
        _llama.clear_memory(llm)
        cached, prefilled, prefill_s = 0, 0, 0.0
        for depth, probe_index, sizes in steps:
            alive = [b for b in sizes if b > 1 and b not in out.failed]
            if not alive and out.step_singles:
                if tick is not None:
                    tick(1)
                continue
            if out.step_singles and keep_going is not None and not keep_going(depth, alive, cached, out):
                out.stopped = True
                break
            if depth > cached and kept is not None and kept[0] > cached:   # the kept prefix, put back
                _llama.clear_memory(llm)
                cached = _llama.restore_sequence(llm, kept[1])
                if cached != kept[0]:       # refused: decode it again
                    _llama.clear_memory(llm)
                    cached = 0
                    kept = None
            if depth < cached:       # back to a shallower depth: the prefix beyond it leaves the cache
                save()
                _remove_from(llm, depth)
                cached = depth
            t0 = time.perf_counter()
            for boundary in [d for d in depths if cached < d < depth] + [depth]:
                for start in range(cached, boundary, limit):   # never more than n_batch / n_ubatch at once
                    batch.fill(prefix[start:min(boundary, start + limit)], start, all_logits=False)
                    _llama.decode(llm, batch)
                    if tick is not None:
                        tick(0)
                prefilled += max(0, boundary - cached)
                cached = max(cached, boundary)
            prefill_s += time.perf_counter() - t0
            out.prefill = (prefilled, prefill_s)
            if not out.depths or out.depths[-1] != depth:
                out.depths.append(depth)
            probe = streams[probe_index][depth:depth + max(alive, default=max_batch)]
            singles = _reference_rows(llm, batch, probe, depth, reference, tick)
            single = float(np.median(singles))
            if not out.step_singles:
                out.single_seconds = single
            out.step_singles.append((depth, single))
            timed: dict[int, float] = {}
            _compare_batches(llm, batch, probe, depth, alive, reference, out.failed, timed, tick)
            for b, t in timed.items():
                if b not in out.seconds:
                    out.seconds[b] = t
                    out.ratios[b] = t / single
            for b in alive:
                if b not in out.failed:
                    out.passed.setdefault(b, set()).add((depth, probe_index))
            _remove_from(llm, depth)
            if tick is not None:
                tick(1)
            if keep and out.kept is not None and out.kept[0] > (kept[0] if kept is not None else 0):
                kept = out.kept
        save()
        return out
    finally:
        batch.close()
        _llama.clear_memory(llm)


def _probe_plan(llm: Llama, max_batch: Any, prefix_tokens: Any, depths: Sequence[int] | None,
                tokens: Sequence[int] | None) -> tuple[int, list[int], list[list[int]]]:
    """check_batch_invariance's arguments checked: (the clamped max_batch, the depths
    to check at, the probe streams, each long enough for the deepest probe)."""
    _llama.context_of(llm)
    checked_int(max_batch, "max_batch", minimum=1)
    checked_int(prefix_tokens, "prefix_tokens", minimum=1)
    max_batch = effective_max_batch(llm, int(max_batch))
    n_ctx = _llama.usable_n_ctx(llm)
    if prefix_tokens + max_batch > n_ctx:
        raise ContextTooSmallError(f"n_ctx {n_ctx} is too small for a probe of {prefix_tokens + max_batch} tokens")
    if depths is None:
        depths = check_depths(n_ctx, max_batch, shallowest=int(prefix_tokens))
    else:
        depths = sorted({_depth(d) for d in depths})
        if not depths:
            raise ValueError("depths is empty")
        if depths[-1] + max_batch > n_ctx:
            raise ContextTooSmallError(f"n_ctx {n_ctx} is too small for a probe of {max_batch} tokens at depth "
                                       f"{depths[-1]}")
    need = depths[-1] + max_batch
    if tokens is None:
        streams = probe_streams(llm, need)
    else:
        streams = [[int(t) for t in tokens]]
        if len(streams[0]) < need:
            raise ValueError(f"need at least {need} probe tokens, got {len(streams[0])}")
    return int(max_batch), list(depths), streams


def _compare_batches(llm: Llama, batch: Any, probe: Sequence[int], depth: int, sizes: Sequence[int],
                     reference: Any, failed: dict[int, tuple[int, int, float]], seconds: dict[int, float],
                     tick: Callable[[int], Any] | None = None) -> None:
    """Decode each size not yet failed as one batch at ``depth`` and compare its rows
    with the one-token ``reference`` bit for bit; a difference goes in ``failed``,
    the first timing of each size in ``seconds``."""
    for b in sizes:
        if b == 1 or b in failed:
            continue
        _remove_from(llm, depth)
        batch.fill(probe[:b], depth, all_logits=True)
        t0 = time.perf_counter()
        _llama.decode(llm, batch)
        seconds.setdefault(b, time.perf_counter() - t0)
        got = _llama.output_logits(llm, b)
        same = np.all(got.view(np.uint32) == reference[:b].view(np.uint32), axis=1)
        if not same.all():
            failed[b] = (depth, int((~same).sum()), float(np.max(np.abs(got - reference[:b]))))
        if tick is not None:
            tick(0)


def _depth(d: Any) -> int:
    return checked_int(d, "depths", minimum=1, what="ints")


def _remove_from(llm: Llama, pos: int) -> None:
    if not _llama.remove_from(llm, pos):
        raise RuntimeError("this model cannot roll back its cache, so batch invariance cannot be probed")


def _reference_rows(llm: Llama, batch: Any, probe: Sequence[int], depth: int, reference: np.ndarray,
                    tick: Callable[[int], Any] | None = None) -> list[float]:
    """Decodes ``probe`` one token at a time from ``depth``, as plain decoding does,
    into ``reference``'s rows; returns each decode's seconds."""
    times = []
    for i, tok in enumerate(probe):
        batch.fill([tok], depth + i, all_logits=True)
        t0 = time.perf_counter()
        _llama.decode(llm, batch)
        times.append(time.perf_counter() - t0)
        reference[i] = _llama.output_logits(llm, 1)[0]
        if tick is not None and i % 8 == 7:
            tick(0)
    return times
