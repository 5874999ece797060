"""The cost model's online correction, with synthetic timings: no model.

A curve measured under load can price every batch at r(B) = B; the policy then
never verifies a draft, no batch above one token is timed, and the old cost model
never recovered (the trap). These tests drive CostAwarePolicy + CostModel through
the Drafter's calls (choose_among / observe / defer / settle) with made-up timings
from a known "true" machine."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ngramspec.drafting.cost_model import MIN_BATCH_COST, REFRESH_AFTER, CostModel
from ngramspec.drafting.policy import EXPLORE_EVERY, EXPLORE_MAX_INTERVAL
from tests.support.policies import table_policy

ALL = np.ones(10, dtype=bool)
T1 = 0.010                               # seconds of a one-token decode on the quiet machine
TRAP = {1: 2.83, 2: 2.08, 3: 3.06, 4: 11.7, 5: 6.68, 6: 5.56, 7: 8.92, 8: 6.21, 9: 13.9}  # timed under load


def quiet(batch: int) -> float:
    return T1 * (1.0 + 0.3 * (batch - 1))   # the true quiet curve: r(B) = 1 + 0.3 (B - 1)


def run(policy, passes, *, predictable=True, timing=quiet, load=lambda i: 1.0, sources=(4,) * 8, run_length=0):
    """``passes`` passes over a text that the draft (always token 7) predicts
    always, never, or (``run_length`` n) for n tokens and then misses once; each
    pass's timing is timing(B) * load(pass index). Returns each pass's batch size."""
    def truth(i):
        if not predictable:
            return 8
        return 8 if run_length and i % (run_length + 1) == run_length else 7

    sizes: list[int] = []
    out: list[int] = []
    for i in range(passes):
        cand = list(sources)
        which, k = policy.choose_among([cand], ALL)
        start = len(out)
        draft = [7] * len(cand)
        accepted = 0
        while accepted < k and draft[accepted] == truth(start + accepted):
            accepted += 1
        policy.observe(k + 1, timing(k + 1) * load(i), cand[:k], accepted)
        if accepted == k:      # the unverified tail is scored in hindsight, as the Drafter does
            policy.defer(start + k, draft[k:], cand[k:])
        out.extend(truth(start + j) for j in range(accepted + 1))
        policy.settle(out)
        sizes.append(k + 1)
    return sizes


def trapped_policy(**kw):
    p = table_policy(9, **kw)
    p.calibrate(TRAP)
    return p


def test_the_loaded_curve_clips_to_r_of_b_equal_b():
    p = trapped_policy()
    assert [p.relative_cost(b) for b in range(1, 10)] == [float(b) for b in range(1, 10)]


def test_without_exploration_the_trap_holds():
    p = trapped_policy(explore=False)
    assert set(run(p, 200)) == {1}
    assert p.relative_cost(9) == 9.0 and p.explored == 0


def test_exploration_escapes_the_trap_and_learns_the_quiet_curve():
    p = trapped_policy()
    sizes = run(p, 60)
    first = next(i for i, b in enumerate(sizes) if b > 1)
    assert first == EXPLORE_EVERY - 1          # the first exploration, after 8 passes
    # One exploration was enough; the scale then moved by more than DRIFT since the
    # one-token time was last taken, so one plain pass re-times it.
    assert p.explored == 2
    assert abs(p.relative_cost(9) - (1 + 0.3 * 8)) < 1e-9
    assert sum(b == 9 for b in sizes[first:]) >= len(sizes[first:]) - 2
    assert p.cost.corrected


def test_unpredictable_text_explores_nothing():
    p = trapped_policy()
    assert set(run(p, 500, predictable=False)) == {1}
    assert p.explored == 0


def test_exploration_backs_off_when_the_machine_really_is_dear():
    # The true curve really is r(B) = B: every exploration confirms it.
    p = trapped_policy()
    sizes = run(p, 600, timing=lambda b: T1 * b)
    explored = [i for i, b in enumerate(sizes) if b > 1]
    gaps = np.diff(explored).tolist()
    assert gaps[:3] == [16, 32, 64] and all(g == EXPLORE_MAX_INTERVAL for g in gaps[3:])
    assert len(explored) <= 4 + 600 // EXPLORE_MAX_INTERVAL
    assert p.explore_interval == EXPLORE_MAX_INTERVAL
    # Their cost: each explored pass costs r(9) = 9 and yields 9 tokens on this text,
    # so even here nothing is lost; the bound is the share of passes.
    assert len(explored) / len(sizes) <= 1 / EXPLORE_EVERY


def test_a_burst_of_load_mid_generation_does_not_pin_the_curve():
    # Quiet start (the right curve), then 30 passes whose batched timings are 6x (the
    # one-token reference stays the quiet one: the worst case), then quiet again.
    # The text: 6 predictable tokens, then a miss (acceptance about 0.86).
    p = table_policy(9)
    p.calibrate({b: 1 + 0.3 * (b - 1) for b in range(1, 10)})
    p.observe(1, T1, [], 0)
    burst = range(20, 50)
    sizes = run(p, 250, load=lambda i: 6.0 if i in burst else 1.0, run_length=6)
    assert min(sizes[10:20]) > 1
    assert 1 in sizes[20:50]                   # the burst did price drafting out
    assert max(p.relative_cost(b) / b for b in range(2, 10)) <= 1.0 + 1e-9   # never above r(B) = B
    after = sizes[50:]
    resumed = next(i for i, b in enumerate(after) if b > 1)
    assert resumed <= EXPLORE_MAX_INTERVAL
    assert sum(b == 1 for b in after[resumed:]) <= len(after[resumed:]) // 8   # drafting again
    assert abs(p.relative_cost(9) - (1 + 0.3 * 8)) < 0.1


def test_a_stale_one_token_time_is_refreshed():
    # A one-token time learned under load, then only batches: after REFRESH_AFTER
    # passes one plain pass re-times it and the next ratio uses the fresh value.
    m = CostModel(9, prior_slope=0.3)
    m.observe(1, 5 * T1)
    for _ in range(REFRESH_AFTER):
        m.observe(9, quiet(9))
    assert m.single_is_stale and abs(m.scale - 0.1) < 1e-9         # ratios against the loaded time: too cheap
    p = table_policy(9, prior_slope=0.3)
    p.cost = m
    p.acceptance = 0.99
    assert p.choose_among([[4] * 8], ALL) == (0, 0)      # the refresh pass
    p.observe(1, T1, [], 0)
    assert not m.single_is_stale and m.single_seconds == T1
    for _ in range(40):
        p.observe(9, quiet(9), [4] * 8, 8)
    assert abs(m.scale - 1.0) < 0.05


def test_scale_never_prices_a_batch_above_b_singles():
    m = CostModel(9, prior_slope=0.3)
    m.observe(1, T1)
    for _ in range(50):
        m.observe(5, 100 * T1)
    assert all(m.relative_cost(b) <= b + 1e-9 for b in range(1, 10))


def test_bad_timings_are_ignored():
    m = CostModel(9)
    m.observe(1, T1)
    for bad in (0.0, -1.0, math.nan, math.inf):
        m.observe(4, bad)
    assert m.scale == 1.0 and m.single_seconds == T1


def test_set_scale_reprices_every_batch_and_refuses_nonsense():
    m = CostModel(9, prior_slope=0.3)
    before = m.relative_costs()
    m.set_scale(2.0)
    after = m.relative_costs()
    assert after[1] == before[1] == 1.0
    assert all(after[b] - 1.0 == pytest.approx(2.0 * (before[b] - 1.0), abs=1e-3) for b in range(2, 10))
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="scale must be"):
            m.set_scale(bad)
    assert m.relative_costs() == after


def test_learn_cost_false_means_no_exploration():
    p = trapped_policy(learn_cost=False)
    assert set(run(p, 100)) == {1} and not p.explore


# One token on 1 thread, batches on 2 (llama-cpp-python's defaults on 2 cores):
# Qwen2.5-Coder-0.5B's measured curve on the Xeon.
SPLIT = {1: 1.0, 2: 0.82, 3: 1.05, 4: 1.29, 5: 1.46, 6: 1.73, 7: 1.93, 8: 2.15, 9: 2.38}


def split(batch: int) -> float:
    return T1 * SPLIT[batch]


def test_a_curve_with_batches_cheaper_than_one_token_is_priced_as_measured():
    m = CostModel(9)
    m.calibrate(SPLIT)
    assert m.batch_offset < 0 and m.relative_cost(1) == 1.0
    for b, r in SPLIT.items():
        assert m.relative_cost(b) == pytest.approx(r, abs=0.05)
    # The old fit, a line through r(1) = 1, priced r(2) at 1.07 and r(9) at 1.55
    # once corrected online; timings from the true curve now leave it where it is.
    m.observe(1, T1)
    for i in range(200):
        m.observe(2 + i % 8, split(2 + i % 8))
    assert m.scale == pytest.approx(1.0, abs=0.05)
    assert m.relative_cost(2) == pytest.approx(0.82, abs=0.03) and m.relative_cost(9) == pytest.approx(2.38, abs=0.1)


def test_batches_not_cheaper_than_one_token_keep_the_line_through_one():
    m = CostModel(9)
    m.calibrate({1: 1.0, 2: 1.3, 4: 1.9, 8: 3.1})
    assert m.batch_offset == 0.0
    assert [m.relative_cost(b) for b in (1, 2, 4, 8)] == pytest.approx([1.0, 1.3, 1.9, 3.1])


def test_a_cheap_batch_is_floored_and_never_above_b_singles():
    m = CostModel(9)
    m.calibrate({2: 0.01, 3: 50.0})
    assert m.relative_cost(2) >= MIN_BATCH_COST - 1e-9
    assert all(m.relative_cost(b) <= b + 1e-9 for b in range(1, 10))


def test_when_a_batch_is_cheaper_than_one_token_any_draft_is_verified():
    # A one-token draft at 10% acceptance: dearer than plain decoding on a line
    # through r(1) = 1, cheaper on the split-thread curve.
    p = table_policy(9, ngram_prior=0.1)
    p.calibrate({b: 1.0 + 0.3 * (b - 1) for b in range(1, 10)})
    assert p.acceptance_of(0) == 0.1 and p.choose_among([[0]], ALL)[1] == 0
    p = table_policy(9, ngram_prior=0.1)
    p.calibrate(SPLIT)
    assert p.choose_among([[0]], ALL)[1] == 1
