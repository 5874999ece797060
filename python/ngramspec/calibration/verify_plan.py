"""Which verify batch sizes a (model, build, exactness) may use, and what they cost.

Exact mode may only verify with batch sizes whose logits are bit-identical to
one-token decoding on this model and llama.cpp build (``check_batch_invariance``);
fast mode (exact=False) may use every size. Either way the plan carries the
measured cost curve r(B) that the policy starts from.

``build_plan`` measures whatever is missing before it returns (the whole check
and the cost curve: ``engine.prepare()``); ``stepwise_plan`` returns at once with
the sizes certified so far and a ``Certification`` that certifies the rest a
slice at a time (``certify.py``), pricing them with the check's own timings.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ngramspec.calibration.invariance import InvarianceReport, check_batch_invariance

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["VerifyPlan", "build_plan", "no_exact_size_warning", "stepwise_plan", "STEPWISE_ORIGIN"]

#: A plan's origin while its sizes are certified a slice at a time.
STEPWISE_ORIGIN = "invariance check, certified in steps as generations start (cached per model and build)"


def no_exact_size_warning(llm: Llama, report: InvarianceReport) -> str:
    """The first-use warning of exact mode when no size above 1 is exact: what was
    checked, the causes on this build and setup, and the two ways out."""
    from ngramspec.builds.build_info import INSTALL_COMMAND, invariance_hazards, is_exact_build

    hazards = invariance_hazards(llm)
    cause = f" Causes here: {'; '.join(hazards)}." if hazards else ""
    fixes = []
    if not is_exact_build():
        fixes.append(f"run `{INSTALL_COMMAND}` to rebuild llama-cpp-python without LLAMAFILE and REPACK")
    if any(h.startswith("flash_attn") for h in hazards):
        fixes.append("create the Llama with flash_attn=False")
    fixes.append("or pass exact=False (fast mode: faster, but the text may leave plain greedy's)")
    return ("no verify batch size above 1 is bit-exact with this model, llama.cpp build and settings "
            f"({report.summary()}); decoding plainly, so no speed-up.{cause} To speculate: "
            + "; ".join(fixes) + ".")


@dataclass(frozen=True)
class VerifyPlan:
    """allowed[b]: a verify batch of b tokens may be used (index 0 unused, b=1 always).
    relative_costs: measured r(B) by batch size ({} when none was measured).
    exact: whether the allowed sizes were checked bit-exact.
    origin: where the sizes and costs came from, for stats and doctor."""
    allowed: np.ndarray
    relative_costs: dict[int, float] = field(default_factory=dict)
    exact: bool = True
    origin: str = "plain"

    @property
    def max_batch(self) -> int:
        sizes = np.flatnonzero(self.allowed)
        return int(sizes[-1]) if len(sizes) else 1


def build_plan(llm: Llama, *, exact: bool, max_batch: int, can_roll_back: bool,
               invariance: InvarianceReport | None = None, use_cache: bool = True,
               progress: Any = False) -> tuple[VerifyPlan, Any]:
    """The plan for verify batches of up to ``max_batch`` tokens, and the
    invariance report it used (None in fast mode).

    Side effects, stated because they touch the user's Llama: measuring (exact
    mode without a given or cached report, or fast mode's one cost sweep) decodes
    test batches, which clears the Llama's KV cache once; with ``use_cache`` the
    exact report is read from, or written to, the on-disk cache (invariance_cache)."""
    allowed = np.zeros(max_batch + 1, dtype=bool)
    allowed[1] = True
    if max_batch < 2 or not can_roll_back:
        return VerifyPlan(allowed, {}, exact, "plain"), invariance
    if not exact:
        allowed[1:] = True
        if invariance is not None:
            return VerifyPlan(allowed, invariance.relative_costs(), False, "given report"), invariance
        # Fast mode's curve is far from linear (a tiled kernel makes 8+ rows cheap per
        # row, repacked weights make groups of 4 rows cheap), so it is priced as measured.
        from ngramspec.calibration.fast_curve import load_or_measure

        curve = load_or_measure(llm, max_batch, use_cache=use_cache, progress=progress)
        return VerifyPlan(allowed, dict(curve.relative), False, f"cost curve ({curve.describe()})"), invariance
    origin = "given report"
    if invariance is None:
        if use_cache:
            from ngramspec.calibration.invariance_cache import load_or_check

            invariance = load_or_check(llm, max_batch, progress=progress)
            origin = "invariance check (cached per model and build)"
        else:
            invariance = check_batch_invariance(llm, max_batch=max_batch, progress=progress)
            origin = "invariance check"
    for b in range(2, max_batch + 1):
        allowed[b] = invariance.allows(b)
    if not allowed[2:].any():
        warnings.warn(no_exact_size_warning(llm, invariance), RuntimeWarning, stacklevel=4)
    # The check timed every batch size it decoded: a free first cost curve.
    return VerifyPlan(allowed, invariance.relative_costs(), True, origin), invariance


def stepwise_plan(llm: Llama, *, max_batch: int, can_roll_back: bool, use_cache: bool = True
                  ) -> tuple[VerifyPlan, InvarianceReport | None, Any]:
    """Exact mode's plan without waiting for the whole check: (the plan, its report,
    the ``Certification`` still under way or None when nothing is left). The plan
    allows the sizes certified so far (stored by earlier slices, engines or
    processes; none on a fresh cache) and is priced by the stored cost curve if the
    entry is complete and has one, else by the check's own timings (the one-shot
    line, corrected online). The caller runs ``certification.run_slice()`` before
    generations and widens ``plan.allowed`` in place as sizes are certified."""
    from ngramspec.calibration.certify import Certification

    allowed = np.zeros(max_batch + 1, dtype=bool)
    allowed[1] = True
    if max_batch < 2 or not can_roll_back:
        return VerifyPlan(allowed, {}, True, "plain"), None, None
    certification = Certification(llm, max_batch, use_cache=use_cache)
    report = certification.report
    curve = certification.stored_curve()
    if curve is not None:
        report.cost_curve = curve
    for b in range(2, max_batch + 1):
        allowed[b] = report.allows(b)
    if certification.complete:
        if not allowed[2:].any():
            warnings.warn(no_exact_size_warning(llm, report), RuntimeWarning, stacklevel=4)
        return VerifyPlan(allowed, report.relative_costs(), True, "invariance check (cached per model and build)"), \
            report, None
    return VerifyPlan(allowed, report.relative_costs(), True, STEPWISE_ORIGIN), report, certification
