"""Build (once) llama.cpp's own ``llama-server`` from the llama.cpp that the pinned
llama-cpp-python vendors, with the same flags as scripts/install_llama_cpp.py
(exact, or with --stock as a plain ``pip install`` builds it), so the benchmark
can compare its ``--spec-type ngram-*`` modes on the same kernels. Optional: only
``ngramspec bench --llama-server PATH`` uses it.

The source comes from the llama-cpp-python sdist on PyPI; nothing is committed.
The binary is cached at ``<cache>/llama-server/<version>-<hash of flags>/bin/llama-server``
and that path is printed last.

Usage: python scripts/build_llama_server.py [--stock] [--rebuild]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from install_llama_cpp import load_llama_build  # beside this script: run as one, scripts/ is on sys.path

LLAMA_BUILD = load_llama_build()
LLAMA_CPP_PYTHON_VERSION: str = LLAMA_BUILD.PINNED_VERSION

SERVER_FLAGS = ["-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_CURL=OFF",
                "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DCMAKE_BUILD_TYPE=Release"]


def server_dir(args: list[str]) -> Path:
    digest = hashlib.sha256("\n".join([LLAMA_CPP_PYTHON_VERSION] + args).encode()).hexdigest()[:16]
    return LLAMA_BUILD.cache_root() / "llama-server" / f"{LLAMA_CPP_PYTHON_VERSION}-{digest}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stock", action="store_true", help="the flags of a plain `pip install llama-cpp-python`")
    ap.add_argument("--rebuild", action="store_true")
    opts = ap.parse_args()
    # The wheel's flags, minus the ones that switch the tools off, plus the server's.
    # The exact kind is the same patched llama.cpp as the wheel (ngramspec's patch set).
    patches = [] if opts.stock else LLAMA_BUILD.patch_files(LLAMA_CPP_PYTHON_VERSION)
    wheel_args = LLAMA_BUILD.cmake_args("stock" if opts.stock else "exact", patched=bool(patches))
    args = [a for a in wheel_args if not a.startswith(("-DLLAMA_BUILD_TOOLS", "-DLLAMA_BUILD_SERVER"))]
    args += SERVER_FLAGS
    dest = server_dir(args + ([f"patches:{LLAMA_BUILD.patch_digest(patches)}"] if patches else []))
    binary = dest / "bin" / "llama-server"
    if binary.is_file() and not opts.rebuild:
        print(binary)
        return 0
    work = Path(tempfile.mkdtemp(prefix="llama-server-build-"))
    try:
        src = LLAMA_BUILD.patched_source(work / "src", LLAMA_CPP_PYTHON_VERSION, patches) / "vendor" / "llama.cpp"
        build = work / "build"
        print("cmake flags:", " ".join(args), flush=True)
        subprocess.run(["cmake", "-S", str(src), "-B", str(build)] + args, check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "llama-server", "-j", str(os.cpu_count() or 2)],
                       check=True)
        (dest / "bin").mkdir(parents=True, exist_ok=True)
        shutil.copy2(build / "bin" / "llama-server", binary)
        (dest / "FLAGS.txt").write_text(" ".join(args) + "\n" + "".join(f"patch {f.name}\n" for f in patches))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
