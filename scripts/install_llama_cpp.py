#!/usr/bin/env python3
"""Build (once) and install the pinned llama-cpp-python with flags that work here.

Why this exists (see shared/FACTS.md §1-2):
  * the default build uses GGML_NATIVE=ON and crashes on some CPUs (AMX matmul);
  * llamafile's sgemm and the CPU "repack" kernels make a batched forward pass
    differ bit-for-bit from single-token decoding, which breaks exact
    speculative verification.
pip's own wheel cache does not key on CMAKE_ARGS, so we never let pip reuse a
wheel: the wheel is built with --no-cache-dir and cached by us under
``$NGRAMSPEC_CACHE_DIR/wheels/<version>-<hash of flags>/``.

This is the one place where the llama.cpp build flags live.

Usage: python scripts/install_llama_cpp.py [--print-flags] [--rebuild]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

LLAMA_CPP_PYTHON_VERSION = "0.3.36"

# Flags that are the same on every machine.
BASE_FLAGS = [
    "-DGGML_NATIVE=OFF",        # never -march=native: the wheel is keyed by explicit features
    "-DGGML_LLAMAFILE=OFF",     # tinyBLAS sgemm: batch-size dependent results
    "-DGGML_CPU_REPACK=OFF",    # repacked Q4_0/IQ4 kernels: batch-size dependent results
    "-DGGML_AMX_TILE=OFF",      # AMX kernels crash on the machine FACTS.md describes
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
    "-DLLAVA_BUILD=OFF",        # multimodal library: not used, halves the build time
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
]

# x86 instruction-set features: /proc/cpuinfo flag -> ggml CMake option.
X86_FEATURES = [
    ("sse4_2", "GGML_SSE42"),
    ("avx", "GGML_AVX"),
    ("avx2", "GGML_AVX2"),
    ("bmi2", "GGML_BMI2"),
    ("fma", "GGML_FMA"),
    ("f16c", "GGML_F16C"),
    ("avx_vnni", "GGML_AVX_VNNI"),
    ("avx512f", "GGML_AVX512"),
    ("avx512_vbmi", "GGML_AVX512_VBMI"),
    ("avx512_vnni", "GGML_AVX512_VNNI"),
    ("avx512_bf16", "GGML_AVX512_BF16"),
]


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cmake_args() -> list[str]:
    """All CMake flags for this machine; an explicit $CMAKE_ARGS is appended last."""
    args = list(BASE_FLAGS)
    if platform.machine().lower() in ("x86_64", "amd64"):
        flags = cpu_flags()
        args += [f"-D{opt}={'ON' if feat in flags else 'OFF'}" for feat, opt in X86_FEATURES]
    extra = os.environ.get("CMAKE_ARGS", "").split()
    return args + extra


def cache_root() -> Path:
    env = os.environ.get("NGRAMSPEC_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ngramspec"


def wheel_dir(args: list[str]) -> Path:
    key = "\n".join([LLAMA_CPP_PYTHON_VERSION, sys.version.split()[0], platform.machine()] + args)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_root() / "wheels" / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}-{digest}"


def installed_version() -> str | None:
    out = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('llama_cpp_python'))"],
        capture_output=True, text=True,
    )
    return out.stdout.strip() if out.returncode == 0 else None


def build_wheel(args: list[str], dest: Path) -> Path:
    env = dict(os.environ)
    env["CMAKE_ARGS"] = " ".join(args)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Build into a temporary folder and rename, so a killed build leaves no half wheel.
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".tmp-", dir=dest.parent))
    try:
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir",
               "--no-binary", "llama-cpp-python", "-w", str(tmp),
               f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"]
        print("building llama-cpp-python (several minutes):", " ".join(cmd), flush=True)
        print("CMAKE_ARGS=" + env["CMAKE_ARGS"], flush=True)
        subprocess.run(cmd, env=env, check=True)
        (tmp / "FLAGS.txt").write_text(env["CMAKE_ARGS"] + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--print-flags", action="store_true", help="print the CMake flags and cache folder")
    ap.add_argument("--rebuild", action="store_true", help="ignore the cached wheel")
    opts = ap.parse_args()
    args = cmake_args()
    dest = wheel_dir(args)
    if opts.print_flags:
        print(" ".join(args))
        print(dest)
        return 0
    wheels = sorted(dest.glob("llama_cpp_python-*.whl")) if dest.is_dir() else []
    if opts.rebuild or not wheels:
        build_wheel(args, dest)
        wheels = sorted(dest.glob("llama_cpp_python-*.whl"))
    else:
        print(f"using cached wheel {wheels[0]}", flush=True)
    # --force-reinstall --no-deps replaces a wheel built with other flags; deps come normally.
    subprocess.run([sys.executable, "-m", "pip", "install", "--force-reinstall", "--no-deps", str(wheels[0])],
                   check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", str(wheels[0])], check=True)
    (dest / "INSTALLED").touch()
    print(f"llama-cpp-python {installed_version()} installed from {wheels[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
