"""Memory across requests: a bounded store of earlier outputs and primed text.

Every generation otherwise starts from nothing: the n-gram tables and the copy
matcher see only this request's prompt and output. Real use repeats itself
across requests (an agent calling the same tools with the same JSON shapes, edit
after edit of one file, extraction over many rows with one schema, a chat
re-quoting code that has left the window). A ``Memory`` keeps that text:

  * what it holds: the output of every generation that used it (with the last
    ``prompt_tail`` tokens of its prompt in front, see below), and text it was
    primed with (``prime``: strings, files, folders). Each is one document;
    documents are never spliced into one draft.
  * how it drafts: ``proposer_for(llm)`` gives a proposer (name "memory",
    ``ngramspec.memory.proposer``) that matches the end of the current context
    (prompt + output so far) against the stored documents, as the copy drafter
    does against the prompt, and drafts what followed the longest match (C++
    ``CorpusMatcher``).
  * bounded: ``max_tokens`` (default 1,000,000, about 16 MiB of index) counts
    stored tokens; past it the oldest are dropped (the newest three quarters of
    the budget are kept). Text primed before the memory knows its tokenizer is
    kept as text, at most 8 characters per budget token, oldest dropped first.
  * isolated by default: a wrapper or engine has no memory unless the caller
    passes one; a ``Memory`` passed to several is shared by them, from any
    threads (the store is locked). What one request adds can change another's
    speed, never its output: every draft token is verified.
  * persistent: ``save(path)`` / ``Memory.load(path)``, a versioned file with a
    SHA-256 checksum, written atomically (``ngramspec.memory.file_format``). The
    file carries the tokenizer's fingerprint (vocabulary size and a hash of every
    token's text); binding the memory to a model with another tokenizer raises
    ``TokenizerMismatchError`` naming both.

Why the prompt tail: a document that starts with the output itself cannot draft
the output's first tokens of a later request (there is nothing before them to
match), and those are often the repeated part (the opening of a tool call after
the same chat-template header). ``prompt_tail=0`` stores outputs alone;
``prompt_tail=-1`` stores whole prompts too, which add almost nothing (they
mostly repeat the current prompt, which the copy drafter already sees) and crowd
outputs out of the budget (measured: docs/memory.md).

Tokenization: token ids are tokenizer-specific, so primed text is tokenized with
the model the memory is bound to (``proposer_for`` binds it). Text primed before
any binding, or while no bound model is alive, is kept as text (and saved as
text) until the next ``proposer_for``.
"""
from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ngramspec._core import CorpusMatcher
from ngramspec.arg_checks import checked_int
from ngramspec.memory.file_format import MemoryFileError, check_save_path, read_memory_file, write_memory_file
from ngramspec.memory.fingerprint import TokenizerFingerprint, TokenizerMismatchError, tokenizer_fingerprint
from ngramspec.memory.priming import PathLike, PrimeReport, prime_inputs, read_text_file, walk_files
from ngramspec.memory.proposer import MemoryProposer

__all__ = ["DEFAULT_MAX_TOKENS", "Memory"]

DEFAULT_MAX_TOKENS = 1_000_000
# Text primed before binding is kept as text: at most this many characters per
# budget token (a token is rarely longer), so it too stays O(budget).
_PENDING_CHARS_PER_TOKEN = 8


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
        checked_int(prompt_tail, "prompt_tail", minimum=-1)
        checked_int(max_file_bytes, "max_file_bytes", minimum=1)
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
        texts, checked = prime_inputs(text, path)   # raises before anything is primed
        report = PrimeReport()
        for t in texts:
            self._add_text(t, report)
        for p in checked:
            files = walk_files(p) if p.is_dir() else [p]
            for f in files:
                content, why = read_text_file(f, self.max_file_bytes)
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
            settings = {
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
        write_memory_file(path, settings, tokens)

    @classmethod
    def load(cls, path: PathLike, *, max_tokens: int | None = None) -> Memory:
        """Reads a file written by ``save``. ``MemoryFileError`` when it is not a
        memory file, is corrupt or truncated (checksum), or has a newer format.
        ``max_tokens`` overrides the saved budget (a smaller one keeps the newest).
        The tokenizer is checked when the memory is bound (``proposer_for``)."""
        saved = read_memory_file(Path(path))
        settings = dict(saved.settings)
        if max_tokens is not None:
            settings["max_tokens"] = max_tokens
        try:
            mem = cls(settings.pop("max_tokens"), **settings)
        except (ValueError, TypeError) as e:
            raise MemoryFileError(f"{saved.where} has invalid settings ({e})") from None
        mem._fingerprint = saved.fingerprint
        for document in saved.documents():
            mem._corpus.add(document)
        for text in saved.pending:
            mem._pending.append(text)
            mem._pending_chars += len(text)
        mem._trim_pending()   # a smaller max_tokens bounds the pending text too
        return mem
