"""llama.cpp's tiled K-quant matmul is turned off only when asked
(``ngramspec.prefer_exact_kernels()`` or ``GGML_CPU_TILED_MM=0``): then verify batches
of 8+ rows of a K-quant model round as one-token decoding does. Importing ngramspec
leaves it as llama.cpp has it (the switch slows a K-quant prefill: docs/exactness.md)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ngramspec.builds.build_info import is_exact_build

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
    assert _python(asked) == ("0" if is_exact_build() else "None")
    assert _python(asked, GGML_CPU_TILED_MM="1") == "1"


@pytest.mark.skipif(not is_exact_build(), reason="a stock build has other batch variance (llamafile, repack)")
def test_k_quant_batches_of_8_and_more_are_exact_with_the_tiled_matmul_off(smollm2_q4k_path):
    asked = PROBE.format(path=smollm2_q4k_path, before="ngramspec.prefer_exact_kernels()")
    assert _python(asked) == "0 12"
    # The tiled kernel kept (the default): 8+ rows round differently, and the check says so.
    assert _python(PROBE.format(path=smollm2_q4k_path, before="")) == "None 7"
