"""SuffixMatcher against a brute-force reference, plus examples and bad input."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramspec import SuffixMatcher
from tests.support.reference_suffix_matcher import ReferenceSuffixMatcher


def test_copies_the_continuation_of_the_longest_match():
    m = SuffixMatcher(anchor=1)
    # "5 1 2" occurs twice; the context ends "... 8 1 2" which shares "1 2" with both
    # but "8 1 2" only with the first: the longest match wins over the more recent one.
    m.update_batch([8, 1, 2, 3, 4, 5, 1, 2, 6, 7, 8, 1, 2])
    draft, match = m.predict(3)
    assert draft.tolist() == [3, 4, 5] and match == 3


def test_equal_matches_go_to_the_most_recent():
    m = SuffixMatcher(anchor=2)
    m.update_batch([1, 2, 3, 9, 1, 2, 4, 9, 1, 2])
    draft, match = m.predict(2)
    assert draft.tolist() == [4, 9] and match == 3


def test_a_repeating_run_copies_into_its_own_draft():
    m = SuffixMatcher(anchor=2)
    m.update_batch([5, 6, 5, 6])
    assert m.predict(5)[0].tolist() == [5, 6, 5, 6, 5]


def test_no_match_gives_no_draft():
    m = SuffixMatcher()
    m.update_batch([1, 2, 3, 4])
    draft, match = m.predict(4)
    assert draft.tolist() == [] and match == 0
    assert m.predict(0)[0].tolist() == []


def test_reset_forgets_everything():
    m = SuffixMatcher()
    m.update_batch([1, 2, 3, 1, 2])
    m.reset()
    assert len(m) == 0 and m.predict(3)[1] == 0
    m.update_batch([1, 2])
    assert m.predict(3)[1] == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=0, max_size=30), min_size=1, max_size=6),
       st.integers(1, 3), st.integers(1, 4), st.integers(3, 8), st.integers(0, 12))
def test_matches_reference(chunks, anchor, max_candidates, max_match, n):
    m = SuffixMatcher(anchor=anchor, max_candidates=max_candidates, max_match=max(max_match, anchor))
    ref = ReferenceSuffixMatcher(anchor, max_candidates, max(max_match, anchor))
    for chunk in chunks:
        if len(chunk) == 1:
            m.update(chunk[0])
        else:
            m.update_batch(np.array(chunk, dtype=np.int64))
        ref.update_batch(chunk)
        draft, match = m.predict(n)
        assert (draft.tolist(), match) == ref.predict(n)
    assert m.history.tolist() == ref.history


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=0, max_size=40), min_size=1, max_size=8),
       st.integers(1, 3), st.integers(1, 4), st.integers(3, 8), st.integers(1, 24), st.integers(0, 12))
def test_bounded_matches_reference(chunks, anchor, max_candidates, max_match, max_tokens, n):
    """With a small budget, eviction (keep the newest 3/4 of it) and the rebuilt index
    agree with the reference after every chunk."""
    max_match = max(max_match, anchor)
    m = SuffixMatcher(anchor=anchor, max_candidates=max_candidates, max_match=max_match, max_tokens=max_tokens)
    ref = ReferenceSuffixMatcher(anchor, max_candidates, max_match, max_tokens)
    seen = 0
    for chunk in chunks:
        if len(chunk) == 1:
            m.update(chunk[0])
        else:
            m.update_batch(chunk)
        ref.update_batch(chunk)
        seen += len(chunk)
        assert m.history.tolist() == ref.history and len(m) <= max_tokens
        assert (lambda d: (d[0].tolist(), d[1]))(m.predict(n)) == ref.predict(n)
    assert m.tokens_seen == seen


def test_eviction_forgets_the_oldest_text():
    m = SuffixMatcher(anchor=2, max_tokens=8)
    m.update_batch([1, 2, 3, 4, 5, 6, 7, 8])
    assert m.history.tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    m.update(9)  # over budget: keep the newest 8 - 8 // 4 = 6
    assert m.history.tolist() == [4, 5, 6, 7, 8, 9] and m.tokens_seen == 9
    m.update_batch([4, 5])  # "4 5" is still held
    assert m.predict(2)[0].tolist() == [6, 7]
    assert m.max_tokens == 8 and "max_tokens=8" in repr(m)
    m = SuffixMatcher(anchor=2, max_tokens=8)
    m.update_batch([1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2])  # "1 2" was evicted: no match
    assert m.history.tolist() == [4, 5, 6, 7, 8, 9, 1, 2] and m.predict(3)[1] == 0


def test_memory_follows_the_budget():
    assert SuffixMatcher().max_tokens == 1 << 20
    m = SuffixMatcher(max_tokens=10_000)
    m.update_batch(np.arange(50_000) % 977)
    assert len(m) <= 10_000 and m.tokens_seen == 50_000
    # tokens, one chain link each and a head table at most half full: under 24 bytes a budget token
    assert 0 < m.memory_bytes <= 24 * 10_000 + 64


@pytest.mark.parametrize("kwargs, match", [
    ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": 2**30 + 1}, "max_tokens"), ({"max_tokens": -5}, "max_tokens"),
    ({"anchor": 0}, "anchor"), ({"anchor": 17}, "anchor"), ({"max_candidates": 0}, "max_candidates"),
    ({"max_match": 1, "anchor": 2}, "max_match"), ({"max_match": 2**40}, "max_match"),
])
def test_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SuffixMatcher(**kwargs)


@pytest.mark.parametrize("kwargs", [{"anchor": 2.0}, {"anchor": True}, {"max_candidates": "8"},
                                    {"max_tokens": 1e6}, {"max_tokens": None}])
def test_bad_setting_types(kwargs):
    with pytest.raises(TypeError, match="must be an int"):
        SuffixMatcher(**kwargs)


@pytest.mark.parametrize("call, exc", [
    (lambda m: m.update(-1), ValueError), (lambda m: m.update(2**31), ValueError),
    (lambda m: m.update(1.5), TypeError), (lambda m: m.update(None), TypeError),
    (lambda m: m.update_batch([1, -2]), ValueError), (lambda m: m.update_batch("12"), TypeError),
    (lambda m: m.update_batch([[1, 2]]), ValueError), (lambda m: m.update_batch([1.0, 2.0]), TypeError),
    (lambda m: m.predict(-1), ValueError), (lambda m: m.predict(2**16 + 1), ValueError),
    (lambda m: m.predict(2.0), TypeError),
])
def test_bad_input_leaves_state_unchanged(call, exc):
    m = SuffixMatcher()
    m.update_batch([1, 2, 3, 1, 2])
    before = (m.history.tolist(), m.predict(4)[0].tolist())
    with pytest.raises(exc):
        call(m)
    assert (m.history.tolist(), m.predict(4)[0].tolist()) == before
