"""Fast mode's verify-cost curve, measured once per model, build and context settings.

Fast mode (exact=False) may verify with any batch size, and on builds with
llamafile's sgemm or repacked weights its curve is jagged (a batch of 4 rows can cost
less than one of 3, 16 less than 15: the kernels work on groups of rows), so it is
priced as measured rather than by a line. Timing the sizes a 64-token draft can use
costs seconds on a larger model, too much for every process start, so the curve is
kept on disk next to the exact mode's invariance verdict (same key, its own file) and
measured again only when the setup changes. Only a curve that passed validation is
stored; a failing one gives the stated prior for this process.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ngramspec.calibration.cost_curve import CostCurveResult
from ngramspec.calibration.cost_timing import measure_cost_curve
from ngramspec.calibration.invariance import check_sizes
from ngramspec.calibration.invariance_cache import cache_path, fingerprint

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["fast_sizes", "load_or_measure"]

#: Rounds of the interleaved timing (``measure_cost_curve``): more than the exact
#: curve's line needs, since fast mode prices single sizes.
REPEATS = 3


def fast_sizes(max_batch: int) -> list[int]:
    """The sizes fast mode's curve times: those the invariance check would decode
    (every size to 16, then a ~1.25-1.5x series, then the top)."""
    return check_sizes(max_batch)


def load_or_measure(llm: Llama, max_batch: int, *, use_cache: bool = True, progress: Any = False) -> CostCurveResult:
    """The curve over ``fast_sizes(max_batch)``: the stored one when it covers them,
    else measured (which clears the Llama's KV cache; ``progress``: its progress
    line, ``calibration.progress``) and, if it passed, stored."""
    sizes = fast_sizes(max_batch)
    key = fingerprint(llm)
    path = cache_path(key)
    path = path.with_name(path.stem + "-fast.json")
    if use_cache:
        try:
            data = json.loads(path.read_text())
            if isinstance(data, dict) and data.get("key") == key:
                stored = CostCurveResult.from_json(data["cost_curve"])
                if all(b in stored.relative for b in sizes):
                    return stored.restricted(sizes)
        except (OSError, ValueError, KeyError, TypeError):
            pass   # missing or unreadable: measure again
    curve = measure_cost_curve(llm, sizes, repeats=REPEATS, attempts=2, context_tokens=32, progress=progress)
    if use_cache and curve.passed:
        from ngramspec.atomic_write import atomic_write_text

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps({"key": key, "cost_curve": curve.to_json()}))
        except OSError:
            pass   # a read-only cache only costs the next start-up a measurement
    return curve
