"""Exact mode's online audit: which passes it re-checks, what a mismatch does.

The rule and the row comparison are tested on small arrays; the withdrawal on a
real model whose batches really do round differently at depth: flash attention on
the exact build, the stock build's own kernels in .venv-stock.
"""
from __future__ import annotations

import json
import warnings

import llama_cpp
import numpy as np
import pytest

from ngramspec import SpeculativeEngine
from ngramspec.builds.build_info import is_exact_build
from ngramspec.calibration import invariance_cache
from ngramspec.calibration.audit import AuditRule, audit_pass
from ngramspec.calibration.invariance import BatchSizeResult, InvarianceReport
from ngramspec.suite import sources
from tests.support.long_chats import conversations
from tests.support.plain import plain_tokens

# -- the sampling rule ---------------------------------------------------------


def test_single_tokens_are_never_audited():
    assert not AuditRule().wants(1, 10, 0.0)


def test_passes_are_audited_within_the_share_of_verify_time():
    rule = AuditRule(certified_depth=10_000, share=0.1, run_share=1.0)   # one generation: no cap of its own
    assert not rule.wants(3, 50, 0.5)     # nothing verified yet: any audit would exceed the share
    rule.verified(5.0)
    assert rule.wants(3, 60, 0.5)         # 0.5 <= 0.1 * 5
    rule.audited(0.5)
    assert not rule.wants(3, 70, 0.5)     # 1.0 > 0.1 * 5
    rule.verified(5.0)
    assert rule.wants(3, 80, 0.5)         # 1.0 <= 0.1 * 10


def test_one_generation_spends_no_more_than_its_own_share_of_what_the_engine_saved():
    rule = AuditRule(certified_depth=10_000, share=0.1, run_share=0.1)
    rule.begin_run()
    rule.verified(100.0)                  # a long answer: the engine's budget is now 10 s
    rule.begin_run()                      # a short one starts with none of its own
    rule.verified(2.0)
    assert not rule.wants(3, 50, 0.5)     # the engine could pay (0.5 <= 10.2), this answer not (0.5 > 0.2)
    rule.verified(3.0)
    assert rule.wants(3, 60, 0.5)         # 0.5 <= 0.1 * 5
    rule.audited(0.5)
    assert not rule.wants(3, 70, 0.1)     # 0.6 > 0.5
    rule.begin_run()
    rule.verified(5.0)
    assert rule.wants(3, 80, 0.5)         # the next answer has its own


def test_a_new_span_is_audited_even_in_a_short_answer():
    rule = AuditRule(certified_depth=300, share=0.1, run_share=0.01)
    rule.begin_run()
    assert rule.wants(2, 400, 0.5)


def test_beyond_the_certified_depth_one_pass_per_span_is_audited():
    rule = AuditRule(certified_depth=300, share=0.0)   # no budget: only new spans are audited
    assert rule.wants(4, 400, 0.1)          # 257-512: new
    assert not rule.wants(4, 500, 0.1)      # same span
    assert not rule.wants(5, 500, 0.1)      # same span, another size
    assert rule.wants(5, 513, 0.1)          # 513-1024: a new span
    assert not rule.wants(4, 200, 0.1)      # inside the certified depth


# -- the row comparison ---------------------------------------------------------


def _rows(n, vocab=5, seed=0):
    return np.random.default_rng(seed).standard_normal((n, vocab)).astype(np.float32)


def test_audit_pass_agrees_when_rows_are_bit_identical():
    rows = _rows(3)
    seen = []

    def decode_one(tok, pos):
        seen.append((tok, pos))
        return rows[pos - 100]

    result = audit_pass(decode_one, rows.copy(), [7, 8, 9], 100, lambda r, d: pytest.fail("no re-accept"))
    assert result.mismatch_row is None and seen == [(7, 100), (8, 101), (9, 102)]


def test_audit_pass_reports_the_first_differing_row_and_reaccepts_from_single_rows():
    single = _rows(3)
    batch = single.copy()
    batch[1, 2] = np.nextafter(batch[1, 2], np.float32(np.inf))   # one ulp in one logit
    got = {}

    def accept(rows, draft):
        got["rows"], got["draft"] = rows.copy(), draft.copy()
        return [1]

    result = audit_pass(lambda tok, pos: single[pos], batch, [4, 5, 6], 0, accept)
    assert result.mismatch_row == 1 and result.max_abs_diff > 0
    assert result.targets == [1]
    assert np.array_equal(got["rows"], single) and list(got["draft"]) == [5, 6]


# -- a real withdrawal -----------------------------------------------------------


@pytest.mark.model
@pytest.mark.stock
def test_a_size_that_differs_in_real_generation_is_withdrawn_and_remembered(smollm2_path, tmp_path, monkeypatch):
    """Hand the engine a report that certifies every size, on a setup where batches
    differ at depth: the audit sees it, warns, withdraws the size for the process
    and in the cache file, and the next report of the setup leaves it out."""
    monkeypatch.setenv("NGRAMSPEC_CACHE_DIR", str(tmp_path))
    invariance_cache.forget_priors()
    invariance_cache._process_withdrawn.clear()
    # Flash attention on the exact build; the stock build's own kernels in .venv-stock.
    llm = llama_cpp.Llama(smollm2_path, n_ctx=4096, n_threads=2, seed=0, verbose=False, flash_attn=is_exact_build())
    try:
        stored = invariance_cache.load_or_check(llm, 9)      # the real verdict, written to the cache
        path = invariance_cache.cache_path(invariance_cache.fingerprint(llm))
        assert path.is_file()
        trusting = InvarianceReport({b: BatchSizeResult(b, True, 0, 0.0, 0.01) for b in range(1, 10)}, 0.01,
                                    cost_curve=stored.cost_curve)
        engine = SpeculativeEngine(llm, invariance=trusting, max_draft=8, adaptive=False, invariance_cache=True)
        engine.audit_rule.share = 1.0     # audit about every other pass, so a difference is seen for sure
        engine.audit_rule.run_share = 1.0
        prompt = sources.chat_formatter(llm)(conversations()["multi_turn_refactor"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gen = engine.generate(prompt, max_tokens=200)
        assert gen.stats.audited_passes > 0
        assert gen.stats.withdrawn_sizes, "no pass differed: this setup no longer shows batch variance at depth"
        messages = [str(w.message) for w in caught if "exact mode's audit" in str(w.message)]
        assert messages and "withdrawn" in messages[0] and str(path) in messages[0]
        for size in gen.stats.withdrawn_sizes:
            assert not engine.plan().allowed[size]
        on_disk = json.loads(path.read_text())["invariance"]["withdrawn"]
        assert {int(b) for b in on_disk} == set(gen.stats.withdrawn_sizes)
        # A new process (no memory of this one) reads the withdrawal from the file.
        invariance_cache._process_withdrawn.clear()
        again = invariance_cache.load_or_check(llm, 9)
        assert set(again.withdrawn) == set(gen.stats.withdrawn_sizes)
        assert not set(again.invariant_sizes) & set(gen.stats.withdrawn_sizes)
        # The audited passes took their tokens from one-token decoding: the output so far
        # is not guaranteed (earlier unaudited passes may differ), but a later run with the
        # withdrawn sizes gone gives plain's text.
        llm.reset()
        fresh = SpeculativeEngine(llm, invariance=again, max_draft=8)
        assert fresh.generate(prompt, max_tokens=64).tokens == plain_tokens(llm, prompt, 64)
    finally:
        invariance_cache._process_withdrawn.clear()
        llm.close()
