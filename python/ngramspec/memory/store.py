"""Memory across requests: a bounded store of earlier outputs and primed text,
and the proposer that drafts from it.

Every generation otherwise starts from nothing: the n-gram tables and the copy
matcher see only this request's prompt and output. Real use repeats itself
across requests (an agent calling the same tools with the same JSON shapes, edit
after edit of one file, extraction over many rows with one schema, a chat
re-quoting code that has left the window). A ``Memory`` keeps that text:

  * what it holds: the output of every generation that used it (with the last
    ``prompt_tail`` tokens of its prompt in front, see below), and text it was
    primed with (``prime``: strings, files, folders). Each is one document;
    documents are never spliced into one draft.
  * how it drafts: ``proposer_for(llm)`` gives a proposer (name "memory") that
    matches the end of the current context (prompt + output so far) against the
    stored documents, as the copy drafter does against the prompt, and drafts
    what followed the longest match (C++ ``CorpusMatcher``).
  * bounded: ``max_tokens`` (default 1,000,000, about 16 MiB of index) counts
    stored tokens; past it the oldest are dropped (the newest three quarters of
    the budget are kept). Text primed before the memory knows its tokenizer is
    kept as text, at most 8 characters per budget token, oldest dropped first.
  * isolated by default: a wrapper or engine has no memory unless the caller
    passes one; a ``Memory`` passed to several is shared by them, from any
    threads (the store is locked). What one request adds can change another's
    speed, never its output: every draft token is verified.
  * persistent: ``save(path)`` / ``Memory.load(path)``, a versioned file with a
    SHA-256 checksum, written atomically (temporary file, fsync, rename). The
    file carries the tokenizer's fingerprint (vocabulary size and a hash of every
    token's text); binding the memory to a model with another tokenizer raises
    ``TokenizerMismatchError`` naming both.

Why the prompt tail: a document that starts with the output itself cannot draft
the output's first tokens of a later request (there is nothing before them to
match), and those are often the repeated part (the opening of a tool call after
the same chat-template header). ``prompt_tail=0`` stores outputs alone;
``prompt_tail=-1`` stores whole prompts too. Measured by replaying recorded
SmolLM2-135M greedy outputs through MemoryProposer alone (12 requests per
workload, memory filled by the earlier ones, every 8-token draft verified;
share of output tokens that came from accepted drafts):

    prompt_tail              0      16 (default)   -1 (whole prompt)
    JSON extraction        0.40     0.44           0.45   (storage 1.0x / 1.3x / 1.9x)
    tool-call prompts      0.18     0.30           0.31   (storage 1.0x / 1.7x / 3.5x)

Whole prompts add almost nothing (they mostly repeat the current prompt, which
the copy drafter already sees) and crowd outputs out of the budget.

Tokenization: token ids are tokenizer-specific, so primed text is tokenized with
the model the memory is bound to (``proposer_for`` binds it). Text primed before
any binding, or while no bound model is alive, is kept as text (and saved as
text) until the next ``proposer_for``.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import struct
import tempfile
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Union

import numpy as np

from ngramspec._core import CorpusMatcher
from ngramspec.proposers.base import EMPTY_TOKENS, Proposal

__all__ = ["FOLLOW_WINDOW", "MEMORY_PRIORS", "Memory", "MemoryFileError", "MemoryProposer", "PrimeReport",
           "TokenizerFingerprint", "TokenizerMismatchError", "memory_source", "resumed_source",
           "support_source", "tokenizer_fingerprint"]

PathLike = Union[str, "os.PathLike[str]"]

DEFAULT_MAX_TOKENS = 1_000_000
FORMAT_VERSION = 1
_MAGIC = b"NGSPMEM\n"
_PREFIX = struct.Struct("<8sII")  # magic, format version, header length
_CHECKSUM_BYTES = 32
# Text primed before binding is kept as text: at most this many characters per
# budget token (a token is rarely longer), so it too stays O(budget).
_PENDING_CHARS_PER_TOKEN = 8
# Priming a folder skips names starting with "." and these.
_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "venv", "build", "dist"})
_SNIFF_BYTES = 8192

# Source buckets, as the copy drafter's: match lengths 2-3, 4-7, 8-15, 16-31, 32+,
# each twice (a fresh match; one continuing a memory draft that agreed with all
# the last pass emitted). The priors are guesses, not measured: a little below the
# copy drafter's, because a match in another request's text is weaker evidence
# than one in this request's prompt. Then three buckets for a draft that resumes
# near where the output departed from a memory draft (MemoryProposer, "following"),
# by its match length: 1, 2-3, 4+. Then five for how many stored continuations of
# the context back each draft token (``Memory.support``), as the n-gram drafter's
# share buckets: backed by one document only; by under a half of those that agreed
# so far; under 0.8; under 1; by all of them (two or more). These key every token of
# a draft that has such candidates (the match-length buckets are left for a draft
# that has none); the priors are the n-gram drafter's measured shares rounded.
# The policy learns each bucket online.
_BUCKETS = 5
_RESUME_BUCKETS = 3
_SUPPORT_BASE = 2 * _BUCKETS + _RESUME_BUCKETS
MEMORY_PRIORS = ((0.25, 0.4, 0.55, 0.7, 0.8) + (0.55, 0.65, 0.75, 0.8, 0.85) + (0.3, 0.45, 0.6)
                 + (0.5, 0.1, 0.4, 0.6, 0.9))
# Following: how far past the place where the output departed from a memory draft
# a resumed draft is looked for, and for how many output tokens that place is kept.
# Chosen by replaying the recorded Qwen 0.5B sequences with a prototype (windows
# 4-64 within 4% of each other on extraction and tool_calls; 8 among the best).
FOLLOW_WINDOW = 8


def _header_int(header: dict[str, Any], key: str) -> int:
    """A memory file header's integer (not a float, a bool or a string of digits)."""
    value = header[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{key} is {value!r}, not an integer")
    return value


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


class MemoryFileError(ValueError):
    """A memory file that is not one, is corrupt or truncated, or has an unknown format."""


class TokenizerMismatchError(ValueError):
    """A memory's tokens belong to another tokenizer than the model's."""


def memory_source(match_length: int, continuing: bool = False) -> int:
    """The bucket (0..9) of a memory draft token that follows a backward match of this length."""
    bucket = min(_BUCKETS - 1, max(0, match_length.bit_length() - 2))
    return bucket + (_BUCKETS if continuing else 0)


def support_source(agree: int, seen: int) -> int:
    """The bucket (13..17) of a memory draft token that ``agree`` of the ``seen``
    stored continuations (those that agreed with the draft before it) go on with."""
    if seen <= 1:
        return _SUPPORT_BASE
    share = agree / seen
    return _SUPPORT_BASE + (1 if share < 0.5 else 2 if share < 0.8 else 3 if share < 1 else 4)


def resumed_source(match_length: int) -> int:
    """The bucket (10..12) of the first token of a draft resumed near the place where
    the output departed from a memory draft, after a backward match of this length."""
    return 2 * _BUCKETS + min(_RESUME_BUCKETS - 1, max(0, match_length.bit_length() - 1))


# --- the tokenizer's fingerprint -------------------------------------------------------

@dataclass(frozen=True)
class TokenizerFingerprint:
    """Identifies a tokenizer: vocabulary size and SHA-256 of every token's text.
    ``name`` (model family and tokenizer type) is for messages only."""
    n_vocab: int
    sha256: str
    name: str = "unknown"

    def same_tokenizer(self, other: TokenizerFingerprint) -> bool:
        return self.n_vocab == other.n_vocab and self.sha256 == other.sha256

    def describe(self) -> str:
        return f"'{self.name}' ({self.n_vocab} tokens, sha256 {self.sha256[:12]})"

    def to_json(self) -> dict[str, Any]:
        return {"n_vocab": self.n_vocab, "sha256": self.sha256, "name": self.name}

    @staticmethod
    def from_json(obj: Any) -> TokenizerFingerprint:
        return TokenizerFingerprint(int(obj["n_vocab"]), str(obj["sha256"]), str(obj.get("name", "unknown")))


_fingerprints: weakref.WeakKeyDictionary[Any, TokenizerFingerprint] = weakref.WeakKeyDictionary()
_fingerprints_lock = threading.Lock()


def _token_texts(llm: Any) -> Iterator[bytes]:
    """Each token's text as bytes. llama.cpp's own token text (the vocabulary entry)
    where available, else the detokenized bytes (duck-typed models, tests)."""
    n = int(llm.n_vocab())
    model = getattr(llm, "_model", None)
    vocab = getattr(model, "vocab", None)
    if vocab is not None:
        import llama_cpp

        get = getattr(llama_cpp, "llama_vocab_get_text", None) or llama_cpp.llama_token_get_text
        for i in range(n):
            yield get(vocab, i) or b""
    else:
        for i in range(n):
            yield bytes(llm.detokenize([i]))


def _tokenizer_name(llm: Any) -> str:
    meta = getattr(llm, "metadata", None) or {}
    parts = [meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre")]
    label = "/".join(p for p in parts if p) or "unknown"
    model = meta.get("general.name")
    return f"{label} of {model}" if model else label


def tokenizer_fingerprint(llm: Any) -> TokenizerFingerprint:
    """The fingerprint of ``llm``'s tokenizer (a ``llama_cpp.Llama``, or any object
    with ``n_vocab()`` and ``detokenize``). Hashing every token text took 0.26 s
    on Qwen2.5's 151,936 tokens and 0.07 s on SmolLM2's 49,152 (project machine,
    llama_vocab_get_text; detokenize() per token was about 4x slower), so it is
    cached per model object."""
    with _fingerprints_lock:
        try:
            cached = _fingerprints.get(llm)
        except TypeError:  # not weak-referenceable: no cache
            cached = None
    if cached is not None:
        return cached
    h = hashlib.sha256()
    n = 0
    for text in _token_texts(llm):
        h.update(len(text).to_bytes(4, "little"))
        h.update(text)
        n += 1
    fp = TokenizerFingerprint(n, h.hexdigest(), _tokenizer_name(llm))
    with _fingerprints_lock, contextlib.suppress(TypeError):
        _fingerprints[llm] = fp
    return fp


# --- priming ---------------------------------------------------------------------------

@dataclass
class PrimeReport:
    """What one ``prime`` call did. ``tokens``: tokens stored now (0 when the text
    was kept as text until the memory is bound); ``pending``: documents kept as text."""
    documents: int = 0
    tokens: int = 0
    pending: int = 0
    files: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)


def _read_text_file(path: Path, max_bytes: int) -> tuple[str | None, str]:
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


def _walk_files(folder: Path) -> list[Path]:
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


# --- the memory ------------------------------------------------------------------------

class Memory:
    """A bounded store of earlier outputs and primed text, and its proposers.

    max_tokens: the budget (default 1,000,000 tokens, ~16 MiB); the oldest text goes first.
    anchor: tokens of the current context that must match for a stored position
        to be a candidate (3: a 2-token match in a large store is usually chance).
    max_candidates, max_match: as for ``SuffixMatcher``.
    prompt_tail: tokens of each prompt stored in front of its output (module
        docstring); 0: outputs only; -1: whole prompts.
    max_file_bytes: ``prime(path=...)`` skips files larger than this.
    """

    def __init__(self, max_tokens: int = DEFAULT_MAX_TOKENS, *, anchor: int = 3, max_candidates: int = 64,
                 max_match: int = 64, prompt_tail: int = 16, max_file_bytes: int = 1 << 20) -> None:
        if isinstance(prompt_tail, bool) or not isinstance(prompt_tail, int) or prompt_tail < -1:
            raise ValueError(f"prompt_tail must be an int >= -1, got {prompt_tail!r}")
        if isinstance(max_file_bytes, bool) or not isinstance(max_file_bytes, int) or max_file_bytes < 1:
            raise ValueError(f"max_file_bytes must be a positive int, got {max_file_bytes!r}")
        self._corpus = CorpusMatcher(anchor=anchor, max_candidates=max_candidates, max_match=max_match,
                                     max_tokens=max_tokens)
        self.prompt_tail = prompt_tail
        self.max_file_bytes = max_file_bytes
        self._lock = threading.RLock()
        self._fingerprint: TokenizerFingerprint | None = None
        # The latest bound model, for tokenizing: a weak reference, or a closure for a model
        # that is not weak-referenceable.
        self._model: Callable[[], Any] | None = None
        self._pending: deque[str] = deque()  # text primed before it could be tokenized
        self._pending_chars = 0

    # -- settings and state
    @property
    def max_tokens(self) -> int:
        return self._corpus.max_tokens

    @property
    def max_match(self) -> int:
        return self._corpus.max_match

    @property
    def fingerprint(self) -> TokenizerFingerprint | None:
        """The tokenizer of the stored tokens; None until first bound."""
        return self._fingerprint

    @property
    def pending_documents(self) -> int:
        """Documents primed as text and not yet tokenized."""
        return len(self._pending)

    @property
    def memory_bytes(self) -> int:
        return self._corpus.memory_bytes + self._pending_chars

    @property
    def corpus(self) -> np.ndarray:
        """The stored tokens, oldest first, each document followed by -1."""
        return self._corpus.corpus

    def __len__(self) -> int:
        """Stored tokens, document ends included (what max_tokens bounds)."""
        return len(self._corpus)

    def __repr__(self) -> str:
        tok = self._fingerprint.describe() if self._fingerprint else "not bound"
        return (f"Memory(max_tokens={self.max_tokens}, stored={len(self)}, pending={len(self._pending)}, "
                f"tokenizer={tok})")

    # -- binding to a model
    def bind(self, llm: Any) -> TokenizerFingerprint:
        """Ties the memory to ``llm``'s tokenizer (the first binding sets it; later
        ones must match: ``TokenizerMismatchError`` otherwise) and tokenizes text
        primed so far. ``proposer_for`` calls it."""
        fp = tokenizer_fingerprint(llm)
        with self._lock:
            if self._fingerprint is None:
                self._fingerprint = fp
            elif not self._fingerprint.same_tokenizer(fp):
                raise TokenizerMismatchError(
                    f"this Memory holds tokens of tokenizer {self._fingerprint.describe()}, but the model "
                    f"uses tokenizer {fp.describe()}; a memory works only with models that share its "
                    f"tokenizer (use a new Memory, or the one saved for this model)")
            try:
                self._model = weakref.ref(llm)
            except TypeError:
                self._model = lambda: llm  # not weak-referenceable: keep it
        # Tokenized one by one, each leaving the queue only once stored, so an error
        # in one (a tokenizer that raises) keeps the others for the next bind.
        while True:
            with self._lock:
                if not self._pending:
                    break
                text = self._pending[0]
            tokens = self._tokenize(llm, text)
            with self._lock:
                if self._pending and self._pending[0] is text:
                    self._pending.popleft()
                    self._pending_chars -= len(text)
            self._add_document(tokens)
        return fp

    def proposer_for(self, llm: Any) -> MemoryProposer:
        """A proposer drafting from this memory for generations on ``llm``: binds
        the memory to its tokenizer first (``bind``). One proposer per engine or
        wrapper; any number may share the memory."""
        self.bind(llm)
        return MemoryProposer(self)

    @staticmethod
    def _tokenize(llm: Any, text: str) -> list[int]:
        return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def _bound_model(self) -> Any:
        return self._model() if self._model is not None else None

    # -- adding text
    def _add_document(self, tokens: Sequence[int]) -> int:
        if len(tokens) == 0:
            return 0
        self._corpus.add(tokens)  # locked in C++
        return len(tokens)

    def add_tokens(self, tokens: Sequence[int]) -> None:
        """Stores one document of token ids of the bound tokenizer (``RuntimeError``
        before the memory is bound: its tokens would have no tokenizer)."""
        if self._fingerprint is None:
            raise RuntimeError("bind the Memory to a model (proposer_for or bind) before adding token ids")
        self._add_document(tokens)

    def _add_text(self, text: str, report: PrimeReport) -> None:
        if not text:
            return
        with self._lock:
            llm = self._bound_model()
            if llm is None:
                self._pending.append(text)
                self._pending_chars += len(text)
                self._trim_pending()
                report.documents += 1
                report.pending = len(self._pending)   # what is still held (the oldest may have gone)
                return
        report.tokens += self._add_document(self._tokenize(llm, text))
        report.documents += 1

    def _trim_pending(self) -> None:
        """Keeps the pending text within the budget's characters, oldest dropped first."""
        limit = _PENDING_CHARS_PER_TOKEN * self.max_tokens
        while self._pending_chars > limit and self._pending:
            self._pending_chars -= len(self._pending.popleft())

    def prime(self, text: str | Sequence[str] | None = None, *,
              path: PathLike | Sequence[PathLike] | None = None) -> PrimeReport:
        """Stores text the next requests are likely to repeat: ``text`` (a string
        or a list of strings) and ``path`` (a file, or a folder read recursively;
        or a list of them). Each string and file is one document.

        Folders: files in sorted order; names starting with "." and the folders
        __pycache__, node_modules, venv, build and dist are skipped, and so are
        symbolic links. Any file is skipped (and listed in the report's
        ``skipped`` with the reason) when it is not a regular file (a FIFO, a
        device), is larger than ``max_file_bytes``, has a NUL byte in its first
        8 KiB (binary), or is not UTF-8. A missing path raises
        ``FileNotFoundError``, an empty one ``ValueError``, and so does text that
        is not valid Unicode (a lone surrogate), before anything is primed. Text beyond the budget evicts the
        oldest, so from a folder larger than the budget the last files stay.

        Before the memory is bound to a model, text is kept as text (see the
        module docstring) and ``tokens`` in the report is 0."""
        report = PrimeReport()
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
        for t in texts:
            self._add_text(t, report)
        for p in checked:
            files = _walk_files(p) if p.is_dir() else [p]
            for f in files:
                content, why = _read_text_file(f, self.max_file_bytes)
                if content is None:
                    report.skipped.append((str(f), why))
                    continue
                self._add_text(content, report)
                report.files.append(str(f))
        return report

    def clear(self) -> None:
        """Forgets every stored token and pending text (the tokenizer binding stays)."""
        with self._lock:
            self._corpus.clear()
            self._pending.clear()
            self._pending_chars = 0

    # -- drafting
    def predict(self, context: Sequence[int], k: int) -> tuple[np.ndarray, int]:
        """(draft, match_length): up to k tokens that followed the longest match of
        the end of ``context`` in the stored documents; (empty, 0) if none."""
        return self._corpus.predict(context[-self._corpus.max_match:], k)

    def predict_at(self, context: Sequence[int], k: int) -> tuple[np.ndarray, int, int]:
        """As ``predict``, and where the draft starts: an absolute position in the
        store (it stays valid while other text is added; eviction forgets it)."""
        return self._corpus.predict_at(context[-self._corpus.max_match:], k)

    def support(self, context: Sequence[int], draft: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(agree, seen) per draft token: of the stored continuations of the end of
        ``context`` (the candidates ``predict`` weighs) that agreed with the draft
        before token i, how many go on with it (agree[i]) out of how many (seen[i])."""
        return self._corpus.support(context[-self._corpus.max_match:], draft)

    def follow(self, place: int, window: int, context: Sequence[int], k: int) -> tuple[np.ndarray, int, int]:
        """(draft, match_length, at): up to k tokens drafted near ``place`` (an
        absolute position from ``predict_at`` or ``follow``), where the end of
        ``context`` matches within ``window`` positions of it in its document."""
        return self._corpus.follow(place, window, context[-self._corpus.max_match:], k)

    # -- persistence
    def save(self, path: PathLike) -> None:
        """Writes the memory to ``path`` atomically: a temporary file in the same
        folder, flushed and fsynced, then renamed over ``path``. An existing
        ``path`` must be a regular file: the rename would replace a device
        (/dev/null), a FIFO or a symbolic link itself, not write through it."""
        path = check_save_path(path)
        with self._lock:
            header = {
                "format": FORMAT_VERSION,
                "max_tokens": self.max_tokens,
                "anchor": self._corpus.anchor,
                "max_candidates": self._corpus.max_candidates,
                "max_match": self._corpus.max_match,
                "prompt_tail": self.prompt_tail,
                "max_file_bytes": self.max_file_bytes,
                "tokenizer": self._fingerprint.to_json() if self._fingerprint else None,
                "pending": list(self._pending),
            }
            tokens = self._corpus.corpus.astype("<i4")
        header["n_tokens"] = int(tokens.size)
        head = json.dumps(header, ensure_ascii=False).encode("utf-8")
        body = _PREFIX.pack(_MAGIC, FORMAT_VERSION, len(head)) + head + tokens.tobytes()
        data = body + hashlib.sha256(body).digest()
        folder = path.parent if str(path.parent) else Path(".")
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        try:  # make the rename itself durable (not possible on every platform)
            dir_fd = os.open(folder, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dir_fd)
        except OSError:
            pass
        finally:
            os.close(dir_fd)

    @classmethod
    def load(cls, path: PathLike, *, max_tokens: int | None = None) -> Memory:
        """Reads a file written by ``save``. ``MemoryFileError`` when it is not a
        memory file, is corrupt or truncated (checksum), or has a newer format.
        ``max_tokens`` overrides the saved budget (a smaller one keeps the newest).
        The tokenizer is checked when the memory is bound (``proposer_for``)."""
        path = Path(path)
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
            settings = {k: _header_int(header, k) for k in ("max_tokens", "anchor", "max_candidates", "max_match",
                                                             "prompt_tail", "max_file_bytes")}
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
        if max_tokens is not None:
            settings["max_tokens"] = max_tokens
        try:
            mem = cls(settings.pop("max_tokens"), **settings)
        except (ValueError, TypeError) as e:
            raise MemoryFileError(f"{where} has invalid settings ({e})") from None
        mem._fingerprint = fingerprint
        # Documents are the runs between -1 markers; a leading -1 (left by eviction) is dropped.
        ends = np.flatnonzero(tokens == -1)
        if (tokens < -1).any() or (tokens.size and (ends.size == 0 or ends[-1] != tokens.size - 1)):
            raise MemoryFileError(f"{where} holds malformed token data")
        start_doc = 0
        for end in ends.tolist():
            mem._corpus.add(tokens[start_doc:end])
            start_doc = end + 1
        for text in pending:
            mem._pending.append(text)
            mem._pending_chars += len(text)
        mem._trim_pending()   # a smaller max_tokens bounds the pending text too
        return mem


class MemoryProposer:
    """Drafts from a ``Memory`` what followed the longest match of the current
    context (prompt + accepted output) in the stored documents; stores this
    generation's output (after the prompt's last ``prompt_tail`` tokens) in the
    memory when it ends. One per engine or wrapper (it holds one generation's
    context); the Memory behind it may be shared.

    Following: it remembers where in the store its latest draft came from. When the
    output departs from it (a new value in the same JSON shape: ``"zone": "Asia/B``
    where the earlier answer had ``"zone": "America/...``), a fresh match needs
    ``anchor`` (3) tokens of the shape again before memory drafts anything. Instead,
    for the next FOLLOW_WINDOW output tokens it also looks a few positions past the
    departure in that document for the output's newest tokens, where a single
    matching token (``",\n``) usually means the shape resumes there, and drafts what
    follows (its own buckets, learned like the others). Modelled by
    bench/memory_replay.py on the recorded Qwen 0.5B sequences
    (bench/results/memory-qwen2.5-coder-0.5b-{1t,2t}.json), memory / no memory
    before -> after, 1 thread / 2 threads: extraction 1.07x -> 1.11x / 1.03x -> 1.04x,
    tool_calls 1.17x -> 1.19x / 1.17x -> 1.19x, edits 1.02x -> 1.01x / 1.01x -> 1.01x,
    unrelated 1.00x.

    Support: a token that two or more stored continuations of the context back is
    priced by how many of them agree with it (``Memory.support``), not by the match
    length. The skeleton of a repeated JSON answer is backed by every earlier answer,
    its values by one or none, so the policy learns to draft through the skeleton and
    stop before a value. Same replay, after following -> with support, on the runs of
    commit 017418f (bench/results/memory-qwen2.5-coder-0.5b-{1t,2t}.json): extraction
    1.10x -> 1.16x / 1.05x -> 1.09x, tool_calls 1.19x -> 1.29x / 1.17x -> 1.23x, edits
    1.02x / 1.02x both; SmolLM2 (memory-smollm2-135m-1t.json): extraction 1.01x ->
    1.05x, tool_calls 1.04x both, edits 1.02x -> 0.975x (its third edit, where the
    135M model loops on blank lines)."""

    name: ClassVar[str] = "memory"
    # Its text is the earlier requests, so how far it can be trusted carries over
    # from one request to the next: starting each request from the priors, short
    # requests (a 65-token JSON answer) ended before the policy had learned that
    # memory drafts were right 70-75% of the time. Measured (memory_sequences.py,
    # Qwen 0.5B, 2 threads, extraction and tool_calls; bench/results/memory-keep-acceptance-ab.md):
    # 4% and 3% fewer passes, decode time unchanged within noise.
    keeps_acceptance: ClassVar[bool] = True

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.source_priors: Sequence[float] = MEMORY_PRIORS
        self.source_base = 0
        self._keep = memory.max_match  # only the context's last max_match tokens can matter
        self._context: list[int] = []
        self._prompt_tail: list[int] = []
        self._reset()

    def _reset(self) -> None:
        self._continuing = False
        self._last: np.ndarray = EMPTY_TOKENS  # the latest draft, until the next accept
        # The latest draft with one token more (so the token after it can be checked
        # too), and where it starts in the store; None: no draft.
        self._ahead: np.ndarray = EMPTY_TOKENS
        self._drafted_at: int | None = None
        # Following (see the class docstring): the place in the store the output is
        # at (synced: the next output token is expected there) or departed from
        # (not synced: the token it did not emit), and output tokens since it departed.
        self._place: int | None = None
        self._synced = False
        self._lag = 0

    def begin(self, prompt: Sequence[int]) -> None:
        prompt = [int(t) for t in prompt]
        tail = self.memory.prompt_tail
        self._prompt_tail = prompt if tail < 0 else (prompt[-tail:] if tail else [])
        self._context = prompt[-self._keep:]
        self._reset()

    def propose(self, k: int) -> Proposal:
        self._last, self._ahead, self._drafted_at = EMPTY_TOKENS, EMPTY_TOKENS, None
        if k <= 0:
            return Proposal.none(self.name)
        ahead, match, at = self.memory.predict_at(self._context, k + 1)
        resumed = False
        if self._place is not None:
            # Near the place it follows, one matching token is strong evidence; a match
            # as long elsewhere in the store is not, so ties go to the place.
            near = (self.memory.follow(self._place - 1, 1, self._context, k + 1) if self._synced
                    else self.memory.follow(self._place, FOLLOW_WINDOW, self._context, k + 1))
            if len(near[0]) and near[1] >= match:
                ahead, match, at = near
                resumed = not self._synced
        if len(ahead) == 0:
            return Proposal.none(self.name)
        self._ahead, self._drafted_at = ahead, at
        draft = self._last = ahead[:k]
        base = self.source_base
        if resumed:
            sources = [base + resumed_source(match)] + [base + memory_source(match + i, True)
                                                        for i in range(1, len(draft))]
        else:
            agree, seen = self.memory.support(self._context, draft)
            # Backed by two or more stored continuations: keyed on how many agree; by
            # one document (or none): on the match, as a copy is.
            sources = [base + (support_source(int(agree[i]), int(seen[i])) if seen[i] > 1
                               else memory_source(match + i, self._continuing or i > 0))
                       for i in range(len(draft))]
        return Proposal(draft, sources, self.name, match)

    def accept(self, tokens: Sequence[int]) -> None:
        tokens = [int(t) for t in tokens]
        n = min(len(self._last), len(tokens))
        self._continuing = len(self._last) > 0 and all(int(self._last[i]) == tokens[i] for i in range(n))
        self._follow(tokens)
        self._last, self._ahead, self._drafted_at = EMPTY_TOKENS, EMPTY_TOKENS, None
        self._context.extend(tokens)
        if len(self._context) > 2 * self._keep:  # trim now and then, not on every token
            del self._context[:-self._keep]

    def _follow(self, tokens: list[int]) -> None:
        """Moves the followed place by the emitted ``tokens``."""
        ahead, at = self._ahead, self._drafted_at
        if at is not None:
            agreed = 0
            while agreed < min(len(ahead), len(tokens)) and int(ahead[agreed]) == tokens[agreed]:
                agreed += 1
            if agreed == len(tokens):       # the output is still in the document
                self._place, self._synced, self._lag = at + agreed, True, 0
                return
            if agreed == len(ahead):        # it ran past the document's end
                self._place = None
                return
            if agreed > 0 or self._place is None or self._synced:
                # It departed from this draft: the place to resume near.
                self._place, self._synced, self._lag = at + agreed, False, 0
                tokens = tokens[agreed:]
            # else a draft from elsewhere was wrong at once: keep the place already followed.
        elif self._synced:                  # nothing to draft from the place: its document ended
            self._place = None
        if self._place is not None:         # output tokens since it departed
            self._lag += len(tokens)
            if self._lag > FOLLOW_WINDOW:
                self._place = None

    def end(self, output: Sequence[int]) -> None:
        output = [int(t) for t in output]
        if output:
            self.memory.add_tokens(self._prompt_tail + output)
        self._context, self._prompt_tail = [], []
        self._reset()
