"""outlines (1.x): ``outlines.from_llamacpp(wrapped)`` takes the wrapper as it is (it is a
Llama).

Unconstrained generation (no output type) speculates. A Pydantic schema, a regex or any
other output type becomes a ``logits_processor`` (outlines masks the logits with its own
index, in Python), which the engine cannot run on verified rows the way plain runs it:
those calls are decoded by the wrapped Llama's own path, by design, and say so in the
stats. Their text is plain's; they are not sped up.
"""
from __future__ import annotations

import re

import outlines
import pytest

from tests.support.libraries import COPY_JSON, JSON_TEXT, Fruits, assert_decoded_plainly, assert_speculated

GREEDY = {"temperature": 0.0, "max_tokens": 48}
PLAIN_REASON = "logits_processor in greedy decoding"
DATE = r"20[0-9]{2}-[01][0-9]-[0-3][0-9]"


def _both(llm, wrapped, call, **options):
    """``call(model)`` with outlines on the plain Llama, then on the wrapper (reset before each)."""
    llm.reset()
    plain = call(outlines.from_llamacpp(llm, **options))
    llm.reset()
    return plain, call(outlines.from_llamacpp(wrapped, **options))


@pytest.mark.parametrize("chat_mode", [True, False], ids=["chat", "completion"])
def test_unconstrained_generation_speculates_with_plains_text(llm, wrapped, chat_mode):
    prompt = COPY_JSON if chat_mode else COPY_JSON + "\n"
    plain, spec = _both(llm, wrapped, lambda model: model(prompt, **GREEDY), chat_mode=chat_mode)
    assert spec == plain
    assert '"elderberry"' in plain
    assert_speculated(wrapped.last_speculative)


def test_streamed_generation_speculates_with_plains_text(llm, wrapped):
    plain, spec = _both(llm, wrapped, lambda model: list(model.stream(COPY_JSON, **GREEDY)))
    assert "".join(spec) == "".join(plain) == JSON_TEXT
    assert_speculated(wrapped.last_speculative)


def test_a_pydantic_schema_is_decoded_plainly_with_plains_text(llm, wrapped):
    plain, spec = _both(llm, wrapped, lambda model: model(COPY_JSON, Fruits, **{**GREEDY, "max_tokens": 64}))
    assert spec == plain
    assert Fruits.model_validate_json(spec) == Fruits.model_validate_json(JSON_TEXT)
    assert_decoded_plainly(wrapped.last_speculative, PLAIN_REASON)


def test_a_regex_is_decoded_plainly_with_plains_text(llm, wrapped):
    prompt = "What is the date today? Answer as YYYY-MM-DD."
    date = outlines.types.Regex(DATE)
    plain, spec = _both(llm, wrapped, lambda model: model(prompt, date, max_tokens=16, temperature=0.0))
    assert spec == plain
    assert re.fullmatch(DATE, spec), spec   # constrained (without numba it silently is not)
    assert_decoded_plainly(wrapped.last_speculative, PLAIN_REASON)
