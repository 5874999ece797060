"""check_batch_invariance, and exact mode's refusal of non-invariant batch sizes."""
from __future__ import annotations

import warnings

import llama_cpp
import pytest

from ngramspec import InvarianceReport, SpeculativeEngine, check_batch_invariance
from ngramspec.invariance import BatchSizeResult
from prompts import PROMPTS
from plain import plain_tokens


def test_test_build_is_batch_invariant(invariance):
    assert sorted(invariance.results) == list(range(1, 18))
    assert invariance.invariant_sizes == list(range(1, 18))
    assert invariance.max_invariant_batch == 17
    for r in invariance.results.values():
        assert r.rows_differing == 0 and r.max_abs_diff == 0.0
    assert "batch  invariant" in str(invariance)


def fake_report(non_invariant: set[int], up_to: int = 17) -> InvarianceReport:
    return InvarianceReport({b: BatchSizeResult(b, b not in non_invariant, int(b in non_invariant), 0.1 * (b in non_invariant))
                             for b in range(1, up_to + 1)})


def test_report_summaries():
    r = fake_report({4, 9})
    assert r.max_invariant_batch == 3
    assert 4 not in r.invariant_sizes and 5 in r.invariant_sizes


def test_exact_mode_never_uses_a_non_invariant_size(llm):
    bad = {3, 4, 5, 6}
    eng = SpeculativeEngine(llm, invariance=fake_report(bad), adaptive=False)
    llm.reset()
    gen = eng.generate(PROMPTS["repetitive"], max_tokens=64)
    used = set(gen.stats.verify_batch_sizes)
    assert not used & bad
    assert used - {1}, "allowed sizes above 1 should still be used"
    assert gen.tokens == plain_tokens(llm, PROMPTS["repetitive"], 64)


def test_exact_mode_decodes_plainly_when_nothing_is_invariant(llm):
    eng = SpeculativeEngine(llm, invariance=fake_report(set(range(2, 18))))
    llm.reset()
    with pytest.warns(RuntimeWarning, match="no verify batch size above 1 is bit-exact"):
        gen = eng.generate(PROMPTS["repetitive"], max_tokens=16)
    assert set(gen.stats.verify_batch_sizes) == {1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per engine, not per call
        eng.generate(PROMPTS["repetitive"], max_tokens=4)


def test_inexact_mode_ignores_the_report(llm):
    eng = SpeculativeEngine(llm, exact=False, invariance=fake_report(set(range(2, 18))), adaptive=False)
    llm.reset()
    gen = eng.generate(PROMPTS["repetitive"], max_tokens=32)
    assert max(gen.stats.verify_batch_sizes) > 1


def test_engine_measures_invariance_itself_when_not_given_a_report(smollm2_path):
    model = llama_cpp.Llama(smollm2_path, n_ctx=256, seed=0, verbose=False)
    try:
        eng = SpeculativeEngine(model, max_draft=4, invariance_cache=False)
        gen = eng.generate(PROMPTS["repetitive"], max_tokens=24)
        assert eng.invariance is not None and sorted(eng.invariance.results) == [1, 2, 3, 4, 5]
        assert gen.tokens == plain_tokens(model, PROMPTS["repetitive"], 24)
    finally:
        model.close()


@pytest.mark.parametrize("max_batch, exc", [(0, ValueError), (513, ValueError), (2.5, TypeError), (True, TypeError)])
def test_check_rejects_bad_max_batch(llm, max_batch, exc):
    with pytest.raises(exc):
        check_batch_invariance(llm, max_batch=max_batch)


def test_check_rejects_closed_llama(smollm2_path):
    model = llama_cpp.Llama(smollm2_path, n_ctx=64, seed=0, verbose=False)
    model.close()
    with pytest.raises(ValueError, match="closed"):
        check_batch_invariance(model, max_batch=4)
