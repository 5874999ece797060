"""`ngramspec install-llama`'s logic: the flags, the cache key, and the refusals that
leave the environment as it was. The build itself runs in scripts/setup.sh and
scripts/setup_stock.sh; tests/builds/test_packaging.py moves a stock venv to the cached
exact wheel."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ngramspec.builds import llama_build
from ngramspec.cli.main import main

STOCK_INFO = "CPU : SSE3 = 1 | AVX2 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
EXACT_INFO = "CPU : SSE3 = 1 | AVX2 = 1 | OPENMP = 1 | "
PATCHED_INFO = "CPU : SSE3 = 1 | AVX2 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | BATCH_INVARIANT_MAX = 65 | "


def _dry_run_as(info: str, rpc: bool, monkeypatch, capsys, tmp_path) -> str:
    """What `install-llama --dry-run` prints when the installed build reports ``info``."""
    monkeypatch.setenv("NGRAMSPEC_CACHE_DIR", str(tmp_path))
    before = llama_build.installed_build()
    monkeypatch.setattr(llama_build, "installed_build", lambda python=None: llama_build.InstalledBuild(
        before.version, info, before.location, True, rpc=rpc))
    assert main(["install-llama", "--dry-run"]) == 0
    return str(capsys.readouterr().out)


def test_exact_flags_keep_batch_kernels_off_every_verify_size():
    args = llama_build.cmake_args("exact", environ={})
    assert "-DGGML_CPU_BATCH_INVARIANT_MAX=65" in args and "-DGGML_LLAMAFILE=ON" in args
    assert "-DGGML_CPU_REPACK=ON" in args and "-DGGML_NATIVE=OFF" in args
    assert llama_build.cmake_args("exact", environ={"CMAKE_ARGS": "-DFOO=1"})[-1] == "-DFOO=1"
    # Without our patch (another llama-cpp-python version) the gate does not exist: sgemm off.
    unpatched = llama_build.cmake_args("exact", environ={}, patched=False)
    assert "-DGGML_LLAMAFILE=OFF" in unpatched and "-DGGML_CPU_REPACK=OFF" in unpatched
    assert not any("BATCH_INVARIANT" in a for a in unpatched)


def test_the_patch_set_is_for_the_pinned_version_and_keys_the_cache():
    patches = llama_build.patch_files()
    assert patches and all(p.suffix == ".patch" and p.read_text().startswith("diff --git") for p in patches)
    assert llama_build.patch_files("0.3.35") == []
    args = ["-DX=1"]
    assert llama_build.wheel_dir(args, patches=patches) != llama_build.wheel_dir(args)
    assert len(llama_build.patch_digest(patches)) == 12


def test_a_patched_build_is_exact_and_its_limit_is_read(monkeypatch, capsys, tmp_path):
    assert llama_build.is_exact_build(PATCHED_INFO)
    assert llama_build.batch_invariant_max(PATCHED_INFO) == 65
    assert llama_build.batch_invariant_max(STOCK_INFO) == 0
    out = _dry_run_as(PATCHED_INFO, True, monkeypatch, capsys, tmp_path)
    assert "is an exact build (patched: batches of up to 65 rows take one-row kernels)" in out, out


def test_an_unpatched_exact_build_is_not_current(monkeypatch, capsys, tmp_path):
    """The exact build from before the patch set is rebuilt, not 'nothing to do'."""
    out = _dry_run_as(EXACT_INFO, True, monkeypatch, capsys, tmp_path)
    assert "dry run: nothing was changed" in out and "nothing to do" not in out, out


def test_the_exact_build_this_venv_has_is_patched():
    info = llama_build.installed_build().system_info
    if not llama_build.is_exact_build(info):
        pytest.skip("this venv's llama-cpp-python is not the exact build")
    assert llama_build.batch_invariant_max(info) == llama_build.BATCH_INVARIANT_MAX, info


def test_without_patch_the_build_is_refused_in_one_line(monkeypatch, tmp_path):
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name in ("patch", "git") else real_which(name))
    with pytest.raises(llama_build.BuildError, match="apt install patch.*nothing was changed"):
        llama_build.build_wheel([], tmp_path / "w", patches=llama_build.patch_files())
    assert not (tmp_path / "w").exists()


def test_the_exact_build_has_rpc_workers_and_no_rdma_dependency():
    args = llama_build.cmake_args("exact", environ={})
    assert "-DGGML_RPC=ON" in args and "-DGGML_RPC_RDMA=OFF" in args
    assert not any("RPC" in a for a in llama_build.cmake_args("stock", environ={}))


def test_print_flags_and_dry_run_show_rpc(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("NGRAMSPEC_CACHE_DIR", str(tmp_path))
    assert main(["install-llama", "--print-flags"]) == 0
    assert "-DGGML_RPC=ON" in capsys.readouterr().out
    script = Path(__file__).resolve().parents[2] / "scripts" / "install_llama_cpp.py"
    for flag in ("--print-flags", "--dry-run"):
        p = subprocess.run([sys.executable, str(script), flag], capture_output=True, text=True,
                           env={**os.environ, "NGRAMSPEC_CACHE_DIR": str(tmp_path)})
        assert p.returncode == 0 and "-DGGML_RPC=ON" in p.stdout, p.stdout + p.stderr
    assert not (tmp_path / "wheels").exists()


def test_an_exact_build_without_rpc_is_not_current(monkeypatch, capsys, tmp_path):
    """An exact build made before GGML_RPC=ON joined the flags is rebuilt, not 'nothing to do'."""
    out = _dry_run_as(EXACT_INFO, False, monkeypatch, capsys, tmp_path)
    assert "is an exact build without RPC workers" in out and "dry run: nothing was changed" in out, out


def test_stock_flags_are_a_plain_pip_install_except_on_amx(monkeypatch):
    monkeypatch.setattr(llama_build, "cpu_flags", lambda: {"avx2", "fma"})
    assert llama_build.cmake_args("stock", environ={}) == []
    monkeypatch.setattr(llama_build, "cpu_flags", lambda: {"avx2", "fma", "amx_tile"})
    args = llama_build.cmake_args("stock", environ={})
    assert "-DGGML_AMX_TILE=OFF" in args and not any("LLAMAFILE" in a or "REPACK" in a for a in args)
    with pytest.raises(ValueError, match="unknown build kind"):
        llama_build.cmake_args("fast", environ={})


def test_the_wheel_cache_is_keyed_by_kind_version_and_flags():
    a = llama_build.wheel_dir(["-DX=1"], "0.3.36", "exact")
    assert a == llama_build.wheel_dir(["-DX=1"], "0.3.36", "exact")
    assert len({a, llama_build.wheel_dir(["-DX=2"], "0.3.36", "exact"),
                llama_build.wheel_dir(["-DX=1"], "0.3.35", "exact"),
                llama_build.wheel_dir(["-DX=1"], "0.3.36", "stock")}) == 4


def test_build_features_are_read_from_system_info():
    assert llama_build.build_features(STOCK_INFO)["LLAMAFILE"] == "1"
    assert not llama_build.is_exact_build(STOCK_INFO)
    assert llama_build.is_exact_build(EXACT_INFO)


def test_print_flags_and_dry_run_change_nothing(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("NGRAMSPEC_CACHE_DIR", str(tmp_path))
    assert main(["install-llama", "--print-flags"]) == 0
    out = capsys.readouterr().out
    assert "-DGGML_CPU_BATCH_INVARIANT_MAX=65" in out and str(tmp_path) in out
    assert "0001-cpu-batch-invariant-threshold.patch" in out
    before = llama_build.installed_build()
    monkeypatch.setattr(llama_build, "installed_build", lambda python=None: llama_build.InstalledBuild(
        before.version, STOCK_INFO, before.location, True))
    assert main(["install-llama", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "is a stock build (LLAMAFILE, REPACK on)" in out and "a new build" in out
    assert "dry run: nothing was changed" in out
    assert not (tmp_path / "wheels").exists()


def test_replacing_a_stock_build_asks_first(monkeypatch, tmp_path, capsys):
    """Without --yes and without a terminal to ask on, nothing is replaced."""
    monkeypatch.setenv("NGRAMSPEC_CACHE_DIR", str(tmp_path))
    before = llama_build.installed_build()
    monkeypatch.setattr(llama_build, "installed_build", lambda python=None: llama_build.InstalledBuild(
        before.version, STOCK_INFO, before.location, True))
    monkeypatch.setattr(llama_build, "install", lambda *a, **k: pytest.fail("installed without asking"))
    with open(os.devnull) as no_terminal:
        monkeypatch.setattr(sys, "stdin", no_terminal)
        assert main(["install-llama"]) == 2
    assert "add --yes" in capsys.readouterr().err


def test_already_exact_is_nothing_to_do(capsys):
    # This venv is the exact build (scripts/setup.sh).
    if not llama_build.is_exact_build(llama_build.installed_build().system_info):
        pytest.skip("this venv's llama-cpp-python is not the exact build")
    assert main(["install-llama", "--yes"]) == 0
    assert "already the exact build: nothing to do" in capsys.readouterr().out


def test_no_compiler_is_one_line_and_nothing_changes(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(llama_build.BuildError, match="no C or C\\+\\+ compiler found.*nothing was changed"):
        llama_build.build_wheel([], tmp_path / "w")
    assert not (tmp_path / "w").exists()


def test_an_unwritable_cache_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(llama_build.BuildError, match="cannot write the wheel cache.*nothing was changed"):
        llama_build.build_wheel([], blocker / "sub" / "w")


def test_no_write_access_to_the_environment_is_refused(monkeypatch, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(llama_build, "_site_packages", lambda: site)
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != site)
    current = llama_build.InstalledBuild("0.3.36", STOCK_INFO, "", True)
    with pytest.raises(llama_build.BuildError, match="no write access.*nothing was changed"):
        llama_build._check_writable(current)


def test_a_failed_download_is_explained(tmp_path):
    log = tmp_path / "build.log"
    log.write_text("ERROR: Could not find a version that satisfies the requirement llama-cpp-python==9.9.9\n")
    msg = llama_build._explain_failure(log, "9.9.9")
    assert msg.startswith("could not download llama-cpp-python 9.9.9's source") and "nothing was changed" in msg


def test_the_script_delegates_to_the_package():
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "scripts" / "install_llama_cpp.py"), "--print-flags"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert " ".join(llama_build.cmake_args("exact")) in out.stdout
