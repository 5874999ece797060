#!/usr/bin/env bash
# Static checks: ruff (lint + import order), mypy (strict for python/ngramspec), a
# -Werror build of the C++ core (-Wall -Wextra, NGRAMSPEC_WERROR=ON) into
# build/werror, never into .venv, and docs: mkdocs builds docs/ (mkdocs.yml) with
# --strict into build/site, failing on a link to a missing page or heading, and
# scripts/check_links.py checks that README.md's relative links name files that exist.
# Runs every check and fails if any failed. .ci/run runs it (docs/development.md).
# Config: pyproject.toml [tool.ruff], [tool.mypy], mkdocs.yml; ruff, mypy and werror
# also run as pre-commit hooks (.pre-commit-config.yaml).
#
# Usage: bash scripts/check.sh [ruff|mypy|werror|docs ...]     (default: all four)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
BIN=$(dirname "$PY")
export PATH="$BIN:$PATH"
checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(ruff mypy werror docs)
failed=()

for check in "${checks[@]}"; do
    echo "== $check"
    case "$check" in
        ruff)
            "$PY" -m ruff check python tests bench scripts || failed+=(ruff) ;;
        mypy)
            # Files and strictness come from pyproject.toml [tool.mypy].
            "$PY" -m mypy || failed+=(mypy)
            # Tests and bench: errors, not missing annotations (pyproject.toml explains).
            # The tests are a package (tests.support holds their helpers). --allow-any-generics: a bare
            # dict / list / Popen is a missing annotation, not an error. --no-warn-unreachable:
            # mypy keeps an attribute narrowed by an assert across the calls that change it,
            # so tests that assert a state, act, then assert the next state read as unreachable.
            echo "== mypy (tests, bench: looser)"
            # bench/ on the path: its scripts import their siblings by name, as tests import replay.
            MYPYPATH=bench "$PY" -m mypy --allow-untyped-defs --allow-incomplete-defs --allow-untyped-calls \
                --allow-untyped-decorators --no-warn-return-any --check-untyped-defs --allow-any-generics \
                --no-warn-unreachable --follow-imports=silent --explicit-package-bases tests bench \
                || failed+=(mypy-tests) ;;
        werror)
            BUILD=${NGRAMSPEC_WERROR_DIR:-build/werror}
            GEN=()
            command -v ninja >/dev/null && [ ! -f "$BUILD/CMakeCache.txt" ] && GEN=(-G Ninja)
            if cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DNGRAMSPEC_WERROR=ON \
                    -DPython_EXECUTABLE="$("$PY" -c 'import sys; print(sys.executable)')" \
                    -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" >/dev/null; then
                cmake --build "$BUILD" -j "${CMAKE_BUILD_PARALLEL_LEVEL:-2}" || failed+=(werror)
            else
                failed+=(werror)
            fi ;;
        docs)
            # No --quiet: mkdocs 1.6.1 then drops the warnings before --strict counts them,
            # and a broken link passes. The build log is shown only when it fails.
            if ! log=$("$PY" -m mkdocs build --strict -d build/site 2>&1); then
                echo "$log"
                failed+=(docs)
            fi
            "$PY" scripts/check_links.py README.md || failed+=(readme-links) ;;
        *)
            echo "check.sh: unknown check '$check' (ruff, mypy, werror, docs)" >&2; exit 2 ;;
    esac
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "check.sh: FAILED: ${failed[*]}"
    exit 1
fi
echo "check.sh: all passed"
