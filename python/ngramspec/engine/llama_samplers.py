"""llama.cpp's own grammar and penalties samplers, driven row by row.

Plain llama-cpp-python builds one llama.cpp sampler chain per request, runs it over
every row it samples and accepts each sampled token into it. To give the same
tokens, the engine runs the same llama.cpp samplers (not a Python copy of their
float arithmetic) over each verified row, and keeps their state per position:
``SamplerState`` holds the grammar and penalties samplers after some prefix of the
output, and ``clone`` copies it, so a rejected draft never reaches the state that
the next pass starts from.
"""
from __future__ import annotations

import contextlib
import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np

from ngramspec._llama import grammar_source, llama_cpp_module, vocab_handle

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["SamplerState", "TokenArray", "check_grammar"]

#: llama_token_data: {int32 id; float logit; float p}, 12 bytes, no padding.
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class TokenArray:
    """A ``llama_token_data_array`` over numpy memory: the whole vocabulary, or a few
    chosen ids, for a sampler's ``apply``."""

    def __init__(self, n: int) -> None:
        lc = llama_cpp_module()
        self.data = np.zeros(n, dtype=_TOKEN_DATA)
        self.data["id"] = np.arange(n, dtype=np.int32)
        self._struct = lc.llama_token_data_array(
            data=self.data.ctypes.data_as(ctypes.POINTER(lc.llama_token_data)), size=n, selected=-1, sorted=False)
        self._ref = ctypes.byref(self._struct)

    def apply(self, sampler: Any, logits: np.ndarray, ids: np.ndarray | None = None) -> np.ndarray:
        """The logits after ``sampler`` (``logits`` for the whole vocabulary, or for
        ``ids`` only), as float32 in the same order."""
        n = len(logits)
        if ids is not None:
            self.data["id"][:n] = ids
        self.data["logit"][:n] = logits
        self._struct.size, self._struct.selected, self._struct.sorted = n, -1, False
        llama_cpp_module().llama_sampler_apply(sampler, self._ref)
        out: np.ndarray = self.data["logit"][:n].copy()
        if ids is not None:
            self.data["id"][:n] = np.arange(n, dtype=np.int32)
        return out


def _grammar_sampler(llm: Llama, grammar: Any) -> Any:
    lc = llama_cpp_module()
    text, root = grammar_source(grammar)
    ptr = lc.llama_sampler_init_grammar(vocab_handle(llm), text.encode("utf-8"), root.encode("utf-8"))
    if not ptr:
        # llama.cpp logs the parse error; plain llama-cpp-python would add the NULL
        # sampler to its chain and crash on the first token.
        raise ValueError("the grammar could not be parsed (GBNF): llama.cpp's log says where")
    return ptr


def check_grammar(llm: Llama, grammar: Any) -> None:
    """ValueError if llama.cpp cannot parse ``grammar`` (a ``LlamaGrammar``)."""
    llama_cpp_module().llama_sampler_free(_grammar_sampler(llm, grammar))


class SamplerState:
    """The grammar sampler and the penalties sampler (each optional) after some
    prefix of the output: ``accept`` advances it by one token, ``clone`` copies it.
    ``seen``: the distinct tokens in the penalties' window (the only logits the
    penalties sampler changes). Freed when collected."""

    def __init__(self, grammar: Any = None, penalties: Any = None, last_n: int = 0,
                 recent: list[int] | None = None) -> None:
        self.grammar, self.penalties, self.last_n = grammar, penalties, last_n
        self.recent = recent if recent is not None else []

    @classmethod
    def start(cls, llm: Llama, grammar: Any, penalties: tuple[int, float, float, float] | None) -> SamplerState:
        """The state before the first generated token: ``grammar`` (a ``LlamaGrammar``)
        parsed, ``penalties`` (last_n, repeat, frequency, presence) with nothing seen.
        Penalties that llama.cpp finds disabled (last_n <= 0, or all neutral) leave
        no sampler."""
        lc = llama_cpp_module()
        g = _grammar_sampler(llm, grammar) if grammar is not None else None
        p, last_n = None, 0
        if penalties is not None:
            last_n, repeat, frequency, presence = penalties
            if last_n > 0 and (repeat != 1.0 or frequency != 0.0 or presence != 0.0):
                p = lc.llama_sampler_init_penalties(llm.n_vocab(), last_n, repeat, frequency, presence)
        return cls(g, p, int(last_n) if p else 0)

    @property
    def seen(self) -> np.ndarray:
        return np.unique(np.asarray(self.recent, dtype=np.int32))

    def clone(self) -> SamplerState:
        lc = llama_cpp_module()
        return SamplerState(lc.llama_sampler_clone(self.grammar) if self.grammar else None,
                            lc.llama_sampler_clone(self.penalties) if self.penalties else None,
                            self.last_n, list(self.recent))

    def accept(self, token: int) -> None:
        lc = llama_cpp_module()
        if self.penalties:
            lc.llama_sampler_accept(self.penalties, token)
            self.recent.append(int(token))
            if len(self.recent) > self.last_n:
                del self.recent[0]
        if self.grammar:
            lc.llama_sampler_accept(self.grammar, token)

    def free(self) -> None:
        lc = llama_cpp_module()
        for ptr in (self.grammar, self.penalties):
            if ptr:
                lc.llama_sampler_free(ptr)
        self.grammar = self.penalties = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):   # at interpreter shutdown the library may be gone already
            self.free()
