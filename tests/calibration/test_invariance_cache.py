"""The invariance report and the verify-cost curve are stored per model, build and
context settings; every stored value is validated before it is trusted,
and only cost curves that passed validation are stored."""
from __future__ import annotations

import json
import math
import time

import llama_cpp
import pytest

from ngramspec import SpeculativeEngine, check_batch_invariance
from ngramspec.calibration import certify, invariance_cache
from ngramspec.calibration.cost_curve import STATISTIC, CostCurveResult, prior_curve
from ngramspec.calibration.invariance import BatchSizeResult, InvarianceReport, check_depths, check_sizes
from tests.support.plain import plain_tokens
from tests.support.prompts import PROMPTS

LOADED = {1: 2.83, 2: 2.08, 3: 3.06, 4: 11.7, 5: 6.68, 6: 5.56, 7: 8.92, 8: 6.21, 9: 13.9}  # timed under load
QUIET = {1: 1.0, 2: 0.99, 3: 1.3, 4: 1.56, 5: 1.9, 6: 2.2, 7: 2.6, 8: 3.04, 9: 3.4}


class CountingCheck:
    """The real check, counted."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, llm, max_batch):
        self.calls += 1
        return check_batch_invariance(llm, max_batch=max_batch)


class FakeCheck:
    """A valid report without decoding anything (every size exact, plausible timings)."""

    def __init__(self, non_invariant=()) -> None:
        self.calls = 0
        self.bad = set(non_invariant)

    def __call__(self, llm, max_batch):
        self.calls += 1
        return InvarianceReport({b: BatchSizeResult(b, b not in self.bad, int(b in self.bad),
                                                    0.5 * (b in self.bad), 0.01 * (1 + 0.4 * (b - 1)),
                                                    8 if b in self.bad else None)
                                 for b in check_sizes(max_batch)}, 0.01,
                                depths=check_depths(llm.n_ctx(), max_batch), probes=2, check_seconds=0.5)


class FakeMeasure:
    """A cost measurement that passes (QUIET) or fails (gives the prior), counted."""

    def __init__(self, passes: bool = True) -> None:
        self.calls = 0
        self.passes = passes
        self.sizes: list[int] | None = None

    def __call__(self, llm, sizes):
        self.calls += 1
        self.sizes = list(sizes)
        if not self.passes:
            return prior_curve(sizes, "test: failed", attempts=3)
        rel = {b: QUIET.get(b, 1 + 0.3 * (b - 1)) for b in sizes}
        return CostCurveResult(rel, "measured", True, time.time(), 5, STATISTIC, (2, 2), None,
                               dict.fromkeys(sizes, 0.01), 1, 128)


def curve_of(report: InvarianceReport) -> CostCurveResult:
    """The report's cost curve (load_or_check always gives one)."""
    assert report.cost_curve is not None
    return report.cost_curve


def entry(llm):
    return invariance_cache.cache_path(invariance_cache.fingerprint(llm))


def test_second_load_reads_the_file_and_agrees(llm, invariance_cache_dir):
    check = CountingCheck()
    measure = FakeMeasure()
    first = invariance_cache.load_or_check(llm, 5, check=check, measure=measure)
    assert check.calls == 1 and measure.calls == 1 and len(list(invariance_cache_dir.glob("*.json"))) == 1
    assert curve_of(first).origin == "measured" and measure.sizes == [1, 2, 3, 4, 5]
    again = invariance_cache.load_or_check(llm, 5, check=check, measure=measure)
    assert check.calls == 1 and measure.calls == 1   # both from the file
    assert again.results == first.results
    assert again.single_token_seconds == first.single_token_seconds
    assert curve_of(again).origin == "cached" and curve_of(again).relative == curve_of(first).relative
    assert again.relative_costs() == curve_of(first).relative
    # A smaller request is covered; a larger one is measured and stored.
    small = invariance_cache.load_or_check(llm, 3, check=check, measure=measure)
    assert check.calls == 1 and measure.calls == 1 and sorted(small.relative_costs()) == [1, 2, 3]
    bigger = invariance_cache.load_or_check(llm, 7, check=check, measure=measure)
    assert check.calls == 2 and sorted(bigger.results) == list(range(1, 8)) and measure.calls == 2
    invariance_cache.load_or_check(llm, 7, check=check, measure=measure)
    assert check.calls == 2 and measure.calls == 2


def test_the_curve_prices_only_exact_sizes(llm, invariance_cache_dir):
    measure = FakeMeasure()
    report = invariance_cache.load_or_check(llm, 9, check=FakeCheck(non_invariant={4, 8}), measure=measure)
    assert measure.sizes == [1, 2, 3, 5, 6, 7, 9]
    assert sorted(report.relative_costs()) == [1, 2, 3, 5, 6, 7, 9]


def test_a_checked_report_is_priced_as_an_engines_is(llm):
    # the suite checks once and hands the report to its engines: it must price exact mode by
    # a curve timed over rounds, as load_or_check does, not by the check's one decode per size
    report = check_batch_invariance(llm, max_batch=9)
    assert report.cost_curve is None and report.one_shot_curve() is not None
    assert invariance_cache.price_as_measured(llm, report, 9, repeats=3) is report
    curve = report.cost_curve
    assert curve is not None and report.relative_costs() == curve.relative
    assert curve.attempts >= 1 and "one decode per size" not in curve.describe()
    assert sorted(curve.relative) == invariance_cache.curve_sizes(report, 9)
    assert curve.passed == (curve.origin == "measured") and (curve.passed or "measurement" in (curve.reason or ""))
    if curve.passed:
        assert curve.repeats == 3 and curve.statistic == STATISTIC
    given = prior_curve([2], "given")                       # a report with a curve keeps it
    report.cost_curve = given
    assert invariance_cache.price_as_measured(llm, report, 9).cost_curve is given


def test_other_settings_or_model_files_get_their_own_entry(llm, smollm2_path, invariance_cache_dir):
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
def test_an_unreadable_or_foreign_file_is_measured_again(llm, invariance_cache_dir, content):
    check = FakeCheck()
    path = entry(llm)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    report = invariance_cache.load_or_check(llm, 3, check=check, measure=FakeMeasure())
    assert check.calls == 1 and sorted(report.results) == [1, 2, 3]
    assert json.loads(path.read_text())["key"] == invariance_cache.fingerprint(llm)   # rewritten


def stored(llm, invariance_cache_dir, max_batch=9):
    """A valid entry (FakeCheck + a passing curve), returned as its parsed JSON."""
    invariance_cache.load_or_check(llm, max_batch, check=FakeCheck(), measure=FakeMeasure())
    return json.loads(entry(llm).read_text())


def write(llm, data):
    entry(llm).write_text(json.dumps(data))


# -- D10: absurd values in a well-formed file ---------------------------------

def set_row(data, b, field, value):
    idx = {"invariant": 1, "rows": 2, "diff": 3, "seconds": 4, "failed_at": 5}[field]
    for row in data["invariance"]["results"]:
        if row[0] == b:
            row[idx] = value
    return data


@pytest.mark.parametrize("spoil", [
    lambda d: set_row(d, 3, "invariant", "no"),          # a truthy string is not a boolean
    lambda d: set_row(d, 3, "invariant", 1),
    lambda d: set_row(d, 3, "seconds", math.inf),
    lambda d: set_row(d, 3, "seconds", -0.01),
    lambda d: set_row(d, 3, "seconds", 0),
    lambda d: set_row(d, 3, "seconds", "0.01"),
    lambda d: set_row(d, 3, "rows", 2),                  # differing rows but "invariant"
    lambda d: set_row(d, 3, "rows", 99),
    lambda d: set_row(d, 3, "diff", -1.0),
    lambda d: set_row(d, 1, "invariant", False) and set_row(d, 1, "rows", 1),
    lambda d: d["invariance"].update(single_token_seconds=math.inf),
    lambda d: d["invariance"].update(single_token_seconds=0.0),
    lambda d: d["invariance"]["results"].append(list(d["invariance"]["results"][2])),   # a repeated size
    lambda d: d["invariance"]["results"].pop(4),                                       # a size missing
    lambda d: d["invariance"].update(depths=[]),
    lambda d: d["invariance"].update(depths=[8, "100"]),
    lambda d: d["invariance"].update(depths=[8]),                                      # too shallow for n_ctx
    lambda d: d["invariance"].update(probes=0),
    lambda d: d["invariance"].update(check_seconds=-1.0),
    lambda d: d["invariance"].update(withdrawn={"x": "seen"}),
    lambda d: d["invariance"].update(withdrawn={"3": 7}),
    lambda d: set_row(d, 3, "failed_at", 100),                                          # failed, yet invariant
])
def test_absurd_invariance_values_are_measured_again_and_rewritten(llm, invariance_cache_dir, spoil):
    data = stored(llm, invariance_cache_dir)
    spoil(data)
    write(llm, data)
    check = FakeCheck()
    report = invariance_cache.load_or_check(llm, 9, check=check, measure=FakeMeasure())
    assert check.calls == 1
    assert all(r.invariant is True for r in report.results.values())
    fresh = json.loads(entry(llm).read_text())
    invariance_cache.parse_invariance(fresh["invariance"], check_sizes(9))   # the rewritten file is valid


def test_infinite_seconds_no_longer_turn_speculation_off(llm, invariance_cache_dir):
    data = stored(llm, invariance_cache_dir)
    for row in data["invariance"]["results"]:
        row[4] = math.inf
    data["invariance"]["single_token_seconds"] = math.inf
    write(llm, data)
    report = invariance_cache.load_or_check(llm, 9, check=FakeCheck(), measure=FakeMeasure())
    costs = report.relative_costs()
    assert all(math.isfinite(c) for c in costs.values()) and costs[2] < 2


@pytest.mark.parametrize("change", [
    {"passed": False}, {"passed": "yes"}, {"measured_at": math.inf}, {"repeats": 0},
    {"relative": {"1": 1.0, "2": math.inf}}, {"relative": {"1": 1.0, "2": -1.5}},
])
def test_absurd_curve_values_are_measured_again(llm, invariance_cache_dir, change):
    data = stored(llm, invariance_cache_dir)
    data["cost_curve"].update(change)
    write(llm, data)
    measure = FakeMeasure()
    report = invariance_cache.load_or_check(llm, 9, check=FakeCheck(), measure=measure)
    assert measure.calls == 1 and curve_of(report).origin == "measured"
    CostCurveResult.from_json(json.loads(entry(llm).read_text())["cost_curve"])   # rewritten, valid


# -- A load-spoiled curve -------------------------------------------

def inject_loaded_curve(llm, invariance_cache_dir):
    data = stored(llm, invariance_cache_dir)
    data["cost_curve"]["relative"] = {str(b): r for b, r in LOADED.items()}   # otherwise a perfect entry
    write(llm, data)


def test_a_load_spoiled_curve_in_the_file_is_not_trusted(llm, invariance_cache_dir):
    inject_loaded_curve(llm, invariance_cache_dir)
    measure = FakeMeasure()
    report = invariance_cache.load_or_check(llm, 9, check=FakeCheck(), measure=measure)
    assert measure.calls == 1 and curve_of(report).origin == "measured"
    assert report.relative_costs() != {b: float(b) for b in range(1, 10)}
    assert report.relative_costs() == {b: QUIET[b] for b in range(1, 10)}
    stored_now = json.loads(entry(llm).read_text())["cost_curve"]["relative"]
    assert stored_now == {str(b): QUIET[b] for b in range(1, 10)}


def test_when_measuring_again_fails_too_the_prior_is_used_and_nothing_is_stored(llm, invariance_cache_dir):
    inject_loaded_curve(llm, invariance_cache_dir)
    failing = FakeMeasure(passes=False)
    report = invariance_cache.load_or_check(llm, 9, check=FakeCheck(), measure=failing)
    assert failing.calls == 1
    assert curve_of(report).origin == "prior" and not curve_of(report).passed
    assert report.relative_costs() == prior_curve(range(1, 10), "").relative
    assert all(report.relative_costs()[b] < b for b in range(2, 10))      # never r(B) = B
    assert "cost_curve" not in json.loads(entry(llm).read_text())         # the spoiled curve is gone, none written
    # This process keeps the prior (no new timing per engine) ...
    invariance_cache.load_or_check(llm, 9, check=FakeCheck(), measure=failing)
    assert failing.calls == 1
    # ... and the next process measures again.
    invariance_cache.forget_priors()
    ok = FakeMeasure()
    assert curve_of(invariance_cache.load_or_check(llm, 9, check=FakeCheck(), measure=ok)).origin == "measured"
    assert ok.calls == 1 and "cost_curve" in json.loads(entry(llm).read_text())


def test_a_load_spoiled_curve_is_replaced_by_a_real_measurement(llm, invariance_cache_dir):
    inject_loaded_curve(llm, invariance_cache_dir)
    llm.reset()
    report = invariance_cache.load_or_check(llm, 4, check=FakeCheck())   # the real interleaved measurement
    curve = curve_of(report)
    assert curve.origin in ("measured", "prior")
    assert curve.relative[1] == 1.0 and sorted(curve.relative) == [1, 2, 3, 4]
    assert curve.relative != {b: float(b) for b in range(1, 5)}
    data = json.loads(entry(llm).read_text())
    if curve.passed:    # a quiet enough machine: stored with how it was measured
        assert data["cost_curve"]["statistic"] == STATISTIC and data["cost_curve"]["repeats"] >= 3
        assert data["cost_curve"]["threads"] == [llm.context_params.n_threads, llm.context_params.n_threads_batch]
    else:               # too busy: the prior, and nothing stored
        assert "cost_curve" not in data
    assert llm.n_tokens == 0


# -- recalibrate ---------------------------------------------------------------

def test_recalibrate_replaces_the_stored_curve(llm, invariance_cache_dir):
    stored(llm, invariance_cache_dir)
    before = json.loads(entry(llm).read_text())["cost_curve"]["measured_at"]
    time.sleep(0.01)
    check = FakeCheck()
    measure = FakeMeasure()
    report = invariance_cache.recalibrate(llm, 9, check=check, measure=measure)
    assert measure.calls == 1 and check.calls == 0 and curve_of(report).origin == "measured"
    assert json.loads(entry(llm).read_text())["cost_curve"]["measured_at"] > before
    invariance_cache.recalibrate(llm, 9, recheck=True, check=check, measure=measure)
    assert check.calls == 1 and measure.calls == 2


def test_recalibrate_that_fails_drops_the_stored_curve(llm, invariance_cache_dir):
    stored(llm, invariance_cache_dir)
    report = invariance_cache.recalibrate(llm, 9, check=FakeCheck(), measure=FakeMeasure(passes=False))
    assert curve_of(report).origin == "prior"
    assert "cost_curve" not in json.loads(entry(llm).read_text())


# -- the engine ------------------------------------------------------------------

def test_prepare_measures_the_cost_curve_when_the_first_slice_finished_the_check(
        smollm2_path, invariance_cache_dir, monkeypatch):
    # On a fast machine the first generation's slice decides every size, so no
    # certification is left when prepare() runs: it must still price the sizes with a
    # measured (or prior) curve, as its docstring says, not keep the check's timings.
    monkeypatch.setattr(certify, "SLICE_BUDGET_S", 1e6)
    model = llama_cpp.Llama(smollm2_path, n_ctx=256, seed=0, verbose=False)
    try:
        eng = SpeculativeEngine(model, max_draft=4)
        eng.generate(PROMPTS["repetitive"], max_tokens=4)
        assert eng._certification is None                 # the whole check ran in one slice
        assert eng.invariance is not None and eng.invariance.cost_curve is None
        eng.prepare()
        assert eng.invariance is not None and eng.invariance.cost_curve is not None
        assert eng.invariance.cost_curve.origin in ("measured", "prior")
    finally:
        model.close()


def test_engine_uses_the_cache_unless_told_not_to(smollm2_path, invariance_cache_dir, monkeypatch):
    model = llama_cpp.Llama(smollm2_path, n_ctx=256, seed=0, verbose=False)
    try:
        SpeculativeEngine(model, max_draft=4, invariance_cache=False).generate(PROMPTS["repetitive"], max_tokens=4)
        assert not invariance_cache_dir.exists()
        eng = SpeculativeEngine(model, max_draft=4)
        gen = eng.generate(PROMPTS["repetitive"], max_tokens=24)
        assert len(list(invariance_cache_dir.glob("*.json"))) == 1   # the first slice's verdicts and progress
        assert gen.tokens == plain_tokens(model, PROMPTS["repetitive"], 24)
        eng.prepare()                       # the rest of the check, and the cost curve
        assert eng.invariance is not None and eng.invariance.cost_curve is not None
        assert eng.invariance.cost_curve.origin in ("measured", "prior")
        # A new engine starts from the file: same report, no check.
        def no_check(*args, **kwargs):
            raise AssertionError("measured again")

        monkeypatch.setattr(invariance_cache, "check_batch_invariance", no_check)
        monkeypatch.setattr(certify, "run_steps", no_check)
        eng2 = SpeculativeEngine(model, max_draft=4)
        eng2.generate(PROMPTS["repetitive"], max_tokens=4)
        assert eng2.invariance is not None and eng2.invariance.results == eng.invariance.results
    finally:
        model.close()
