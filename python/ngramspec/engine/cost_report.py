"""What a generation's stats say about its pricing: where the verify-cost curve
came from, what it ended as, and why nothing was speculated when nothing was."""
from __future__ import annotations

import numpy as np

from ngramspec.calibration.invariance import InvarianceReport
from ngramspec.calibration.verify_plan import STEPWISE_ORIGIN, VerifyPlan
from ngramspec.drafting.policy import CostAwarePolicy
from ngramspec.drafting.policy_protocol import Policy
from ngramspec.engine.stats import GenerationStats

__all__ = ["curve_origin", "describe_cost"]


def curve_origin(plan: VerifyPlan, report: InvarianceReport | None) -> str:
    """Where a verify plan's cost curve came from, in words (stats, doctor)."""
    curve = report.cost_curve if report is not None else None
    if curve is None and report is not None:
        curve = report.one_shot_curve()
        if curve is not None and curve.origin != "prior":
            return "measured now (the invariance check's one-shot timings)"
    if curve is not None:
        text = str(curve.describe())
        return text + " (in the given invariance report)" if plan.origin == "given report" else text
    if plan.origin == "given report":
        return "given report (the invariance check's own timings)"
    return plan.origin


def describe_cost(stats: GenerationStats, plan: VerifyPlan, policy: Policy, *, max_draft: int,
                  can_roll_back: bool) -> None:
    """Fills a generation's ``cost_curve_origin``, ``relative_costs``,
    ``explored_passes`` and ``speculation_off_reason`` at its end. ``max_draft``:
    the engine's cap (what the caller asked for, within the context's batch limit)."""
    if isinstance(policy, CostAwarePolicy):
        cost = policy.cost
        origin = cost.origin
        if cost.corrected:
            origin += f"; corrected online (scale {cost.scale:.2f})"
        stats.cost_curve_origin = origin
        stats.relative_costs = cost.relative_costs()
        stats.explored_passes = policy.explored_generation
    else:
        stats.cost_curve_origin = "none: the eager policy verifies every allowed draft token"
        stats.relative_costs = dict(plan.relative_costs)
    reason = None
    if not can_roll_back:
        reason = "this model's cache cannot be rolled back (recurrent or hybrid): plain decoding"
    elif max_draft <= 0:
        reason = "max_draft is 0 (or the context's batch limit is 1)"
    elif not np.asarray(plan.allowed)[2:].any() and plan.origin == STEPWISE_ORIGIN:
        reason = ("exact mode has certified no verify batch size yet: it certifies a few at the start of each "
                  "generation (calibration/certify.py); warmup=True or engine.prepare() certifies them all now")
    elif not np.asarray(plan.allowed)[2:].any():
        reason = ("no verify batch size above 1 is bit-exact on this model and build (exact=False speculates anyway)"
                  if plan.exact else "no verify batch size above 1 is allowed")
    elif stats.forward_passes and not stats.drafted_tokens:
        if isinstance(policy, CostAwarePolicy):
            c = policy.cost.costs
            reason = (f"no draft verified: none offered, or none expected to pay for its verify cost (r(2) = {c[2]:.2f}"
                      + (f", r({len(c) - 1}) = {c[-1]:.2f}" if len(c) > 3 else "") + ")")
        else:
            reason = "no draft was offered"
    stats.speculation_off_reason = reason
