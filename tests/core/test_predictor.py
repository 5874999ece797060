"""NGramPredictor: behaviour, the akunu example, and agreement with the reference."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramspec import NGramPredictor
from tests.support.reference_predictor import ReferencePredictor


def words_to_ids(words: list[str]) -> tuple[list[int], dict[int, str]]:
    vocab: dict[str, int] = {}
    ids = [vocab.setdefault(w, len(vocab)) for w in words]
    return ids, {i: w for w, i in vocab.items()}


def test_akunu_worked_example_chains_the_draft():
    # "the cat sat" is followed by "on" twice and by "down" once, so the
    # 4-gram context wins and the chain follows the first sentence.
    text = "the cat sat on the mat . the cat sat down . the cat sat on the mat . the cat sat"
    ids, names = words_to_ids(text.split())
    p = NGramPredictor()
    p.update_batch(ids)
    assert [names[int(t)] for t in p.predict(4)] == ["on", "the", "mat", "."]
    assert p.predict_with_orders(4)[1].tolist() == [4, 4, 4, 4]
    # "the cat sat" -> "on" twice out of three; then "cat sat on" -> "the" every time.
    _, _, counts, totals = p.predict_detailed(4)
    assert counts.tolist() == [2, 2, 2, 2] and totals.tolist() == [3, 2, 2, 2]
    assert p.predict(4).dtype == np.int32


def test_most_frequent_then_most_recent_tie_break():
    p = NGramPredictor(min_order=2, max_order=2)
    p.update_batch([1, 5, 1, 6, 1, 6, 1])  # after 1: 6 twice, 5 once
    assert p.predict(1).tolist() == [6]
    p = NGramPredictor(min_order=2, max_order=2)
    p.update_batch([1, 5, 1, 6, 1])  # after 1: 5 once, 6 once, 6 later
    assert p.predict(1).tolist() == [6]
    p.update_batch([5, 1])  # now 5 is the latest
    assert p.predict(1).tolist() == [5]


def test_longest_context_wins_over_frequency():
    p = NGramPredictor(min_order=2, max_order=3)
    # bigram "2 -> 9" is frequent, but trigram "1 2 -> 3" is the longer match
    p.update_batch([2, 9, 2, 9, 2, 9, 1, 2, 3, 7, 1, 2])
    assert p.predict(1).tolist() == [3]


def test_stops_when_nothing_matches():
    p = NGramPredictor()
    assert p.predict(5).size == 0
    p.update_batch([1, 2, 3])
    assert p.predict(5).size == 0  # 3 was never followed by anything
    assert p.predict(0).size == 0


def test_window_forgets_old_ngrams():
    p = NGramPredictor(min_order=2, max_order=2, window=4)
    p.update_batch([7, 8, 7])
    assert p.predict(1).tolist() == [8]
    p.update_batch([1, 2, 3, 7])  # the pair (7, 8) has left the window
    assert p.predict(1).size == 0
    assert p.history.tolist() == [1, 2, 3, 7]
    assert len(p) == 4
    assert p.tokens_seen == 7


def test_history_is_a_copy_and_reset_clears():
    p = NGramPredictor()
    p.update_batch(np.arange(10, dtype=np.int64))
    h = p.history
    h[:] = 0
    assert p.history.tolist() == list(range(10))
    p.reset()
    assert len(p) == 0 and p.tokens_seen == 0
    assert p.history.size == 0
    assert all(v == 0 for v in p.table_sizes.values())
    assert p.predict(3).size == 0


def test_repr_and_introspection():
    p = NGramPredictor(min_order=3, max_order=5, window=64)
    p.update_batch([1, 2, 3, 1, 2, 3])
    assert repr(p) == "NGramPredictor(min_order=3, max_order=5, window=64, history=6 tokens)"
    assert (p.min_order, p.max_order, p.window) == (3, 5, 64)
    assert set(p.table_sizes) == {3, 4, 5}
    assert p.table_sizes == {3: 3, 4: 3, 5: 2}
    assert p.table_entries == {3: 3, 4: 3, 5: 2}
    p.update(4)
    assert p.table_entries[3] == 4 and p.table_sizes[3] == 3
    assert p.memory_bytes > 0


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64])
def test_update_batch_accepts_every_integer_dtype(dtype):
    p = NGramPredictor()
    p.update_batch(np.array([1, 2, 3, 1, 2], dtype=dtype))
    assert p.predict(2).tolist() == [3, 1]


def test_update_batch_accepts_lists_tuples_and_strided_arrays():
    p = NGramPredictor()
    p.update_batch((1, 2))
    p.update_batch([])
    p.update_batch(np.array([[3, 0], [1, 0], [2, 0]])[:, 0])  # non-contiguous
    assert p.history.tolist() == [1, 2, 3, 1, 2]
    p.update(np.int64(3))
    assert p.history.tolist()[-1] == 3


def test_single_updates_match_batch():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 6, size=300)
    a, b = NGramPredictor(window=32), NGramPredictor(window=32)
    a.update_batch(tokens)
    for t in tokens:
        b.update(int(t))
    assert a.history.tolist() == b.history.tolist()
    assert a.predict(16).tolist() == b.predict(16).tolist()
    assert a.table_entries == b.table_entries


def test_largest_token_id():
    p = NGramPredictor()
    big = 2**31 - 1
    p.update_batch([big, 0, big, 0, big])
    assert p.predict(2).tolist() == [0, big]


@settings(max_examples=300, deadline=None)
@given(
    orders=st.tuples(st.integers(2, 5), st.integers(0, 3)),
    window=st.integers(2, 24),
    tokens=st.lists(st.integers(0, 5), max_size=200),
    chunks=st.lists(st.integers(1, 40), min_size=1, max_size=8),
    n=st.integers(0, 12),
)
def test_matches_reference(orders, window, tokens, chunks, n):
    min_order = orders[0]
    max_order = min_order + orders[1]
    window = max(window, max_order)
    ours = NGramPredictor(min_order=min_order, max_order=max_order, window=window)
    ref = ReferencePredictor(min_order, max_order, window)
    # Feed in chunks of varying size (single updates and batches), checking drafts
    # along the way: with a window of at most 24 and up to 200 tokens the window
    # wraps many times.
    i, c = 0, 0
    while i < len(tokens):
        size = chunks[c % len(chunks)]
        piece = tokens[i:i + size]
        if size == 1:
            ours.update(piece[0])
        else:
            ours.update_batch(piece)
        ref.update_batch(piece)
        i += size
        c += 1
        assert ours.predict(n).tolist() == ref.predict(n)
    assert ours.history.tolist() == ref.history
    assert ours.table_sizes == ref.table_sizes()
    assert ours.table_entries == ref.table_entries()
    draft, used = ours.predict_with_orders(n)
    ref_draft, ref_used = ref.predict_with_orders(n)
    assert (draft.tolist(), used.tolist()) == (ref_draft, ref_used)
    assert [a.tolist() for a in ours.predict_detailed(n)] == list(ref.predict_detailed(n))


def test_memory_is_bounded_after_a_million_updates():
    window = 512
    p = NGramPredictor(window=window)
    start = p.memory_bytes
    rng = np.random.default_rng(1)
    for _ in range(10):
        p.update_batch(rng.integers(0, 50, size=100_000))
    assert p.tokens_seen == 1_000_000
    # Documented bound: fixed at construction. Per order, 16 bytes per hash slot
    # (next power of two >= 2*window) and 24 bytes per continuation node (window),
    # plus a power-of-two ring of at least window+1 int32s.
    slots = 1 << (2 * window - 1).bit_length()
    ring = 1 << window.bit_length()
    bound = 3 * (16 * slots + 24 * window) + 4 * ring + 1024
    assert p.memory_bytes == start
    assert p.memory_bytes <= bound
    assert len(p) == window
    assert sum(p.table_entries.values()) <= 3 * window
