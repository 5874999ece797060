"""Priming a memory: checking what ``Memory.prime`` was given, and reading files and folders."""
from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

__all__ = ["PrimeReport", "prime_inputs", "read_text_file", "walk_files"]

PathLike = Union[str, "os.PathLike[str]"]

# Priming a folder skips names starting with "." and these.
_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "venv", "build", "dist"})
_SNIFF_BYTES = 8192


@dataclass
class PrimeReport:
    """What one ``prime`` call did. ``tokens``: tokens stored now (0 when the text
    was kept as text until the memory is bound); ``pending``: documents kept as text."""
    documents: int = 0
    tokens: int = 0
    pending: int = 0
    files: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)


def prime_inputs(text: str | Sequence[str] | None,
                 path: PathLike | Sequence[PathLike] | None) -> tuple[list[str], list[Path]]:
    """``prime``'s arguments as lists of texts and paths, every one checked before
    anything is primed (see ``Memory.prime`` for what raises)."""
    texts = [text] if isinstance(text, str) else list(text or [])
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"text must be a str or a list of str, got {type(t).__name__}")
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as e:   # a lone surrogate: it could be neither tokenized nor saved
            raise ValueError(f"text[{i}] is not valid Unicode ({e.reason} at index {e.start})") from None
    given: Any = os.fsdecode(path) if isinstance(path, bytes) else path   # bytes: one path, not its bytes
    paths = [given] if isinstance(given, (str, os.PathLike)) else list(given or [])
    if any(isinstance(p, (str, os.PathLike)) and not os.fspath(p) for p in paths):
        # Path("") is "."; an unset variable (--prime "$DIR") must not prime the working
        # folder. Checked before anything is primed.
        raise ValueError("prime: an empty path; give a file or a folder")
    checked = [Path(p) for p in paths]
    for p in checked:   # every path is checked before anything is primed
        if not p.exists():
            if p.is_symlink():
                raise FileNotFoundError(f"prime: {p} is a symbolic link that leads nowhere (broken, or a loop)")
            raise FileNotFoundError(f"prime: no such file or folder: {p}")
    return texts, checked


def read_text_file(path: Path, max_bytes: int) -> tuple[str | None, str]:
    """(text, "") for a regular UTF-8 text file of at most max_bytes, else (None, why).
    Anything else is skipped unread: a FIFO would block the read for ever, and a
    device (/dev/zero) reports size 0 and never ends; the read itself stops past
    max_bytes too, in case the file grew after it was measured."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file"
        if st.st_size > max_bytes:
            return None, f"larger than {max_bytes} bytes ({st.st_size})"
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            return None, f"larger than {max_bytes} bytes"
    except OSError as e:
        return None, f"unreadable ({e.strerror or e})"
    if b"\0" in data[:_SNIFF_BYTES]:
        return None, "binary (NUL byte)"
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError:
        return None, "not UTF-8 text"


def walk_files(folder: Path) -> list[Path]:
    """Files under folder, recursively, sorted, skipping hidden names, the usual
    build and dependency folders, and symbolic links."""
    out: list[Path] = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
        for name in sorted(files):
            p = Path(root) / name
            if not name.startswith(".") and not p.is_symlink():
                out.append(p)
    return out
