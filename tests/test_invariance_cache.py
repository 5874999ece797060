"""The invariance report is stored per model, build and context settings."""
from __future__ import annotations

import json

import llama_cpp
import pytest

from ngramspec import SpeculativeEngine, check_batch_invariance
from ngramspec import invariance_cache
from plain import plain_tokens
from prompts import PROMPTS


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NGRAMSPEC_CACHE_DIR", str(tmp_path))
    return tmp_path / "invariance"


class CountingCheck:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, llm, max_batch):
        self.calls += 1
        return check_batch_invariance(llm, max_batch=max_batch)


def test_second_load_reads_the_file_and_agrees(llm, cache):
    check = CountingCheck()
    first = invariance_cache.load_or_check(llm, 5, check=check)
    assert check.calls == 1 and len(list(cache.glob("*.json"))) == 1
    again = invariance_cache.load_or_check(llm, 5, check=check)
    assert check.calls == 1   # from the file
    assert again.results == first.results
    assert again.single_token_seconds == first.single_token_seconds
    # A smaller request is covered; a larger one is measured and stored.
    invariance_cache.load_or_check(llm, 3, check=check)
    assert check.calls == 1
    bigger = invariance_cache.load_or_check(llm, 7, check=check)
    assert check.calls == 2 and sorted(bigger.results) == list(range(1, 8))
    invariance_cache.load_or_check(llm, 7, check=check)
    assert check.calls == 2


def test_other_settings_or_model_files_get_their_own_entry(llm, smollm2_path, cache):
    key = invariance_cache.fingerprint(llm)
    other = llama_cpp.Llama(smollm2_path, n_ctx=2048, n_threads=max(1, llm.context_params.n_threads + 1), seed=0,
                            verbose=False)
    try:
        assert invariance_cache.cache_path(invariance_cache.fingerprint(other)) != invariance_cache.cache_path(key)
    finally:
        other.close()
    touched = dict(key, model=key["model"][:-1] + [key["model"][-1] + 1])   # the model file was replaced
    assert invariance_cache.cache_path(touched) != invariance_cache.cache_path(key)


@pytest.mark.parametrize("content", ["not json", "{}", '{"key": 1}', "[1, 2]"])
def test_an_unreadable_or_foreign_file_is_measured_again(llm, cache, content):
    check = CountingCheck()
    path = invariance_cache.cache_path(invariance_cache.fingerprint(llm))
    path.parent.mkdir(parents=True)
    path.write_text(content)
    report = invariance_cache.load_or_check(llm, 3, check=check)
    assert check.calls == 1 and sorted(report.results) == [1, 2, 3]
    assert json.loads(path.read_text())["key"] == invariance_cache.fingerprint(llm)   # rewritten


def test_engine_uses_the_cache_unless_told_not_to(smollm2_path, cache, monkeypatch):
    model = llama_cpp.Llama(smollm2_path, n_ctx=256, seed=0, verbose=False)
    try:
        SpeculativeEngine(model, max_draft=4, invariance_cache=False).generate(PROMPTS["repetitive"], max_tokens=4)
        assert not cache.exists()
        eng = SpeculativeEngine(model, max_draft=4)
        gen = eng.generate(PROMPTS["repetitive"], max_tokens=24)
        assert len(list(cache.glob("*.json"))) == 1
        assert gen.tokens == plain_tokens(model, PROMPTS["repetitive"], 24)
        # A new engine starts from the file: same report, no check.
        def no_check(*args, **kwargs):
            raise AssertionError("measured again")

        monkeypatch.setattr(invariance_cache, "check_batch_invariance", no_check)
        eng2 = SpeculativeEngine(model, max_draft=4)
        eng2.generate(PROMPTS["repetitive"], max_tokens=4)
        assert eng2.invariance.results == eng.invariance.results
    finally:
        model.close()
