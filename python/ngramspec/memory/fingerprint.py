"""The tokenizer's fingerprint: what ties a memory's token ids to one tokenizer.

Token ids mean nothing without their tokenizer, so a memory records the
fingerprint of the first model it is bound to and refuses (``TokenizerMismatchError``)
any model whose tokenizer differs.
"""
from __future__ import annotations

import contextlib
import hashlib
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ngramspec import _llama
from ngramspec.errors import NgramspecError

__all__ = ["TokenizerFingerprint", "TokenizerMismatchError", "tokenizer_fingerprint"]


class TokenizerMismatchError(NgramspecError, ValueError):
    """A memory's tokens belong to another tokenizer than the model's."""


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
    texts = _llama.vocabulary_texts(llm)
    if texts is not None:
        yield from texts
    else:
        for i in range(int(llm.n_vocab())):
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
