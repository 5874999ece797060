#!/usr/bin/env bash
# Sets up ./.venv-stock: the same pinned llama-cpp-python built as a plain
# `pip install llama-cpp-python` builds it (default flags: llamafile's sgemm and
# CPU repack on), cached like the exact wheel, and the ngramspec wheel scripts/setup.sh
# built. Run scripts/setup.sh first: the test tools are not installed a second time
# (1.5 minutes of pip on a fresh machine). A .pth file adds .venv's site-packages after
# this venv's own, so this venv's llama-cpp-python and ngramspec are the ones imported
# and everything else comes from .venv. The tests marked `stock` run exact mode's
# identity checks here. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
WHEELS=(build/wheel/ngramspec-*.whl)
if [ ! -x .venv/bin/python ] || [ ! -f "${WHEELS[0]}" ]; then
    echo "setup_stock.sh: run scripts/setup.sh first (.venv and build/wheel: the test tools and ngramspec's wheel)" >&2
    exit 1
fi
PTH=ngramspec-dev-tools.pth
purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
# A .venv-stock of the old layout (its own copy of the test tools, which would shadow
# .venv's newer pins) is made again; the cached stock wheel makes that quick.
if [ -x .venv-stock/bin/python ] && [ ! -f "$(.venv-stock/bin/python -c "$purelib")/$PTH" ]; then
    "$PYTHON" -m venv --clear .venv-stock
fi
[ -x .venv-stock/bin/python ] || "$PYTHON" -m venv .venv-stock
VPY=.venv-stock/bin/python
version='import sys; print(sys.version_info[:2])'
if [ "$("$VPY" -c "$version")" != "$(.venv/bin/python -c "$version")" ]; then
    echo "setup_stock.sh: .venv-stock and .venv have different Pythons: remove .venv-stock, run again with PYTHON set" >&2
    exit 1
fi
OWN=$("$VPY" -c "$purelib")
# The install sees this venv alone: without the .pth, llama-cpp-python's installer can
# only find (and back up, or put back) this venv's own build.
rm -f "$OWN/$PTH"

# llama-cpp-python's dependencies at the versions .venv has (so that they cannot shadow
# .venv's for its tools), and platformdirs and tqdm for install_llama_cpp.py (the wheel
# cache's folder, the build's progress bar).
mkdir -p build
.venv/bin/python -m pip freeze --disable-pip-version-check --exclude ngramspec --exclude llama-cpp-python \
    | grep -E '^[A-Za-z0-9_.-]+==' > build/venv-constraints.txt
"$VPY" -m pip install -q --disable-pip-version-check -c build/venv-constraints.txt \
    numpy jinja2 MarkupSafe diskcache typing-extensions platformdirs tqdm
"$VPY" scripts/install_llama_cpp.py --stock
"$VPY" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "${WHEELS[0]}"
# site.addsitedir (not a bare path), so .venv's own .pth files are read too; Python
# writes the line, so any path is quoted right.
.venv/bin/python -c "import sysconfig; print('import site; site.addsitedir(%r)' % sysconfig.get_paths()['purelib'])" \
    > "$OWN/$PTH"
"$VPY" -c "import llama_cpp, ngramspec, pytest, fastapi
assert '.venv-stock' in llama_cpp.__file__ and '.venv-stock' in ngramspec.__file__, (llama_cpp.__file__, ngramspec.__file__)"
