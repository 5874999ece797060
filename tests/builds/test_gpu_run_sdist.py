"""The prepared GPU run on real pieces (slow tier): the pinned llama-cpp-python sdist
(downloaded from PyPI), trimmed and configured by CMake with the exact build's
flags (every folder the build adds is still there); the synthetic-model writer
with the gguf-py of that sdist, its model loaded by llama.cpp; and the diagnosis
tools finding a kernel that rounds a batch differently on this CPU build: the batch-only
K-quant kernels (tiled matmul or repack gemm), which the patched exact build is told to
use from 8 rows (GGML_CPU_BATCH_INVARIANT_MAX=7) instead of from 66 (a Q4_K model)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.gpu_scripts import GPU, gpu_module

prepare = gpu_module("prepare")
trim_sdist = gpu_module("trim_sdist")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trimmed_source(tmp_path_factory) -> tuple[Path, Any, Path]:
    """(the trimmed tarball, its TrimReport, the folder it unpacks to)."""
    folder = tmp_path_factory.mktemp("sdist")
    sdist = prepare.download_sdist(folder)
    out = folder / "trimmed.tar.gz"
    report = trim_sdist.trim(sdist, out)
    safe: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(out) as tar:
        tar.extractall(folder / "src", **safe)
    return out, report, folder / "src" / report.top


def test_the_trimmed_sdist_is_small_and_cmake_configures_it(trimmed_source, tmp_path: Path):
    out, report, src = trimmed_source
    assert report.top == f"llama_cpp_python-{prepare.LLAMA_CPP_PYTHON_VERSION}"
    assert out.stat().st_size < 8 * 2**20            # measured: 3.4 MiB
    assert report.dropped_bytes > 150 * 2**20         # models, docs, the web UI, other backends
    flags = gpu_module("gpu_run").cmake_flags(cpu=True)      # what the run builds with, less CUDA
    bin_dir = Path(sys.executable).parent
    p = subprocess.run(["cmake", "-S", str(src), "-B", str(tmp_path / "build"), "-G", "Ninja", *flags],
                       capture_output=True, text=True, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "Build files have been written" in p.stdout


@pytest.mark.model
def test_the_synthetic_writer_makes_models_llama_cpp_loads(trimmed_source, tmp_path: Path):
    import llama_cpp

    synthetic = gpu_module("synthetic_gguf")
    gguf_py = trimmed_source[2] / "vendor" / "llama.cpp" / "gguf-py"
    for kind in synthetic.BLOCKS:
        path = synthetic.write("tiny", tmp_path / f"tiny-{kind}.gguf", weight_type=kind, gguf_py=gguf_py)
        llm = llama_cpp.Llama(str(path), n_ctx=256, logits_all=True, verbose=False)
        try:
            tokens = llm.tokenize(b"def total_price(items):\n    return 0")
            assert len(tokens) > 10 and max(tokens) < synthetic.SHAPES["tiny"].n_vocab
            llm.eval(tokens)
            logits = np.array(llm.scores[: llm.n_tokens])
            # Sane scales: finite logits of about unit spread, not zeros and not blown up.
            assert np.isfinite(logits).all() and 0.2 < float(logits.std(axis=1).mean()) < 5, kind
        finally:
            llm.close()
    with pytest.raises(ValueError, match="multiple of 256"):
        synthetic._quantized(np.random.default_rng(0), 4, 96, "q4_k")
    with pytest.raises(ValueError, match="unknown shape"):
        synthetic.write("qwen9", tmp_path / "x.gguf", gguf_py=gguf_py)


@pytest.fixture(scope="module")
def tiny_q4_k(trimmed_source, tmp_path_factory) -> str:
    synthetic = gpu_module("synthetic_gguf")
    gguf_py = trimmed_source[2] / "vendor" / "llama.cpp" / "gguf-py"
    return str(synthetic.write("tiny", tmp_path_factory.mktemp("tiny") / "tiny-q4_k.gguf", weight_type="q4_k",
                               gguf_py=gguf_py))


def _tiled_on() -> dict[str, str]:
    """The environment where batches of 8+ rows take the batch-only kernels (the tiled
    K-quant matmul or the repack gemm) as in upstream llama.cpp, while 1-7 rows stay on
    the one-row kernels: the patched exact build's threshold moved from 65 to 7 by
    GGML_CPU_BATCH_INVARIANT_MAX (read once per process)."""
    return {**os.environ, "GGML_CPU_TILED_MM": "1", "GGML_CPU_BATCH_INVARIANT_MAX": "7"}


@pytest.mark.model
def test_op_diff_finds_the_matmul_that_rounds_a_batch_of_8_differently(tiny_q4_k):
    found = {}
    for size in (8, 7):
        p = subprocess.run([sys.executable, str(GPU / "op_diff.py"), tiny_q4_k, "--size", str(size), "--depth", "8",
                            "--n-ctx", "256"], capture_output=True, text=True, env=_tiled_on(), timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
        found[size] = json.loads(p.stdout)
    # The first node of the graph that is a K-quant matmul: layer 0's query projection.
    assert found[8]["first"]["op"] == "MUL_MAT" and found[8]["first"]["name"] == "Qcur-0", found[8]["first"]
    assert found[8]["differing_count"] > 10 and found[8]["compared"] > 50
    assert found[7]["first"] is None and found[7]["compared"] == found[8]["compared"]


@pytest.mark.model
def test_the_probe_sees_a_runtime_switch_in_a_fresh_process(tiny_q4_k):
    job = json.dumps({"model": tiny_q4_k, "n_ctx": 256, "n_gpu_layers": 0, "flash_attn": False, "max_batch": 9,
                      "llama_kwargs": {}, "depths": [8, 100]})
    answers = {}
    for label, value in (("tiled on", "7"), ("tiled off", "65")):
        p = subprocess.run([sys.executable, str(GPU / "invariance_probe.py"), job], capture_output=True, text=True,
                           env={**_tiled_on(), "GGML_CPU_BATCH_INVARIANT_MAX": value}, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
        answers[label] = json.loads(p.stdout.strip().splitlines()[-1])
    assert answers["tiled on"]["invariant_sizes"] == list(range(1, 8))
    assert answers["tiled on"]["failed_at"] == {"8": 8, "9": 8}
    assert answers["tiled off"]["invariant_sizes"] == list(range(1, 10))
    bad = subprocess.run([sys.executable, str(GPU / "invariance_probe.py")], capture_output=True, text=True)
    assert bad.returncode == 2 and "Usage" in bad.stderr


# measure.py's steps on the tiny Q4_K model, as the GPU run takes them, in a process of
# their own with batches of 8+ rows on the batch-only kernels: sizes up to 9 at depth, r(B)
# at two contexts, then the diagnosis of size 8 (the probe's switch: the patched build's
# threshold back at 65).
_MEASURE = """
import dataclasses, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import measure
model, out = sys.argv[2], Path(sys.argv[3])
plan = dataclasses.replace(measure.quick_plan(), n_ctx=256, max_batch=9, diagnose_up_to=9, curve_max=9,
                           contexts=(16, 64), probe_switches=(
                               ("GGML_CPU_BATCH_INVARIANT_MAX=65", {"GGML_CPU_BATCH_INVARIANT_MAX": "65"}, {}),))
results = measure.Results(out, time.time() + 900, {})
measure.measure_model(results, "tiny", model, plan)
measure.diagnose(results, "tiny", model, plan)
print(measure.summary_table(results.data))
"""


@pytest.mark.model
def test_measure_checks_times_and_diagnoses_a_model(tiny_q4_k, tmp_path: Path):
    out = tmp_path / "results.json"
    p = subprocess.run([sys.executable, "-c", _MEASURE, str(GPU), tiny_q4_k, str(out)], capture_output=True,
                       text=True, env=_tiled_on(), timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "| tiny | fa_off | sizes 1-7 bit-exact" in p.stdout
    data = json.loads(out.read_text())
    assert all(s["status"] == "ok" for s in data["steps"]), data["steps"]
    for setting in ("fa_off", "fa_on"):
        entry = data["models"]["tiny"]["settings"][setting]
        assert entry["invariance"]["invariant_sizes"] == list(range(1, 8)), setting
        assert entry["llama_kwargs"]["flash_attn"] == (setting == "fa_on")
        cost = entry["cost"]
        assert cost["contexts"] == [16, 64] and [len(s) for s in cost["seconds"]] == [9, 9]
        assert cost["verify_cost"][0] == 1.0 and all(t > 0 for s in cost["seconds"] for t in s)
        diag = data["diagnosis"][f"tiny {setting}"]
        assert diag["size"] == 8 and diag["depth"] == 8
        assert diag["switches"]["GGML_CPU_BATCH_INVARIANT_MAX=65"]["invariant_sizes"] == list(range(1, 10))
        assert diag["op_diff"]["first"]["name"] == "Qcur-0" and diag["op_diff"]["first"]["op"] == "MUL_MAT"
