"""The benchmark suite's model loading, engine table and peak-RSS reader: each
written once and shared (runner, rss, other_build, llama_server)."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from ngramspec import models
from ngramspec.suite import loading, methods, rss
from ngramspec.suite.workload import Item


@pytest.fixture(scope="module")
def draft_llm(smollm2_path):
    """A second Llama on SmolLM2-135M: the draft-model methods' draft model
    (SmolLM2 drafting for itself, as tests/engine/test_draft_model_engine.py does)."""
    from tests.support.loaders import load_llama

    m = load_llama(smollm2_path, n_ctx=2048)
    yield m
    m.close()


def test_runner_loads_through_models(smollm2_path, tmp_path):
    plain = loading.load(smollm2_path, "plain", 256, 1)
    lookup = loading.load("smollm2-135m", "prompt lookup", 256, None)
    try:
        assert plain.model_path == lookup.model_path == smollm2_path
        assert plain.n_ctx() == 256 and plain.context_params.n_threads == 1
        assert plain.draft_model is None and lookup.draft_model is not None
    finally:
        plain.close()
        lookup.close()
    with pytest.raises(models.ModelLoadError, match="neither a file nor one of"):
        loading.load(str(tmp_path / "missing.gguf"), "plain", 256, 1)
    assert loading.model_path("smollm2-135m") == models.resolve_model_path("smollm2-135m")


# The proposers each ngramspec method's name says its engine drafts with, in order
# (a prediction method's PredictionProposer joins per call, with the item's prediction).
PROPOSERS_BY_METHOD = {
    "ngramspec": ["ngram", "copy"],
    "ngramspec n-gram only": ["ngram"],
    "ngramspec fast": ["ngram", "copy"],
    "ngramspec+draft": ["ngram", "copy", "draft_model"],
    "draft-only": ["draft_model"],
    "ngramspec+prediction": ["ngram", "copy"],
    "ngramspec+wrong-prediction": ["ngram", "copy"],
}


def test_every_engine_method_is_built_from_engine_options():
    from ngramspec.options import EngineOptions

    assert set(methods.ENGINE_OPTIONS) == {"ngramspec", *methods.EXTRA_METHODS} == set(PROPOSERS_BY_METHOD)
    assert all(isinstance(o, EngineOptions) for o in methods.ENGINE_OPTIONS.values())
    # llama-cpp-python's own decoding: no engine
    assert not {"plain", "prompt lookup"} & set(methods.ENGINE_OPTIONS)
    assert set(methods.METHODS) - {"plain", "prompt lookup"} <= set(methods.ENGINE_OPTIONS)
    assert set(methods.OTHER_BUILD_METHODS) - {"plain"} <= set(methods.ENGINE_OPTIONS)


def test_each_methods_engine_holds_the_proposers_its_name_says(llm, draft_llm):
    # (built, not run: no verify plan is made, so nothing is measured)
    for method, names in PROPOSERS_BY_METHOD.items():
        draft = {"draft_model": draft_llm} if method in methods.DRAFT_METHODS else {}
        engine = loading.make_engine(llm, method, **draft)
        assert [p.name for p in engine.proposers] == names, method
        assert (engine.draft_proposer is not None) == ("draft_model" in names), method
        assert engine.options == methods.ENGINE_OPTIONS[method].replace(**draft), method
    fast = loading.make_engine(llm, "ngramspec fast")
    assert fast.exact is False and fast.max_draft == methods.MEASURED_MAX_BATCH - 1
    assert loading.make_engine(llm, "ngramspec").exact is True
    only = loading.make_engine(llm, "draft-only", draft_model=draft_llm)
    assert only.max_draft == 3 and only.options.adaptive is False    # eager: every allowed draft token verified
    with pytest.raises(ValueError, match="without a draft model"):
        loading.make_engine(llm, "ngramspec", draft_model=draft_llm)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_vmhwm_reader_is_shared_by_probe_and_server():
    assert rss.vmhwm_mib() == pytest.approx(rss.peak_mib())
    assert rss.peak_mib() > 1
    child: subprocess.Popen[Any] = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        from ngramspec.suite.llama_server import LlamaServer

        srv = LlamaServer.__new__(LlamaServer)   # only its process handle matters here
        srv.proc = child
        # Right after the fork the child is still tiny (VmHWM of a few KiB until
        # python has started): wait until it has grown, for at most 10 s.
        import time

        for _ in range(100):
            peak = srv.peak_rss_mib()
            if peak and peak > 1:
                break
            time.sleep(0.1)
        assert peak is not None and peak > 1
    finally:
        child.kill()
        child.wait()
    assert rss.vmhwm_mib(child.pid) is None      # gone
    assert rss.vmhwm_mib(2 ** 30) is None


def test_rss_probe_runs_an_engine_method(smollm2_path):
    import json
    from dataclasses import asdict

    item = Item("tiny", "def add(a, b):\n    return", 4, ["\n"])
    job = json.dumps({"path": smollm2_path, "method": "ngramspec fast", "item": asdict(item), "n_ctx": 256,
                      "threads": 1})
    out = subprocess.run([sys.executable, "-m", "ngramspec.suite.rss"], input=job, capture_output=True, text=True,
                         timeout=300, env={**os.environ})
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip().splitlines()[-1]) > 50


@pytest.mark.parametrize("methods", [["plain"], ["plain", "ngramspec fast"], ["ngramspec"]])
def test_run_suite_refuses_methods_its_report_cannot_be_written_without(tmp_path, methods):
    # Refused at once (no model loaded, nothing run): the report needs plain and ngramspec's runs.
    from ngramspec.suite import run_suite

    with pytest.raises(ValueError, match="must include 'plain' and 'ngramspec'"):
        run_suite("smollm2-135m", quick=True, rounds=1, out_dir=tmp_path, command="test", methods=methods)
    assert not any(tmp_path.iterdir())


def test_draft_only_verifies_the_draft_models_drafts(llm, draft_llm):
    # The suite's "draft-only" method: the draft model alone proposes, and its run
    # records the draft model's figures (issue 56: both had gone missing since the
    # gates moved into engine.gates, and draft-only ran as plain decoding).
    from ngramspec import check_batch_invariance
    from ngramspec.suite.in_process import InProcessMethods

    # draft-only verifies at most 3 draft tokens: sizes up to 4, checked shallow (cheap)
    invariance = check_batch_invariance(llm, max_batch=4, depths=[8])
    engine = loading.make_engine(llm, "draft-only", invariance=invariance, draft_model=draft_llm)
    assert [p.name for p in engine.proposers] == ["draft_model"]
    assert engine.draft_proposer is engine.proposers[0]
    item = Item("tiny", "def fibonacci(n):\n", 12, [])
    run = InProcessMethods(llm, {"draft-only": engine}, draft_llm=draft_llm).run_once("draft-only", "w", item, 0)
    assert not run.error
    assert run.stats["drafted_by_source"].get("draft_model", 0) > 0, run.stats
    assert set(run.stats["drafted_by_source"]) == {"draft_model"}
    assert run.stats["draft_model"]["calls"] > 0
