"""The rules a measured verify-cost curve must pass, the retry-then-prior
logic of measure_cost_curve and the one-shot curve of a bare invariance report.
Pure functions: no model is loaded."""
from __future__ import annotations

import math
from typing import Any

import pytest

from ngramspec.calibration.cost_curve import (
    DIP_TOLERANCE,
    MIN_REPEATS,
    MONOTONE_TOLERANCE,
    PRIOR_SLOPE,
    SPREAD_TOLERANCE,
    STATISTIC,
    UPPER_TOLERANCE,
    CostCurveResult,
    evaluate_rounds,
    prior_curve,
    summarize_rounds,
    validate_curve,
)
from ngramspec.calibration.cost_timing import measure_cost_curve
from ngramspec.calibration.invariance import (
    CHECK_DENSE_UP_TO,
    MAX_CHECK_BATCH,
    BatchSizeResult,
    InvarianceReport,
    check_sizes,
)

# Two measured curves: timed under load (relative to a noisy B=1), and quiet.
LOADED = {1: 2.83, 2: 2.08, 3: 3.06, 4: 11.7, 5: 6.68, 6: 5.56, 7: 8.92, 8: 6.21, 9: 13.9}
QUIET = {1: 1.0, 2: 0.99, 4: 1.56, 8: 3.04}


def test_the_quiet_curve_passes():
    assert validate_curve(QUIET) is None
    assert validate_curve({1: 1.0, 2: 1.42, 3: 1.72, 4: 2.10, 8: 3.43, 16: 6.11}) is None  # SmolLM2, quiet Xeon


def test_the_load_spoiled_curve_fails():
    assert "r(1)" in (validate_curve(LOADED) or "")
    renormalised = {b: r / LOADED[1] for b, r in LOADED.items()}    # even relative to its own B=1
    reason = validate_curve(renormalised)
    assert reason is not None and "non-decreasing" in reason


@pytest.mark.parametrize("curve, fragment", [
    ({}, "empty"),
    ({2: 1.5}, "r(1) is missing"),
    ({1: 1.0, 2: math.inf}, "finite"),
    ({1: 1.0, 2: math.nan}, "finite"),
    ({1: 1.0, 2: -1.0}, "finite positive"),
    ({1: 1.0, 2: 0.0}, "finite positive"),
    ({1: 1.0, 2: "1.5"}, "finite"),
    ({1: 1.0, 2: True}, "finite"),
    ({1: 1.0, 0: 1.0}, "batch size"),
    ({1: 1.05, 2: 1.5}, "r(1)"),
    ({1: 1.0, 2: 2.0 * (1 + UPPER_TOLERANCE) + 0.01}, "exceeds"),
    ({1: 1.0, 2: 2.0, 3: 2.0 * (1 - MONOTONE_TOLERANCE) - 0.01}, "non-decreasing"),
])
def test_each_rule(curve, fragment):
    reason = validate_curve(curve)
    assert reason is not None and fragment in reason


# The exact build's curve on an AVX-512 Xeon (Qwen2.5-Coder-0.5B, 2 threads, 5 rounds): odd
# batches pay a one-column tail, so r dips at every even size, the same way in every round.
ODD_EVEN = {1: 1.0, 2: 0.82, 3: 1.37, 4: 1.17, 5: 1.56, 6: 1.51, 7: 2.09, 8: 2.01, 9: 2.36, 12: 3.07, 17: 4.5,
            25: 6.17, 33: 7.87, 49: 11.35, 65: 14.01}
ODD_EVEN_SPREAD = {1: 0.0, 2: 0.061, 3: 0.036, 4: 0.057, 5: 0.05, 6: 0.016, 7: 0.043, 8: 0.004, 9: 0.075,
                   12: 0.06, 17: 0.04, 25: 0.017, 33: 0.032, 49: 0.042, 65: 0.062}


def test_a_dip_the_rounds_agree_on_passes_and_one_timing_alone_does_not():
    assert validate_curve(ODD_EVEN, ODD_EVEN_SPREAD) is None
    assert "non-decreasing" in (validate_curve(ODD_EVEN) or "")         # one-shot timings: no spread to judge
    noisy = {**ODD_EVEN_SPREAD, 4: SPREAD_TOLERANCE + 0.01}          # the rounds disagree where it dips
    assert "by more than 10%" in (validate_curve(ODD_EVEN, noisy) or "")
    noisy_top = {**ODD_EVEN_SPREAD, 3: SPREAD_TOLERANCE + 0.01}      # ... or at the size it dips from
    assert "r(4)" in (validate_curve(ODD_EVEN, noisy_top) or "")


# One of 4 in 12 measurements of the main job's setting (Qwen2.5-Coder-0.5B at llama-cpp-python's
# default threads, 1 for a token and 2 for a batch, 2-core AVX-512 Xeon) that a 10% spread rule for
# dips failed into the linear prior: r(4) dips 11% below r(3), whose rounds spread 19%.
DEFAULT_THREADS = {1: 1.0, 2: 0.489, 3: 0.82, 4: 0.732, 5: 0.909, 6: 0.856, 7: 1.102, 8: 1.131, 9: 1.395,
                   12: 1.593, 17: 2.782, 25: 3.202, 33: 4.633, 49: 5.816, 65: 8.934}
DEFAULT_THREADS_SPREAD = {1: 0.0, 2: 0.122, 3: 0.191, 4: 0.063, 5: 0.1, 6: 0.089, 7: 0.092, 8: 0.108, 9: 0.133,
                          12: 0.101, 17: 0.096, 25: 0.088, 33: 0.083, 49: 0.042, 65: 0.06}


def test_a_dip_within_the_spread_every_size_must_meet_passes():
    assert validate_curve(DEFAULT_THREADS, DEFAULT_THREADS_SPREAD, threads=(1, 2)) is None
    deeper = {**DEFAULT_THREADS, 4: 0.82 * (1 - DIP_TOLERANCE) - 0.01}
    assert "by more than 35%" in (validate_curve(deeper, DEFAULT_THREADS_SPREAD, threads=(1, 2)) or "")


def test_a_repeated_dip_is_bounded_too():
    steady = {1: 0.0, 2: 0.01, 3: 0.01}
    assert validate_curve({1: 1.0, 2: 2.0, 3: 2.0 * (1 - DIP_TOLERANCE) + 0.01}, steady) is None
    reason = validate_curve({1: 1.0, 2: 2.0, 3: 2.0 * (1 - DIP_TOLERANCE) - 0.01}, steady)
    assert reason is not None and "by more than 35% (a dip repeated over rounds)" in reason


def test_the_odd_even_curve_is_measured_not_replaced_by_the_prior():
    # before DIP_TOLERANCE, three attempts of this steady curve all failed into the prior
    fn, calls = scripted(rounds_from(ODD_EVEN, 5, 0.02))
    curve = measure_cost_curve(None, list(ODD_EVEN), repeats=5, attempts=3, time_rounds=fn)  # type: ignore[arg-type]
    assert len(calls) == 1 and curve.origin == "measured" and curve.passed
    assert curve.relative[4] < curve.relative[3]


def test_tolerances_are_tolerances():
    assert validate_curve({1: 1.0, 2: 2.0 * (1 + UPPER_TOLERANCE) - 1e-9}) is None
    assert validate_curve({1: 1.0, 2: 2.0, 3: 2.0 * (1 - MONOTONE_TOLERANCE) + 1e-9}) is None
    assert validate_curve(QUIET, {2: SPREAD_TOLERANCE}) is None
    assert "spread" in (validate_curve(QUIET, {2: SPREAD_TOLERANCE + 0.01}) or "")
    assert validate_curve({1: 1.2, 2: 1.5}, r1_tolerance=0.25) is None


def test_prior_is_the_stated_line_not_the_clip():
    p = prior_curve([2, 4, 9], "because")
    assert p.origin == "prior" and not p.passed and p.reason == "because" and p.measured_at is None
    assert p.relative == {b: pytest.approx(1 + PRIOR_SLOPE * (b - 1)) for b in (1, 2, 4, 9)}
    assert all(p.relative[b] < b for b in (2, 4, 9))
    assert validate_curve(p.relative) is None
    assert "prior" in p.describe() and "because" in p.describe()


def rounds_from(curve: dict[int, float], n: int, jitter: float = 0.0, t1: float = 0.01):
    """n rounds whose ratios are ``curve`` times (1 +/- jitter), alternating."""
    out = []
    for i in range(n):
        f = 1 + (jitter if i % 2 else -jitter)
        out.append({b: t1 * (1 if b == 1 else r * f) for b, r in curve.items()})
    return out


def test_summary_is_the_median_of_ratios_within_the_round():
    rounds = [{1: 0.01, 2: 0.015}, {1: 0.02, 2: 0.03}, {1: 0.01, 2: 0.05}]   # load doubled round 2 as a whole
    relative, spread = summarize_rounds(rounds)
    assert relative == {1: 1.0, 2: pytest.approx(1.5)}
    assert spread[2] == 0.0   # two of three rounds agree exactly: median absolute deviation 0


def test_one_disturbed_round_does_not_move_the_median():
    rounds = rounds_from({1: 1, 2: 1.4, 4: 2.1}, 5)
    rounds[2][4] *= 6
    relative, spread, reason = evaluate_rounds(rounds)
    assert reason is None and relative[4] == pytest.approx(2.1)


def test_too_few_rounds_never_pass():
    _, _, reason = evaluate_rounds(rounds_from(QUIET, MIN_REPEATS - 1))
    assert reason is not None and "too few" in reason


def scripted(*attempts):
    calls = []

    def time_rounds(sizes, repeats, attempt):
        calls.append((tuple(sizes), repeats, attempt))
        return attempts[attempt - 1]
    return time_rounds, calls


def test_a_failed_attempt_is_measured_again_and_a_pass_is_kept():
    bad = rounds_from(QUIET, 5, jitter=0.5)        # spread 50%
    good = rounds_from(QUIET, 5, jitter=0.02)
    fn, calls = scripted(bad, good)
    curve = measure_cost_curve(None, [2, 4, 8], repeats=5, attempts=3, time_rounds=fn)  # type: ignore[arg-type]
    assert len(calls) == 2 and calls[0][0] == (1, 2, 4, 8)
    assert curve.origin == "measured" and curve.passed and curve.attempts == 2
    assert curve.relative == {b: pytest.approx(r, rel=0.03) for b, r in QUIET.items()}
    assert curve.statistic == STATISTIC and curve.repeats == 5
    assert curve.measured_at is not None and curve.measured_at > 0
    assert "measured now" in curve.describe()


def test_a_curve_that_keeps_failing_gives_the_prior_after_a_bounded_number_of_tries():
    spoiled = [{b: 0.01 * r for b, r in LOADED.items()} for _ in range(5)]
    fn, calls = scripted(*[spoiled] * 3)
    curve = measure_cost_curve(None, range(1, 10), repeats=5, attempts=3, time_rounds=fn)  # type: ignore[arg-type]
    assert len(calls) == 3
    assert curve.origin == "prior" and not curve.passed and "failed validation" in (curve.reason or "")
    assert curve.relative == prior_curve(range(1, 10), "").relative
    assert curve.relative != {b: float(b) for b in range(1, 10)}      # never the clip r(B) = B


def test_stored_form_round_trips_and_bad_values_are_refused():
    curve = measure_cost_curve(None, [2, 4, 8], time_rounds=scripted(rounds_from(QUIET, 5, 0.01))[0])  # type: ignore[arg-type]
    back = CostCurveResult.from_json(curve.to_json())
    assert back.origin == "cached" and back.relative == curve.relative and back.measured_at == curve.measured_at
    changes: list[dict[str, Any]] = [
        {"passed": False}, {"passed": "yes"}, {"measured_at": math.inf}, {"measured_at": -1},
        {"measured_at": 4e12}, {"repeats": 1}, {"repeats": 5.0}, {"statistic": "mean"},
        {"relative": {"1": 1.0, "2": math.inf}}, {"relative": {"1": 1.0, "2": "x"}},
        {"relative": LOADED}, {"spread": {"2": 0.9}}, {"threads": [0, 2]}, {"threads": "2"}]
    for change in changes:
        data = dict(curve.to_json(), **change)
        if "relative" in change and change["relative"] is LOADED:
            data["relative"] = {str(b): r for b, r in LOADED.items()}
        with pytest.raises(ValueError):
            CostCurveResult.from_json(data)


def test_check_sizes_are_dense_then_geometric_and_bounded():
    assert check_sizes(1) == [1]
    assert check_sizes(9) == list(range(1, 10))
    assert check_sizes(17) == list(range(1, 18))
    assert check_sizes(40) == list(range(1, CHECK_DENSE_UP_TO + 1)) + [17, 21, 25, 33, 40]
    capped = check_sizes(10_000)
    assert capped == check_sizes(512) == check_sizes(MAX_CHECK_BATCH)
    # A draft of 64 tokens and the token before it.
    assert max(capped) == MAX_CHECK_BATCH == 65 and len(capped) == CHECK_DENSE_UP_TO + 7
    # Cost (batched tokens) is bounded by a constant, not by the square of the request.
    assert sum(check_sizes(10_000)) == sum(check_sizes(65)) <= 387


def report_with_seconds(seconds: dict[int, float], single: float) -> InvarianceReport:
    return InvarianceReport({b: BatchSizeResult(b, True, 0, 0.0, s) for b, s in seconds.items()}, single)


def test_a_bare_reports_costs_are_its_timings_only_when_plausible():
    quiet = report_with_seconds({b: 0.01 * r for b, r in QUIET.items()}, 0.01)
    assert quiet.cost_curve is None
    assert quiet.relative_costs() == {b: pytest.approx(r) for b, r in QUIET.items()}
    loaded = report_with_seconds({b: 0.01 * r for b, r in LOADED.items()}, 0.01)
    costs = loaded.relative_costs()
    assert costs == prior_curve(LOADED, "").relative          # the prior, not the clipped timings
    one_shot = loaded.one_shot_curve()
    assert one_shot is not None and one_shot.origin == "prior"
    assert InvarianceReport({1: BatchSizeResult(1, True, 0, 0.0)}).relative_costs() == {}   # no timings


def test_an_attached_curve_wins():
    r = report_with_seconds({b: 0.01 * r for b, r in LOADED.items()}, 0.01)
    r.cost_curve = prior_curve([2, 3], "test")
    assert r.relative_costs() == {1: 1.0, 2: pytest.approx(1.6), 3: pytest.approx(2.2)}


def test_a_measurement_that_overruns_its_budget_gives_the_prior_at_once():
    spoiled = [{b: 0.01 * r for b, r in LOADED.items()} for _ in range(5)]
    fn, calls = scripted(*[spoiled] * 3)
    curve = measure_cost_curve(None, range(1, 10), attempts=3, budget_s=0.0, time_rounds=fn)  # type: ignore[arg-type]
    assert len(calls) == 1 and curve.origin == "prior" and "budget" in (curve.reason or "")
    short = rounds_from(QUIET, 2)              # the timing loop stopped after 2 of 5 rounds
    fn, calls = scripted(short)
    curve = measure_cost_curve(None, [2, 4, 8], repeats=5, time_rounds=fn)  # type: ignore[arg-type]
    assert len(calls) == 1 and curve.origin == "prior" and "budget" in (curve.reason or "")
    assert "failed validation" not in (curve.reason or "")     # no attempt was judged


def test_a_budget_that_ends_a_retry_keeps_why_the_first_attempt_failed():
    """The engine's case: the first full attempt fails validation, the retry overruns
    the budget. The prior's reason names both, so a user sees why it was not measured."""
    spoiled = [{b: 0.01 * r for b, r in LOADED.items()} for _ in range(5)]
    expected = evaluate_rounds(spoiled)[2]
    assert expected
    fn, calls = scripted(spoiled, rounds_from(QUIET, 2))
    curve = measure_cost_curve(None, sorted(LOADED), repeats=5, time_rounds=fn)  # type: ignore[arg-type]
    assert len(calls) == 2 and curve.origin == "prior"
    assert "after 1 full attempt(s)" in (curve.reason or "")
    assert f"the last full one failed validation: {expected}" in (curve.reason or "")


# llama-cpp-python's default threads on 2 cores: one token on 1 thread, batches on 2.
# Qwen2.5-Coder-0.5B on the Xeon, 5 interleaved rounds, spread under 3%: a batch of 2
# is cheaper than one token. Real, not noise; it failed validation (and every process
# then ran on the prior) until the rules knew the thread counts.
SPLIT_THREADS = {1: 1.0, 2: 0.82, 3: 1.05, 4: 1.29, 5: 1.46, 6: 1.73, 7: 1.93, 8: 2.15, 9: 2.38}


def test_a_batch_on_more_threads_may_be_cheaper_than_one_token():
    assert validate_curve(SPLIT_THREADS, threads=(1, 2)) is None
    assert "non-decreasing" in (validate_curve(SPLIT_THREADS) or "")            # threads unknown: the strict rule
    assert "non-decreasing" in (validate_curve(SPLIT_THREADS, threads=(2, 2)) or "")
    relative, _spread, reason = evaluate_rounds(rounds_from(SPLIT_THREADS, 5, 0.01), threads=(1, 2))
    assert reason is None and relative[2] == pytest.approx(0.82, rel=0.03)


@pytest.mark.parametrize("curve, fragment", [
    ({1: 1.0, 2: 0.5 * (1 - MONOTONE_TOLERANCE) - 0.01, 3: 1.0}, "batch threads"),  # faster than 2 threads can be
    ({1: 1.0, 2: 0.82, 3: 0.82 * (1 - MONOTONE_TOLERANCE) - 0.01}, "non-decreasing"),  # among the batch sizes
    ({1: 1.0, 2: 2.0 * (1 + UPPER_TOLERANCE) + 0.01}, "exceeds"),
])
def test_split_threads_keep_the_other_rules(curve, fragment):
    assert fragment in (validate_curve(curve, threads=(1, 2)) or "")


def test_fewer_batch_threads_allow_dearer_batches():
    dear = {1: 1.0, 2: 3.0, 3: 4.0}     # one token on 2 threads, batches on 1
    assert validate_curve(dear, threads=(2, 1)) is None
    assert "exceeds" in (validate_curve(dear) or "")


def test_a_stored_split_thread_curve_loads_only_with_its_threads():
    rounds = rounds_from(SPLIT_THREADS, 5, 0.01)
    relative, spread, reason = evaluate_rounds(rounds, threads=(1, 2))
    assert reason is None
    curve = CostCurveResult(relative, "measured", True, 1.7e9, 5, STATISTIC, (1, 2), None, spread, 1, 128)
    back = CostCurveResult.from_json(curve.to_json())
    assert back.relative == curve.relative and back.threads == (1, 2)
    # without its threads, r(2) = 0.82 < r(1) is judged as a dip: one the rounds agreed on loads,
    with pytest.raises(ValueError, match="non-decreasing"):
        CostCurveResult.from_json(dict(curve.to_json(), threads=None, spread={}))
    assert CostCurveResult.from_json(dict(curve.to_json(), threads=None)).relative == curve.relative
    # and one they did not is refused
    wide = {str(b): SPREAD_TOLERANCE + 0.01 for b in SPLIT_THREADS}
    with pytest.raises(ValueError, match="non-decreasing"):
        CostCurveResult.from_json(dict(curve.to_json(), threads=None, spread=wide))


def test_a_bare_report_judges_its_timings_with_the_threads_it_ran_on():
    split = report_with_seconds({b: 0.01 * r for b, r in SPLIT_THREADS.items()}, 0.01)
    assert split.relative_costs() == prior_curve(SPLIT_THREADS, "").relative    # threads unknown: strict
    split.threads = (1, 2)
    assert split.relative_costs() == {b: pytest.approx(r) for b, r in SPLIT_THREADS.items()}


def test_the_check_records_the_threads_of_the_context(invariance, llm):
    assert invariance.threads == (llm.context_params.n_threads, llm.context_params.n_threads_batch)
