#!/usr/bin/env bash
# Sets up ./.venv-stock: the same pinned llama-cpp-python built as a plain
# `pip install llama-cpp-python` builds it (default flags: llamafile's sgemm and
# CPU repack on), cached like the exact wheel, plus ngramspec and its test tools.
# The tests marked `stock` run exact mode's identity checks there. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv-stock/bin/python ] || "$PYTHON" -m venv .venv-stock
VPY=.venv-stock/bin/python

"$VPY" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
# instructor and llama-index-llms-llama-cpp without their dependencies (requirements-nodeps.txt says why).
"$VPY" -m pip install -q --disable-pip-version-check --no-deps -r requirements-nodeps.txt
"$VPY" scripts/install_llama_cpp.py --stock
"$VPY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps .
