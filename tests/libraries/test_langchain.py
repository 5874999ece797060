"""LangChain's llama-cpp-python models (langchain-community): ChatLlamaCpp and LlamaCpp.

Neither takes an existing Llama: both accept ``client=`` as a field and then overwrite
it with a Llama they load from ``model_path`` (ChatLlamaCpp in an "after" validator,
LlamaCpp in a pre-init one). The supported way is to wrap the one they loaded:
``chat.client = ngramspec.wrap(chat.client)``. Every call (invoke, stream, structured
output) then goes through the wrapper, speculatively, with plain's greedy text.
"""
from __future__ import annotations

from typing import Any

import llama_cpp
import pytest
from langchain_community.chat_models import ChatLlamaCpp
from langchain_community.llms import LlamaCpp

from tests.support.libraries import (
    COPY_JSON_COMPLETION,
    JSON_TEXT,
    LLAMA_SETTINGS,
    MESSAGES,
    Fruits,
    assert_speculated,
    wrapped_in,
)

#: Greedy, and LangChain's repeat_penalty default (1.1) off: with it drafting nearly
#: stops (bench/results/repeat-penalty-cost-smollm2-135m.md). test_langchains_default_*
#: keeps it.
GREEDY: dict[str, Any] = {"temperature": 0.0, "max_tokens": 48, "repeat_penalty": 1.0}
CHAT = [(m["role"], m["content"]) for m in MESSAGES]


@pytest.fixture(scope="module")
def chat(smollm2_path):
    model = ChatLlamaCpp(model_path=smollm2_path, **LLAMA_SETTINGS, **GREEDY)
    yield model
    model.client.close()


@pytest.fixture(scope="module")
def completion_model(smollm2_path):
    model = LlamaCpp(model_path=smollm2_path, **LLAMA_SETTINGS, **GREEDY)
    yield model
    model.client.close()


def test_neither_model_takes_an_existing_llama(wrapped, smollm2_path):
    # client= is accepted and then replaced by a Llama loaded from model_path: the wrapper
    # given there is dropped, so the docs show wrapping the model's own client.
    for cls in (ChatLlamaCpp, LlamaCpp):
        model = cls(model_path=smollm2_path, client=wrapped, **LLAMA_SETTINGS)
        try:
            assert model.client is not wrapped and type(model.client) is llama_cpp.Llama, cls
        finally:
            model.client.close()


def test_chat_invoke_speculates_with_plains_text(chat, invariance):
    chat.client.reset()
    plain = chat.invoke(CHAT)
    assert JSON_TEXT in plain.content   # the copy that drafting pays on
    with wrapped_in(chat, "client", invariance) as wrapped:   # the supported way (docs/usage.md)
        spec = chat.invoke(CHAT)
        assert spec.content == plain.content
        assert spec.response_metadata == plain.response_metadata
        assert_speculated(wrapped.last_speculative)


def test_chat_stream_speculates_with_plains_text(chat, invariance):
    chat.client.reset()
    plain = "".join(str(part.content) for part in chat.stream(CHAT))
    with wrapped_in(chat, "client", invariance) as spec:
        parts = list(chat.stream(CHAT))
        assert "".join(str(part.content) for part in parts) == plain
        assert len(parts) > 2   # streamed, a chunk per verify pass
        assert_speculated(spec.last_speculative)


def test_chat_structured_output_speculates_under_its_grammar(chat, invariance):
    # with_structured_output forces a tool call: llama-cpp-python's chat handler turns the
    # schema into a grammar, which the wrapper verifies row by row.
    structured = chat.with_structured_output(Fruits)
    chat.client.reset()
    plain = structured.invoke(CHAT)
    with wrapped_in(chat, "client", invariance) as spec:
        out = structured.invoke(CHAT)
        assert isinstance(out, Fruits) and out == plain
        assert out.count == 7 and len(out.fruits) == 7
        stats = spec.last_speculative
        assert_speculated(stats)
        assert stats["grammar_rows"] > 0


def test_llm_invoke_and_stream_speculate_with_plains_text(completion_model, invariance):
    prompt = COPY_JSON_COMPLETION
    completion_model.client.reset()
    plain = completion_model.invoke(prompt)
    completion_model.client.reset()
    plain_stream = "".join(completion_model.stream(prompt))
    assert plain_stream == plain and '"elderberry"' in plain
    with wrapped_in(completion_model, "client", invariance) as spec:
        assert completion_model.invoke(prompt) == plain
        assert_speculated(spec.last_speculative)
        spec.reset()
        assert "".join(completion_model.stream(prompt)) == plain
        assert_speculated(spec.last_speculative)


def test_langchains_default_repeat_penalty_keeps_plains_text(smollm2_path, invariance):
    # LangChain's defaults otherwise (repeat_penalty 1.1): penalties are applied row by row,
    # so the call speculates and the text is plain's; how much is accepted is the text's
    # business (little, here), so only the path is asserted.
    model = ChatLlamaCpp(model_path=smollm2_path, **LLAMA_SETTINGS, temperature=0.0, max_tokens=32)
    try:
        assert model.repeat_penalty == 1.1
        plain = model.invoke(CHAT)
        with wrapped_in(model, "client", invariance) as spec:
            assert model.invoke(CHAT).content == plain.content
            assert spec.last_speculative["used"] is True
    finally:
        model.client.close()
