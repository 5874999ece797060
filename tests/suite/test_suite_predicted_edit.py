"""The benchmark's predicted_edit workload (predicted outputs): it builds from real
standard-library source, its items carry the unedited function as their
prediction and an unrelated function as the wrong one, and the prediction
methods return exactly plain greedy's text (they run only where an item has a
prediction)."""
from __future__ import annotations

import dataclasses

import pytest

from ngramspec.suite import runner, sources
from ngramspec.suite.loading import make_engine
from ngramspec.suite.methods import ENGINE_OPTIONS, EXTRA_METHODS, PREDICTION_METHODS


def test_workload_builds_with_predictions(llm):
    (w,) = sources.build(llm, quick=True, names=["predicted_edit"])
    assert w.name == "predicted_edit" and len(w.items) == 2
    for item in w.items:
        assert item.prediction and item.wrong_prediction
        assert item.prediction in item.prompt             # the prediction is the file being edited
        assert item.wrong_prediction not in item.prompt   # the wrong one is another module's function
        assert item.prediction != item.wrong_prediction
        assert 30 <= len(item.prediction.splitlines()) <= 80
        assert "Reply with the whole function" in item.prompt
    # The default suite is unchanged: predicted_edit is built only when named.
    assert [x.name for x in sources.build(llm, quick=True)] == list(sources.DEFAULT_WORKLOADS)
    assert all(i.prediction is None for x in sources.build(llm, quick=True) for i in x.items)
    with pytest.raises(ValueError, match="unknown workload"):
        sources.build(llm, quick=True, names=["no_such_workload"])


def test_prediction_methods_are_registered():
    assert set(PREDICTION_METHODS) == {"ngramspec+prediction", "ngramspec+wrong-prediction"}
    assert set(PREDICTION_METHODS) <= set(EXTRA_METHODS)
    assert set(PREDICTION_METHODS) <= set(ENGINE_OPTIONS)


def test_prediction_methods_match_plain_greedy(llm, invariance):
    (edit,) = sources.build(llm, quick=True, names=["predicted_edit"])
    (other,) = sources.build(llm, quick=True, names=["code_editing"])
    # Short runs: the first item, 96 new tokens.
    edit = dataclasses.replace(edit, items=[dataclasses.replace(edit.items[0], max_tokens=96)])
    other = dataclasses.replace(other, items=[dataclasses.replace(other.items[0], max_tokens=24)])
    methods = ("plain", "ngramspec", *PREDICTION_METHODS)
    # A Suite without its measurements (invariance from the fixture, no cost curve):
    # run() and run_once() are what the benchmark runs.
    suite = runner.Suite.__new__(runner.Suite)
    suite.model, suite.quick, suite.llm, suite.progress = "smollm2-135m", True, llm, False
    suite.methods, suite.workloads, suite.servers, suite.lookup = methods, [edit, other], {}, None
    suite.invariance = invariance
    suite.engines = {m: make_engine(llm, m, invariance=invariance) for m in methods if m != "plain"}
    runs = suite.run(1)
    assert all(not r.error for r in runs)
    by = {(r.workload, r.method): r for r in runs}
    # The prediction methods ran only on the item that has a prediction.
    assert {m for (w, m) in by if w == "code_editing"} == {"plain", "ngramspec"}
    plain = by[("predicted_edit", "plain")]
    assert plain.tokens > 0
    for m in methods[1:]:
        assert by[("predicted_edit", m)].text == plain.text, m
    right = by[("predicted_edit", "ngramspec+prediction")].stats
    wrong = by[("predicted_edit", "ngramspec+wrong-prediction")].stats
    assert right["prediction"]["accepted_prediction_tokens"] > 0
    assert set(wrong["prediction"]) == {"accepted_prediction_tokens", "rejected_prediction_tokens"}
    assert not by[("predicted_edit", "ngramspec")].stats["prediction"]


def test_help_states_the_engines_default_max_draft(capsys):
    """--max-draft's help gives the default the engines really use (it said 8 after
    the default had become 64)."""
    from ngramspec.options import DEFAULT_MAX_DRAFT
    from ngramspec.suite import predicted_edit

    with pytest.raises(SystemExit) as exit_info:
        predicted_edit.main(["--help"])
    assert exit_info.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"(default: the engine's, {DEFAULT_MAX_DRAFT})" in help_text
