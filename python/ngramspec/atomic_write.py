"""Writing a file so that a reader sees its old contents or its new ones, never a part.

The new contents go to a temporary file in the target's folder (the same file
system, so the rename is atomic), which is renamed over the target once it is
complete. On any failure, an interrupt included, the temporary file is removed
and the target is left as it was.

Imports nothing of ngramspec: every layer may use it.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Union

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_writer"]

PathLike = Union[str, "os.PathLike[str]"]

# Tries at a fresh temporary name before giving up (a clash needs 48 random bits to repeat).
_NAME_TRIES = 100


@contextlib.contextmanager
def atomic_writer(path: PathLike, *, durable: bool = False, mode: int = 0o666) -> Iterator[IO[bytes]]:
    """A binary file for ``path``'s new contents: it replaces ``path`` when the
    ``with`` block ends without an exception, and is removed otherwise.

    durable: flush and fsync the file before the rename, and the folder after it,
        so that the new contents survive a power cut (slower: for files a user keeps).
    mode: permission bits of a new file, before the umask (as for ``open``). A file
        that replaces an existing one keeps that one's permission bits, as writing
        into it would (a rename would otherwise leave them at ``mode``).
    The temporary file is ``.NAME.RANDOM.tmp`` in the target's folder; a folder
    that does not exist raises FileNotFoundError and creates nothing."""
    target = Path(path)
    folder = target.parent
    fd, tmp = _create_temporary(folder, target.name, mode)
    try:
        kept = _existing_mode(target)
        if kept is not None:
            os.chmod(tmp, kept)
        with os.fdopen(fd, "wb") as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:   # an interrupt too: the temporary file must not outlive a failed write
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_folder(folder)


def atomic_write_bytes(path: PathLike, data: bytes, *, durable: bool = False, mode: int = 0o666) -> None:
    """Replace ``path`` by ``data`` atomically (``atomic_writer``'s rules)."""
    with atomic_writer(path, durable=durable, mode=mode) as f:
        f.write(data)


def atomic_write_text(path: PathLike, text: str, *, encoding: str = "utf-8", durable: bool = False,
                      mode: int = 0o666) -> None:
    """Replace ``path`` by ``text`` encoded with ``encoding`` atomically (no newline translation)."""
    atomic_write_bytes(path, text.encode(encoding), durable=durable, mode=mode)


def _create_temporary(folder: Path, name: str, mode: int) -> tuple[int, str]:
    """A new, empty file next to the target, opened for writing: (descriptor, path).
    O_EXCL: an existing file (a link an attacker planted included) is never opened."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_NAME_TRIES):
        tmp = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name for {name!r} in {str(folder)!r}")


def _existing_mode(target: Path) -> int | None:
    """The permission bits of the regular file at ``target``, None when there is none."""
    try:
        st = os.stat(target)
    except OSError:
        return None
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else None


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (not possible on every platform: then skipped)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
