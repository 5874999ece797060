"""The GPU run, on the device machine: stash the first call's model part, then in
the second call install the carried wheels, stitch and check the model, build
llama-cpp-python 0.3.36 from the trimmed sdist (CUDA, for this GPU's
architecture only), install ngramspec from the working tree, and run
``measure.py`` under a deadline, so that a partial result still comes back.

Everything it writes lives in two places: ``.gpu-work/`` (git-ignored; survives
between calls while the machine stays warm: the stashed part, the build, the
installed packages, the generated models) and ``--out`` ($OUT on the machine:
``results.json`` and ``measure.log``; the caller tees the whole log into
``run.log``). scripts/gpu/README.md has the plan and the exact device calls.

With ``--cpu`` the same steps run with CUDA off, on a CPU build, for testing it
here (``--quick`` then shrinks the measurements so that they end in minutes).

Usage (from the repository root):
  python3 scripts/gpu/gpu_run.py stash                       # call 1
  python3 scripts/gpu/gpu_run.py all --out "$OUT" --budget 560  # call 2
  .venv/bin/python scripts/gpu/gpu_run.py all --cpu --quick --out /tmp/gpu-out --budget 3600
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
from model_parts import PartsError, sha256_of, stitch  # noqa: E402

CARRY = REPO / ".gpu-carry"
WORK = REPO / ".gpu-work"
SITE = WORK / "site"               # pip --target: the carried wheels, llama-cpp-python, ngramspec
#: ngramspec's cache there (NGRAMSPEC_CACHE_DIR): the real model is stitched into its
#: models/ folder, so that ngramspec finds it by name, as it finds a model fetched from PyPI.
CACHE = WORK / "cache"
#: What the measurement keeps for writing its results and the machine's shutdown after the deadline.
RESERVE_S = 20


def log(msg: str) -> None:
    print(f"[gpu_run {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_manifest(folder: Path) -> dict[str, Any]:
    """The carried manifest (kept in .gpu-work too, for a later call that carries nothing)."""
    path = folder / "manifest.json"
    kept = WORK / "manifest.json"
    if path.is_file():
        WORK.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, kept)
    elif kept.is_file():
        path = kept
    else:
        raise SystemExit(f"gpu_run.py: {folder / 'manifest.json'} is missing: run scripts/gpu/prepare.py here first, "
                         f"and carry {folder.relative_to(REPO) if folder.is_relative_to(REPO) else folder}")
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


def stash(carry: Path) -> int:
    """Call 1: copy this call's model part into .gpu-work/parts (git-ignored, so it
    stays while the machine is warm) and check its sha256."""
    manifest = load_manifest(carry)
    parts = WORK / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    for part in manifest["model"]["parts"]:
        src = carry / part["file"]
        if not src.is_file():
            continue
        dest = parts / part["file"]
        shutil.copyfile(src, dest)
        got = sha256_of(dest)
        if got != part["sha256"]:
            dest.unlink()
            raise SystemExit(f"gpu_run.py: {src}: sha256 {got}, expected {part['sha256']}")
        log(f"stashed {dest} ({dest.stat().st_size} bytes, sha256 ok)")
    return 0


def run_logged(cmd: list[str], env: dict[str, str], log_path: Path, what: str) -> None:
    """Runs ``cmd`` with its output in ``log_path``; on failure, prints the log's tail and stops the run."""
    t0 = time.perf_counter()
    with log_path.open("w") as f:
        rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-40:]
        print("\n".join(tail), flush=True)
        raise SystemExit(f"gpu_run.py: {what} failed (exit {rc}); its log: {log_path}")
    log(f"{what}: {time.perf_counter() - t0:.0f} s")


def pip_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(SITE) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INDEX="1")
    return env


def install_wheels(carry: Path, manifest: dict[str, Any]) -> None:
    """The carried pure-Python wheels, offline, into SITE (unless a call before did)."""
    wheels = [str(carry / "wheels" / w["file"]) for w in manifest["wheels"]]
    if not all(Path(w).is_file() for w in wheels) and (SITE / "diskcache").is_dir():
        return
    SITE.mkdir(parents=True, exist_ok=True)
    run_logged([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
                "--upgrade", "--target", str(SITE), *wheels], pip_env(), WORK / "wheels.log", "carried wheels")


def stitch_model(carry: Path, manifest: dict[str, Any]) -> tuple[Path | None, str]:
    """(the real model, stitched and checked, or None; what happened)."""
    model = manifest["model"]
    out = CACHE / "models" / model["filename"]
    if out.is_file() and sha256_of(out) == model["sha256"]:
        return out, "already stitched (sha256 ok)"
    paths = [(carry / p["file"]) if (carry / p["file"]).is_file() else WORK / "parts" / p["file"]
             for p in model["parts"]]
    if all(p.is_file() for p in paths):
        log("checking and stitching the model parts")
    try:
        stitch(paths, out, model["sha256"], [p["sha256"] for p in model["parts"]])
    except PartsError as e:
        return None, f"not stitched: {e} (call 1 ran on another machine, or not at all)"
    return out, f"stitched from {len(paths)} parts, sha256 {model['sha256']} ok"


def gpu_arch() -> str:
    """This GPU's compute capability as CMake names it ("9.0" -> "90")."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                         text=True, check=True).stdout.split()
    return out[0].replace(".", "")


def llama_build_module() -> Any:
    """ngramspec.builds.llama_build, loaded from the source tree (ngramspec is not installed yet)."""
    path = REPO / "python" / "ngramspec" / "builds" / "llama_build.py"
    spec = importlib.util.spec_from_file_location("ngramspec_llama_build", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def cmake_flags(cpu: bool) -> list[str]:
    """The unpatched exact build's flags (LLAMAFILE, REPACK and AMX off, this CPU's
    instruction sets: the run builds the trimmed sdist without ngramspec's CPU patches),
    plus CUDA for this GPU only, less the other GPU architectures."""
    flags: list[str] = llama_build_module().cmake_args("exact", environ={}, patched=False)
    if not cpu:
        flags += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={gpu_arch()}-real", "-DGGML_CUDA_NCCL=OFF"]
    return flags


def build_llama(carry: Path, manifest: dict[str, Any], flags: list[str]) -> str:
    """Builds and installs llama-cpp-python from the trimmed sdist into SITE, unless
    a build with the same flags is there already (a second call on a warm machine)."""
    stamp = WORK / "llama-build.stamp"
    key = hashlib.sha256("\n".join([manifest["sdist"]["sha256"], *flags]).encode()).hexdigest()
    if stamp.is_file() and stamp.read_text() == key and (SITE / "llama_cpp").is_dir():
        return "already built with these flags"
    src_root = WORK / "src"
    tarball = carry / manifest["sdist"]["file"]
    if not tarball.is_file():
        raise SystemExit(f"gpu_run.py: no llama-cpp-python build here and no sdist carried ({tarball}): this is a "
                         "fresh machine; run call 2 again with its carry")
    shutil.rmtree(src_root, ignore_errors=True)
    src_root.mkdir(parents=True)
    safe: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(tarball) as tar:
        tar.extractall(src_root, **safe)
    src = src_root / manifest["sdist"]["top"]
    env = pip_env()
    env.update(CMAKE_ARGS=" ".join(flags), CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if nvcc and "-DGGML_CUDA=ON" in flags:
        env.setdefault("CUDACXX", nvcc)
    wheelhouse = WORK / "wheelhouse"
    shutil.rmtree(wheelhouse, ignore_errors=True)
    t0 = time.perf_counter()
    run_logged([sys.executable, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "--no-index",
                "--no-cache-dir", "-w", str(wheelhouse), str(src)], env, WORK / "llama-build.log",
               "llama-cpp-python build")
    seconds = time.perf_counter() - t0
    wheel = next(wheelhouse.glob("llama_cpp_python-*.whl"))
    run_logged([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
                "--upgrade", "--target", str(SITE), str(wheel)], pip_env(), WORK / "llama-install.log",
               "llama-cpp-python install")
    stamp.write_text(key)
    return f"built in {seconds:.0f} s"


def tree_digest() -> str:
    """A digest of what ngramspec's install compiles and copies (so a changed tree is installed again)."""
    digest = hashlib.sha256()
    files = [REPO / "CMakeLists.txt", REPO / "pyproject.toml",
             *sorted((REPO / "cpp").rglob("*")), *sorted((REPO / "python").rglob("*.py"))]
    for f in files:
        if f.is_file():
            digest.update(str(f.relative_to(REPO)).encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()


def install_ngramspec() -> str:
    stamp = WORK / "ngramspec-install.stamp"
    key = tree_digest()
    if stamp.is_file() and stamp.read_text() == key and (SITE / "ngramspec").is_dir():
        return "already installed from this tree"
    env = pip_env()
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    # No build isolation: scikit-build-core and pybind11 come from the carried wheels (no index there).
    run_logged([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                "--no-cache-dir", "--no-compile", "--upgrade", "--target", str(SITE), str(REPO)], env,
               WORK / "ngramspec-install.log", "ngramspec install")
    stamp.write_text(key)
    return "installed"


def command_output(cmd: list[str]) -> str:
    """The command's output, its lines joined with " | " (at most 300 characters)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable ({type(e).__name__})"
    if p.returncode != 0:
        return f"exit {p.returncode}: {p.stderr.strip()[-200:]}"
    return " | ".join(line.strip() for line in p.stdout.strip().splitlines() if line.strip())[:300]


def machine_facts(cpu: bool) -> dict[str, Any]:
    facts: dict[str, Any] = {"cpu_count": os.cpu_count(), "python": sys.version.split()[0],
                             "cmake": command_output(["cmake", "--version"]).replace("cmake version ", "")}
    if not cpu:
        facts["gpu"] = command_output(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap,memory.total",
                                       "--format=csv,noheader"])
        facts["nvcc"] = command_output(["nvcc", "--version"])
    return facts


def run_all(opts: argparse.Namespace) -> int:
    started = time.time()
    deadline = started + opts.budget
    carry = opts.carry
    out = opts.out
    out.mkdir(parents=True, exist_ok=True)
    manifest = load_manifest(carry)
    facts = machine_facts(opts.cpu)
    log(f"machine: {json.dumps(facts)}")
    install_wheels(carry, manifest)
    model, how = stitch_model(carry, manifest)
    log(f"model {manifest['model']['filename']}: {how}")
    flags = cmake_flags(opts.cpu)
    log(f"llama-cpp-python flags: {' '.join(flags)}")
    built = build_llama(carry, manifest, flags)
    log(f"llama-cpp-python: {built}")
    log(f"ngramspec: {install_ngramspec()}")
    setup = {"machine": facts, "model": how, "llama_build": built, "cmake_flags": flags,
             "commit": manifest.get("commit", "unknown"), "prepared": manifest.get("created"),
             "setup_seconds": round(time.time() - started, 1)}
    left = deadline - time.time() - RESERVE_S
    if left < 30:
        (out / "results.json").write_text(json.dumps({"setup": setup, "error": "no time left to measure"}, indent=1))
        log("no time left to measure")
        return 1
    cmd = [sys.executable, str(HERE / "measure.py"), "--out", str(out / "results.json"), "--keep", str(WORK),
           "--deadline", str(deadline - RESERVE_S), "--work", str(WORK / "models"),
           "--gguf-py", str(WORK / "src" / manifest["sdist"]["top"] / "vendor" / "llama.cpp" / "gguf-py"),
           "--setup", json.dumps(setup)]
    if model is not None:
        cmd += ["--model", manifest["model"]["name"]]
    if opts.cpu:
        cmd += ["--cpu"]
    if opts.quick:
        cmd += ["--quick"]
    if opts.resume:
        cmd += ["--resume", str(WORK / "results.json")]
    env = dict(os.environ, PYTHONPATH=str(SITE), PYTHONUNBUFFERED="1", NGRAMSPEC_CACHE_DIR=str(CACHE))
    log(f"measuring for at most {left:.0f} s")
    with (out / "measure.log").open("w") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # measure.py stops itself between steps at its deadline; this kills one step that hangs.
        watchdog = threading.Timer(max(1.0, deadline - time.time() - RESERVE_S / 2), proc.kill)
        watchdog.start()
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                f.write(line)
                f.flush()
                if not line.startswith("  "):   # progress detail stays in measure.log
                    print(line, end="", flush=True)
            rc = proc.wait()
        finally:
            watchdog.cancel()
    log(f"measure.py exit {rc}{' (killed at the deadline)' if rc < 0 else ''}; total {time.time() - started:.0f} s")
    return rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stash", help="call 1: keep this call's model part in .gpu-work/parts")
    s.add_argument("--carry", type=Path, default=CARRY / "call1")
    a = sub.add_parser("all", help="call 2: set up, build, install and measure")
    a.add_argument("--carry", type=Path, default=CARRY / "call2")
    a.add_argument("--out", type=Path, required=True)
    a.add_argument("--budget", type=float, default=560.0, help="seconds from start to the last result written")
    a.add_argument("--cpu", action="store_true", help="CUDA off: test the run on a CPU build")
    a.add_argument("--quick", action="store_true", help="small sizes and short runs (the CPU test)")
    a.add_argument("--resume", action="store_true", help="a later call on the same warm machine: skip the steps "
                   "the last call finished (kept in .gpu-work/results.json), measure the rest")
    opts = ap.parse_args()
    if opts.command == "stash":
        return stash(opts.carry)
    return run_all(opts)


if __name__ == "__main__":
    sys.exit(main())
