"""The memory file: what ``Memory.save`` writes and ``Memory.load`` reads.

Layout: an 8-byte magic, the format version and the header's length (little-endian
uint32 each), a UTF-8 JSON header (settings, tokenizer fingerprint, text still
pending, token count), the stored tokens as little-endian int32 (each document
followed by -1), and a SHA-256 of everything before it. Written atomically: a
temporary file in the same folder, fsynced, then renamed over the path.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np

from ngramspec.atomic_write import atomic_write_bytes
from ngramspec.errors import NgramspecError
from ngramspec.json_checks import is_int
from ngramspec.memory.fingerprint import TokenizerFingerprint

__all__ = ["FORMAT_VERSION", "MemoryFileError", "SavedMemory", "check_save_path", "read_memory_file",
           "write_memory_file"]

PathLike = Union[str, "os.PathLike[str]"]

FORMAT_VERSION = 1
_MAGIC = b"NGSPMEM\n"
_PREFIX = struct.Struct("<8sII")  # magic, format version, header length
_CHECKSUM_BYTES = 32
# The header's integer settings, as Memory's constructor takes them.
_SETTINGS = ("max_tokens", "anchor", "max_candidates", "max_match", "prompt_tail", "max_file_bytes")


class MemoryFileError(NgramspecError, ValueError):
    """A memory file that is not one, is corrupt or truncated, or has an unknown format."""


def check_save_path(path: PathLike) -> Path:
    """``path`` as a place ``Memory.save`` can write: not empty, not a directory
    and, if it exists, a regular file (the save renames a temporary file over it,
    which would replace a symbolic link, a device or a FIFO itself, not write
    through it). ``ValueError`` (``IsADirectoryError`` for a directory) otherwise.
    Used by ``save`` and, before any work, by the CLI's and the server's ``--memory``."""
    if not os.fspath(path):
        raise ValueError("an empty path; give a file")
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return p
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(f"{str(p)!r} is a directory; give a file")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{str(p)!r} exists and is not a regular file (a link, device or FIFO); give a file")
    return p


def write_memory_file(path: Path, settings: dict[str, Any], tokens: np.ndarray) -> None:
    """Writes a memory file of ``settings`` (the header's entries after its format)
    and ``tokens`` (int32, little-endian) to ``path``, atomically."""
    header = {"format": FORMAT_VERSION, **settings, "n_tokens": int(tokens.size)}
    head = json.dumps(header, ensure_ascii=False).encode("utf-8")
    body = _PREFIX.pack(_MAGIC, FORMAT_VERSION, len(head)) + head + tokens.tobytes()
    data = body + hashlib.sha256(body).digest()
    atomic_write_bytes(path, data, durable=True, mode=0o600)   # 0o600: a memory holds users' text


@dataclass
class SavedMemory:
    """A memory file's contents. ``where`` names the file in error messages."""
    where: str
    settings: dict[str, int]
    fingerprint: TokenizerFingerprint | None
    pending: list[str]
    tokens: np.ndarray

    def documents(self) -> list[np.ndarray]:
        """The stored documents, oldest first: the runs between -1 markers (a leading
        -1, left by eviction, is dropped). ``MemoryFileError`` for malformed tokens."""
        tokens = self.tokens
        ends = np.flatnonzero(tokens == -1)
        if (tokens < -1).any() or (tokens.size and (ends.size == 0 or ends[-1] != tokens.size - 1)):
            raise MemoryFileError(f"{self.where} holds malformed token data")
        docs = []
        start = 0
        for end in ends.tolist():
            docs.append(tokens[start:end])
            start = end + 1
        return docs


def _header_int(header: dict[str, Any], key: str) -> int:
    """A memory file header's integer (not a float, a bool or a string of digits)."""
    value = header[key]
    if not is_int(value):
        raise TypeError(f"{key} is {value!r}, not an integer")
    return value


def read_memory_file(path: Path) -> SavedMemory:
    """Reads a file written by ``write_memory_file``. ``MemoryFileError`` when it is
    not a memory file, is corrupt or truncated (checksum), or has a newer format."""
    data = path.read_bytes()
    where = f"memory file {str(path)!r}"
    if len(data) < _PREFIX.size + _CHECKSUM_BYTES:
        if data[:len(_MAGIC)] != _MAGIC[:len(data)]:
            raise MemoryFileError(f"{where} is not an ngramspec memory file")
        raise MemoryFileError(f"{where} is truncated ({len(data)} bytes)")
    magic, version, head_len = _PREFIX.unpack_from(data)
    if magic != _MAGIC:
        raise MemoryFileError(f"{where} is not an ngramspec memory file")
    if version != FORMAT_VERSION:
        raise MemoryFileError(f"{where} has format {version}; this ngramspec reads format {FORMAT_VERSION}")
    body, checksum = data[:-_CHECKSUM_BYTES], data[-_CHECKSUM_BYTES:]
    if hashlib.sha256(body).digest() != checksum:
        raise MemoryFileError(f"{where} is corrupt or truncated (checksum mismatch)")
    start = _PREFIX.size
    if head_len > len(body) - start:
        raise MemoryFileError(f"{where} declares a {head_len}-byte header in a {len(body)}-byte file")
    try:
        header = json.loads(body[start:start + head_len].decode("utf-8"))
        if not isinstance(header, dict):
            raise TypeError("the header is not a JSON object")
        if header.get("format", FORMAT_VERSION) != FORMAT_VERSION:
            raise ValueError(f"its header says format {header.get('format')!r}")
        n_tokens = _header_int(header, "n_tokens")
        settings = {k: _header_int(header, k) for k in _SETTINGS}
        fingerprint = (TokenizerFingerprint.from_json(header["tokenizer"])
                       if header.get("tokenizer") is not None else None)
        pending = header.get("pending", [])
        if not isinstance(pending, list) or not all(isinstance(t, str) for t in pending):
            raise TypeError("pending is not a list of strings")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, OverflowError, RecursionError) as e:
        raise MemoryFileError(f"{where} has a malformed header ({e})") from None
    payload = body[start + head_len:]
    if len(payload) != 4 * n_tokens:
        raise MemoryFileError(f"{where} holds {len(payload)} bytes of tokens, its header says {4 * n_tokens}")
    tokens = np.frombuffer(payload, dtype="<i4").astype(np.int32)
    return SavedMemory(where, settings, fingerprint, pending, tokens)
