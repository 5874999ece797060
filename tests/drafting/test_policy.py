"""CostAwarePolicy: drafts when it pays, falls back to plain decoding when not."""
from __future__ import annotations

import numpy as np

from tests.support.policies import table_policy

ALL = np.ones(10, dtype=bool)


def choose(policy, sources, allowed):
    """How many tokens of one draft, with these sources, the policy verifies."""
    return policy.choose_among([list(np.asarray(sources).tolist())], allowed)[1]


def test_drafts_long_when_acceptance_is_high():
    p = table_policy(9)
    p.acceptance = 0.99
    assert choose(p, np.array([4] * 8, dtype=np.int32), ALL) == 8


def test_by_default_it_never_probes_blindly():
    # Refused drafts are learned from in hindsight, so a low-acceptance source is
    # never verified just to find out.
    p = table_policy(9)
    p.acceptance = 0.2
    orders = np.array([2, 2, 2], dtype=np.int32)
    assert {choose(p, orders, ALL) for _ in range(200)} == {0}


def test_no_draft_offered_means_plain():
    assert choose(table_policy(9), np.empty(0, dtype=np.int32), ALL) == 0


def test_respects_allowed_sizes():
    p = table_policy(9)
    p.acceptance = 0.99
    allowed = ALL.copy()
    allowed[5:] = False  # batches of 5+ tokens are not allowed
    assert choose(p, np.array([4] * 8, dtype=np.int32), allowed) == 3


def test_trusts_orders_separately():
    p = table_policy(9)
    acc = p.acceptance
    acc[2], acc[4] = 0.1, 0.95
    p.acceptance = acc
    assert choose(p, np.array([4, 4, 4, 2, 2], dtype=np.int32), ALL) == 3


def test_observe_learns_acceptance_and_cost():
    p = table_policy(9, alpha=0.5, prior_slope=0.4, ngram_prior=0.5)
    p.observe(4, 0.03, np.array([3, 3, 3], dtype=np.int32), accepted=1)
    assert p.acceptance[3] == 0.375  # a hit (0.5 -> 0.75), then a miss (-> 0.375), then nothing
    assert p.scale == 1.0 and p.relative_cost(3) == 1.8  # no single-token timing yet: nothing to compare with
    p.observe(1, 0.01, np.empty(0, dtype=np.int32), accepted=0)
    p.observe(5, 0.03, np.array([4, 4, 4, 4], dtype=np.int32), accepted=4)
    # Observed r(5) = 3: extra 2 against the prior's 1.6, a ratio of 1.25; the first
    # timing is taken whole, later ones are averaged in.
    assert abs(p.scale - 1.25) < 1e-12
    assert abs(p.relative_cost(3) - (1 + 1.25 * 0.8)) < 1e-12
    p.observe(5, 0.03, np.array([4, 4, 4, 4], dtype=np.int32), accepted=4)
    assert abs(p.scale - 1.25) < 1e-12
    assert p.acceptance[4] > 0.9


def test_calibrate_fits_a_robust_line():
    p = table_policy(9)
    # Per-size slopes 0.5, 0.5, 0.5, 0.5 and one spoiled timing (r(3) = 30, clipped to 3: slope 1).
    p.calibrate({1: 1.0, 2: 1.5, 3: 30.0, 4: 2.5, 5: 3.0, 6: float("nan"), 9: 5.0})
    assert [p.relative_cost(b) for b in range(1, 10)] == [1.0 + 0.5 * (b - 1) for b in range(1, 10)]
    p.calibrate({})  # nothing measured: the curve stays
    assert p.relative_cost(9) == 5.0


def test_calibrate_with_shape_keeps_a_bend_within_bounds():
    p = table_policy(17)
    bend = {b: 1.0 + 0.4 * (b - 1) for b in range(1, 8)} | dict.fromkeys(range(8, 18), 3.5)
    p.calibrate(bend, shape=True)
    costs = [p.relative_cost(b) for b in range(1, 18)]
    assert costs == sorted(costs) and costs[6] == 1.0 + 0.4 * 6
    assert costs[15] < 1.0 + 0.4 * 15 * 0.6      # 16 rows priced near the measured 3.5, not the line's 7


def test_a_few_real_timings_override_a_spoiled_calibration():
    p = table_policy(9)
    p.calibrate({b: float(b) for b in range(2, 10)})   # as if every batch cost B singles
    p.observe(1, 0.010, [], 0)
    for _ in range(3):
        p.observe(2, 0.013, [4], 1)                     # really r(2) = 1.3
    assert abs(p.relative_cost(2) - 1.3) < 1e-9


def test_a_cheap_large_batch_is_used():
    p = table_policy(17)
    p.acceptance = 0.95
    flat_top = {b: 1.0 + 0.4 * (b - 1) for b in range(1, 8)} | dict.fromkeys(range(8, 18), 3.5)
    p.calibrate(flat_top, shape=True)
    assert choose(p, np.array([4] * 16, dtype=np.int32), np.ones(18, dtype=bool)) == 16


def copy_source(match, continuing=False):
    """The policy-table index of a copy bucket in the default pipeline (n-gram, then copy)."""
    from ngramspec.proposers.copy import copy_source as bucket
    from tests.support.policies import COPY_BASE as COPY_SOURCE_BASE
    return COPY_SOURCE_BASE + bucket(match, continuing)


def test_picks_the_candidate_with_the_best_expected_gain():

    p = table_policy(9)
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
    from tests.support.policies import COPY_BASE as COPY_SOURCE_BASE
    from tests.support.policies import N_TABLE as N_SOURCES

    fresh = [copy_source(n) for n in (2, 3, 4, 8, 16, 32, 1000)]
    assert fresh == sorted(fresh) and fresh[0] == COPY_SOURCE_BASE and fresh[1] == fresh[0]
    cont = [copy_source(n, continuing=True) for n in (2, 1000)]
    assert set(cont).isdisjoint(fresh) and max(cont) == N_SOURCES - 1


def test_ngram_sources_bucket_the_share_of_the_context():
    from ngramspec.proposers.ngram import N_NGRAM_SOURCES, ngram_source, ngram_sources
    from tests.support.policies import COPY_BASE as COPY_SOURCE_BASE
    # seen once | under a half | under 0.8 | under 1 | always this token
    assert [ngram_source(c, t) for c, t in [(1, 1), (1, 3), (2, 5), (1, 2), (3, 4), (4, 5), (9, 10), (2, 2),
                                            (40, 40)]] == [0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert N_NGRAM_SOURCES == 5 and COPY_SOURCE_BASE == N_NGRAM_SOURCES
    assert ngram_sources(np.array([1, 3, 7]), np.array([1, 3, 9])) == [0, 4, 2]


def test_a_context_always_followed_by_one_token_is_trusted_apart_from_an_ambiguous_one():
    # The JSON-extraction case: the same n-gram order both closes a row (always the
    # same indentation follows) and opens a field value (anything follows).
    from ngramspec.proposers.ngram import ngram_source
    p = table_policy(9, alpha=0.2)
    sure, unsure = ngram_source(12, 12), ngram_source(1, 12)
    for _ in range(30):
        p.observe(2, 0.0, [sure], accepted=1)
        p.observe(2, 0.0, [unsure], accepted=0)
    assert choose(p, np.array([sure] * 4), ALL) == 4
    assert choose(p, np.array([unsure] * 4), ALL) == 0


def test_each_generation_starts_from_the_priors_unless_told_to_keep():
    for keep in (False, True):
        p = table_policy(9, keep_acceptance=keep)
        prior = p.acceptance
        for _ in range(20):
            p.observe(2, 0.0, [4], accepted=1)
        p.defer(0, [1, 2], [4, 4])
        learned = p.acceptance
        assert learned[4] > prior[4] + 0.5
        p.new_generation()
        assert p.acceptance.tolist() == (learned if keep else prior).tolist()
        p.settle([1, 2])  # the deferred draft was dropped: nothing to score
        assert p.acceptance.tolist() == (learned if keep else prior).tolist()


def test_sources_declared_kept_carry_their_acceptance_into_the_next_generation():
    p = table_policy(9)
    base = len(p.acceptance)
    p.declare_sources(base, [0.25, 0.25], keep=True)      # a memory's buckets
    p.declare_sources(base + 2, [0.3], keep=False)        # any other proposer's
    for _ in range(30):
        p.observe(3, 0.0, [base, base + 2], accepted=2)   # both sources right
        p.observe(2, 0.0, [4], accepted=1)                # an n-gram bucket right
    learned = p.acceptance
    assert learned[base] > 0.9 and learned[base + 2] > 0.9 and learned[4] > 0.9
    p.new_generation()
    after = p.acceptance
    assert after[base] == learned[base]                   # kept
    assert after[base + 1] == 0.25                        # kept, never observed: still its prior
    assert after[base + 2] == 0.3 and after[4] == table_policy(9).acceptance[4]   # back to the priors


def test_set_acceptance_becomes_the_prior():
    p = table_policy(9)
    p.acceptance = 0.9
    p.observe(2, 0.0, [4], accepted=0)
    p.new_generation()
    assert set(p.acceptance.tolist()) == {0.9}


def test_a_jagged_measured_curve_is_priced_as_measured():
    # Repacked weights: 4 rows cost less than 3, 16 less than 15.
    p = table_policy(17)
    jagged = {1: 1.0, 2: 1.9, 3: 2.4, 4: 2.2, 8: 3.6, 15: 7.0, 16: 6.2, 17: 7.3}
    p.calibrate(jagged, shape=True)
    assert p.relative_cost(4) < p.relative_cost(3) and p.relative_cost(16) < p.relative_cost(15)
    assert abs(p.relative_cost(6) - (2.2 + (3.6 - 2.2) / 2)) < 1e-9   # between measured sizes: interpolated
    # A draft of 3 (a batch of 4) is worth more than one of 2 where 4 rows are cheaper.
    p.acceptance = 0.8
    assert choose(p, np.array([4] * 3, dtype=np.int32), np.ones(18, dtype=bool)) == 3


def test_ngram_sources_of_a_long_draft_equal_the_scalar_rule():
    from hypothesis import given
    from hypothesis import strategies as st

    from ngramspec.proposers.ngram import ngram_source, ngram_sources

    pairs = st.lists(st.integers(0, 12).flatmap(lambda t: st.tuples(st.integers(0, t), st.just(t))), max_size=70)

    @given(pairs)
    def check(draft):
        counts = np.array([c for c, _ in draft], dtype=np.int32)
        totals = np.array([t for _, t in draft], dtype=np.int32)
        assert ngram_sources(counts, totals) == [ngram_source(c, t) for c, t in draft]

    check()
