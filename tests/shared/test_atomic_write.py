"""atomic_write: a file is replaced whole or not at all, and a write that fails,
an interrupt included, removes its temporary file and leaves the old file as it
was. (The invariance cache's writer used to remove it only after an OSError.)
No model is loaded."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Callable

import pytest

from ngramspec.atomic_write import atomic_write_bytes, atomic_write_text, atomic_writer


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def raising(error: BaseException) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise error
    return fail


def test_writes_and_replaces_whole_files(tmp_path):
    target = tmp_path / "a.json"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two, é")
    assert target.read_text(encoding="utf-8") == "two, é"
    atomic_write_bytes(target, b"\x00\x01\r\n")
    assert target.read_bytes() == b"\x00\x01\r\n"
    atomic_write_text(str(target), "a\nb\n")              # a str path; no newline translation
    assert target.read_bytes() == b"a\nb\n"
    assert names(tmp_path) == ["a.json"]


def test_an_interrupt_midway_leaves_the_old_file_and_no_temporary_one(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_writer(target) as f:
        f.write(b"half of the new")
        raise KeyboardInterrupt
    assert target.read_text() == "old"
    assert names(tmp_path) == ["a.json"]


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()],
                         ids=["disk-full", "interrupt"])
def test_a_failed_rename_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch, error):
    target = tmp_path / "a.json"
    target.write_text("old")
    monkeypatch.setattr(os, "replace", raising(error))
    with pytest.raises(type(error)):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert names(tmp_path) == ["a.json"]


def test_a_missing_folder_is_an_error_and_creates_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        atomic_write_text(tmp_path / "missing" / "a.json", "x")
    assert names(tmp_path) == []


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_new_files_get_the_permissions_open_would_give(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "atomic", "x")
        (tmp_path / "plain").write_text("x")
        atomic_write_text(tmp_path / "private", "x", mode=0o600)
    finally:
        os.umask(old)

    def bits(name: str) -> int:
        return stat.S_IMODE((tmp_path / name).stat().st_mode)

    assert bits("atomic") == bits("plain") == 0o644
    assert bits("private") == 0o600


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("existing", [0o644, 0o640, 0o600])
def test_a_replaced_file_keeps_its_permissions(tmp_path, existing):
    # The rename replaced a 0644 file by the temporary file's 0600 (Memory.save).
    target = tmp_path / "kept"
    target.write_text("old")
    target.chmod(existing)
    atomic_write_text(target, "new", mode=0o600)
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == existing


def test_durable_syncs_the_file_and_its_folder(tmp_path, monkeypatch):
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write_bytes(tmp_path / "plain", b"x")
    assert synced == []
    atomic_write_bytes(tmp_path / "kept", b"x", durable=True)
    assert len(synced) == 2                                  # the file, then the folder after the rename
    assert (tmp_path / "kept").read_bytes() == b"x"


# -- the invariance cache's writer -------------------------------------------------

def test_the_invariance_cache_writer_cleans_up_after_an_interrupt(tmp_path, monkeypatch):
    from ngramspec.calibration import invariance_cache

    entry = tmp_path / "entry.json"
    assert invariance_cache._write(entry, {"a": 1}) is True
    monkeypatch.setattr(os, "replace", raising(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        invariance_cache._write(entry, {"a": 2})
    assert json.loads(entry.read_text()) == {"a": 1}
    assert names(tmp_path) == ["entry.json"]


def test_the_invariance_cache_writer_reports_a_disk_error(tmp_path, monkeypatch):
    from ngramspec.calibration import invariance_cache

    entry = tmp_path / "entry.json"
    monkeypatch.setattr(os, "replace", raising(OSError(28, "No space left on device")))
    assert invariance_cache._write(entry, {"a": 1}) is False   # a cache that cannot be written is no error
    assert names(tmp_path) == []
