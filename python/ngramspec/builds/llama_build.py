"""Builds llama-cpp-python with the flags exact speculation needs, and installs it.

``ngramspec install-llama`` (and ``scripts/install_llama_cpp.py``) rebuild the
installed llama-cpp-python version from its source on PyPI:

- our patch set (``patches/``, applied to the sdist's vendored llama.cpp in name
  order) and ``GGML_CPU_BATCH_INVARIANT_MAX=65``: a mat-mul of at most 65 rows (every
  verify batch) runs only the one-row kernels, so each of its rows is bit-identical to
  one-token decoding, while larger batches (prompt processing) keep llamafile's sgemm
  and the tiled K-quant matmul;
- ``GGML_CPU_REPACK=ON`` as in a stock build: repacked Q4_0/Q4_K/IQ4_NL weights decode one
  token with a gemv that is faster than vec_dot (Qwen2.5-Coder-1.5B Q4_K_M: 29 against
  41 ms), and the patch runs every row of a batch of up to 65 through that gemv;
- ``GGML_NATIVE=OFF`` with the instruction-set options read from /proc/cpuinfo, and
  AMX off: a native build crashes on CPUs with AMX (the first ``llama_decode``
  dies in ``ggml_backend_amx_mul_mat``).

The wheel is built once with ``pip wheel --no-cache-dir`` (pip's own wheel cache
ignores CMAKE_ARGS and would hand back a wheel built with other flags) and cached
under ``<cache>/wheels/llama_cpp_python-<version>-<hash of Python, machine, flags
and patch set>/``. A ``stock`` build (no flags, as a plain ``pip install`` makes it) is
cached the same way, for tests and benchmarks against what users have.

Nothing in the environment changes until a wheel has been built; the installed
llama-cpp-python is backed up, and put back if the new one cannot be imported.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PINNED_VERSION", "BuildError", "Plan", "cmake_args", "wheel_dir", "cached_wheel", "build_wheel",
           "installed_build", "plan", "install", "patch_files", "patch_digest", "patched_source", "batch_invariant_max"]

#: The llama-cpp-python version ngramspec is tested with.
PINNED_VERSION = "0.3.36"

#: The largest mat-mul (rows of src1) the patched CPU backend computes with the one-row
#: kernels only: one more than the engine's largest draft (64), so every verify batch.
BATCH_INVARIANT_MAX = 65

#: Our patches to the pinned sdist's vendored llama.cpp, applied in name order by an
#: exact build of PINNED_VERSION (docs/exactness.md says what each changes and why).
PATCHES_DIR = Path(__file__).resolve().parent / "patches"

#: Flags that are the same on every machine (exact build).
BASE_FLAGS = [
    "-DGGML_NATIVE=OFF",        # never -march=native: the wheel is keyed by explicit features
    "-DGGML_LLAMAFILE=ON",      # llamafile's sgemm, for batches above the invariant size only
    f"-DGGML_CPU_BATCH_INVARIANT_MAX={BATCH_INVARIANT_MAX}",   # our patch: verify sizes take one-row kernels
    "-DGGML_CPU_REPACK=ON",     # repacked weights: fast one-token gemv; gemm above the invariant size only
    "-DGGML_AMX_TILE=OFF",      # AMX kernels crash on the first decode on AMX CPUs
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
    "-DGGML_RPC=ON",            # llama.cpp's RPC backend: layers on other machines (ngramspec rpc-worker)
    "-DGGML_RPC_RDMA=OFF",      # else on by default where libibverbs is found, tying the wheel to it
    "-DLLAVA_BUILD=OFF",        # multimodal library: not used, halves the build time
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
]

#: What an unpatched exact build (a version other than the pinned one) sets instead:
#: without our patch, llamafile's sgemm would take every batch of 2+ rows.
UNPATCHED_FLAGS = {"-DGGML_LLAMAFILE": "-DGGML_LLAMAFILE=OFF", "-DGGML_CPU_REPACK": "-DGGML_CPU_REPACK=OFF"}

#: x86 instruction-set features: /proc/cpuinfo flag -> ggml CMake option.
X86_FEATURES = [
    ("sse4_2", "GGML_SSE42"),
    ("avx", "GGML_AVX"),
    ("avx2", "GGML_AVX2"),
    ("bmi2", "GGML_BMI2"),
    ("fma", "GGML_FMA"),
    ("f16c", "GGML_F16C"),
    ("avx_vnni", "GGML_AVX_VNNI"),
    ("avx512f", "GGML_AVX512"),
    ("avx512vbmi", "GGML_AVX512_VBMI"),     # Linux spells it without the underscore
    ("avx512_vnni", "GGML_AVX512_VNNI"),
    ("avx512_bf16", "GGML_AVX512_BF16"),
]

_NETWORK_ERRORS = ("NewConnectionError", "Network is unreachable", "Temporary failure in name resolution",
                   "Name or service not known", "No matching distribution found", "Could not find a version",
                   "ConnectTimeout", "ReadTimeout", "Connection refused")


#: Build features that make a batch round differently from one token, unless the build
#: is patched (BATCH_INVARIANT_FEATURE): then batches up to its value use one-row kernels.
INEXACT_FEATURES = ("LLAMAFILE", "REPACK")
BATCH_INVARIANT_FEATURE = "BATCH_INVARIANT_MAX"


def build_features(info: str) -> dict[str, str]:
    """{feature: value} from ``llama_print_system_info()`` ("AVX2 = 1" -> {"AVX2": "1"})."""
    return {m.group(1): m.group(2) for m in re.finditer(r"([A-Za-z0-9_]+) = ([^|\s]+)", info)}


def _invariant_max(features: dict[str, str]) -> int:
    value = features.get(BATCH_INVARIANT_FEATURE, "0")
    return int(value) if value.isdigit() else 0


def batch_invariant_max(info: str) -> int:
    """The patched build's BATCH_INVARIANT_MAX (0: not patched)."""
    return _invariant_max(build_features(info))


def is_exact_build(info: str) -> bool:
    """True for our patched build (batches up to BATCH_INVARIANT_MAX rows take one-row
    kernels) and for a build with none of INEXACT_FEATURES."""
    features = build_features(info)
    return _invariant_max(features) > 0 or not any(features.get(name) == "1" for name in INEXACT_FEATURES)


def patch_files(version: str = PINNED_VERSION) -> list[Path]:
    """The patches an exact build of ``version`` applies: ours, for the pinned version
    only (another version's vendored llama.cpp is not what they were made against)."""
    if version != PINNED_VERSION or not PATCHES_DIR.is_dir():
        return []
    return sorted(PATCHES_DIR.glob("*.patch"))


def patch_digest(files: Sequence[Path]) -> str:
    """A short digest of the patch set (names and contents): part of the wheel cache key."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


try:
    from ngramspec.errors import NgramspecError
except ImportError:  # loaded alone by scripts/install_llama_cpp.py, before ngramspec is built
    NgramspecError = Exception  # type: ignore[misc,assignment]


class BuildError(NgramspecError):
    """A build or install that could not be done; the message is one line, and the
    environment is as it was."""


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _isa_flags() -> list[str]:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return []
    flags = cpu_flags()
    return [f"-D{opt}={'ON' if feat in flags else 'OFF'}" for feat, opt in X86_FEATURES]


def cmake_args(kind: str = "exact", environ: dict[str, str] | None = None, *, patched: bool = True) -> list[str]:
    """The CMake flags of a build of ``kind`` on this machine; $CMAKE_ARGS is appended last.

    exact: BASE_FLAGS and the CPU's instruction sets; unpatched (another llama-cpp-python
        version than the pinned one), llamafile's sgemm off instead of gated.
    stock: none, as a plain ``pip install llama-cpp-python`` builds it; on a CPU
        with AMX (where that build crashes), the exact build's instruction-set and
        AMX flags, with LLAMAFILE and REPACK left at their defaults (on)."""
    env = os.environ if environ is None else environ
    extra = env.get("CMAKE_ARGS", "").split()
    if kind == "exact":
        base = list(BASE_FLAGS) if patched else [UNPATCHED_FLAGS.get(f.split("=")[0], f) for f in BASE_FLAGS
                                                  if not f.startswith("-DGGML_CPU_BATCH_INVARIANT_MAX")]
        return base + _isa_flags() + extra
    if kind == "stock":
        if "amx_tile" in cpu_flags():
            return ["-DGGML_NATIVE=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF",
                    *_isa_flags(), *extra]
        return extra
    raise ValueError(f"unknown build kind {kind!r} (exact, stock)")


def cache_root() -> Path:
    env = os.environ.get("NGRAMSPEC_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("ngramspec"))


def wheel_dir(args: Sequence[str], version: str = PINNED_VERSION, kind: str = "exact",
              patches: Sequence[Path] = ()) -> Path:
    """The cache folder of a wheel of ``version`` built with ``args`` (and ``patches``)
    for this Python and machine."""
    parts = [version, sys.version.split()[0], platform.machine(), *args]
    if kind != "exact":
        parts.insert(0, kind)
    if patches:
        parts.append("patches:" + patch_digest(patches))
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return cache_root() / "wheels" / f"llama_cpp_python-{version}-{digest}"


def cached_wheel(folder: Path) -> Path | None:
    wheels = sorted(folder.glob("llama_cpp_python-*.whl")) if folder.is_dir() else []
    return wheels[0] if wheels else None


def _find_compilers() -> list[str]:
    """Names of what is missing among a C and a C++ compiler."""
    missing = []
    for var, names, what in (("CC", ("cc", "gcc", "clang"), "C"), ("CXX", ("c++", "g++", "clang++"), "C++")):
        chosen = os.environ.get(var)
        found = shutil.which(chosen.split()[0]) if chosen else next((n for n in names if shutil.which(n)), None)
        if not found:
            missing.append(what)
    return missing


def _progress_line(line: str) -> tuple[int, int] | None:
    m = re.search(r"\[(\d+)/(\d+)\]", line)
    return (int(m.group(1)), int(m.group(2))) if m else None


def build_wheel(args: Sequence[str], dest: Path, version: str = PINNED_VERSION, *, quiet: bool = False,
                patches: Sequence[Path] = ()) -> Path:
    """Builds llama-cpp-python ``version`` with ``args`` into ``dest`` (a new folder,
    renamed into place only when the wheel exists, so a killed build leaves none),
    from its sdist with ``patches`` applied. Shows the compile's progress on stderr.
    BuildError (one line) on failure."""
    missing = _find_compilers()
    if missing:
        raise BuildError(f"no {' or '.join(missing)} compiler found (install gcc and g++, or clang); "
                         "nothing was changed")
    env = dict(os.environ, CMAKE_ARGS=" ".join(args))
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".tmp-", dir=dest.parent))
    except OSError as e:
        raise BuildError(f"cannot write the wheel cache {dest.parent}: {e.strerror or e}; "
                         "nothing was changed") from None
    log_path = tmp.with_suffix(".log")
    try:
        source = (str(patched_source(tmp / "src", version, patches)) if patches
                  else f"llama-cpp-python=={version}")
        cmd = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-cache-dir",
               "--disable-pip-version-check", "--no-binary", "llama-cpp-python", "-w", str(tmp), source]
        rc = _run_with_progress(cmd, env, log_path, f"building llama-cpp-python {version}", quiet)
        wheel = cached_wheel(tmp)
        if rc != 0 or wheel is None:
            raise BuildError(_explain_failure(log_path, version))
        (tmp / "FLAGS.txt").write_text(" ".join(args) + "\n" + "".join(f"patch {f.name}\n" for f in patches))
        shutil.rmtree(tmp / "src", ignore_errors=True)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
        log_path.unlink(missing_ok=True)
        found = cached_wheel(dest)
        assert found is not None
        return found
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def patched_source(where: Path, version: str, patches: Sequence[Path]) -> Path:
    """Downloads llama-cpp-python ``version``'s sdist into ``where``, unpacks it and
    applies ``patches`` (``patch -p1``, in order; none: the sdist as it is); returns
    the source folder."""
    if shutil.which("patch") is not None:
        tool = ["patch", "-p1", "--batch", "--forward", "--silent", "-i"]
    elif shutil.which("git") is not None:
        tool = ["git", "apply", "-p1"]
    elif patches:
        raise BuildError("the exact build applies ngramspec's patches with `patch` (or `git apply`), and neither "
                         "is installed (Debian/Ubuntu: apt install patch); nothing was changed")
    where.mkdir(parents=True)
    out = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
                          "--disable-pip-version-check", "-q", "-d", str(where), f"llama-cpp-python=={version}"],
                         capture_output=True, text=True)
    sdists = sorted(where.glob("llama_cpp_python-*.tar.gz"))
    if out.returncode != 0 or not sdists:
        text = out.stderr + out.stdout
        if any(s in text for s in _NETWORK_ERRORS):
            raise BuildError(f"could not download llama-cpp-python {version}'s source (no network, or no such "
                             "version on the index); nothing was changed")
        lines = text.strip().splitlines()
        raise BuildError(f"could not download llama-cpp-python {version}'s source "
                         f"({lines[-1][:160] if lines else 'pip download failed'}); nothing was changed")
    with tarfile.open(sdists[0]) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(where, filter="data")
        else:  # Python < 3.12 without the backported filters
            tar.extractall(where)  # noqa: S202  # PyPI's sdist of the pinned version
    source = where / sdists[0].name[:-len(".tar.gz")]
    for f in patches:
        done = subprocess.run([*tool, str(f)], cwd=source, capture_output=True, text=True)
        if done.returncode != 0:
            why = (done.stdout + done.stderr).strip().splitlines()
            raise BuildError(f"patch {f.name} does not apply to llama-cpp-python {version}'s source "
                             f"({why[0][:160] if why else 'patch failed'}); nothing was changed")
    return source


def _run_with_progress(cmd: list[str], env: dict[str, str], log_path: Path, what: str, quiet: bool) -> int:
    """Runs ``cmd`` with its output in ``log_path``; a progress bar follows the
    compile's [done/total] steps."""
    from tqdm import tqdm  # type: ignore[import-untyped]  # no types-tqdm in the dev tools

    with open(log_path, "w") as log, tqdm(total=None, desc=what, unit="step", disable=quiet, file=sys.stderr,
                                          bar_format="{desc}: {n_fmt}/{total_fmt} compile steps, {elapsed}") as bar:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            step = _progress_line(line)
            if step is not None:
                bar.total = step[1]
                bar.n = step[0]
                bar.refresh()
        return proc.wait()


def _explain_failure(log_path: Path, version: str) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        text = ""
    if any(s in text for s in _NETWORK_ERRORS):
        why = f"could not download llama-cpp-python {version}'s source (no network, or no such version on the index)"
    else:
        errors = [ln.strip() for ln in text.splitlines() if re.search(r"\berror\b", ln, re.I)]
        why = f"the build failed ({errors[-1][:160]})" if errors else "the build failed"
    kept = log_path.with_name("llama-cpp-python-build.log")
    try:
        shutil.copy(log_path, kept)
        where = f"; its log: {kept}"
    except OSError:
        where = ""
    return f"{why}; nothing was changed{where}"


@dataclass
class InstalledBuild:
    version: str | None           # None: not installed
    system_info: str              # llama_print_system_info(), "" when it cannot be imported
    location: str                 # where it is installed
    importable: bool
    rpc: bool = False             # built with GGML_RPC=ON (llama.cpp's RPC backend)


def installed_build(python: str | None = None) -> InstalledBuild:
    """The llama-cpp-python of an environment (this one by default), read in a
    subprocess so that this process never loads a library about to be replaced."""
    code = ("import importlib.metadata as m, json, sys\n"
            "try:\n    v = m.version('llama_cpp_python')\nexcept m.PackageNotFoundError:\n    v = None\n"
            "info, where, ok, rpc = '', '', False, False\n"
            "if v:\n    try:\n        import llama_cpp\n"
            "        info = llama_cpp.llama_print_system_info().decode(errors='replace').strip()\n"
            "        rpc = bool(llama_cpp.llama_supports_rpc())\n"
            "        where, ok = llama_cpp.__file__, True\n    except Exception as e:\n        info = repr(e)\n"
            "print(json.dumps([v, info, where, ok, rpc]))\n")
    out = subprocess.run([python or sys.executable, "-c", code], capture_output=True, text=True)
    try:
        version, info, where, ok, rpc = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return InstalledBuild(None, "", "", False)
    return InstalledBuild(version, info, where, bool(ok), bool(rpc))


@dataclass
class Plan:
    """What ``install`` would do."""
    kind: str
    version: str
    args: list[str]
    folder: Path
    wheel: Path | None            # the cached wheel, if there is one
    current: InstalledBuild
    patches: list[Path] = field(default_factory=list)   # applied to the sdist before the build

    def describe(self) -> str:
        cur = self.current
        if cur.version is None:
            now = "no llama-cpp-python is installed"
        elif not cur.importable:
            now = f"llama-cpp-python {cur.version} is installed but does not import ({cur.system_info[:120]})"
        else:
            feats = build_features(cur.system_info)
            kind = "an exact build" if is_exact_build(cur.system_info) else "a stock build"
            limit = batch_invariant_max(cur.system_info)
            on = [n for n in INEXACT_FEATURES if feats.get(n) == "1"]
            how = (f" (patched: batches of up to {limit} rows take one-row kernels)" if limit
                   else f" ({', '.join(on)} on)" if on else "")
            now = (f"llama-cpp-python {cur.version} is {kind}" + how
                   + ("" if cur.rpc else " without RPC workers") + f", at {Path(cur.location).parent}")
        source = (f"the cached wheel {self.wheel}" if self.wheel
                  else f"a new build (several minutes), cached in {self.folder}")
        patches = ", ".join(f.name for f in self.patches) or "(none)"
        return (f"{now}.\nIt will be replaced by llama-cpp-python {self.version}, {self.kind} build, from {source}.\n"
                f"CMake flags: {' '.join(self.args) or '(none)'}\nPatches to its llama.cpp: {patches}")


def plan(kind: str = "exact", version: str | None = None) -> Plan:
    current = installed_build()
    chosen = version or current.version or PINNED_VERSION
    patches = patch_files(chosen) if kind == "exact" else []
    args = cmake_args(kind, patched=bool(patches))
    folder = wheel_dir(args, chosen, kind, patches)
    return Plan(kind, chosen, args, folder, cached_wheel(folder), current, patches)


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _check_writable(current: InstalledBuild) -> None:
    targets = [_site_packages()]
    if current.location:
        targets.append(Path(current.location).parent)
    for t in targets:
        if t.exists() and not os.access(t, os.W_OK):
            raise BuildError(f"cannot write to {t} (no write access: use a virtual environment or run as its owner); "
                             "nothing was changed")


def _backup(tmp: Path) -> list[tuple[Path, Path]]:
    """Copies every file of the installed llama-cpp-python into ``tmp``;
    returns (original, copy) pairs."""
    try:
        dist = importlib.metadata.distribution("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        return []
    pairs = []
    for f in dist.files or []:
        src = Path(str(dist.locate_file(f)))
        if src.is_file():
            dst = tmp / str(f).replace("..", "_up_")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
            pairs.append((src, dst))
    return pairs


def _restore(pairs: list[tuple[Path, Path]]) -> None:
    subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", "llama-cpp-python"], capture_output=True)
    for src, dst in pairs:
        src.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(dst, src)


def install(p: Plan, *, rebuild: bool = False, quiet: bool = False) -> InstalledBuild:
    """Carries out ``p``: builds the wheel unless cached (or ``rebuild``), then
    replaces the installed llama-cpp-python with it. The old one is backed up
    first and put back if the new one does not import."""
    _check_writable(p.current)
    wheel = p.wheel
    if wheel is None or rebuild:
        wheel = build_wheel(p.args, p.folder, p.version, quiet=quiet, patches=p.patches)
    with tempfile.TemporaryDirectory(prefix="ngramspec-llama-backup-") as tmp:
        pairs = _backup(Path(tmp))
        out = subprocess.run([sys.executable, "-m", "pip", "install", "--force-reinstall", "--no-deps",
                              "--disable-pip-version-check", "-q", str(wheel)], capture_output=True, text=True)
        if out.returncode != 0:   # pip rolls back a failed install itself
            lines = (out.stderr or out.stdout).strip().splitlines()
            raise BuildError(f"pip could not install {wheel.name}: {lines[-1] if lines else 'unknown error'}; "
                             "nothing was changed")
        # Its dependencies (numpy, jinja2, diskcache...), which --no-deps skipped: present
        # already when it replaces a llama-cpp-python, needed in a fresh environment.
        subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q", str(wheel)],
                       capture_output=True, text=True)
        after = installed_build()
        if not after.importable:
            if pairs:
                _restore(pairs)
            raise BuildError(f"the new llama-cpp-python does not import ({after.system_info[:160]}); "
                             + ("the previous one was put back" if pairs else "none was installed before"))
    with contextlib.suppress(OSError):
        (p.folder / "INSTALLED").touch()
    return after
