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
from ngramspec.suite.sources import Item


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


def test_one_engine_table_for_suite_and_rss_probe(llm):
    assert set(methods.ENGINE_OPTIONS) == {"ngramspec", *methods.EXTRA_METHODS}
    fast = loading.make_engine(llm, "ngramspec fast")
    assert fast.exact is False and fast.max_draft == methods.MEASURED_MAX_BATCH - 1
    assert [p.name for p in loading.make_engine(llm, "ngramspec n-gram only").proposers] == ["ngram"]
    default = loading.make_engine(llm, "ngramspec")
    assert default.exact is True and [p.name for p in default.proposers] == ["ngram", "copy"]


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
