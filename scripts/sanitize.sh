#!/usr/bin/env bash
# The C++ core under AddressSanitizer + UndefinedBehaviorSanitizer.
#
# Builds ngramspec._core with -DNGRAMSPEC_SANITIZE=address,undefined straight from
# CMakeLists.txt (so every source it lists is covered) into its own folder, never
# into .venv, next to a copy of python/ngramspec; puts that folder first on
# PYTHONPATH so `import ngramspec` finds the sanitized _core, preloads the ASan
# runtime into the (uninstrumented) Python interpreter, and runs the predictor and
# matcher property tests plus the randomized stress of every binding. Any ASan or
# UBSan report aborts the process, so the job fails.
#
# Usage: bash scripts/sanitize.sh        (after scripts/setup.sh)
# Environment: PYTHON (default .venv/bin/python), NGRAMSPEC_SANITIZE_DIR (default
# build/asan), NGRAMSPEC_STRESS_SECONDS (default 20), CMAKE_BUILD_PARALLEL_LEVEL (2).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
start=$(date +%s)

PY=${PYTHON:-.venv/bin/python}
BUILD=${NGRAMSPEC_SANITIZE_DIR:-build/asan}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
PKG="$BUILD/pkg"
CXX=${CXX:-g++}

# The runtime must be the one the compiler links against. libstdc++ is preloaded
# too: python does not link it, and without it ASan cannot intercept __cxa_throw
# ("CHECK failed: asan_interceptors.cpp ... real___cxa_throw") on the first C++
# exception, i.e. on the first bad argument.
ASAN_LIB=$("$CXX" -print-file-name=libasan.so)
STDCXX_LIB=$("$CXX" -print-file-name=libstdc++.so)
for lib in "$ASAN_LIB" "$STDCXX_LIB"; do
    [ -f "$lib" ] || { echo "sanitize.sh: $CXX has no $(basename "$lib")" >&2; exit 1; }
done

# Put the venv's tools (cmake, ninja) first.
export PATH="$(dirname "$PY"):$PATH"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
[ -f "$BUILD/CMakeCache.txt" ] && GEN=()   # keep the generator of an existing build

mkdir -p "$BUILD"
LOG="$BUILD/configure.log"
cmake -S . -B "$BUILD" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$CXX" \
    -DNGRAMSPEC_SANITIZE=address,undefined \
    -DPython_EXECUTABLE="$("$PY" -c 'import sys; print(sys.executable)')" \
    -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" >"$LOG" 2>&1 \
    || { cat "$LOG" >&2; exit 1; }
cmake --build "$BUILD" --target _core -j "${CMAKE_BUILD_PARALLEL_LEVEL:-2}"

# A private copy of the package with the sanitized extension in it.
rm -rf "$PKG"
mkdir -p "$PKG"
cp -r python/ngramspec "$PKG/ngramspec"
find "$PKG/ngramspec" -name '_core*.so' -delete
cp "$BUILD"/_core*.so "$PKG/ngramspec/"

export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
export LD_PRELOAD="$ASAN_LIB:$STDCXX_LIB${LD_PRELOAD:+:$LD_PRELOAD}"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86:strict_init_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=87${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export NGRAMSPEC_STRESS_SECONDS=${NGRAMSPEC_STRESS_SECONDS:-20}

# Refuse to test anything but the sanitized build.
"$PY" - "$PKG" <<'EOF'
import sys
import ngramspec._core as core
where = core.__file__
assert where.startswith(sys.argv[1]), f"ngramspec._core came from {where}, not the sanitized build"
print("sanitized core:", where)
EOF

# The C++ core's property and bad-input tests and the stress of every binding (not the
# memory soak of test_suffix_matcher_bounded.py: its RSS bounds do not hold under ASan).
TESTS=(tests/core/test_predictor.py tests/core/test_suffix_matcher.py tests/core/test_predictor_bad_input.py
       tests/core/test_corpus_matcher.py tests/core/test_stress_bindings.py)

# -p no:cacheprovider: leave .pytest_cache to the main run. --capture=sys: pytest
# must not swallow file descriptor 2, where the sanitizer prints its report before
# it ends the process (exit code 86 for ASan, 87 for UBSan), which fails this job.
set +e
"$PY" -m pytest -q -p no:cacheprovider --capture=sys "${TESTS[@]}"
rc=$?
set -e
echo "sanitize.sh: exit $rc after $(( $(date +%s) - start )) s"
exit $rc
