"""``POST /v1/responses`` live: one ``ngramspec serve`` on SmolLM2-135M for the module,
driven by the official ``openai`` client's ``responses.create`` / ``responses.stream`` /
``responses.parse`` (and httpx for the raw stream and what a client would refuse to
send). The answers are the chat route's: at temperature 0 the same text as
``/v1/chat/completions`` for the same messages, through the same speculative path."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the client types; at run time the module is skipped without them
    import httpx
    import openai
else:
    openai = pytest.importorskip("openai")
    httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("sse_starlette")

from pydantic import BaseModel  # noqa: E402

from tests.support.live_server import serving  # noqa: E402

ALIAS = "smollm2"
N_CTX = 2048
INSTRUCTIONS = "Answer in as few words as possible."
QUESTION = "What is 2+2? Answer with one number."      # SmolLM2 answers it and stops, in under 16 tokens
CHAT = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": QUESTION}]
WEATHER = {"type": "function", "name": "get_weather", "description": "The current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                          "additionalProperties": False}}
ASK_WEATHER = "What is the weather in Paris?"


class Person(BaseModel):
    name: str
    age: int


@pytest.fixture(scope="module")
def server(smollm2_path):
    with serving("--model", smollm2_path, "--model_alias", ALIAS, "--n_ctx", str(N_CTX), "--verbose", "false") as srv:
        yield srv


def _extra(obj, name):
    return (obj.model_extra or {}).get(name)


def _chat(client, messages, max_tokens, **kw):
    return client.chat.completions.create(model=ALIAS, messages=messages, max_tokens=max_tokens, temperature=0, **kw)


def test_text_equals_the_chat_route_s(server):
    client = server.client()
    chat = _chat(client, CHAT, 24)
    assert chat.choices[0].finish_reason == "stop"
    r = client.responses.create(model=ALIAS, instructions=INSTRUCTIONS, input=QUESTION, temperature=0,
                                max_output_tokens=24)
    assert r.object == "response" and r.status == "completed" and r.model == ALIAS
    assert r.id.startswith("resp_") and r.instructions == INSTRUCTIONS and r.incomplete_details is None
    [item] = r.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert item.content[0].type == "output_text" and item.content[0].annotations == []
    assert r.output_text == chat.choices[0].message.content
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.usage.output_tokens == chat.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    # The same speculative path, its stats as on the chat route.
    spec = _extra(r, "speculative")
    assert spec["used"] is True and spec["generated_tokens"] == r.usage.output_tokens
    assert _extra(r, "timings")["predicted_n"] == r.usage.output_tokens
    # The same conversation as items (a developer message is a system one), with the decoding header.
    raw = client.responses.with_raw_response.create(model=ALIAS, temperature=0, max_output_tokens=24, input=[
        {"role": "developer", "content": INSTRUCTIONS},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]}])
    assert raw.headers["x-ngramspec-decoding"] == "speculative"
    assert raw.parse().output_text == r.output_text


def test_max_output_tokens_cuts_an_answer_short(server):
    client = server.client()
    chat = _chat(client, CHAT[1:], 4)
    r = client.responses.create(model=ALIAS, input=QUESTION, temperature=0, max_output_tokens=4)
    assert chat.choices[0].finish_reason == "length"
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].status == "incomplete" and r.usage.output_tokens == 4
    assert r.output_text == chat.choices[0].message.content


def test_stream_events_in_order_and_as_the_full_answer(server):
    client = server.client()
    full = client.responses.create(model=ALIAS, instructions=INSTRUCTIONS, input=QUESTION, temperature=0,
                                   max_output_tokens=24)
    with client.responses.stream(model=ALIAS, instructions=INSTRUCTIONS, input=QUESTION, temperature=0,
                                 max_output_tokens=24) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * len(deltas),
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert deltas and "".join(e.delta for e in deltas) == full.output_text == final.output_text
    assert events[-4].text == final.output_text and events[-3].part.text == final.output_text
    item_id = events[2].item.id
    assert all(e.item_id == item_id for e in events[3:-2]) and events[-2].item.id == item_id
    assert events[0].response.id == final.id and events[0].response.status == "in_progress"
    assert final.status == "completed" and final.usage.output_tokens == full.usage.output_tokens
    assert final.output[0].content[0].text == full.output_text
    assert _extra(final, "speculative")["used"] is True


def test_raw_stream_names_each_event(server):
    # What a client without the SDK reads: `event:` names the type its data carries;
    # cut short by max_output_tokens, the last is response.incomplete.
    body = {"model": ALIAS, "input": QUESTION, "temperature": 0, "max_output_tokens": 3, "stream": True}
    r = server.post("/v1/responses", json.dumps(body))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-ngramspec-decoding"] == "speculative"
    names, events = [], []
    for line in r.text.splitlines():
        if line.startswith("event:"):
            names.append(line[len("event:"):].strip())
        elif line.startswith("data:"):
            events.append(json.loads(line[len("data:"):]))
    assert names == [e["type"] for e in events] and names[-1] == "response.incomplete"
    last = events[-1]["response"]
    assert last["status"] == "incomplete" and last["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["usage"]["output_tokens"] == 3
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == \
        last["output"][0]["content"][0]["text"]


def test_a_forced_function_call_and_its_output_on_the_next_turn(server):
    client = server.client()
    kw: dict[str, Any] = {"model": ALIAS, "temperature": 0, "max_output_tokens": 32, "tools": [WEATHER]}
    for choice in ({"type": "function", "name": "get_weather"}, "required"):
        r = client.responses.create(input=ASK_WEATHER, tool_choice=choice, **kw)
        assert r.status == "completed"
        [call] = r.output
        assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
        assert call.id.startswith("fc_") and call.call_id
        assert isinstance(json.loads(call.arguments)["city"], str)
    # The same forced call on the chat route: the same arguments.
    chat = _chat(client, [{"role": "user", "content": ASK_WEATHER}], 32, tools=[{"type": "function", "function": {
        k: WEATHER[k] for k in ("name", "description", "parameters")}}],
                 tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert chat.choices[0].message.tool_calls[0].function.arguments == call.arguments
    # Streamed: the arguments arrive as deltas.
    with client.responses.stream(input=ASK_WEATHER, tool_choice={"type": "function", "name": "get_weather"},
                                 **kw) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done",
                          "response.completed"]
    pieces = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert pieces == events[-3].arguments == final.output[0].arguments == call.arguments
    # The next turn: the call sent back with its output, as agents do; answered with text, the
    # same text as the chat route gives for the same history.
    history = [{"role": "user", "content": ASK_WEATHER}, *[item.model_dump(exclude_none=True) for item in r.output],
               {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}]
    second = client.responses.create(input=history, **kw)
    assert second.output[0].type == "message" and second.output_text
    chat2 = _chat(client, [{"role": "user", "content": ASK_WEATHER},
                           {"role": "assistant", "content": None, "tool_calls": [{
                               "id": call.call_id, "type": "function",
                               "function": {"name": "get_weather", "arguments": call.arguments}}]},
                           {"role": "tool", "tool_call_id": call.call_id, "content": "Sunny, 21 C"}], 32,
                  tools=[{"type": "function", "function": {k: WEATHER[k] for k in ("name", "description",
                                                                                     "parameters")}}])
    assert second.output_text == chat2.choices[0].message.content


def test_text_format_json_schema(server):
    client = server.client()
    ask = "Alice is 31 years old. Give her name and age."
    r = client.responses.create(model=ALIAS, input=ask, temperature=0, max_output_tokens=48, text={"format": {
        "type": "json_schema", "name": "person", "schema": Person.model_json_schema(), "strict": True}})
    assert r.status == "completed"
    Person.model_validate_json(r.output_text)
    assert r.text.format.type == "json_schema" and r.text.format.name == "person"
    # The client's own structured outputs: a Pydantic model as text_format, parsed back.
    parsed = client.responses.parse(model=ALIAS, input=ask, temperature=0, max_output_tokens=48, text_format=Person)
    assert isinstance(parsed.output_parsed, Person) and parsed.output_text == r.output_text
    # json_object: any JSON object.
    obj = client.responses.create(model=ALIAS, input=ask + " Answer in JSON.", temperature=0, max_output_tokens=48,
                                  text={"format": {"type": "json_object"}})
    assert isinstance(json.loads(obj.output_text), dict)


LONG = "hello " * (N_CTX + 200)
#: name: (body, param the error names, code); None: not checked.
BAD: dict[str, tuple[Any, str | None, str | None]] = {
    "malformed JSON": ('{"input": "hi"', None, "invalid_json"),
    "not an object": ('["hi"]', None, "invalid_value"),
    "no input": ({"instructions": "x"}, "input", "invalid_value"),
    "empty input list": ({"input": []}, "input", "invalid_value"),
    "input of the wrong type": ({"input": 5}, "input", "invalid_value"),
    "an unknown field": ({"input": "hi", "frequency_penalty": 1}, "frequency_penalty", "invalid_value"),
    "a message of an unknown role": ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role",
                                     "invalid_value"),
    "max_output_tokens 0": ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens", "invalid_value"),
    "temperature above 2": ({"input": "hi", "temperature": 3}, "temperature", "invalid_value"),
    "temperature NaN": ('{"input": "hi", "max_output_tokens": 2, "temperature": NaN}', None, None),
    "previous_response_id": ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id",
                             "unsupported_parameter"),
    "a built-in tool": ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools", "unsupported_parameter"),
    "tool_choice naming an unknown function": ({"input": "hi", "tools": [WEATHER], "tool_choice": {
        "type": "function", "name": "nope"}}, "tool_choice", "invalid_value"),
    "an output without its call": ({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
                                   "input", "invalid_value"),
    "a reasoning item": ({"input": [{"type": "reasoning", "summary": []}]}, "input", "unsupported_parameter"),
    "json_schema without a schema": ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}},
                                     "text.format.schema", "invalid_value"),
    "an image, and no vision handler": ({"input": [{"role": "user", "content": "hi"}, {"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,AA=="}]}], "max_output_tokens": 2}, "input",
        "invalid_messages"),
    "input longer than the context": ({"input": LONG, "max_output_tokens": 2}, None, "context_length_exceeded"),
    "input longer than the context, streamed": ({"input": LONG, "max_output_tokens": 2, "stream": True}, None,
                                                "context_length_exceeded"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_request_is_4xx(server, case):
    body, param, code = BAD[case]
    r = server.post("/v1/responses", body if isinstance(body, str) else json.dumps(body))
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"], err
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    if case.startswith("an image"):   # the input item it is, not the chat message it became
        assert err["message"].startswith("input[1]: content part 0 is an image"), err


def test_refusals_through_the_client_and_the_server_lives_on(server):
    client = server.client()
    with pytest.raises(openai.BadRequestError, match="does not store responses"):
        client.responses.create(model=ALIAS, input="hi", previous_response_id="resp_1")
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        client.responses.create(model=ALIAS, input="hi", tools=[WEATHER, {**WEATHER, "name": "other"}],
                                tool_choice="required")
    with pytest.raises(openai.BadRequestError), client.responses.stream(model=ALIAS, input=LONG, max_output_tokens=2):
        pass
    assert httpx.get(server.base + "/health", timeout=10).json()["pending"] == 0
    assert client.responses.create(model=ALIAS, input="hi", max_output_tokens=2, temperature=0).usage.output_tokens


def test_openapi_documents_the_route(server):
    schema = httpx.get(server.base + "/openapi.json", timeout=10).json()
    op = schema["paths"]["/v1/responses"]["post"]
    assert set(op["responses"]) >= {"200", "4XX", "500", "503"} and "422" not in op["responses"]
    assert set(op["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert ref.endswith("/ResponsesRequest")
