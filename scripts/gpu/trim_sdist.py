"""Trims the llama-cpp-python sdist to what a build of its Python package needs,
so that it travels to the GPU machine (at most 64 MiB per call, model included).

What goes: llama-cpp-python's own docs, examples, tests and docker files, and in
the vendored llama.cpp its .git, models (vocabulary GGUFs, 75 MB), docs, examples,
tests, benches, tools (the server's web UI alone is 8.5 MB; the build that the GPU
run makes has LLAVA_BUILD, LLAMA_BUILD_TOOLS and LLAMA_BUILD_SERVER off, so no
tool is compiled), and every ggml backend other than the CPU, CUDA, BLAS and RPC
ones (ggml adds a backend's folder only when its GGML_<NAME> option is on).
What stays: the CMake files, llama.cpp's src/, common/, vendor/ (common needs
nlohmann and cpp-httplib; vendor/CMakeLists.txt adds every folder in it), ggml
with the kept backends, and gguf-py (the synthetic-model writer imports it).

The sdist is read and the trimmed one written as streams: nothing is unpacked.

Usage: python scripts/gpu/trim_sdist.py SDIST.tar.gz TRIMMED.tar.gz
"""
from __future__ import annotations

import argparse
import gzip
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

#: Folders (relative to the sdist's top folder) that no build of the package reads.
DROPPED_FOLDERS = (
    ".git", ".github", "docs", "examples", "tests", "docker", "scripts",
    "vendor/llama.cpp/.git", "vendor/llama.cpp/.github", "vendor/llama.cpp/.devops", "vendor/llama.cpp/.gemini",
    "vendor/llama.cpp/.pi", "vendor/llama.cpp/models", "vendor/llama.cpp/docs", "vendor/llama.cpp/examples",
    "vendor/llama.cpp/tests", "vendor/llama.cpp/benches", "vendor/llama.cpp/media", "vendor/llama.cpp/pocs",
    "vendor/llama.cpp/ci", "vendor/llama.cpp/scripts", "vendor/llama.cpp/conversion", "vendor/llama.cpp/skills",
    "vendor/llama.cpp/app", "vendor/llama.cpp/requirements", "vendor/llama.cpp/grammars", "vendor/llama.cpp/tools",
    *(f"vendor/llama.cpp/ggml/src/ggml-{backend}" for backend in (
        "cann", "et", "hexagon", "hip", "metal", "musa", "opencl", "openvino", "sycl", "virtgpu", "vulkan",
        "webgpu", "zdnn", "zendnn")),
)

#: Files a build needs; trim() refuses to write a tarball without any of them.
REQUIRED_FILES = (
    "pyproject.toml", "CMakeLists.txt", "README.md", "llama_cpp/__init__.py", "llama_cpp/llama_cpp.py",
    "vendor/llama.cpp/CMakeLists.txt", "vendor/llama.cpp/src/llama.cpp", "vendor/llama.cpp/common/CMakeLists.txt",
    "vendor/llama.cpp/vendor/CMakeLists.txt", "vendor/llama.cpp/ggml/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/CMakeLists.txt", "vendor/llama.cpp/ggml/src/ggml-cpu/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt", "vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu",
    "vendor/llama.cpp/gguf-py/gguf/__init__.py", "vendor/llama.cpp/gguf-py/gguf/gguf_writer.py",
)


class TrimError(Exception):
    """The sdist is not one this trimmer knows (a file a build needs is missing)."""


@dataclass
class TrimReport:
    top: str                                  # the sdist's top folder, e.g. llama_cpp_python-0.3.36
    kept_files: int = 0
    kept_bytes: int = 0                       # uncompressed
    dropped_files: int = 0
    dropped_bytes: int = 0
    dropped_by_folder: dict[str, int] = field(default_factory=dict)   # folder -> bytes


def is_dropped(relative: str) -> str | None:
    """The DROPPED_FOLDERS entry that ``relative`` (a path inside the sdist's top folder) lies in, or None."""
    for folder in DROPPED_FOLDERS:
        if relative == folder or relative.startswith(folder + "/"):
            return folder
    return None


def trim(sdist: Path, out: Path) -> TrimReport:
    """Writes ``out``, a gzipped tarball of ``sdist`` less DROPPED_FOLDERS, with the
    same top folder. Raises TrimError (and leaves no ``out``) when the sdist lacks
    one of REQUIRED_FILES or is not a single-top-folder tarball."""
    tmp = out.with_name(out.name + ".partial")
    report: TrimReport | None = None
    seen: set[str] = set()
    try:
        with tarfile.open(sdist, "r:gz") as src, \
                gzip.GzipFile(tmp, "wb", compresslevel=9, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as dst:
            for member in src:
                top, _, relative = member.name.partition("/")
                if report is None:
                    report = TrimReport(top)
                elif top != report.top:
                    raise TrimError(f"{sdist}: more than one top folder ({report.top!r}, {top!r})")
                if member.issym() or member.islnk():
                    raise TrimError(f"{sdist}: {member.name} is a link; this trimmer copies plain files only")
                folder = is_dropped(relative) if relative else None
                if folder is not None:
                    report.dropped_files += member.isfile()
                    report.dropped_bytes += member.size
                    report.dropped_by_folder[folder] = report.dropped_by_folder.get(folder, 0) + member.size
                    continue
                seen.add(relative)
                if member.isfile():
                    data = src.extractfile(member)
                    dst.addfile(member, data)
                    report.kept_files += 1
                    report.kept_bytes += member.size
                else:
                    dst.addfile(member)
        if report is None:
            raise TrimError(f"{sdist}: empty tarball")
        missing = [f for f in REQUIRED_FILES if f not in seen]
        if missing:
            raise TrimError(f"{sdist}: not a llama-cpp-python sdist this trimmer knows: missing {', '.join(missing)}")
        tmp.replace(out)
        return report
    except (tarfile.TarError, OSError, EOFError) as e:
        raise TrimError(f"{sdist}: cannot be trimmed: {e}") from None
    finally:
        tmp.unlink(missing_ok=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sdist", type=Path)
    ap.add_argument("out", type=Path)
    opts = ap.parse_args()
    try:
        report = trim(opts.sdist, opts.out)
    except TrimError as e:
        print(f"trim_sdist.py: {e}", file=sys.stderr)
        return 2
    print(f"{opts.out}: {opts.out.stat().st_size / 2**20:.1f} MiB compressed; kept {report.kept_files} files "
          f"({report.kept_bytes / 2**20:.1f} MiB), dropped {report.dropped_files} "
          f"({report.dropped_bytes / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
