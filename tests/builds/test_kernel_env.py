"""On the patched exact build, llama.cpp's tiled K-quant matmul takes only batches of
more than 65 rows, so verify batches of 8+ rows of a K-quant model round as one-token
decoding does with the kernel on, and ``prefer_exact_kernels()`` leaves it on. On an
unpatched exact build it turns it off when asked (``GGML_CPU_TILED_MM=0``). Importing
ngramspec leaves it as llama.cpp has it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ngramspec.builds.build_info import batch_invariant_max, is_exact_build

PROBE = """
import os, llama_cpp, ngramspec
{before}
from ngramspec import check_batch_invariance
llm = llama_cpp.Llama({path!r}, n_ctx=512, n_threads=1, n_threads_batch=1, verbose=False)
report = check_batch_invariance(llm, max_batch=12, depths=[8, 100])
print(os.environ.get("GGML_CPU_TILED_MM"), report.max_invariant_batch)
"""


def _python(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"} | env
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_the_switch_is_set_when_asked_on_an_exact_build_only_and_never_overrides_the_user():
    assert _python("import os, ngramspec; print(os.environ.get('GGML_CPU_TILED_MM'))") == "None"
    asked = "import os, ngramspec; ngramspec.prefer_exact_kernels(); print(os.environ.get('GGML_CPU_TILED_MM'))"
    assert _python(asked) == ("0" if is_exact_build() and not batch_invariant_max() else "None")
    assert _python(asked, GGML_CPU_TILED_MM="1") == "1"


@pytest.mark.skipif(not batch_invariant_max(), reason="the patched exact build only")
def test_k_quant_batches_of_8_and_more_are_exact_with_the_tiled_matmul_on(smollm2_q4k_path):
    """The unpatched exact build certified 7 here (the tiled kernel takes 8+ rows)."""
    assert _python(PROBE.format(path=smollm2_q4k_path, before="")) == "None 12"
    asked = PROBE.format(path=smollm2_q4k_path, before="ngramspec.prefer_exact_kernels()")
    assert _python(asked) == "None 12"   # nothing to turn off
    # The tiled kernel forced on every size, one row included: exact with itself.
    assert _python(PROBE.format(path=smollm2_q4k_path, before=""), GGML_CPU_TILED_MM_FORCE="1") == "None 12"


@pytest.mark.skipif(not is_exact_build() or bool(batch_invariant_max()), reason="the unpatched exact build only")
def test_k_quant_batches_of_8_and_more_are_exact_with_the_tiled_matmul_off(smollm2_q4k_path):
    asked = PROBE.format(path=smollm2_q4k_path, before="ngramspec.prefer_exact_kernels()")
    assert _python(asked) == "0 12"
    # The tiled kernel kept (the default): 8+ rows round differently, and the check says so.
    assert _python(PROBE.format(path=smollm2_q4k_path, before="")) == "None 7"
