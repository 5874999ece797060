"""The generated text, built token by token exactly as llama-cpp-python's
``create_completion`` builds it: the one place stop strings are matched.

Plain llama-cpp-python, after each token:
  * detokenizes the completion so far;
  * if the last 3 bytes hold the lead byte of a UTF-8 character that is not yet
    complete, skips the stop-string and ``max_tokens`` checks for as many tokens
    as the character still needs (its ``multibyte_fix``), so ``max_tokens`` can be
    overshot to finish a character;
  * otherwise cuts the text at the first occurrence of the first stop string (in
    the order given) that occurs, and ends.
``OutputText`` reproduces that rule, and also says which prefix of the text can no
longer change (``stable``: no split character, nothing that may still grow into
a stop string), which is what a stream may send.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["OutputText", "RendersTokens", "renders_alone", "utf8_complete_prefix"]

_REPLACEMENT = "\ufffd".encode()

# (bytes in the character, lead-byte pattern), as llama-cpp-python checks them.
_LEADS = ((2, 192), (3, 224), (4, 240))


def utf8_complete_prefix(data: bytes) -> bytes:
    """``data`` without a trailing, still incomplete UTF-8 sequence."""
    return data[: len(data) - _incomplete_tail(data, len(data))]


def _incomplete_tail(data: bytes | bytearray, end: int) -> int:
    """How many bytes at the end of ``data[:end]`` belong to a UTF-8 sequence not yet complete."""
    for back in range(1, min(4, end) + 1):
        byte = data[end - back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII)
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            return 0 if need <= back else back
    return 0


class RendersTokens(Protocol):
    """What ``OutputText`` reads of a ``llama_cpp.Llama``: its tokenizer object
    (``Llama.tokenizer_``), its detokenizer and its BOS token."""

    tokenizer_: Any

    def detokenize(self, tokens: list[int], prev_tokens: list[int] | None = None) -> bytes: ...

    def token_bos(self) -> int: ...


def renders_alone(llm: RendersTokens) -> bool:
    """Whether each token of ``llm`` renders to the same bytes wherever it stands:
    true of llama.cpp's own tokenizer (llama-cpp-python's ``LlamaTokenizer``, the
    default), not assumed of any other (a subclass, ``LlamaHFTokenizer``)."""
    from llama_cpp.llama_tokenizer import LlamaTokenizer

    return type(llm.tokenizer_) is LlamaTokenizer


class OutputText:
    """llm: the Llama whose tokenizer renders tokens. stops: stop strings (an empty
    one stops at once after the first whole token, with no text: what plain
    llama-cpp-python does, since "" is found at index 0). pieces: a token -> bytes memo to share between the texts
    of one Llama (its tokenizer renders a token the same way every time, and a
    dict lookup costs a fraction of a detokenize call through llama-cpp-python)."""

    def __init__(self, llm: RendersTokens, stops: Sequence[str], pieces: dict[int, bytes] | None = None,
                 prompt: Sequence[int] = (), *, after_bos: bool = False) -> None:
        self._detokenize = llm.detokenize
        self._pieces: dict[int, bytes] = {} if pieces is None else pieces
        # A tokenizer other than llama.cpp's own (Llama(tokenizer=LlamaHFTokenizer...))
        # may render a token differently by what precedes it, and plain detokenizes the
        # whole completion with the prompt as context: so do we, after every token
        # (plain's cost), keeping the bytes that are new.
        self._context: list[int] | None = None if renders_alone(llm) else [int(t) for t in prompt]
        self._output: list[int] = []   # the tokens so far, in that mode
        self._rendered = 0             # bytes of their rendering already in the text, in that mode
        self.stops = [s.encode("utf-8") for s in stops]
        self._longest = max((len(s) for s in self.stops), default=0)
        self._buf = bytearray()      # the text so far (cut before a stop once one is found)
        self.stopped = False         # a stop string ended the text
        self._multibyte_fix = 0
        self._checked = 0            # bytes already searched for stop strings
        self._bos = int(llm.token_bos())    # -1 for a model without one (no token is -1)
        self._first = True
        # llama-cpp-python's detokenize drops the text's first byte when it is a space
        # and the tokens start with BOS (a Llama-1 habit it undoes), and plain decoding
        # detokenizes the completion from its first token: so when the model's first
        # token is BOS, the text's leading space goes. ``after_bos``: plain's completion
        # starts with a BOS of its own (it does for an empty prompt).
        self._drop_leading_space = after_bos and self._context is None

    @property
    def data(self) -> bytes:
        return bytes(self._buf)

    def add(self, token: int) -> bool:
        """Appends one token's bytes. True when the checks that follow a token
        (stop strings, max_tokens) apply to it; False while plain llama-cpp-python
        would skip them to complete a multi-byte character."""
        buf = self._buf
        if self._first:
            self._first = False
            # (llama.cpp's tokenizer's habit; another tokenizer, given the context, has its own)
            self._drop_leading_space |= token == self._bos and self._context is None
        if self._context is not None:
            self._output.append(token)
            whole = bytes(self._detokenize(self._output, prev_tokens=self._context))
            # Such a tokenizer decodes a character split across tokens as U+FFFD until
            # its last byte arrives: wait for it rather than keep the stand-in.
            while whole.endswith(_REPLACEMENT):
                whole = whole[: -len(_REPLACEMENT)]
            piece = whole[self._rendered:]
            self._rendered = max(self._rendered, len(whole))
        else:
            memo = self._pieces.get(token)
            if memo is None:
                memo = self._pieces[token] = bytes(self._detokenize([token]))
            piece = memo
        if self._drop_leading_space and piece and not buf:
            self._drop_leading_space = False   # only ever the text's first byte
            if piece[:1] == b" ":
                piece = piece[1:]
        buf += piece
        tail = buf[-3:]
        if tail and (len(piece) < 3 or not piece.isascii()) and max(tail) >= 0xC0:
            # only a lead byte can start a split character, and an ASCII piece of 3+
            # bytes leaves none in the last 3
            for k, char in enumerate(tail):
                k = 3 - k
                for num, pattern in _LEADS:
                    if num > k and pattern & char == pattern:
                        self._multibyte_fix = num - k
        if self._multibyte_fix > 0:
            self._multibyte_fix -= 1
            return False
        if self.stops:
            # The text up to _checked was searched already, so a new occurrence
            # ends in the bytes added since.
            lo = max(0, self._checked - self._longest + 1)
            window = bytes(buf[lo:])
            self._checked = len(buf)
            hits = [s for s in self.stops if s in window]
            if hits:
                del buf[buf.index(hits[0]):]
                self.stopped = True
        return True

    @property
    def stable_end(self) -> int:
        """Where the prefix that later tokens can no longer change ends: no split
        character, and no suffix that may still grow into a stop string. Looks only
        at the end of the text, so a stream asking after every pass costs O(1) per
        ask, not a copy of the text."""
        buf = self._buf
        end = len(buf)
        if not self.stopped and self.stops:
            # Bytes not yet searched (added while a character was split) may still hold a stop.
            end = self._checked
            hold = 0
            for s in self.stops:
                for i in range(min(len(s) - 1, end), hold, -1):
                    if buf.endswith(s[:i], 0, end):
                        hold = i
                        break
            end -= hold
        return end - _incomplete_tail(buf, end)

    def slice(self, start: int, end: int | None = None) -> bytes:
        """The text's bytes start..end (a copy of just those)."""
        return bytes(self._buf[start:end])

    @property
    def stable(self) -> bytes:
        """The prefix that later tokens can no longer change (see ``stable_end``)."""
        return self.slice(0, self.stable_end)

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="ignore")
