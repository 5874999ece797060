"""/v1/responses' translation (server/responses.py), without a model: a Responses request
into the chat request it means, what is refused and how, and chat answers (a completion,
a stream of chunks) back into a response object and the Responses API's events."""
from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("fastapi")

from ngramspec.server.errors import ClientError  # noqa: E402
from ngramspec.server.responses import ResponsesAnswer, StreamTranslator, chat_request  # noqa: E402
from ngramspec.server.responses_types import ResponseObject, ResponsesRequest  # noqa: E402

TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def _chat(body: dict[str, Any]) -> dict[str, Any]:
    return chat_request(ResponsesRequest.model_validate(body)).model_dump(exclude_none=True, by_alias=True)


def _refusal(body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ClientError) as info:
        ResponsesAnswer(ResponsesRequest.model_validate(body))
    assert info.value.status == 400
    return info.value.error


def test_a_string_input_is_one_user_message_after_the_instructions():
    chat = _chat({"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 5, "temperature": 0,
                  "top_p": 0.5, "seed": 3})
    assert [(m["role"], m["content"]) for m in chat["messages"]] == [("system", "Be brief."), ("user", "Hi")]
    assert (chat["max_tokens"], chat["temperature"], chat["top_p"], chat["seed"]) == (5, 0, 0.5, 3)
    assert chat["stream"] is False and "tools" not in chat and "response_format" not in chat


def test_items_become_the_conversation_a_chat_request_holds():
    chat = _chat({"input": [
        {"role": "developer", "content": "Use tools."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather"},
                                                         {"type": "input_text", "text": "in Paris?"}]},
        # A previous response's output, sent back: its message, then its call.
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city": "Paris"}', "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "rain"}]},
    ], "tools": [TOOL]})
    messages = chat["messages"]
    assert [m["role"] for m in messages] == ["developer", "user", "assistant", "tool", "assistant", "tool"]
    assert messages[1]["content"] == [{"type": "text", "text": "Weather"}, {"type": "text", "text": "in Paris?"}]
    assert messages[2]["content"] == [{"type": "text", "text": "Let me look."}]
    assert messages[2]["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    assert (messages[3]["tool_call_id"], messages[3]["content"]) == ("call_1", "sunny")
    assert "content" not in messages[4] and messages[4]["tool_calls"][0]["id"] == "call_2"
    assert messages[5]["content"] == "rain"
    assert chat["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city", "parameters": TOOL["parameters"]}}]
    assert "tool_choice" not in chat


@pytest.mark.parametrize("choice, chat_choice", [
    ({"type": "function", "name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}),
    ("required", {"type": "function", "function": {"name": "get_weather"}}),   # the one tool there is
    ("auto", "auto"),
    ("none", "none"),
])
def test_tool_choice(choice, chat_choice):
    assert _chat({"input": "x", "tools": [TOOL], "tool_choice": choice})["tool_choice"] == chat_choice


def test_text_format_is_the_chat_route_s_response_format():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    chat = _chat({"input": "x", "text": {"format": {"type": "json_schema", "name": "A", "schema": schema,
                                                    "strict": True}}})
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "A", "schema": schema,
                                                                              "strict": True}}
    assert _chat({"input": "x", "text": {"format": {"type": "json_object"}}})["response_format"] == {
        "type": "json_object"}
    assert "response_format" not in _chat({"input": "x", "text": {"format": {"type": "text"}}})


REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "previous_response_id": ({"previous_response_id": "resp_1"}, "previous_response_id"),
    "conversation": ({"conversation": "conv_1"}, "conversation"),
    "background": ({"background": True}, "background"),
    "reasoning": ({"reasoning": {"effort": "low"}}, "reasoning"),
    "prompt": ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    "truncation auto": ({"truncation": "auto"}, "truncation"),
    "top_logprobs": ({"top_logprobs": 2}, "top_logprobs"),
    "include": ({"include": ["message.output_text.logprobs"]}, "include"),
    "verbosity": ({"text": {"verbosity": "low"}}, "text.verbosity"),
    "a built-in tool": ({"tools": [{"type": "web_search"}]}, "tools"),
    "tool_choice of a built-in tool": ({"tools": [TOOL], "tool_choice": {"type": "web_search_preview"}},
                                       "tool_choice"),
    "tool_choice allowed_tools": ({"tools": [TOOL], "tool_choice": {"type": "allowed_tools", "mode": "auto",
                                                                     "tools": []}}, "tool_choice"),
    "required with two tools": ({"tools": [TOOL, {**TOOL, "name": "other"}], "tool_choice": "required"},
                                "tool_choice"),
    "a reasoning item": ({"input": [{"type": "reasoning", "summary": []}]}, "input"),
    "an item reference": ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input"),
    "a file part": ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
                    "input[0].content[0]"),
    "a text.format of another type": ({"text": {"format": {"type": "xml"}}}, "text.format"),
    "an image by file_id": ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
                            "input[0].content[0]"),
}
INVALID: dict[str, tuple[dict[str, Any], str]] = {
    "an unknown function": ({"tools": [TOOL], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    "required without tools": ({"tool_choice": "required"}, "tool_choice"),
    "a function named without tools": ({"tool_choice": {"type": "function", "name": "f"}}, "tool_choice"),
    "an output without its call": ({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
                                   "input"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_cannot_be_honoured_is_a_400_naming_it(case):
    extra, param = REFUSED[case]
    err = _refusal({"input": "x", **extra})
    assert err["code"] == "unsupported_parameter" and err["param"] == param, err
    assert err["message"].startswith(param + ": "), err


@pytest.mark.parametrize("case", list(INVALID))
def test_what_is_inconsistent_is_a_400(case):
    extra, param = INVALID[case]
    err = _refusal({"input": "x", **extra})
    assert err["code"] == "invalid_value" and err["param"] == param, err


@pytest.mark.parametrize("body", [
    {"input": "x", "frequency_penalty": 1},           # a chat field, not a Responses one: unknown here
    {"input": "x", "repeat_penalty": 1.0},            # nor llama.cpp's repetition penalty (OpenAI has none)
    {"input": [{"type": {"a": 1}}]},                  # a type that is not a string
    {"input": "x", "tools": [{"type": ["function"]}]},
    {"input": []},
    {"input": "x", "max_output_tokens": 0},
    {"input": "x", "temperature": 2.5},
    {"input": [{"role": "robot", "content": "x"}]},
    {"input": [{"type": "function_call", "name": "f"}]},
    {"input": "x", "text": {"format": {"type": "json_schema", "name": "A"}}},
    {"instructions": "no input"},
])
def test_malformed_requests_fail_validation(body):
    with pytest.raises(ValueError):
        ResponsesRequest.model_validate(body)


def test_hints_with_nothing_to_do_here_are_accepted():
    body = {"input": "x", "store": True, "metadata": {"k": "v"}, "user": "u", "safety_identifier": "s",
            "prompt_cache_key": "p", "service_tier": "auto", "parallel_tool_calls": False, "max_tool_calls": 3,
            "include": ["reasoning.encrypted_content"], "truncation": "disabled", "background": False,
            "text": {"verbosity": "medium"}, "stream_options": {"include_obfuscation": False}}
    answer = ResponsesAnswer(ResponsesRequest.model_validate(body))
    out = answer.response("in_progress", "m", [])
    assert out["metadata"] == {"k": "v"} and out["parallel_tool_calls"] is False and out["store"] is False


# ---------------------------------------------------------------------------
# Back: chat answers as a response object and as events.

def _completion(content: str | None, calls: list[dict[str, Any]] | None = None, finish: str = "stop",
                completion_tokens: int = 3) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": completion_tokens,
                      "total_tokens": 10 + completion_tokens},
            "speculative": {"used": True, "prompt_tokens": 10, "prefill_tokens": 4, "generated_tokens": 3},
            "timings": {"predicted_n": 3}}


CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def test_a_completion_as_a_response_object():
    answer = ResponsesAnswer(ResponsesRequest.model_validate({"input": "x", "instructions": "i"}))
    out = answer.json(_completion("Hello."))
    ResponseObject.model_validate(out)   # as /openapi.json documents it
    assert out["status"] == "completed" and out["incomplete_details"] is None and out["instructions"] == "i"
    [item] = out["output"]
    assert item["type"] == "message" and item["role"] == "assistant" and item["status"] == "completed"
    assert item["content"] == [{"type": "output_text", "text": "Hello.", "annotations": [], "logprobs": []}]
    assert out["usage"] == {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 6, "cache_write_tokens": 0},
                            "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0},
                            "total_tokens": 13}
    assert out["speculative"]["used"] is True and out["timings"] == {"predicted_n": 3}
    # Cut short by max_output_tokens.
    cut = answer.json(_completion("Hel", finish="length"))
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}
    assert cut["output"][0]["status"] == "incomplete"


def test_tool_calls_as_function_call_items():
    body = ResponsesRequest.model_validate({"input": "x", "tools": [TOOL], "max_output_tokens": 8,
                                            "tool_choice": {"type": "function", "name": "get_weather"}})
    out = ResponsesAnswer(body).json(_completion(None, [CALL], finish="tool_calls"))
    ResponseObject.model_validate(out)
    [item] = out["output"]
    assert {k: item[k] for k in ("type", "call_id", "name", "arguments", "status")} == {
        "type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}',
        "status": "completed"}
    assert item["id"].startswith("fc_") and out["status"] == "completed"
    assert out["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert out["tools"][0]["name"] == "get_weather"
    # A forced call cut short by max_output_tokens says "tool_calls" in chat: its arguments do not parse.
    cut = {**CALL, "function": {"name": "get_weather", "arguments": '{"city": "Pa'}}
    out = ResponsesAnswer(body).json(_completion(None, [cut], finish="tool_calls", completion_tokens=8))
    assert out["status"] == "incomplete" and out["output"][0]["status"] == "incomplete"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _events(answer: ResponsesAnswer, chunks: list[dict[str, Any]], finish: str, finished: dict[str, Any]):
    t = StreamTranslator(answer, "m")
    events = t.start()
    for chunk in chunks:
        events += t.feed(chunk)
    events += t.finish(finish, finished)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    json.dumps(events)
    return events


def test_a_text_stream_as_events():
    answer = ResponsesAnswer(ResponsesRequest.model_validate({"input": "x", "stream": True}))
    chunks = [_chunk({"role": "assistant"}), _chunk({"content": "Hel"}), _chunk({"content": "lo."}), _chunk({}, "stop")]
    events = _events(answer, chunks, "stop", _completion("Hello."))
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    item_id = events[2]["item"]["id"]
    assert events[2]["item"]["status"] == "in_progress" and events[2]["item"]["content"] == []
    assert all(e["item_id"] == item_id for e in events[3:8])
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "Hello."
    assert events[6]["text"] == "Hello." and events[7]["part"]["text"] == "Hello."
    final = events[-1]["response"]
    assert final["output"] == [events[8]["item"]] and final["output"][0]["content"][0]["text"] == "Hello."
    assert final["id"] == events[0]["response"]["id"] and final["usage"]["output_tokens"] == 3
    ResponseObject.model_validate(final)


def test_a_call_stream_and_an_empty_stream_as_events():
    answer = ResponsesAnswer(ResponsesRequest.model_validate({"input": "x", "stream": True, "tools": [TOOL]}))
    first = {**CALL, "index": 0, "function": {"name": "get_weather", "arguments": '{"city": '}}
    rest = {**CALL, "index": 0, "function": {"name": "get_weather", "arguments": '"Paris"}'}}
    chunks = [_chunk({"role": "assistant", "content": None}), _chunk({"tool_calls": [first]}),
              _chunk({"tool_calls": [rest]}), _chunk({}, "tool_calls")]
    events = _events(answer, chunks, "tool_calls", _completion(None, [CALL], finish="tool_calls"))
    assert [e["type"] for e in events][2:] == [
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert events[5]["arguments"] == '{"city": "Paris"}' and events[6]["item"]["call_id"] == "call_1"
    assert events[-1]["response"]["output"][0]["arguments"] == '{"city": "Paris"}'
    # Nothing generated: one empty message, as the non-streamed answer has.
    answer = ResponsesAnswer(ResponsesRequest.model_validate({"input": "x", "stream": True}))
    events = _events(answer, [_chunk({"role": "assistant"}), _chunk({}, "stop")], "stop", _completion(""))
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == ""
    assert answer.json(_completion(""))["output"][0]["content"][0]["text"] == ""


def test_an_error_mid_stream_is_an_error_event_then_a_failed_response():
    answer = ResponsesAnswer(ResponsesRequest.model_validate({"input": "x", "stream": True}))
    t = StreamTranslator(answer, "m")
    t.start()
    t.feed(_chunk({"content": "Hi"}))
    error, failed = t.failed({"message": "worker lost", "type": "server_error", "param": None, "code": "x"})
    assert error["type"] == "error" and error["message"] == "worker lost"
    assert failed["type"] == "response.failed" and failed["response"]["status"] == "failed"
    assert failed["response"]["error"]["message"] == "worker lost"


def test_a_refusal_of_the_chat_messages_names_the_input_they_came_from():
    answer = ResponsesAnswer(ResponsesRequest.model_validate({"instructions": "i", "input": [
        {"role": "user", "content": "a"}, {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "x"}, {"role": "user", "content": "b"}]}))
    assert answer.origins == ["instructions", "input[0]", "input[1]", "input[2]", "input[3]"]

    def reworded(message: str) -> dict[str, Any]:
        return answer.reword(ClientError(400, message, param="messages", code="invalid_messages")).error

    assert reworded("messages[4]: content part 0 is an image") == {
        "message": "input[3]: content part 0 is an image", "type": "invalid_request_error", "param": "input",
        "code": "invalid_messages"}
    assert reworded("messages[0]: the template cannot render this")["param"] == "instructions"
    assert reworded("messages: the template cannot render this")["message"] == "input: the template cannot render this"
    other = ClientError(400, "prompt too long", param=None, code="context_length_exceeded")
    assert answer.reword(other) is other
