"""instructor (1.x): its llama-cpp-python integration patches the Llama's OpenAI-shaped chat
method, ``instructor.patch(create=llm.create_chat_completion_openai_v1, mode=...)``; given
the wrapper's, every mode goes through the wrapper's create_chat_completion.

Mode.TOOLS (instructor's default) forces a tool call, which llama-cpp-python's chat
handler turns into a grammar from the schema: speculative, verified under the grammar.
Mode.JSON asks for ``{"type": "json_object"}``, a JSON grammar: speculative too.
Mode.JSON_SCHEMA, which instructor's llama-cpp-python guide shows, sends OpenAI's
``{"type": "json_schema", ...}``, which llama-cpp-python 0.3.36's chat handlers ignore
(they read only "json_object"): the output is not constrained, with the plain Llama as
with the wrapper; it speculates as any chat call does.
"""
from __future__ import annotations

from typing import Any

import instructor
import pytest

from tests.support.libraries import JSON_TEXT, MESSAGES, Fruits, assert_speculated

#: The modes, and whether llama-cpp-python constrains their output with a grammar.
MODES = {instructor.Mode.TOOLS: True, instructor.Mode.JSON: True, instructor.Mode.JSON_SCHEMA: False}


@pytest.mark.parametrize("mode", list(MODES), ids=[mode.name for mode in MODES])
def test_a_patched_create_speculates_with_plains_answer(llm, wrapped, mode):
    def ask(model):
        llm.reset()
        create = instructor.patch(create=model.create_chat_completion_openai_v1, mode=mode)
        return create(messages=MESSAGES, response_model=Fruits, max_tokens=64, temperature=0.0, max_retries=0)

    plain = ask(llm)
    out = ask(wrapped)
    # model_dump: instructor keeps each response on its object (_raw_response), which == compares
    assert isinstance(out, Fruits)
    assert out.model_dump() == plain.model_dump() == Fruits.model_validate_json(JSON_TEXT).model_dump()
    stats = wrapped.last_speculative
    assert_speculated(stats)
    assert (stats.get("grammar_rows", 0) > 0) is MODES[mode]


def test_the_raw_completion_is_plains(llm, wrapped):
    # The parsed object keeps the ChatCompletion it came from: the wrapper's is plain's,
    # the tool call's arguments and the usage included.
    def ask(model):
        llm.reset()
        create = instructor.patch(create=model.create_chat_completion_openai_v1, mode=instructor.Mode.TOOLS)
        out: Any = create(messages=MESSAGES, response_model=Fruits, max_tokens=64, temperature=0.0, max_retries=0)
        return out._raw_response

    plain, spec = ask(llm), ask(wrapped)
    assert spec.choices[0].message.tool_calls[0].function == plain.choices[0].message.tool_calls[0].function
    assert spec.choices[0].finish_reason == plain.choices[0].finish_reason
    assert spec.usage == plain.usage
