"""Chat messages as clients send them (server/messages.py) and error texts (server/errors.py), without a model."""
from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("fastapi")

from llama_cpp import llama_chat_format  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

from ngramspec.server.errors import ClientError, as_client_error, template_refusal  # noqa: E402
from ngramspec.server.messages import (  # noqa: E402
    ChatMessage,
    ResponseFormat,
    first_unrenderable,
    llama_response_format,
    renderable_messages,
)

MESSAGES = TypeAdapter(list[ChatMessage])
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def _render(messages, vision=False, tool_calls=False):
    return renderable_messages(MESSAGES.validate_python(messages), vision, tool_calls)


def test_text_parts_are_joined_with_newlines():
    out = _render([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
    assert out == [{"role": "user", "content": "a\nb"}]


def test_null_or_missing_content_is_empty_text():
    out = _render([{"role": "system", "content": None}, {"role": "assistant"}, {"role": "developer", "content": "x"}])
    assert [m["content"] for m in out] == ["", "", "x"]
    assert out[2]["role"] == "system"


def test_tool_calls_are_written_into_the_turn_for_a_template_that_does_not_render_them():
    history = [{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": None, "tool_calls": [CALL]},
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    plain = _render(history)
    assert json.loads(plain[1]["content"]) == {"name": "get_weather", "arguments": {"city": "Paris"}}
    assert plain[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert plain[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    # A template that renders tool_calls gets them as they are, and the content it was given.
    assert _render(history, tool_calls=True)[1]["content"] == ""


def test_an_image_part_is_refused_by_index_without_a_vision_handler():
    parts = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "data:x"}}]
    with pytest.raises(ClientError) as e:
        _render([{"role": "system", "content": "s"}, {"role": "user", "content": parts}])
    assert e.value.status == 400 and e.value.error["code"] == "invalid_messages"
    assert str(e.value.error["message"]).startswith("messages[1]: content part 1 is an image")
    # A vision handler takes the parts as they are.
    assert _render([{"role": "user", "content": parts}], vision=True)[0]["content"][1]["type"] == "image_url"


@pytest.mark.parametrize("fmt, expected", [
    ({"type": "json_object"}, {"type": "json_object"}),
    ({"type": "json_object", "schema": {"type": "object"}}, {"type": "json_object", "schema": {"type": "object"}}),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}, "strict": True}},
     {"type": "json_object", "schema": {"type": "object"}}),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, {"type": "json_object"}),
    ({"type": "text"}, {"type": "text"}),
])
def test_openai_response_formats_become_llama_cpp_pythons(fmt, expected):
    assert llama_response_format(ResponseFormat.model_validate(fmt)) == expected


def test_the_first_message_a_template_fails_on_is_named():
    formatter = llama_chat_format.Jinja2ChatFormatter(
        template="{% for m in messages %}{{ m['role'] + m['content'] }}{% endfor %}", eos_token="", bos_token="")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                {"role": "user", "content": None}, {"role": "user", "content": "c"}]
    assert first_unrenderable(formatter, messages) == 2
    assert first_unrenderable(formatter, messages[:2]) is None
    try:
        formatter(messages=messages)  # type: ignore[arg-type]
    except TypeError as exc:
        err = template_refusal(exc, 2)
    assert str(err.error["message"]).startswith("messages[2]: the model's chat template cannot render this")
    assert "concatenate" not in str(err.error["message"])   # Python's own text stays in the log


def test_a_templates_own_refusal_is_quoted():
    formatter = llama_chat_format.Jinja2ChatFormatter(
        template="{{ raise_exception('Conversation roles must alternate user/assistant') }}", eos_token="",
        bos_token="")
    with pytest.raises(ValueError) as e:
        formatter(messages=[{"role": "user", "content": "a"}])
    assert template_refusal(e.value, 0).error["message"] == (
        "messages[0]: the model's chat template cannot render this: Conversation roles must alternate user/assistant")


def _raise_in_python():
    return "a" + 5   # type: ignore[operator]


def test_no_raw_python_exception_text_reaches_a_client(caplog):
    try:
        _raise_in_python()
    except TypeError as exc:
        err = as_client_error(exc)
    assert isinstance(err, ClientError) and err.status == 400
    assert "concatenate" not in str(err.error["message"]) and "str" not in str(err.error["message"])
    assert "can only concatenate" in caplog.text   # the log has it
    # A message ngramspec wrote for the user reaches the client as it is.
    from ngramspec.integrations.llama_call_args import check_finite

    try:
        check_finite({"temperature": float("nan")})
    except ValueError as exc:
        err = as_client_error(exc)
    assert isinstance(err, ClientError)
    assert err.error["message"] == "temperature must be a finite number, got nan"
    # llama-cpp-python's own refusal of an unknown tool, reworded.
    try:
        raise ValueError("Tool choice 'f' not found in tools.")
    except ValueError as exc:
        err = as_client_error(exc)
    assert isinstance(err, ClientError)
    assert err.error["param"] == "tool_choice" and "`f`" in str(err.error["message"])
