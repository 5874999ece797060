"""Every bad input raises a clear Python exception and leaves the predictor as it was."""
from __future__ import annotations

import numpy as np
import pytest

from ngramspec import NGramPredictor
from tests.support.reference_predictor import ReferencePredictor


def primed() -> NGramPredictor:
    p = NGramPredictor(window=16)
    p.update_batch([1, 2, 3, 1, 2, 3, 1, 2])
    return p


def snapshot(p: NGramPredictor):
    return (p.history.tolist(), p.tokens_seen, p.table_sizes, p.table_entries, p.predict(8).tolist())


@pytest.mark.parametrize(
    "bad, exc, match",
    [
        (-1, ValueError, r"\[0, 2\*\*31\)"),
        (2**31, ValueError, r"\[0, 2\*\*31\)"),
        (2**80, ValueError, r"\[0, 2\*\*31\)"),
        (1.0, TypeError, "must be an int"),
        (np.float32(3), TypeError, "must be an int"),
        ("3", TypeError, "must be an int"),
        (None, TypeError, "must be an int"),
        (True, TypeError, "must be an int"),
    ],
)
def test_update_rejects(bad, exc, match):
    p = primed()
    before = snapshot(p)
    with pytest.raises(exc, match=match):
        p.update(bad)
    assert snapshot(p) == before


@pytest.mark.parametrize(
    "bad, exc, match",
    [
        ([1, 2, -1], ValueError, r"got -1 at index 2"),
        ([4, 2**31], ValueError, r"\[0, 2\*\*31\)"),
        (np.array([5, 2**31], dtype=np.int64), ValueError, r"\[0, 2\*\*31\)"),
        (np.array([5, 2**63], dtype=np.uint64), ValueError, r"\[0, 2\*\*31\)"),
        (np.array([5, -3], dtype=np.int8), ValueError, "got -3"),
        ([1.0, 2.0], TypeError, "integer dtype"),
        (np.array([1, 2], dtype=np.float32), TypeError, "integer dtype"),
        (np.array([], dtype=np.float64), TypeError, "integer dtype"),
        (np.array([True, False]), TypeError, "integer dtype"),
        (["a", "b"], TypeError, "integer dtype"),
        ([1, 2**80], TypeError, "integer dtype"),  # numpy makes an object array
        ("abc", TypeError, "not a string"),
        (np.array([[1, 2], [3, 4]]), ValueError, "1-D"),
        (np.array(5), ValueError, "1-D"),
        ([[1, 2], [3, 4]], ValueError, "1-D"),
        # Byte buffers read as one token per byte (text, not token ids): were accepted.
        (bytearray(b"abc"), TypeError, "not a string or bytes"),
        (memoryview(b"abc"), TypeError, "not a string or bytes"),
        # No order, or read only once: said "1-D, got an array with 0 dimensions".
        ((t for t in [1, 2]), TypeError, "got generator"),
        ({1, 2}, TypeError, "got set"),
        ({1: 2}, TypeError, "got dict"),
    ],
)
def test_update_batch_rejects(bad, exc, match):
    p = primed()
    before = snapshot(p)
    with pytest.raises(exc, match=match):
        p.update_batch(bad)
    assert snapshot(p) == before


@pytest.mark.parametrize(
    "bad, exc, match",
    [(-1, ValueError, ">= 0"), (1.5, TypeError, "must be an int"), (None, TypeError, "must be an int"),
     (2**17, ValueError, "at most 65536")],
)
@pytest.mark.parametrize("method", ["predict", "predict_with_orders", "predict_detailed"])
def test_predict_rejects(bad, exc, match, method):
    p = primed()
    before = snapshot(p)
    with pytest.raises(exc, match=match):
        getattr(p, method)(bad)
    assert snapshot(p) == before


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_order": 1}, "max_order must be between 2 and 8"),
        ({"max_order": 9}, "max_order must be between 2 and 8"),
        ({"max_order": 2**40}, "max_order"),
        ({"min_order": 1}, "min_order must be between 2"),
        ({"min_order": 5, "max_order": 4}, "min_order must be between 2"),
        ({"window": 3}, "window must be between max_order"),
        ({"max_order": 8, "window": 7}, "window must be between max_order"),
        ({"window": -1}, "window must be positive"),
        ({"window": 2**21}, "window must be between"),
        ({"window": 2**70}, "window is out of range: 1180591620717411303424"),
        ({"min_order": 2**64}, "min_order is out of range: 18446744073709551616"),
    ],
)
def test_constructor_rejects(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NGramPredictor(**kwargs)


def test_constructor_rejects_positional_and_float_arguments():
    with pytest.raises(TypeError):
        NGramPredictor(2, 4, 512)  # type: ignore[call-arg]  # keyword-only, so a swapped order cannot slip through
    with pytest.raises(TypeError):
        NGramPredictor(window=51.2)  # type: ignore[arg-type]  # deliberately wrong
    # Named, as the other classes name them (pybind11's own conversion said only
    # "incompatible constructor arguments", and took True as 1).
    for kwargs, name in (({"window": True}, "window"), ({"max_order": None}, "max_order"),
                         ({"min_order": np.float64(2)}, "min_order")):
        with pytest.raises(TypeError, match=f"{name} must be an int"):
            NGramPredictor(**kwargs)
    assert NGramPredictor(window=np.int64(64)).window == 64


def test_window_equal_to_max_order_is_allowed():
    p = NGramPredictor(max_order=8, window=8)
    p.update_batch(list(range(8)) * 3)
    assert len(p) == 8


def test_long_stream_matches_reference_after_many_wraps():
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, 4, size=3000).tolist()
    p = NGramPredictor(min_order=2, max_order=5, window=16)
    ref = ReferencePredictor(2, 5, 16)
    for i in range(0, len(tokens), 50):
        p.update_batch(tokens[i:i + 50])
        ref.update_batch(tokens[i:i + 50])
        assert p.predict(10).tolist() == ref.predict(10)
