"""CostAwarePolicy: drafts when it pays, falls back to plain decoding when not."""
from __future__ import annotations

import numpy as np

from ngramspec.policy import CostAwarePolicy

ALL = np.ones(10, dtype=bool)


def test_drafts_long_when_acceptance_is_high():
    p = CostAwarePolicy(9)
    p.acceptance = 0.99
    assert p.choose(np.array([4] * 8, dtype=np.int32), ALL) == 8


def test_refuses_when_acceptance_is_low_then_probes():
    p = CostAwarePolicy(9, probe_every=4)
    p.acceptance = 0.2
    orders = np.array([2, 2, 2], dtype=np.int32)
    assert [p.choose(orders, ALL) for _ in range(4)] == [0, 0, 0, 1]


def test_no_draft_offered_means_plain():
    assert CostAwarePolicy(9).choose(np.empty(0, dtype=np.int32), ALL) == 0


def test_respects_allowed_sizes():
    p = CostAwarePolicy(9)
    p.acceptance = 0.99
    allowed = ALL.copy()
    allowed[5:] = False  # batches of 5+ tokens are not allowed
    assert p.choose(np.array([4] * 8, dtype=np.int32), allowed) == 3


def test_trusts_orders_separately():
    p = CostAwarePolicy(9)
    acc = p.acceptance
    acc[2], acc[4] = 0.1, 0.95
    p.acceptance = acc
    assert p.choose(np.array([4, 4, 4, 2, 2], dtype=np.int32), ALL) == 3


def test_observe_learns_acceptance_and_cost():
    p = CostAwarePolicy(9, alpha=0.5, prior_slope=0.4, prior_accept=0.5)
    p.observe(4, 0.03, np.array([3, 3, 3], dtype=np.int32), accepted=1)
    assert p.acceptance[3] == 0.375  # a hit (0.5 -> 0.75), then a miss (-> 0.375), then nothing
    assert p.slope == 0.4  # no single-token timing yet, so nothing to compare with
    p.observe(1, 0.01, np.empty(0, dtype=np.int32), accepted=0)
    p.observe(5, 0.03, np.array([4, 4, 4, 4], dtype=np.int32), accepted=4)
    assert abs(p.slope - (0.4 + 0.5 * (0.5 - 0.4))) < 1e-9  # observed slope (3 - 1) / 4
    assert abs(p.relative_cost(3) - (1 + 2 * p.slope)) < 1e-12
    assert p.acceptance[4] > 0.9


def test_calibrate_fits_the_measured_slope():
    p = CostAwarePolicy(9)
    p.calibrate({1: 1.0, 2: 1.5, 3: 2.0, 5: 3.0, 6: float("nan")})
    assert abs(p.slope - 0.5) < 1e-12
    p.calibrate({})  # nothing measured: the slope stays
    assert abs(p.slope - 0.5) < 1e-12


def test_picks_the_candidate_with_the_best_expected_gain():
    from ngramspec.policy import copy_source

    p = CostAwarePolicy(9)
    acc = p.acceptance
    acc[2] = 0.3
    acc[copy_source(40)] = 0.97
    p.acceptance = acc
    ngram, copy = [2, 2, 2], [copy_source(40)] * 8
    assert p.choose_among([ngram, copy], ALL) == (1, 8)
    # A weak copy loses to a trusted n-gram draft.
    acc[copy_source(2)], acc[4] = 0.1, 0.95
    p.acceptance = acc
    assert p.choose_among([[4, 4, 4], [copy_source(2)] * 8], ALL) == (0, 3)


def test_copy_sources_grow_with_the_match_and_split_on_continuing():
    from ngramspec.policy import COPY_SOURCE_BASE, N_SOURCES, copy_source

    fresh = [copy_source(n) for n in (2, 3, 4, 8, 16, 32, 1000)]
    assert fresh == sorted(fresh) and fresh[0] == COPY_SOURCE_BASE and fresh[1] == fresh[0]
    cont = [copy_source(n, continuing=True) for n in (2, 1000)]
    assert set(cont).isdisjoint(fresh) and max(cont) == N_SOURCES - 1
