"""check_batch_invariance, and exact mode's refusal of non-invariant batch sizes."""
from __future__ import annotations

import warnings

import llama_cpp
import pytest

from ngramspec import InvarianceReport, SpeculativeEngine, _llama, check_batch_invariance
from ngramspec.calibration import invariance_cache
from ngramspec.calibration.invariance import (
    MAX_CHECK_BATCH,
    MAX_CHECK_DEPTH,
    BatchSizeResult,
    check_depths,
    check_sizes,
)
from tests.support.plain import plain_tokens
from tests.support.prompts import PROMPTS


def test_test_build_is_batch_invariant(invariance):
    assert sorted(invariance.results) == list(range(1, 18))
    assert invariance.invariant_sizes == list(range(1, 18))
    assert invariance.max_invariant_batch == 17
    for r in invariance.results.values():
        assert r.rows_differing == 0 and r.max_abs_diff == 0.0
    assert "batch  invariant" in str(invariance)


def fake_report(non_invariant: set[int], up_to: int = 17) -> InvarianceReport:
    return InvarianceReport({b: BatchSizeResult(b, b not in non_invariant, int(b in non_invariant),
                                                0.1 * (b in non_invariant))
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
        # The first generation certified what its slice could (calibration/certify.py), and used no other size.
        assert eng.invariance is not None and 1 in eng.invariance.results
        assert set(gen.stats.verify_batch_sizes) - {1} <= set(gen.stats.certified_sizes)
        assert all(eng.invariance.allows(b) for b in gen.stats.certified_sizes)
        assert gen.tokens == plain_tokens(model, PROMPTS["repetitive"], 24)
        eng.prepare()                       # the rest of the check, now
        assert sorted(eng.invariance.results) == [1, 2, 3, 4, 5]
    finally:
        model.close()


@pytest.mark.parametrize("max_batch, exc", [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)])
def test_check_rejects_bad_max_batch(llm, max_batch, exc):
    with pytest.raises(exc):
        check_batch_invariance(llm, max_batch=max_batch)


def test_check_rejects_closed_llama(smollm2_path):
    model = llama_cpp.Llama(smollm2_path, n_ctx=64, seed=0, verbose=False)
    model.close()
    with pytest.raises(ValueError, match="closed"):
        check_batch_invariance(model, max_batch=4)


# -- N_batch / n_ubatch of 2-7 ------------------------------------

@pytest.mark.parametrize("n_batch", [2, 4, 7])
def test_check_respects_a_small_n_batch(smollm2_path, n_batch):
    model = llama_cpp.Llama(smollm2_path, n_ctx=256, n_batch=n_batch, n_ubatch=n_batch, seed=0, verbose=False)
    try:
        report = check_batch_invariance(model, max_batch=16)      # clamped, not refused
        assert sorted(report.results) == list(range(1, n_batch + 1))
        assert report.invariant_sizes == list(range(1, n_batch + 1))
    finally:
        model.close()


def test_check_clamps_to_n_ubatch_too(smollm2_path):
    model = llama_cpp.Llama(smollm2_path, n_ctx=256, n_batch=8, n_ubatch=3, seed=0, verbose=False)
    try:
        assert sorted(check_batch_invariance(model, max_batch=9).results) == [1, 2, 3]
    finally:
        model.close()


def test_default_exact_mode_works_with_n_batch_4(smollm2_path, tmp_path, monkeypatch):
    monkeypatch.setenv("NGRAMSPEC_CACHE_DIR", str(tmp_path))
    model = llama_cpp.Llama(smollm2_path, n_ctx=256, n_batch=4, n_ubatch=4, seed=0, verbose=False)
    try:
        eng = SpeculativeEngine(model)            # exact, cached invariance, as a user gets it
        gen = eng.generate(PROMPTS["repetitive"], max_tokens=16)
        assert max(gen.stats.verify_batch_sizes) <= 4
        assert gen.tokens == plain_tokens(model, PROMPTS["repetitive"], 16)
        assert all(b <= 4 for b in invariance_cache.load_or_check(model, 9).results)
    finally:
        model.close()


# -- A huge max draft -----------------------------------------------

def test_a_huge_max_batch_checks_a_bounded_set_of_sizes(llm, monkeypatch):
    prefill: list[int] = []
    probes: list[int] = []
    real = _llama.decode

    def counting(model, batch):
        n = int(batch.batch.n_tokens)
        (probes if batch.logits[:n].all() else prefill).append(n)
        return real(model, batch)

    monkeypatch.setattr(_llama, "decode", counting)
    report = check_batch_invariance(llm, max_batch=10_000)
    assert sorted(report.results) == check_sizes(MAX_CHECK_BATCH)
    assert report.depths == check_depths(llm.n_ctx(), MAX_CHECK_BATCH) and report.probes == 2
    assert max(probes) <= MAX_CHECK_BATCH
    # One prefill to the deepest depth; per depth and probe text, the one-token references
    # (64) and the checked batches (304 tokens): not 512 sizes' worth.
    assert sum(prefill) == max(report.depths) <= MAX_CHECK_DEPTH
    assert sum(probes) <= len(report.depths) * 2 * (MAX_CHECK_BATCH + sum(check_sizes(MAX_CHECK_BATCH)))
    assert report.check_seconds > 0
    assert llm.n_tokens == 0


def test_unchecked_sizes_are_not_allowed_in_exact_mode(llm):
    report = fake_report(set(), up_to=16)
    for b in check_sizes(40)[16:]:
        report.results[b] = BatchSizeResult(b, True, 0, 0.0)
    eng = SpeculativeEngine(llm, max_draft=39, invariance=report, adaptive=False)
    llm.reset()
    gen = eng.generate(PROMPTS["repetitive"], max_tokens=48)
    assert set(gen.stats.verify_batch_sizes) <= set(check_sizes(40))
    assert gen.tokens == plain_tokens(llm, PROMPTS["repetitive"], 48)
