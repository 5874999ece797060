"""CorpusMatcher against a brute-force reference, plus examples, threads and bad input."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramspec._core import CorpusMatcher
from tests.support.reference_corpus_matcher import ReferenceCorpusMatcher


def test_copies_what_followed_the_longest_match():
    c = CorpusMatcher(anchor=2)
    c.add([8, 1, 2, 3, 4, 5])
    c.add([9, 1, 2, 6, 7])
    # Both documents hold "1 2"; the context ends "8 1 2", which only the first shares.
    draft, match = c.predict([0, 8, 1, 2], 3)
    assert draft.tolist() == [3, 4, 5] and match == 3
    # Equal matches go to the newest document.
    draft, match = c.predict([1, 2], 5)
    assert draft.tolist() == [6, 7] and match == 2


def test_documents_are_never_spliced():
    c = CorpusMatcher(anchor=2)
    c.add([1, 2, 3])
    c.add([4, 5, 6])
    # The copy stops at the end of its document ...
    assert c.predict([1, 2], 8)[0].tolist() == [3]
    # ... a match at a document's end has nothing to copy ...
    assert c.predict([2, 3], 4)[1] == 0
    # ... and an anchor across two documents is not one.
    assert c.predict([3, 4], 4)[1] == 0
    # The backward match stops at the start of its document.
    draft, match = c.predict([3, 4, 5], 4)
    assert draft.tolist() == [6] and match == 2
    assert c.corpus.tolist() == [1, 2, 3, -1, 4, 5, 6, -1]


def test_no_match_and_empty_cases():
    c = CorpusMatcher(anchor=3)
    assert c.predict([1, 2, 3], 4)[1] == 0  # empty corpus
    c.add([])
    assert len(c) == 0
    c.add([1, 2, 3, 4])
    assert c.predict([1, 2], 4)[1] == 0  # context shorter than the anchor
    assert c.predict([1, 2, 3], 0)[0].tolist() == []
    assert c.predict([1, 2, 3], 4)[0].tolist() == [4]
    c.clear()
    assert len(c) == 0 and c.predict([1, 2, 3], 4)[1] == 0


def test_eviction_keeps_the_newest_three_quarters():
    c = CorpusMatcher(anchor=1, max_tokens=8)
    c.add([1, 2, 3])        # 1 2 3 |
    c.add([4, 5, 6])        # 1 2 3 | 4 5 6 |
    c.add([7])              # at 7, 9 > 8: keep the newest 6, then the boundary: | 4 5 6 | 7 |
    assert c.corpus.tolist() == [-1, 4, 5, 6, -1, 7, -1]
    assert c.predict([1], 2)[1] == 0 and c.predict([4], 2)[0].tolist() == [5, 6]
    assert c.tokens_added == 7 and c.max_tokens == 8


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=0, max_size=25), min_size=1, max_size=8),
       st.lists(st.integers(0, 4), min_size=0, max_size=12),
       st.integers(1, 3), st.integers(1, 4), st.integers(3, 8), st.integers(2, 40), st.integers(0, 10))
def test_matches_reference(documents, context, anchor, max_candidates, max_match, max_tokens, n):
    max_match = max(max_match, anchor)
    c = CorpusMatcher(anchor=anchor, max_candidates=max_candidates, max_match=max_match, max_tokens=max_tokens)
    ref = ReferenceCorpusMatcher(anchor, max_candidates, max_match, max_tokens)
    for doc in documents:
        c.add(np.array(doc, dtype=np.int64))
        ref.add(doc)
        assert c.corpus.tolist() == ref.corpus and len(c) <= max_tokens
        # The context: a given one, and the tail of a stored document (a sure match).
        for ctx in (context, doc[: len(doc) // 2 + 1]):
            draft, match = c.predict(ctx, n)
            assert (draft.tolist(), match) == ref.predict(ctx, n)
            draft, match, at = c.predict_at(ctx, n)
            assert (draft.tolist(), match, at) == ref.predict_at(ctx, n)
            for guess in (draft.tolist(), context[:n]):   # its own draft, and any tokens
                agree, seen = c.support(ctx, guess)
                assert (agree.tolist(), seen.tolist()) == ref.support(ctx, guess)
            # Following from every stored place (and one past the end), with small windows.
            assert c.dropped == ref.dropped
            for start in range(ref.dropped, ref.dropped + len(ref.corpus) + 1, 3):
                for window in (0, 1, 4):
                    draft, match, at = c.follow(start, window, ctx, n)
                    assert (draft.tolist(), match, at) == ref.follow(start, window, ctx, n)


def test_follow_drafts_near_a_remembered_place():
    c = CorpusMatcher(anchor=3)
    c.add([5, 1, 2, 3, 9, 4, 4, 7, 8])   # absolute positions 0-8, its end at 9
    c.add([1, 2, 3, 6])                  # 10-13, its end at 14
    draft, match, at = c.predict_at([0, 1, 2, 3], 4)
    assert (draft.tolist(), match, at) == ([6], 3, 13)   # equal matches: the newest document
    # From position 4, one token of context matches at 5 and 6: the nearest wins ...
    draft, match, at = c.follow(4, 8, [0, 4], 4)
    assert (draft.tolist(), match, at) == ([4, 7, 8], 1, 6)
    # ... a longer backward match wins over a nearer one.
    assert c.follow(4, 8, [9, 4, 4], 4)[1:] == (3, 7)
    # The window bounds the search, and it never leaves the document.
    assert c.follow(4, 2, [7], 4)[1] == 0
    assert c.follow(7, 8, [6], 4)[1] == 0
    # A place past the end, or dropped, has nothing.
    assert c.follow(15, 8, [1], 4)[1] == 0
    c.clear()
    assert c.dropped == 15 and c.follow(4, 8, [4], 4)[1] == 0
    c.add([4, 5])
    assert c.follow(15, 8, [4], 4)[0].tolist() == [5]   # positions go on counting after a clear


def test_support_counts_the_stored_continuations_that_agree():
    c = CorpusMatcher(anchor=2)
    c.add([1, 2, 3, 4, 5])
    c.add([1, 2, 3, 9])
    c.add([7, 2, 3, 4, 6])
    agree, seen = c.support([2, 3], [4, 5, 8])
    # Three documents go on after "2 3": two with 4, and of those one with 5, none with 8.
    assert agree.tolist() == [2, 1, 0] and seen.tolist() == [3, 2, 1]
    assert c.support([2, 3], [])[0].tolist() == []
    assert c.support([5, 5], [4])[1].tolist() == [0]   # no candidate at all
    with pytest.raises(ValueError):
        c.support([2, 3], [-4])


def test_follow_rejects_bad_places():
    c = CorpusMatcher()
    c.add([1, 2, 3])
    for args, err in (((-1, 4, [1], 2), ValueError), ((0, -1, [1], 2), ValueError),
                      (("x", 4, [1], 2), TypeError), ((0, 4, [-3], 2), ValueError), ((0, 4, [1], -1), ValueError)):
        with pytest.raises(err):
            c.follow(*args)


def test_large_corpus_is_bounded_and_fast_enough():
    rng = np.random.default_rng(0)
    c = CorpusMatcher(max_tokens=100_000)
    for _ in range(40):
        c.add(rng.integers(0, 50_000, size=10_000))
    assert len(c) <= 100_000 and c.tokens_added == 400_000
    assert c.memory_bytes < 24 * 100_001 + 4096
    stored = c.corpus
    doc = stored[-5001:-1]  # inside the newest document
    draft, match = c.predict(doc[:100], 8)
    assert draft.tolist() == doc[100:108].tolist() and match == 64


def test_shared_between_threads():
    c = CorpusMatcher(anchor=2, max_tokens=5_000)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(300):
                c.add([i % 7, 1, 2, 3, 4, 5])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader() -> None:
        try:
            for _ in range(2_000):
                draft, match = c.predict([9, 1, 2], 3)
                assert match in (0, 2) and draft.tolist() in ([], [3, 4, 5])
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("kwargs, match", [
    ({"anchor": 0}, "anchor"), ({"anchor": 17}, "anchor"), ({"max_candidates": 0}, "max_candidates"),
    ({"max_candidates": 2**21}, "max_candidates"), ({"max_match": 2, "anchor": 3}, "max_match"),
    ({"max_match": 2**40}, "max_match"), ({"max_tokens": 1}, "max_tokens"), ({"max_tokens": 2**30 + 1}, "max_tokens"),
])
def test_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CorpusMatcher(**kwargs)


@pytest.mark.parametrize("kwargs", [{"anchor": 2.0}, {"anchor": True}, {"max_candidates": "8"},
                                    {"max_match": None}, {"max_tokens": 1e6}])
def test_bad_setting_types(kwargs):
    with pytest.raises(TypeError, match="must be an int"):
        CorpusMatcher(**kwargs)


@pytest.mark.parametrize("call, exc", [
    (lambda c: c.add([1, -2]), ValueError), (lambda c: c.add([2**31]), ValueError),
    (lambda c: c.add("12"), TypeError), (lambda c: c.add([[1, 2]]), ValueError),
    (lambda c: c.add([1.0, 2.0]), TypeError), (lambda c: c.add(None), Exception),
    (lambda c: c.predict([1, -1], 2), ValueError), (lambda c: c.predict("12", 2), TypeError),
    (lambda c: c.predict([[1, 2]], 2), ValueError), (lambda c: c.predict(np.array([1.5]), 2), TypeError),
    (lambda c: c.predict([1, 2], -1), ValueError), (lambda c: c.predict([1, 2], 2**16 + 1), ValueError),
    (lambda c: c.predict([1, 2], 2.0), TypeError), (lambda c: c.predict([1, 2], None), TypeError),
])
def test_bad_input_leaves_state_unchanged(call, exc):
    c = CorpusMatcher(anchor=2)
    c.add([1, 2, 3, 1, 2, 4])
    before = (c.corpus.tolist(), c.predict([1, 2], 4)[0].tolist())
    with pytest.raises(exc):
        call(c)
    assert (c.corpus.tolist(), c.predict([1, 2], 4)[0].tolist()) == before
