"""The batch-invariance check and the verify-cost curve, remembered per model,
build and context settings.

Two things are measured on the first engine of a setup, and stored together in
one file whose name is a digest of the setup (``fingerprint``):

- the invariance check (``check_batch_invariance``): which verify batch sizes
  are bit-exact. Deterministic; it only changes with the model file, the
  llama.cpp build or the context settings that pick kernels.
- the verify-cost curve r(B) over the sizes that are exact
  (``cost_timing.measure_cost_curve``): interleaved rounds, median ratios,
  validated. A busy machine can spoil a timing, so **only a curve that passed
  validation is stored**, with when and how it was measured (timestamp, rounds,
  statistic, threads). A curve that fails every attempt is replaced by the
  stated prior (``cost_curve.prior_curve``) for this process only; the next
  process measures again.

Reading is strict: every value of a stored file is checked (types, booleans
that are really booleans, finite positive timings, consistent counts, a curve
that passes the same validation again). A file that cannot be read, does not
match, or holds one bad value is ignored, measured again and rewritten.

``recalibrate(llm, max_batch)`` measures the curve again (``recheck=True``: the
invariance too) and replaces the stored entry; ``ngramspec doctor
--recalibrate`` calls it.

Files live in ``$NGRAMSPEC_CACHE_DIR/invariance`` or the user cache
(``~/.cache/ngramspec/invariance`` on Linux).
"""
from __future__ import annotations

import hashlib
import json
import math
import operator
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ngramspec import _llama
from ngramspec.atomic_write import atomic_write_text
from ngramspec.calibration.cost_curve import CostCurveResult, prior_curve
from ngramspec.calibration.cost_timing import llm_threads, measure_cost_curve
from ngramspec.calibration.invariance import (
    BatchSizeResult,
    InvarianceReport,
    check_batch_invariance,
    check_depths,
    check_sizes,
    covers,
    effective_max_batch,
)
from ngramspec.json_checks import is_int, is_number

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["cache_path", "fingerprint", "load_or_check", "recalibrate", "parse_invariance", "curve_sizes", "withdraw",
           "price_as_measured",
           "forget_priors", "read_entry", "store_entry", "process_withdrawn", "parse_progress"]

# 3: checked at several depths with two probe texts; failing depths, the check's cost
# and sizes withdrawn by the online audit are stored. A verdict of format 2 (one
# probe, 8 tokens deep) is never read: it passed sizes that differ deeper.
_FORMAT = 3

# Priors handed out in this process, so that every engine of one process does not
# time the curve again after all attempts failed: {(file, sizes): curve}.
_process_priors: dict[tuple[str, tuple[int, ...]], CostCurveResult] = {}
# Batch sizes the engine's online audit withdrew in this process, per cache file:
# every later report of the same setup leaves them out, even if the file cannot be written.
_process_withdrawn: dict[str, dict[int, str]] = {}


def forget_priors() -> None:
    """Forget the prior curves handed out in this process, so the next engine times
    its curve again: for a caller that moves to a fresh cache directory
    (NGRAMSPEC_CACHE_DIR) and wants that cache, not this process's memo, to decide."""
    _process_priors.clear()


def _cache_root() -> Path:
    from ngramspec.builds.llama_build import cache_root

    return cache_root() / "invariance"


def _file_stamp(path: Path) -> list[Any]:
    st = path.stat()
    return [path.name, st.st_size, st.st_mtime_ns]


def fingerprint(llm: Llama) -> dict[str, Any]:
    """What the answer depends on: the model file, the llama.cpp build (version,
    CPU features it was built for and runs with, its shared libraries), the
    context settings that choose kernels (threads, batch sizes, KV types, GPU
    offload) and, for a model on RPC workers, which workers and how it is split
    (their kernels are theirs). The model and libraries are identified by size and modification
    time, not hashed, so building the key costs microseconds."""
    import llama_cpp

    from ngramspec.builds.build_info import system_info
    from ngramspec.rpc.loading import rpc_fingerprint

    cp, mp = llm.context_params, llm.model_params
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    libs = sorted(_file_stamp(p) for p in lib_dir.glob("*") if p.is_file()) if lib_dir.is_dir() else []
    model = Path(llm.model_path).resolve()
    settings = {name: getattr(cp, name) for name in ("n_ctx", "n_threads", "n_threads_batch", "n_batch", "n_ubatch",
                                                     "type_k",
                                                     "type_v", "offload_kqv", "flash_attn_type", "flash_attn")
                if hasattr(cp, name)}
    settings["n_gpu_layers"] = getattr(mp, "n_gpu_layers", None)
    key = {
        "format": _FORMAT,
        "model": [str(model)] + _file_stamp(model),
        "llama_cpp": llama_cpp.__version__,
        "system_info": system_info(),
        "libraries": libs,
        "settings": {k: (int(v) if isinstance(v, bool) else v) for k, v in settings.items()},
    }
    rpc = rpc_fingerprint(llm)
    if rpc is not None:   # only then: a local setup keeps the key it always had
        key["rpc"] = rpc
    return key


def cache_path(key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return _cache_root() / f"{digest}.json"


# ---------------------------------------------------------------------------
# Strict reading.

def parse_invariance(data: Any, sizes: list[int]) -> InvarianceReport:
    """A stored invariance section, validated value by value; ValueError if any
    value is wrong or a size in ``sizes`` is missing. Rules: ``single_token_seconds``
    and every ``seconds`` finite and > 0; batch sizes ints >= 1, no repeats;
    ``invariant`` a JSON boolean (not "no", not 0); ``rows_differing`` an int in
    0..B and 0 exactly when invariant; ``max_abs_diff`` a number >= 0 (NaN allowed:
    logits that hold NaN); B = 1 invariant (it is the reference itself)."""
    if not isinstance(data, dict):
        raise ValueError("invariance entry is not an object")
    one = data.get("single_token_seconds")
    if not is_number(one) or not math.isfinite(one) or one <= 0:
        raise ValueError(f"bad single_token_seconds {one!r}")
    rows = data.get("results")
    if not isinstance(rows, list):
        raise ValueError("results is not a list")
    report = InvarianceReport(single_token_seconds=float(one))
    depths = data.get("depths")
    if not isinstance(depths, list) or not depths or not all(is_int(d) and d >= 1 for d in depths):
        raise ValueError(f"bad depths {depths!r}")
    probes, took = data.get("probes"), data.get("check_seconds")
    if not is_int(probes) or probes < 1:
        raise ValueError(f"bad probes {probes!r}")
    if not is_number(took) or not math.isfinite(took) or took < 0:
        raise ValueError(f"bad check_seconds {took!r}")
    report.depths, report.probes, report.check_seconds = list(depths), int(probes), float(took)
    for row in rows:
        if not isinstance(row, list) or len(row) != 6:
            raise ValueError(f"bad result row {row!r}")
        b, invariant, differing, diff, seconds, failed_at = row
        if not is_int(b) or b < 1 or b in report.results:
            raise ValueError(f"bad or repeated batch size {b!r}")
        if not isinstance(invariant, bool):
            raise ValueError(f"invariant at B={b} is {invariant!r}, not a boolean")
        if not is_int(differing) or not 0 <= differing <= b or (differing == 0) != invariant:
            raise ValueError(f"rows_differing at B={b} is {differing!r} (invariant={invariant})")
        if not is_number(diff) or diff < 0 or math.isinf(diff):
            raise ValueError(f"max_abs_diff at B={b} is {diff!r}")
        if not is_number(seconds) or not math.isfinite(seconds) or seconds <= 0:
            raise ValueError(f"seconds at B={b} is {seconds!r}")
        if not (failed_at is None if invariant else is_int(failed_at) and failed_at >= 1):
            raise ValueError(f"failed_at at B={b} is {failed_at!r} (invariant={invariant})")
        report.results[b] = BatchSizeResult(b, invariant, differing, float(diff), float(seconds), failed_at)
    if 1 in report.results and not report.results[1].invariant:
        raise ValueError("B=1 recorded as not invariant")
    missing = [b for b in sizes if b not in report.results]
    if missing:
        raise ValueError(f"sizes {missing} not covered")
    withdrawn = data.get("withdrawn", {})
    if not isinstance(withdrawn, dict):
        raise ValueError("withdrawn is not an object")
    for b, seen in withdrawn.items():
        if not (isinstance(b, str) and b.isdigit() and int(b) >= 2 and isinstance(seen, str)):
            raise ValueError(f"bad withdrawn entry {b!r}: {seen!r}")
        report.withdrawn[int(b)] = seen
    return report


def _read(path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    return data


def read_entry(key: dict[str, Any]) -> dict[str, Any] | None:
    """The stored entry of the setup ``key`` (``fingerprint``), unvalidated, or None."""
    return _read(cache_path(key), key)


def store_entry(key: dict[str, Any], report: InvarianceReport, curve: CostCurveResult | None,
                extra: dict[str, Any] | None = None) -> None:
    """Stores ``report`` (and ``curve`` if it passed) as the entry of ``key``;
    ``extra``: more keys of the invariance section (a stepwise check's progress)."""
    _store(cache_path(key), key, report, curve, extra)


def process_withdrawn(key: dict[str, Any]) -> dict[int, str]:
    """The sizes the audit withdrew in this process for the setup ``key``."""
    return dict(_process_withdrawn.get(str(cache_path(key)), {}))


def _store(path: Path, key: dict[str, Any], report: InvarianceReport, curve: CostCurveResult | None,
           extra: dict[str, Any] | None = None) -> None:
    data: dict[str, Any] = {
        "key": key,
        "invariance": {"single_token_seconds": report.single_token_seconds,
                       "depths": report.depths, "probes": report.probes, "check_seconds": report.check_seconds,
                       "results": [[r.batch_size, r.invariant, r.rows_differing, r.max_abs_diff, r.seconds,
                                    r.failed_at] for _, r in sorted(report.results.items())],
                       "withdrawn": {str(b): seen for b, seen in sorted(report.withdrawn.items())},
                       **(extra or {})},
    }
    if curve is not None and curve.passed and curve.origin in ("measured", "cached"):
        data["cost_curve"] = curve.to_json()   # only curves that passed are ever written
    _write(path, data)


def _write(path: Path, data: dict[str, Any]) -> bool:
    """Atomic write; False when the cache cannot be written (a read-only cache only
    costs the next start-up a fresh measurement)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(data))
        return True
    except OSError:
        return False


def _answers(report: InvarianceReport, llm: Llama, top: int) -> bool:
    """A stored check answers for sizes up to ``top`` on this context if it reached
    the depths a new check would (or found every size above 1 inexact early)."""
    if all(not r.invariant for b, r in report.results.items() if 1 < b <= top):
        return True
    return covers(report.depths, check_depths(_llama.usable_n_ctx(llm), top))


# ---------------------------------------------------------------------------
# A check done in steps (certify.py): its progress, and finishing it in one pass.

def parse_progress(data: Any, depths: Sequence[int], probes: int
                   ) -> tuple[InvarianceReport, dict[int, set[tuple[int, int]]], dict[int, float]] | None:
    """A stored invariance section read as a check in progress: (the decided sizes as a
    report, {B: steps passed} of the undecided ones, {B: batch time ratio}). None when
    it cannot be read, or was checked at depths that do not answer for ``depths``
    (another context size): then everything is checked again."""
    try:
        report = parse_invariance(data, [])
    except ValueError:
        return None
    if report.probes != probes:
        return None
    invariant = [b for b, r in report.results.items() if b > 1 and r.invariant]
    if invariant and not covers(report.depths, depths):
        return None
    passed: dict[int, set[tuple[int, int]]] = {}
    ratios: dict[int, float] = {}
    entries = data.get("progress", {}) if isinstance(data, dict) else {}
    if not isinstance(entries, dict):
        return None
    for b, entry in entries.items():
        if not (isinstance(b, str) and b.isdigit() and isinstance(entry, dict)):
            return None
        steps = entry.get("passed")
        if not isinstance(steps, list) or not all(
                isinstance(s, list) and len(s) == 2 and is_int(s[0]) and is_int(s[1]) for s in steps):
            return None
        passed[int(b)] = {(int(d), int(p)) for d, p in steps if d in depths and 0 <= p < probes}
        ratio = entry.get("ratio")
        if is_number(ratio) and math.isfinite(ratio) and ratio > 0:
            ratios[int(b)] = float(ratio)
    return report, passed, ratios


def _finish(llm: Llama, top: int, data: Any, *, progress: Any = False) -> InvarianceReport:
    """The whole check for sizes up to ``top``, given the stored entry ``data`` (or
    None): the sizes it decided are kept, and the rest are checked in one pass
    (``check_batch_invariance(sizes=...)``: one prefill, one set of references).
    What a stepwise check had passed for them is checked again (a few probes; the
    one-pass check is cheaper than resuming step by step)."""
    n_ctx = _llama.usable_n_ctx(llm)
    depths = check_depths(n_ctx, top)
    sizes = check_sizes(top)
    state = parse_progress(data.get("invariance") if isinstance(data, dict) else None, depths, 2)
    decided: dict[int, BatchSizeResult] = {}
    single = math.nan
    withdrawn: dict[int, str] = {}
    if state is not None:
        stored = state[0]
        decided = {b: r for b, r in stored.results.items() if b in sizes}
        single, withdrawn = stored.single_token_seconds, dict(stored.withdrawn)
    if any(b not in decided for b in sizes if b > 1) or not decided:
        new = check_batch_invariance(llm, max_batch=top, sizes=[b for b in sizes if b not in decided],
                                     progress=progress)
    else:
        return InvarianceReport(dict(sorted(decided.items())), single, threads=llm_threads(llm),
                                depths=list(depths), probes=2, check_seconds=0.0, withdrawn=withdrawn)
    if not decided:
        return new
    report = InvarianceReport(threads=llm_threads(llm), probes=new.probes, withdrawn=withdrawn,
                              single_token_seconds=single if math.isfinite(single) else new.single_token_seconds)
    scale = report.single_token_seconds / new.single_token_seconds
    results = dict(decided)
    for b, r in new.results.items():
        if b not in results:
            results[b] = BatchSizeResult(b, r.invariant, r.rows_differing, r.max_abs_diff, r.seconds * scale,
                                         r.failed_at)
    report.results = dict(sorted(results.items()))
    exact_somewhere = any(r.invariant for b, r in results.items() if b > 1)
    report.depths = list(depths) if exact_somewhere else list(new.depths)
    report.check_seconds = new.check_seconds
    return report


#: Above this size the curve is timed only at CURVE_SPARSE_SIZES: the exact engine
#: prices lengths by a line fitted to the timed sizes (``CostModel.calibrate``), so
#: timing every size up to 65 would cost minutes on a larger model and add nothing.
CURVE_DENSE_UP_TO = 9
CURVE_SPARSE_SIZES = (12, 17, 25, 33, 49, 65)


def curve_sizes(report: InvarianceReport, max_batch: int) -> list[int]:
    """The sizes the cost curve times: 1, every bit-exact checked size up to
    CURVE_DENSE_UP_TO, and the bit-exact ones of CURVE_SPARSE_SIZES, all <= max_batch."""
    def timed(b: int) -> bool:
        return b <= CURVE_DENSE_UP_TO or b in CURVE_SPARSE_SIZES or b == max_batch

    return [b for b in sorted(report.results)
            if b <= max_batch and (b == 1 or (report.results[b].invariant and timed(b)))] or [1]


def _default_measure(llm: Llama, sizes: list[int], progress: Any = False) -> CostCurveResult:
    return measure_cost_curve(llm, sizes, progress=progress)


def price_as_measured(llm: Llama, report: InvarianceReport, max_batch: int, progress: Any = False, *,
                      repeats: int = 5) -> InvarianceReport:
    """``report`` (a ``check_batch_invariance`` of this Llama) priced as ``load_or_check``
    prices an engine's: by a curve timed in interleaved rounds over ``curve_sizes`` (the
    stated prior if no attempt passes), not by the check's one-shot timings, which are
    one decode per size and on a noisy machine fell to the prior where the rounds passed.
    Benchmarks that check once and hand the report to their engines call this, so exact
    mode is measured as users run it. ``repeats``: rounds per attempt (the engine's 5;
    a quick benchmark may take 3, the fewest that can pass). Clears the Llama's KV
    cache. A report that already has a curve is returned as it is."""
    if report.cost_curve is None:
        sizes = curve_sizes(report, effective_max_batch(llm, max_batch))
        report.cost_curve = measure_cost_curve(llm, sizes, repeats=repeats, progress=progress)
    return report


def _resolve(llm: Llama, max_batch: int, check: Callable[..., InvarianceReport] | None,
             measure: Callable[..., CostCurveResult] | None, progress: Any, recheck: bool,
             remeasure: bool) -> InvarianceReport:
    if isinstance(max_batch, bool):
        raise TypeError("max_batch must be an int, got bool")
    max_batch = operator.index(max_batch)
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    # The default check goes on from what a stepwise check stored (certify.py); recheck starts again.
    resume = check is None and not recheck
    if check is None:
        check = check_batch_invariance
    if measure is None:
        measure = _default_measure
    top = effective_max_batch(llm, max_batch)
    key = fingerprint(llm)
    path = cache_path(key)
    data = None if (recheck and remeasure) else _read(path, key)
    dirty = False

    report: InvarianceReport | None = None
    if data is not None and not recheck:
        try:
            report = parse_invariance(data.get("invariance"), check_sizes(top))
        except ValueError:
            report = None
        if report is not None and not _answers(report, llm, top):
            report = None
    if report is None:
        if resume:
            report = _finish(llm, top, data, progress=progress)
        else:
            report = check(llm, max_batch=top) if not progress else check(llm, max_batch=top, progress=progress)
        dirty = True
    for b, seen in _process_withdrawn.get(str(path), {}).items():
        if b not in report.withdrawn:
            report.withdrawn[b] = seen
            dirty = True

    sizes = curve_sizes(report, top)
    memo_key = (str(path), tuple(sizes))
    curve: CostCurveResult | None = None
    stored_curve: CostCurveResult | None = None
    if data is not None and "cost_curve" in data:
        try:
            stored_curve = CostCurveResult.from_json(data["cost_curve"])
        except ValueError:
            dirty = True   # a bad stored curve is dropped from the file
    if stored_curve is not None and not remeasure and all(b in stored_curve.relative for b in sizes):
        curve = stored_curve.restricted(sizes)
    elif len(sizes) == 1:
        curve = prior_curve(sizes, "no batch size above 1 is bit-exact: nothing to price")
    elif not remeasure and memo_key in _process_priors:
        curve = _process_priors[memo_key]
    else:
        curve = measure(llm, sizes, progress=progress) if progress else measure(llm, sizes)
        if curve.passed:
            stored_curve = curve
            _process_priors.pop(memo_key, None)
            dirty = True
        else:
            _process_priors[memo_key] = curve
            if remeasure and stored_curve is not None:   # recalibrate replaces the entry, even by nothing
                stored_curve = None
                dirty = True
    if dirty:
        _store(path, key, report, stored_curve)
    report.cost_curve = curve
    return report


def withdraw(llm: Llama, size: int, seen: str, *, store: bool = True) -> Path | None:
    """Withdraws batch size ``size`` from exact mode on this setup: for every later
    report in this process and, with ``store``, in the cache file (``seen`` says
    what the audit saw). Returns the file written, or None."""
    key = fingerprint(llm)
    path = cache_path(key)
    _process_withdrawn.setdefault(str(path), {})[int(size)] = seen
    if not store:
        return None
    data = _read(path, key)
    if data is None or not isinstance(data.get("invariance"), dict):
        return None
    withdrawn = data["invariance"].get("withdrawn")
    if not isinstance(withdrawn, dict):
        withdrawn = data["invariance"]["withdrawn"] = {}
    withdrawn[str(int(size))] = seen
    return path if _write(path, data) else None


def load_or_check(llm: Llama, max_batch: int, check: Callable[..., InvarianceReport] | None = None, *,
                  measure: Callable[..., CostCurveResult] | None = None,
                  progress: Any = False) -> InvarianceReport:
    """The engine's entry point: the invariance report for this setup, with
    ``report.cost_curve`` attached.

    max_batch is clamped as in ``check_batch_invariance`` (min(n_batch, n_ubatch),
    MAX_CHECK_BATCH). The stored report is used if every one of its values is
    valid and it covers ``check_sizes(max_batch)``; otherwise ``check(llm,
    max_batch=...)`` runs and is stored: by default the sizes a stepwise check
    (``certify.py``) left undecided, with ``check_batch_invariance``.
    ``progress``: a progress line (``calibration.progress``: "bar", "log", True, False).

    ``report.cost_curve`` prices 1 and every bit-exact checked size <= max_batch:
    the stored curve if it is valid and covers them (origin "cached"), else a new
    ``measure(llm, sizes)`` (default ``measure_cost_curve``; origin "measured",
    stored only if it passed), else the prior (origin "prior", not stored; kept
    for the rest of this process so later engines do not time it again).
    ``report.relative_costs()`` returns ``report.cost_curve.relative``.
    """
    return _resolve(llm, max_batch, check, measure, progress, recheck=False, remeasure=False)


def recalibrate(llm: Llama, max_batch: int, *, recheck: bool = False,
                check: Callable[..., InvarianceReport] | None = None,
                measure: Callable[..., CostCurveResult] | None = None,
                progress: Any = False) -> InvarianceReport:
    """Measure the verify-cost curve again and replace the stored entry (with
    ``recheck``, run the invariance check again as well). A new curve that passes
    is stored; one that fails removes the stored curve (the next process measures
    again) and this process uses the prior. Returns the report, as
    ``load_or_check`` does."""
    return _resolve(llm, max_batch, check, measure, progress, recheck=recheck, remeasure=True)
