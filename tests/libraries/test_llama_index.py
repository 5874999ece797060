"""llama-index's llama-cpp-python LLM (llama-index-llms-llama-cpp): LlamaCPP.

LlamaCPP takes no Llama: its constructor loads one from ``model_path`` (or downloads
``model_url``) into the private attribute ``_model``, which every call uses
(``self._model(prompt=..., **generate_kwargs)``). The supported way is to wrap that one
after construction: ``li._model = ngramspec.wrap(li._model)``. complete, chat and
stream_complete then speculate, with plain's greedy text; the response's ``raw`` is the
wrapper's completion dict, ``speculative`` stats included.
"""
from __future__ import annotations

import llama_cpp
import pytest
from llama_index.core.llms import ChatMessage
from llama_index.llms.llama_cpp import LlamaCPP

from tests.support.libraries import COPY_JSON, COPY_JSON_COMPLETION, LLAMA_SETTINGS, assert_speculated, wrapped_in


@pytest.fixture(scope="module")
def li(smollm2_path):
    settings = {k: v for k, v in LLAMA_SETTINGS.items() if k not in ("n_ctx", "verbose")}
    model = LlamaCPP(model_path=smollm2_path, temperature=0.0, max_new_tokens=48,
                     context_window=LLAMA_SETTINGS["n_ctx"], model_kwargs=settings, verbose=False)
    yield model
    model._model.close()


def test_llamacpp_loads_its_own_llama(li):
    # No argument takes a Llama: the one it uses is the private _model it loaded.
    assert type(li._model) is llama_cpp.Llama
    assert li.generate_kwargs == {"temperature": 0.0, "max_tokens": 48}


def test_complete_speculates_with_plains_text(li, invariance):
    li._model.reset()
    plain = li.complete(COPY_JSON_COMPLETION)
    with wrapped_in(li, "_model", invariance):   # the supported way (docs/usage.md)
        spec = li.complete(COPY_JSON_COMPLETION)
        assert spec.text == plain.text and '"elderberry"' in plain.text
        assert spec.raw["choices"] == plain.raw["choices"] and spec.raw["usage"] == plain.raw["usage"]
        assert_speculated(spec.raw["speculative"])
        assert li.metadata.context_window == LLAMA_SETTINGS["n_ctx"]   # read through the wrapper


def test_chat_and_stream_complete_speculate_with_plains_text(li, invariance):
    messages = [ChatMessage(role="user", content=COPY_JSON)]
    li._model.reset()
    plain_chat = li.chat(messages)
    li._model.reset()
    plain_stream = list(li.stream_complete(COPY_JSON_COMPLETION))
    with wrapped_in(li, "_model", invariance) as spec:
        chat = li.chat(messages)
        assert chat.message.content == plain_chat.message.content
        assert_speculated(chat.raw["speculative"])
        spec.reset()
        stream = list(li.stream_complete(COPY_JSON_COMPLETION))
        assert stream[-1].text == plain_stream[-1].text
        assert "".join(str(part.delta) for part in stream) == stream[-1].text
        assert_speculated(spec.last_speculative)
