"""The exact build's column kernels under AddressSanitizer + UndefinedBehaviorSanitizer,
on every x86 instruction set this CPU can run.

Builds llama.cpp's CPU backend (the ggml-cpu target: ggml-base and ggml-cpu) from the pinned
llama-cpp-python sdist with ngramspec's patches applied, as the exact wheel has it
(the same flags), plus ``-fsanitize=address,undefined -fno-sanitize-recover=all``,
once per instruction-set level: this CPU's own (AVX-512 where it has it) and, on an
AVX-512 CPU, AVX2 without AVX-512 (the other kernels of patches 0003-0006). Then it
runs tests/builds/test_batch_invariant_kernels.py (each column kernel against the
one-column kernel it stands in for, bit for bit, odd block counts, 1-65 columns) on
each library (NGRAMSPEC_KERNEL_LIB), with the sanitizer runtime preloaded into
Python. Any sanitizer report aborts the run, so the script fails.

The source comes from PyPI (pip download); the builds are kept under
``<cache>/kernel-asan/<digest>/<level>`` and reused.

Usage: python scripts/kernel_sanitize.py [--rebuild] [--levels native,avx2]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from install_llama_cpp import load_llama_build  # beside this script: run as one, scripts/ is on sys.path

LLAMA_BUILD = load_llama_build()
ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/builds/test_batch_invariant_kernels.py"
SANITIZE = "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
#: Only the libraries: ggml configured on its own wants files the sdist leaves out.
ONLY_LIBS = ["-DLLAMA_BUILD_COMMON=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_TOOLS=OFF",
             "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF",
             "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF"]
_AVX512 = ("-DGGML_AVX512", "-DGGML_AVX512_VBMI", "-DGGML_AVX512_VNNI", "-DGGML_AVX512_BF16")


def levels() -> dict[str, list[str]]:
    """Each instruction-set level this CPU runs, and its CMake flags."""
    exact = LLAMA_BUILD.cmake_args("exact", {})
    out = {"native": exact}
    if "-DGGML_AVX512=ON" in exact:
        out["avx2"] = [a if not a.startswith(tuple(f + "=" for f in _AVX512)) else a.split("=")[0] + "=OFF"
                       for a in exact]
    return out


def build(level: str, args: list[str], patches: list[Path], rebuild: bool) -> Path:
    """The sanitized libggml-cpu.so of ``level``, built unless it is cached."""
    key = "\n".join([LLAMA_BUILD.PINNED_VERSION, LLAMA_BUILD.patch_digest(patches), SANITIZE, *args])
    dest = LLAMA_BUILD.cache_root() / "kernel-asan" / hashlib.sha256(key.encode()).hexdigest()[:16] / level
    lib = dest / "libggml-cpu.so"
    if lib.is_file() and not rebuild:
        return lib
    work = Path(tempfile.mkdtemp(prefix=f"kernel-asan-{level}-"))
    try:
        src = LLAMA_BUILD.patched_source(work / "src", LLAMA_BUILD.PINNED_VERSION, patches)
        out = work / "build"
        flags = [*args, *ONLY_LIBS, "-DBUILD_SHARED_LIBS=ON", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_OPENMP=ON",
                 f"-DCMAKE_C_FLAGS={SANITIZE}", f"-DCMAKE_CXX_FLAGS={SANITIZE}",
                 f"-DCMAKE_SHARED_LINKER_FLAGS={SANITIZE}"]
        print(f"[{level}] cmake flags:", " ".join(flags), flush=True)
        subprocess.run(["cmake", "-S", str(src / "vendor" / "llama.cpp"), "-B", str(out), *flags], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", str(out), "--target", "ggml-cpu", "-j", str(os.cpu_count() or 2)],
                       check=True, stdout=subprocess.DEVNULL)
        dest.mkdir(parents=True, exist_ok=True)
        for f in sorted(out.rglob("libggml*.so*")):
            shutil.copy2(f, dest / f.name, follow_symlinks=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return lib


#: A column kernel told of one column more than its buffer holds: ASan must stop it.
_OUT_OF_BOUNDS = """
import ctypes, os, numpy as np
lib = ctypes.CDLL(os.environ["NGRAMSPEC_KERNEL_LIB"]); lib.ggml_cpu_init()
f = lib.ggml_vec_dot_q8_0_q8_0_cols
f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
              ctypes.c_int]
x, y, out = np.zeros(68, np.uint8), np.zeros(3 * 68, np.uint8), np.zeros(8, np.float32)
f(64, out.ctypes.data, 1, x.ctypes.data, y.ctypes.data, 68, 3)
print("in bounds: ok", flush=True)
f(64, out.ctypes.data, 1, x.ctypes.data, y.ctypes.data, 68, 4)
"""


def sanitized_env(lib: Path) -> dict[str, str]:
    """The environment that runs ``lib`` with the sanitizer runtimes preloaded into Python."""
    cxx = os.environ.get("CXX", "g++")
    runtimes = [subprocess.run([cxx, f"-print-file-name={name}"], capture_output=True, text=True,
                               check=True).stdout.strip() for name in ("libasan.so", "libubsan.so", "libstdc++.so")]
    missing = [r for r in runtimes if not os.path.isabs(r)]
    if missing:
        raise SystemExit(f"kernel_sanitize.py: {cxx} has no {', '.join(missing)}")
    return {**os.environ, "NGRAMSPEC_KERNEL_LIB": str(lib), "LD_PRELOAD": " ".join(runtimes),
           "LD_LIBRARY_PATH": f"{lib.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}",
           # Python itself is not instrumented and keeps memory to the end: leaks are not ours.
           "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1", "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


def sanitizer_bites(lib: Path) -> bool:
    """Whether ASan stops a kernel reading past its buffer in ``lib`` (else the run
    would pass whether or not the sanitizers were there)."""
    out = subprocess.run([sys.executable, "-c", _OUT_OF_BOUNDS], env=sanitized_env(lib), capture_output=True,
                         text=True)
    return out.returncode != 0 and "in bounds: ok" in out.stdout and "heap-buffer-overflow" in out.stderr


def run_test(level: str, lib: Path) -> int:
    """The kernel test on ``lib``, with the sanitizer runtimes preloaded into Python."""
    if not sanitizer_bites(lib):
        print(f"[{level}] AddressSanitizer did not stop an out-of-bounds read in {lib}", flush=True)
        return 1
    env = sanitized_env(lib)
    print(f"[{level}] ASan stops an out-of-bounds read; {TEST} on {lib}", flush=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", TEST]
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--levels", default=None, help="comma-separated, of native and avx2 (default: every one "
                                                   "this CPU runs)")
    opts = ap.parse_args()
    known = levels()
    names = opts.levels.split(",") if opts.levels else list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"kernel_sanitize.py: this CPU cannot run level(s) {unknown}; it runs {list(known)}", file=sys.stderr)
        return 2
    patches = LLAMA_BUILD.patch_files(LLAMA_BUILD.PINNED_VERSION)
    failed = []
    for name in names:
        t0 = time.perf_counter()
        lib = build(name, known[name], patches, opts.rebuild)
        built = time.perf_counter() - t0
        rc = run_test(name, lib)
        print(f"[{name}] build {built:.0f} s, test {time.perf_counter() - t0 - built:.0f} s: "
              f"{'passed' if rc == 0 else f'FAILED (exit {rc})'}", flush=True)
        if rc != 0:
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
