"""The model-free limit (ngramspec.suite.oracle) against brute force on small cases."""
from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramspec.suite import oracle

LINEAR = [1.0 + 0.5 * (b - 1) for b in range(1, 9)]   # r(B) = 1 + 0.5 (B - 1)
ALL = [True] * 8


def brute_copy_lengths(prompt, output):
    seq = list(prompt) + list(output)
    out = []
    for i in range(len(output)):
        q = len(prompt) + i + 1          # first draft token; it follows seq[q - 1]
        best = 0
        for p in range(q - 1):           # an earlier occurrence of the token just emitted
            if seq[p] != seq[q - 1]:
                continue
            n = 0
            while q + n < len(seq) and seq[p + 1 + n] == seq[q + n]:
                n += 1
            best = max(best, n)
        out.append(best)
    return out


def brute_cost(draftable, cost, allowed):
    """Every way to cut the output into passes, by exhaustive search."""
    n = len(draftable)
    best = math.inf
    # A schedule is the list of draft lengths k per pass; each pass advances k + 1.
    for cuts in itertools.product([0, 1], repeat=max(0, n - 2)):
        # cuts[j] == 1: a pass starts at output index j + 1 (index 0 always starts one).
        starts = [0] + [j + 1 for j, c in enumerate(cuts) if c] + [n - 1]
        total, ok = 0.0, True
        for a, b in zip(starts, starts[1:]):
            k = b - a - 1
            if k > draftable[a] or not allowed[k]:
                ok = False
                break
            total += cost[k]
        if ok:
            best = min(best, total)
    return best


def test_copy_lengths_example():
    # prompt "a b c", output "x a b c a": x never occurred before, so nothing may be
    # drafted after it; after "a" the copy "b c" runs 2 tokens and breaks where the
    # source goes on with "x" and the output with "a".
    assert oracle.copy_lengths([1, 2, 3], [9, 1, 2, 3, 1]) == [0, 2, 1, 0, 0]
    # A run copies itself as it grows (LZ77-style overlap), as a chained draft would.
    assert oracle.copy_lengths([7], [7, 7, 7, 7]) == [3, 2, 1, 0]


def test_limits_on_an_uncopyable_text_are_one_and_the_perfect_ceiling():
    out = list(range(10, 30))
    lim = oracle.model_free_limit([1, 2, 3], out, LINEAR, ALL)
    assert lim.speedup == 1.0 and lim.passes == 19
    perfect = oracle.perfect_limit(len(out), LINEAR, ALL)
    # Best per-token price under r(B) = 1 + 0.5 (B - 1) is the largest batch, 8 tokens for 4.5.
    assert perfect.speedup > 1.5 and perfect.tokens_per_pass > 4


def test_disallowed_sizes_are_never_used():
    out = [5] * 30
    only_small = [True, True, True] + [False] * 5     # B <= 3
    lim = oracle.model_free_limit([5], out, LINEAR, only_small)
    assert lim.tokens_per_pass <= 3
    assert lim.speedup <= oracle.model_free_limit([5], out, LINEAR, ALL).speedup


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=0, max_size=6), st.lists(st.integers(0, 3), min_size=1, max_size=9),
       st.lists(st.booleans(), min_size=7, max_size=7))
def test_copy_lengths_and_schedule_match_brute_force(prompt, output, allowed_tail):
    lengths = oracle.copy_lengths(prompt, output)
    assert lengths == brute_copy_lengths(prompt, output)
    allowed = [True] + allowed_tail
    lim = oracle.best_schedule(lengths, LINEAR, allowed)
    assert math.isclose(lim.cost, brute_cost(lengths, LINEAR, allowed) if len(output) > 1 else 0.0)
    perfect = oracle.perfect_limit(len(output), LINEAR, allowed)
    assert 1.0 <= lim.speedup <= perfect.speedup + 1e-12


def test_one_token_pass_must_be_allowed():
    import pytest

    with pytest.raises(ValueError, match="one-token pass"):
        oracle.best_schedule([1, 1, 1], LINEAR, [False] + [True] * 7)


def test_a_pass_priced_by_position_is_what_the_schedule_pays():
    # Passes cost 1 per token at the start and get dearer per extra draft token with
    # the context: the oracle must price each pass where it happens, and plain
    # decoding by the same clock.
    out = [5] * 12
    def at(i, b):
        return (1.0 + 0.01 * i) * (1.0 + (0.2 + 0.1 * i) * (b - 1))
    lim = oracle.model_free_limit([5], out, LINEAR, ALL, cost_at=at)
    plain = sum(at(i, 1) for i in range(len(out) - 1))
    assert lim.plain_cost == pytest.approx(plain)
    assert lim.speedup == pytest.approx(plain / lim.cost)
    assert lim.cost == pytest.approx(brute_cost_at(oracle.copy_lengths([5], out), at, ALL))
    # The same prices at every position reduce to the r(B) form.
    flat = oracle.model_free_limit([5], out, LINEAR, ALL, cost_at=lambda i, b: LINEAR[b - 1])
    assert flat.speedup == pytest.approx(oracle.model_free_limit([5], out, LINEAR, ALL).speedup)


def brute_cost_at(draftable, at, allowed):
    n, best = len(draftable), math.inf
    for cuts in itertools.product([0, 1], repeat=max(0, n - 2)):
        starts = [0] + [j + 1 for j, c in enumerate(cuts) if c] + [n - 1]
        total = 0.0
        for a, b in zip(starts, starts[1:]):
            k = b - a - 1
            if k > draftable[a] or k >= len(allowed) or not allowed[k]:
                break
            total += at(a, k + 1)
        else:
            best = min(best, total)
    return best


def test_limits_priced_two_ways_cannot_be_combined():
    by_pass = oracle.model_free_limit([1], [1, 1, 1], LINEAR, ALL)
    by_position = oracle.model_free_limit([1], [1, 1, 1], LINEAR, ALL, cost_at=lambda i, b: LINEAR[b - 1])
    assert by_position.plain_cost is not None
    assert oracle.combine([by_position, by_position]).plain_cost == pytest.approx(2 * by_position.plain_cost)
    with pytest.raises(ValueError, match="cannot combine"):
        oracle.combine([by_pass, by_position])
