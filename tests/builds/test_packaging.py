"""The package a user installs: sdist -> wheel -> a fresh venv -> `ngramspec doctor` and a generation.

`python -m build` makes the sdist, then the wheel from the unpacked sdist alone, which
proves the sdist carries everything CMake needs. The wheel goes into a fresh venv
together with the llama-cpp-python wheel that scripts/install_llama_cpp.py built and
cached (so nothing rebuilds it), plus numpy and friends from the configured index,
pinned as in requirements-dev.txt. About 1.5-3 minutes, most of it compiling the core.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.model]

ROOT = Path(__file__).resolve().parents[2]
PIP_QUIET = ["--disable-pip-version-check", "-q"]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that could make the fresh venv import another ngramspec."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def run(cmd: list[object], timeout: int, **kw) -> subprocess.CompletedProcess[str]:
    kw.setdefault("env", clean_env())
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    shown = " ".join(map(str, cmd))
    assert p.returncode == 0, f"{shown} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def cached_llama_wheel(kind: str = "exact") -> Path:
    """The wheel scripts/install_llama_cpp.py (exact) or scripts/setup_stock.sh (stock)
    built for this machine and cached."""
    from ngramspec.builds import llama_build

    folder = llama_build.plan(kind, llama_build.PINNED_VERSION).folder
    wheel = llama_build.cached_wheel(folder)
    if wheel is None:
        setup = "scripts/setup.sh" if kind == "exact" else "scripts/setup_stock.sh"
        pytest.skip(f"no cached {kind} llama-cpp-python wheel in {folder}: run {setup} first")
    return wheel


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(sdist, wheel): the wheel built from the sdist alone."""
    pytest.importorskip("build", reason="`build` is in requirements-dev.txt: run scripts/setup.sh")
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2"))
    # Without --sdist/--wheel, build makes the sdist and then the wheel from it.
    # --no-isolation: the build tools are the venv's pinned ones (requirements-dev.txt).
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT], timeout=900, env=env)
    sdists, wheels = sorted(out.glob("ngramspec-*.tar.gz")), sorted(out.glob("ngramspec-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return sdists[0], wheels[0]


def test_sdist_carries_the_sources(built):
    sdist, _ = built
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    needed = {"CMakeLists.txt", "pyproject.toml", "README.md", "python/ngramspec/__init__.py",
              "python/ngramspec/_core.pyi", "python/ngramspec/py.typed"}
    cmake = (ROOT / "CMakeLists.txt").read_text()
    needed |= {f"cpp/{p.name}" for p in (ROOT / "cpp").iterdir() if p.name in cmake}   # every source CMake lists
    needed |= {f"cpp/{p.name}" for p in (ROOT / "cpp").glob("*.hpp")}
    assert needed <= names, f"missing from the sdist: {sorted(needed - names)}"
    assert not any(n.startswith((".venv/", "build/", "dist/")) for n in names)


def test_wheel_carries_the_extension_and_the_type_information(built):
    _, wheel = built
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"ngramspec/_core.pyi", "ngramspec/py.typed", "ngramspec/__init__.py", "ngramspec/cli/main.py",
            "ngramspec/engine/speculative_engine.py", "ngramspec/server/app.py"} <= names
    assert any(n.startswith("ngramspec/_core.") and n.endswith((".so", ".pyd")) for n in names), sorted(names)
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "ngramspec = ngramspec.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_fresh_venv_runs_doctor_and_a_generation(built, tmp_path, smollm2_path):
    _, wheel = built
    llama_wheel = cached_llama_wheel()
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py = env_dir / "bin" / "python"
    # One resolve: the cached llama-cpp-python wheel by path, ngramspec's wheel, their
    # dependencies from the index, pinned like the dev venv. --only-binary: nothing is
    # compiled, so llama-cpp-python cannot be rebuilt with other flags.
    p = run([py, "-m", "pip", "install", *PIP_QUIET, "--only-binary", ":all:", "-c", ROOT / "requirements-dev.txt",
             llama_wheel, wheel], timeout=600)
    assert "Building wheel" not in p.stdout + p.stderr
    # llama-cpp-python came from that file (pip records where).
    probe = ("import importlib.metadata as m, json; d = m.distribution('llama_cpp_python');"
             "print(json.dumps([d.version, json.loads(d.read_text('direct_url.json') or '{}').get('url', '')]))")
    version, url = json.loads(run([py, "-c", probe], timeout=60).stdout)
    assert version == "0.3.36" and url.endswith(llama_wheel.name), url

    # Out of the source tree, so `import ngramspec` can only be the installed wheel.
    cwd = tmp_path
    where = run([py, "-c", "import ngramspec, ngramspec._core as c; print(ngramspec.__file__, c.__file__)"],
                timeout=60, cwd=cwd).stdout.split()
    assert all(str(env_dir) in w for w in where), where

    exe = env_dir / "bin" / "ngramspec"
    doctor = run([exe, "doctor", "--model", smollm2_path, "--max-batch", "4", "--threads", "2", "--no-trial"],
                 timeout=300, cwd=cwd)
    assert "llama-cpp-python 0.3.36, an exact build" in doctor.stdout
    assert "batch  invariant" in doctor.stdout and "exact speculation POSSIBLE" in doctor.stdout

    gen = run([exe, "generate", "--model", smollm2_path, "--max-tokens", "16", "--threads", "2", "--json",
               "def fibonacci(n):"], timeout=300, cwd=cwd)
    out = json.loads(gen.stdout)
    assert out["usage"]["completion_tokens"] >= 1 and out["choices"][0]["text"]
    assert out["speculative"]["used"] is True


def test_a_stock_user_is_told_and_moved_to_the_exact_build(built, tmp_path, smollm2_path):
    """Where users are: a plain `pip install llama-cpp-python`, then ngramspec. The
    doctor names the problem and the command; the command (with the cached exact
    wheel, so nothing is compiled here) turns the environment into the exact build."""
    _, wheel = built
    stock, exact = cached_llama_wheel("stock"), cached_llama_wheel("exact")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py, exe = env_dir / "bin" / "python", env_dir / "bin" / "ngramspec"
    run([py, "-m", "pip", "install", *PIP_QUIET, "--only-binary", ":all:", "-c", ROOT / "requirements-dev.txt",
         stock, wheel], timeout=600)
    doctor = [exe, "doctor", "--model", smollm2_path, "--max-batch", "4", "--threads", "2", "--no-trial"]
    before = subprocess.run([str(c) for c in doctor], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                            env=clean_env())
    assert before.returncode == 1, before.stdout + before.stderr     # exact speculation is not possible
    assert "a stock build" in before.stdout and "LLAMAFILE" in before.stdout
    assert "exact speculation NOT possible" in before.stdout
    assert "ngramspec install-llama" in before.stdout

    dry = run([exe, "install-llama", "--dry-run"], timeout=120, cwd=tmp_path)
    assert "a stock build" in dry.stdout and str(exact) in dry.stdout and "nothing was changed" in dry.stdout
    refused = subprocess.run([str(exe), "install-llama"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                             env=clean_env(), stdin=subprocess.DEVNULL)
    assert refused.returncode != 0 and "--yes" in refused.stderr
    info = ("import llama_cpp; print(llama_cpp.llama_print_system_info().decode())")
    assert "LLAMAFILE = 1" in run([py, "-c", info], timeout=60).stdout     # nothing was changed

    moved = run([exe, "install-llama", "--yes"], timeout=600, cwd=tmp_path)
    assert "building" not in moved.stderr.lower(), moved.stderr      # the cached wheel, no compile
    assert "an exact build" in moved.stdout
    assert "BATCH_INVARIANT_MAX = 65" in run([py, "-c", info], timeout=60).stdout   # the patched build
    after = run(doctor, timeout=300, cwd=tmp_path)
    assert "an exact build" in after.stdout and "exact speculation POSSIBLE" in after.stdout
