"""The ngramspec command in a subprocess, as the CLI tests run it."""
from __future__ import annotations

import subprocess
import sys

__all__ = ["EXE", "TEST_MODEL", "TEST_THREADS", "ngramspec"]

EXE = [sys.executable, "-m", "ngramspec"]

#: The tests' model: SmolLM2-135M, for its speed (the command's default is a larger one).
TEST_MODEL = "smollm2-135m"

#: The threads the tests decode on, one token and batches alike: both cores of the 2-core CI
#: machine (llama-cpp-python's default is half the cores, which left one idle).
TEST_THREADS = 2


def ngramspec(*args: str, stdin: str | None = None, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``python -m ngramspec ARGS``, text in and out. ``generate`` and ``doctor``
    run on TEST_MODEL unless ARGS name a ``--model``."""
    argv = list(args)
    if argv and argv[0] in ("generate", "doctor") and "--model" not in argv and "--help" not in argv:
        argv[1:1] = ["--model", TEST_MODEL]
    return subprocess.run(EXE + argv, input=stdin if stdin is not None else "", capture_output=True, text=True,
                          timeout=timeout)
