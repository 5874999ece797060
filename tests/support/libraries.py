"""What the tests of the libraries users put on llama-cpp-python (tests/libraries/) share:
a request whose answer copies the prompt (so n-gram drafting pays and "drafts were
accepted" is a real assertion), its Pydantic model, how a library's own Llama is
swapped for its wrapper, and the checks on the wrapper's stats."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

import ngramspec
from ngramspec import SpeculativeLlama

JSON_TEXT = '{"fruits": ["apple", "banana", "cherry", "date", "elderberry", "fig", "grape"], "count": 7}'
#: SmolLM2-135M copies the JSON (chat, greedy): most of its answer is drafted from the prompt.
COPY_JSON = "Copy this JSON exactly:\n" + JSON_TEXT
#: The same copy for completion (no chat template): the pattern twice, then its third input.
#: SmolLM2-135M continues it with the JSON on every build tried, by at least 1 nat of
#: log-probability at each of the first 40 tokens (Zen 2 AVX2, exact build). COPY_JSON
#: with no template is not a copy everywhere: on that CPU the exact build describes the
#: JSON's structure instead, and the stock build copies it.
COPY_JSON_COMPLETION = f"Input: {JSON_TEXT}\nOutput: {JSON_TEXT}\nInput: {JSON_TEXT}\nOutput:"
MESSAGES = [{"role": "user", "content": COPY_JSON}]
#: The Llama settings the libraries that load their own Llama are given: the `llm`
#: fixture's (tests/conftest.py), and llama-cpp-python's own n_batch (LangChain's
#: default of 8 would cap every verify pass at 8 tokens).
LLAMA_SETTINGS: dict[str, Any] = {"n_ctx": 2048, "seed": 0, "n_batch": 512, "verbose": False}


class Fruits(BaseModel):
    """Fruits, and how many there are."""

    fruits: list[str]
    count: int


def wrap(llama: Any, invariance: Any) -> SpeculativeLlama:
    """``ngramspec.wrap(llama)`` with the suite's invariance report and every draft verified
    (adaptive=False), so how much is drafted depends on the text alone, not on the
    machine's timings. The call path, speculative or plain, is the default wrapper's."""
    return ngramspec.wrap(llama, invariance=invariance, adaptive=False)


@contextmanager
def wrapped_in(holder: Any, attr: str, invariance: Any) -> Iterator[SpeculativeLlama]:
    """Replaces ``holder.<attr>``, the Llama a library loaded for itself, with its wrapper, as
    docs/usage.md tells users to (``chat.client = ngramspec.wrap(chat.client)``), and puts
    the plain Llama back after. The Llama is reset first, as before each plain call."""
    own = getattr(holder, attr)
    spec = wrap(own, invariance)
    own.reset()
    setattr(holder, attr, spec)
    try:
        yield spec
    finally:
        setattr(holder, attr, own)
        own.reset()


def assert_speculated(stats: dict[str, Any]) -> None:
    """The wrapper decoded the call speculatively, and drafts were accepted: fewer forward
    passes than tokens."""
    assert stats["used"] is True, stats
    assert stats["accepted_tokens"] > 0, stats
    assert stats["forward_passes"] < stats["generated_tokens"], stats


def assert_decoded_plainly(stats: dict[str, Any], reason: str) -> None:
    """The wrapper handed the call to the Llama's own decoding, and says why."""
    assert stats["used"] is False, stats
    assert stats["reason"] == reason, stats
    assert "accepted_tokens" not in stats, stats
