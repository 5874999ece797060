"""Verify-cost curves: the context-dependent pass-time model (pure arithmetic) and
the measurement on the real model."""
from __future__ import annotations

import pytest

from ngramspec.calibration.cost_curve import ContextCost, CostCurve
from ngramspec.calibration.cost_timing import measure_verify_cost


def test_pass_time_is_interpolated_and_extrapolated_in_context_length():
    cost = ContextCost([100, 1100], [[1.0, 2.0, 3.0], [2.0, 5.0, 8.0]])
    assert cost.max_batch == 3
    assert cost.time(1, 100) == 1.0 and cost.time(3, 1100) == 8.0
    assert cost.time(2, 600) == pytest.approx(3.5)
    assert cost.time(2, 2100) == pytest.approx(8.0)     # beyond the longest: the same slope
    assert cost.time(3, 0) == 3.0                        # never below the shortest context's time


def test_three_contexts_use_the_segment_each_falls_in():
    cost = ContextCost([0, 10, 20], [[1.0], [2.0], [4.0]])
    assert cost.time(1, 5) == pytest.approx(1.5)
    assert cost.time(1, 15) == pytest.approx(3.0)
    assert cost.time(1, 30) == pytest.approx(6.0)


def test_from_curves_turns_ratios_into_seconds():
    cost = ContextCost.from_curves({512: CostCurve([1.0, 1.5], 0.02), 64: CostCurve([1.0, 1.4], 0.01)})
    assert cost.contexts == [64, 512]
    assert cost.seconds == [[0.01, pytest.approx(0.014)], [0.02, pytest.approx(0.03)]]


@pytest.mark.parametrize("contexts, seconds, message", [
    ([], [], "at least one"),
    ([1, 2], [[1.0]], "one curve per context"),
    ([2, 1], [[1.0], [1.0]], "ascending"),
    ([1, 2], [[1.0], [1.0, 2.0]], "same batch sizes"),
])
def test_bad_context_costs_are_refused(contexts, seconds, message):
    with pytest.raises(ValueError, match=message):
        ContextCost(contexts, seconds)


def test_measured_curve_starts_at_one_and_leaves_the_cache_empty(llm):
    curve = measure_verify_cost(llm, 4, reps=1, context_tokens=16)
    assert curve.relative[0] == 1.0 and len(curve.relative) == 4
    assert all(r > 0 for r in curve.relative) and curve.single_seconds > 0
    assert curve(4) == curve.relative[3]
    assert llm.n_tokens == 0


def test_verify_cost_needs_a_batch_and_a_repetition(llm):
    with pytest.raises(ValueError, match=">= 1"):
        measure_verify_cost(llm, 0)
    with pytest.raises(ValueError, match=">= 1"):
        measure_verify_cost(llm, 4, reps=0)


def test_a_context_longer_than_n_batch_is_prefilled_in_chunks(llm):
    # One llama_decode of more than n_batch tokens aborts the process in llama.cpp.
    assert llm.n_batch < 600
    curve = measure_verify_cost(llm, 2, reps=1, context_tokens=600)
    assert curve.relative[0] == 1.0 and curve.single_seconds > 0


@pytest.mark.parametrize("kwargs, message", [
    ({"max_batch": 10_000}, "n_batch"),
    ({"max_batch": 4, "context_tokens": 4096}, "exceeds the context"),
    ({"max_batch": 4, "context_tokens": 0}, "context_tokens"),
])
def test_verify_cost_refuses_what_llama_cpp_would_abort_on(llm, kwargs, message):
    with pytest.raises(ValueError, match=message):
        measure_verify_cost(llm, **kwargs)


# -- The interleaved, validated measurement on the real model -------------

def test_interleaved_measurement_on_the_real_model(llm):
    from ngramspec.calibration.cost_curve import PRIOR_SLOPE, STATISTIC, validate_curve
    from ngramspec.calibration.cost_timing import measure_cost_curve

    llm.reset()
    curve = measure_cost_curve(llm, [2, 3, 4], repeats=3, attempts=2, context_tokens=32)
    assert sorted(curve.relative) == [1, 2, 3, 4] and curve.relative[1] == 1.0
    assert curve.threads == (llm.context_params.n_threads, llm.context_params.n_threads_batch)
    if curve.passed:      # quiet enough: a validated measurement, with how it was made
        assert curve.origin == "measured" and curve.statistic == STATISTIC and curve.repeats == 3
        assert validate_curve(curve.relative, curve.spread, threads=curve.threads) is None and 1 <= curve.attempts <= 2
        assert set(curve.spread) == {1, 2, 3, 4}
    else:                 # too busy: the stated prior and why, never the clip r(B) = B
        assert curve.origin == "prior" and curve.reason
        assert curve.relative == {b: pytest.approx(1 + PRIOR_SLOPE * (b - 1)) for b in (1, 2, 3, 4)}
    assert llm.n_tokens == 0


def test_the_budget_stretches_to_what_the_first_round_says_attempts_take(llm):
    """A fixed budget about as long as one attempt gave larger models the prior (Qwen2.5-Coder-1.5B:
    22-25 s an attempt against 20 s, the prior in 1 of 2 tries); now the first round prices it."""
    from ngramspec.calibration.cost_timing import BUDGET_ATTEMPTS, measure_cost_curve

    llm.reset()
    curve = measure_cost_curve(llm, [2, 3, 4], repeats=3, attempts=1, context_tokens=32, budget_s=0.0)
    assert "overran" not in (curve.reason or "") and curve.attempts == 1
    assert BUDGET_ATTEMPTS >= 2    # room for a retry after a failed attempt


def test_interleaved_measurement_refuses_what_llama_cpp_would_abort_on(llm):
    from ngramspec.calibration.cost_timing import measure_cost_curve

    with pytest.raises(ValueError, match="n_batch"):
        measure_cost_curve(llm, [10_000])
    with pytest.raises(ValueError, match=">= 1"):
        measure_cost_curve(llm, [2], repeats=0)
