"""Exact mode certifies verify sizes a slice at a time (calibration/certify.py): the
same check as the whole one, never a size before it is certified, a progress line
past 2 s, and the whole check up front with the warm-up option."""
from __future__ import annotations

import json
import logging

import llama_cpp
import pytest

from ngramspec import SpeculativeEngine, check_batch_invariance, wrap
from ngramspec.calibration import certify, invariance_cache, progress
from ngramspec.calibration.certify import Certification, size_groups
from ngramspec.calibration.invariance import check_sizes
from tests.support.plain import plain_tokens
from tests.support.prompts import PROMPTS


@pytest.fixture()
def small(smollm2_path):
    """SmolLM2-135M with a 256-token context: the check probes 3 depths (8, 100, 247)."""
    model = llama_cpp.Llama(smollm2_path, n_ctx=256, seed=0, verbose=False)
    yield model
    model.close()


def stored_verdicts(model) -> dict[int, bool]:
    """{B: certified} of the decided sizes in the model's cache entry."""
    data = json.loads(invariance_cache.cache_path(invariance_cache.fingerprint(model)).read_text())
    return {row[0]: row[1] for row in data["invariance"]["results"]}


def test_size_groups():
    assert size_groups(65) == [[2, 3, 4], [5, 6, 7, 8], list(range(9, 17)), [17, 21, 25, 33], [41, 49, 65]]
    assert size_groups(9) == [[2, 3, 4], [5, 6, 7, 8], [9]]
    assert size_groups(3) == [[2, 3]]
    assert size_groups(1) == []


def test_the_stepwise_check_decides_every_size_as_the_whole_check(small, invariance_cache_dir):
    whole = check_batch_invariance(small, max_batch=9)
    seen: list[list[int]] = []
    slices = 0
    kept = Certification(small, 9)
    while True:
        # Every other slice on a new Certification, as a new process would make (it goes on from the
        # file), the others on one that puts its probe prefix back in the cache (run_steps' kept copy).
        step = kept if slices % 2 else Certification(small, 9)
        if step.complete:
            break
        step.run_slice(budget_s=0)   # one step a slice
        slices += 1
        seen.append(step.certified())
        assert slices < 40
    assert slices == 3 * 3 * 2       # 3 groups (2-4, 5-8, 9), 3 depths, 2 probe texts
    done = Certification(small, 9).report
    assert sorted(done.results) == sorted(whole.results) == check_sizes(9)
    for b, r in whole.results.items():
        assert (done.results[b].invariant, done.results[b].failed_at) == (r.invariant, r.failed_at), b
    # Certified smallest first, and never taken back.
    assert all(set(a) <= set(b) for a, b in zip(seen, seen[1:]))
    assert seen[5] == [1, 2, 3, 4] and seen[4] == [1]


def test_a_fresh_cache_first_generation_verifies_only_certified_sizes(smollm2_path, invariance_cache_dir,
                                                                     monkeypatch):
    model = llama_cpp.Llama(smollm2_path, n_ctx=512, seed=0, verbose=False)
    try:
        engine = SpeculativeEngine(model, max_draft=16, trace=True)

        def check(gen) -> None:
            used = {b for b in gen.stats.verify_batch_sizes if b > 1}
            certified = set(gen.stats.certified_sizes)
            assert used <= certified, (used, certified)
            assert all(stored_verdicts(model).get(b) for b in certified)   # certified on disk, not just said
            assert engine.invariance is not None and all(engine.invariance.allows(b) for b in certified)
            assert max((t[2] + 1 for t in gen.stats.trace), default=1) <= max(certified, default=1)

        # One step per generation (a budget of 0 s; the default's steps depend on the machine's speed):
        # sizes 2-4 are certified after 8 steps (4 depths x 2 texts), and the generations after that
        # speculate with them while 5-17 are still being checked.
        monkeypatch.setattr(certify, "SLICE_BUDGET_S", 0.0)
        first = engine.generate(PROMPTS["repetitive"], max_tokens=32)   # on a fresh cache
        check(first)
        assert first.stats.certified_sizes == [] and set(first.stats.verify_batch_sizes) == {1}
        sizes = [first.stats.certified_sizes]
        partial_and_used = False
        for _ in range(10):
            gen = engine.generate(PROMPTS["repetitive"], max_tokens=32)
            check(gen)
            sizes.append(gen.stats.certified_sizes)
            used = [b for b in gen.stats.verify_batch_sizes if b > 1]
            partial_and_used |= bool(used) and max(gen.stats.certified_sizes) < 17
        assert all(set(a) <= set(b) for a, b in zip(sizes, sizes[1:]))
        assert sizes[-1][:3] == [2, 3, 4] and partial_and_used
        assert gen.tokens == plain_tokens(model, PROMPTS["repetitive"], 32)
    finally:
        model.close()


def test_a_progress_line_shows_when_the_check_takes_over_2_s(small, invariance_cache_dir, monkeypatch, capfd,
                                                             caplog):
    monkeypatch.setattr(progress, "PROGRESS_AFTER_S", 1e9)    # never slow enough: nothing shown
    SpeculativeEngine(small, max_draft=4).certify(budget_s=0)
    assert "certifying" not in capfd.readouterr().err
    monkeypatch.setattr(progress, "PROGRESS_AFTER_S", 0.0)    # every check slow enough: a line
    SpeculativeEngine(small, max_draft=4).certify(budget_s=0)
    assert "exact mode: certifying verify sizes 2-4" in capfd.readouterr().err
    with caplog.at_level(logging.INFO, logger="ngramspec"):   # the server's way: log records
        SpeculativeEngine(small, max_draft=4, progress="log").certify(budget_s=0)
    assert any("certifying verify sizes" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="progress must be one of"):
        SpeculativeEngine(small, progress="loud")


def test_the_warmup_option_does_the_whole_check(small, invariance_cache_dir):
    engine = SpeculativeEngine(small, max_draft=8, warmup=True)
    assert engine.invariance is not None and sorted(engine.invariance.results) == check_sizes(9)
    assert engine.invariance.cost_curve is not None
    assert engine.certify() == []            # nothing left for the generations
    assert sorted(stored_verdicts(small)) == check_sizes(9)
    spec = wrap(small, max_draft=8, warmup=True)   # wrap's keyword, read from the file now
    assert spec.engine.invariance is not None and sorted(spec.engine.invariance.results) == check_sizes(9)


def test_the_whole_check_goes_on_from_the_steps(small, invariance_cache_dir, monkeypatch):
    engine = SpeculativeEngine(small, max_draft=8)
    certified: set[int] = set()
    for _ in range(6):                       # sizes 2-4: 3 depths x 2 texts
        certified |= set(engine.certify(budget_s=0))
    assert certified == {1, 2, 3, 4}
    assert stored_verdicts(small) == {1: True, 2: True, 3: True, 4: True}
    asked: list[list[int]] = []
    real = invariance_cache.check_batch_invariance  # type: ignore[attr-defined]  # the name _finish calls, patched below

    def recorded(llm, **kwargs):
        asked.append(list(kwargs["sizes"]))
        return real(llm, **kwargs)

    monkeypatch.setattr(invariance_cache, "check_batch_invariance", recorded)
    plan = engine.prepare()                  # doctor's and the warm-up's path: load_or_check
    assert asked == [[5, 6, 7, 8, 9]]        # only what the steps left
    assert engine.invariance is not None and sorted(engine.invariance.results) == check_sizes(9)
    assert all(plan.allowed[b] == engine.invariance.allows(b) for b in range(2, 10))
