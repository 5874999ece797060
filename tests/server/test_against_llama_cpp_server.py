"""``ngramspec serve`` against the server it is built on, llama-cpp-python 0.3.36's own
(``python -m llama_cpp.server``), same model and settings, given the same requests:
where theirs answers 200, ours answers 200 with the same greedy text; where theirs
fails (OpenAI's json_schema format, content parts, a tool-call history), ours answers
200, as theirs answers the request in its own terms; our stats and header say
whether speculation ran. Then real clients: the ``openai`` library's JSON mode, a
Pydantic schema through ``chat.completions.parse``, a tool-call round trip, logprobs."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import openai
else:
    openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")

from pydantic import BaseModel  # noqa: E402

from tests.support.live_server import llama_cpp_serving, serving  # noqa: E402
from tests.support.prompts import PROMPTS  # noqa: E402


class Person(BaseModel):
    name: str
    age: int


class People(BaseModel):
    people: list[Person]


ASK = [{"role": "system", "content": "You extract data as JSON."},
       {"role": "user", "content": "Alice is 31. Bob is 42. List each person's name and age."}]
PERSON_TOOL = {"type": "function", "function": {"name": "record_person", "description": "Record one person",
                                                "parameters": Person.model_json_schema()}}
FORCED = {"type": "function", "function": {"name": "record_person"}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "record_person",
                                                         "arguments": '{"name": "Alice", "age": 31}'}}
CODE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"
GRAMMAR = 'root ::= "    return " [a-z +*-]+ "\\n"'
# These requests name a repeat penalty of 1.0 (both servers default to 1.1, which
# test_a_request_of_defaults_gives_their_text covers).
GREEDY: dict[str, Any] = {"temperature": 0, "repeat_penalty": 1.0, "max_tokens": 48}


@pytest.fixture(scope="module")
def servers(smollm2_path):
    # Both take llama-cpp-python's settings, with its defaults (threads included).
    settings = ["--model", smollm2_path, "--n_ctx", "2048", "--verbose", "false"]
    with serving(*settings, "--model_alias", "smollm2") as ours, llama_cpp_serving(*settings) as theirs:
        yield ours, theirs


def _same_start(server) -> None:
    """A fixed, unrelated exchange: both servers then start the next request from the
    same cache state (plain greedy text can depend on what was cached)."""
    server.post("/v1/completions", json.dumps({"prompt": "Hello.", "max_tokens": 2, "temperature": 0}))


def _post(server, path: str, body: dict[str, Any]) -> Any:
    _same_start(server)
    return server.post(path, json.dumps(body))


def _answer(out: dict[str, Any]) -> Any:
    """What a greedy answer says: the text, or the tool calls' names and arguments."""
    choice = out["choices"][0]
    if "text" in choice:
        return choice["text"]
    message = choice["message"]
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    return message.get("content"), calls


#: Requests both servers answer: (path, body).
BOTH: dict[str, tuple[str, dict[str, Any]]] = {
    "json_object": ("/v1/chat/completions", {"messages": ASK, "response_format": {"type": "json_object"}}),
    "json_object with a schema (llama-cpp-python's own form)": ("/v1/chat/completions", {
        "messages": ASK, "response_format": {"type": "json_object", "schema": People.model_json_schema()}}),
    "a forced tool call": ("/v1/chat/completions", {"messages": ASK, "tools": [PERSON_TOOL], "tool_choice": FORCED}),
    "a forced function_call": ("/v1/chat/completions", {
        "messages": ASK, "functions": [PERSON_TOOL["function"]], "function_call": {"name": "record_person"}}),
    "a completion with a grammar": ("/v1/completions", {"prompt": CODE, "grammar": GRAMMAR}),
    "completion logprobs": ("/v1/completions", {"prompt": CODE, "logprobs": 2, "max_tokens": 16}),
    "chat logprobs": ("/v1/chat/completions", {"messages": ASK, "logprobs": True, "top_logprobs": 2,
                                               "max_tokens": 16}),
    "a frequency penalty": ("/v1/chat/completions", {"messages": ASK, "frequency_penalty": 0.6}),
    "presence and repeat penalties": ("/v1/completions", {"prompt": CODE, "presence_penalty": 0.5,
                                                          "repeat_penalty": 1.3}),
    "min_tokens": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Say hi."}],
                                            "min_tokens": 24}),
    "a logit_bias": ("/v1/completions", {"prompt": CODE, "logit_bias": {"28": -3.0, "216": 2.0}}),
    "n = 2 (theirs answers one choice)": ("/v1/chat/completions", {"messages": ASK, "n": 2, "max_tokens": 24}),
}


@pytest.mark.parametrize("case", list(BOTH))
def test_what_theirs_answers_ours_answers_alike(servers, case):
    ours, theirs = servers
    path, body = BOTH[case]
    body = {**GREEDY, **body}
    a, b = _post(ours, path, body), _post(theirs, path, body)
    assert b.status_code == 200, b.text
    assert a.status_code == 200, a.text
    mine, their = a.json(), b.json()
    assert _answer(mine) == _answer(their)
    assert mine["speculative"]["used"] is True and a.headers["x-ngramspec-decoding"] == "speculative"
    if "logprobs" in case:
        assert mine["choices"][0]["logprobs"] == their["choices"][0]["logprobs"]
    if case.startswith("n = 2"):
        assert [c["index"] for c in mine["choices"]] == [0, 1]
        assert _answer({"choices": mine["choices"][1:]}) == _answer(their)
    if case == "min_tokens":
        assert mine["usage"]["completion_tokens"] >= 24


#: Requests that leave every sampling field at its default but temperature (0: greedy;
#: the default, 0.8, samples, and the two servers draw differently).
DEFAULTS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "List the days of the week, one "
                                                                           "per line, then again."}],
                                      "temperature": 0, "max_tokens": 96}),
    # 16 tokens (the default max_tokens) whose text a repeat penalty of 1.0 changes.
    "completion": ("/v1/completions", {"prompt": PROMPTS["list"], "temperature": 0}),
}


@pytest.mark.parametrize("case", list(DEFAULTS))
def test_a_request_of_defaults_gives_their_text(servers, case):
    # repeat_penalty defaulted to 1.0 here and to 1.1 there: the same request gave other text.
    ours, theirs = servers
    path, body = DEFAULTS[case]
    a, b = _post(ours, path, body), _post(theirs, path, body)
    assert a.status_code == 200, a.text
    assert b.status_code == 200, b.text
    assert _answer(a.json()) == _answer(b.json())
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")   # ours adds completion_tokens_details
    assert [a.json()["usage"][k] for k in counts] == [b.json()["usage"][k] for k in counts]
    assert a.json()["speculative"]["used"] is True and a.headers["x-ngramspec-decoding"] == "speculative"


def _rendered_tool_history() -> list[dict[str, Any]]:
    return [*ASK, {"role": "assistant", "content": '{"name": "record_person", "arguments": {"name": "Alice", '
                                                   '"age": 31}}'},
            {"role": "tool", "tool_call_id": "call_1", "content": "recorded"}]


#: Requests theirs fails: (path, ours, theirs in its own terms).
THEIRS_FAILS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "OpenAI's json_schema format": (
        "/v1/chat/completions",
        {"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {
            "name": "People", "schema": People.model_json_schema(), "strict": True}}},
        {"messages": ASK, "response_format": {"type": "json_object", "schema": People.model_json_schema()}}),
    "content parts": (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Name a colour."},
                                                   {"type": "text", "text": "One word."}]}]},
        {"messages": [{"role": "user", "content": "Name a colour.\nOne word."}]}),
    "a tool-call history": (
        "/v1/chat/completions",
        {"messages": [*ASK, {"role": "assistant", "content": None, "tool_calls": [CALL]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "recorded"}]},
        {"messages": _rendered_tool_history()}),
    "a system message with null content": (
        "/v1/chat/completions",
        {"messages": [{"role": "system", "content": None}, {"role": "user", "content": "Say hi."}]},
        {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "Say hi."}]}),
}


@pytest.mark.parametrize("case", list(THEIRS_FAILS))
def test_what_theirs_fails_ours_answers(servers, case):
    ours, theirs = servers
    path, mine, their_form = THEIRS_FAILS[case]
    failed = _post(theirs, path, {**GREEDY, **mine})
    assert failed.status_code >= 400, failed.text
    a, b = _post(ours, path, {**GREEDY, **mine}), _post(theirs, path, {**GREEDY, **their_form})
    assert a.status_code == 200, a.text
    assert b.status_code == 200, b.text
    assert _answer(a.json()) == _answer(b.json())
    assert a.json()["speculative"]["used"] is True


EXTRACT = [{"role": "user", "content": "Extract the people: Alice is 31 years old and Bob is 42 years old."}]


def test_a_pydantic_schema_through_the_openai_client(servers):
    ours, theirs = servers
    kw = {"model": "smollm2", "messages": EXTRACT, "temperature": 0, "max_tokens": 120,
          "extra_body": {"repeat_penalty": 1.0}}
    _same_start(ours)
    parsed = ours.client().chat.completions.parse(response_format=People, **kw)
    with pytest.raises(openai.APIStatusError):   # llama-cpp-python's server: a 500
        theirs.client().chat.completions.parse(response_format=People, **kw)
    message = parsed.choices[0].message
    assert isinstance(message.parsed, People)
    # Theirs, in its own terms, gives the same JSON.
    their = _post(theirs, "/v1/chat/completions", {**GREEDY, "max_tokens": 120, "messages": EXTRACT,
                                                     "response_format": {"type": "json_object",
                                                                         "schema": People.model_json_schema()}}).json()
    assert message.content == their["choices"][0]["message"]["content"]
    assert (parsed.model_extra or {})["speculative"]["used"] is True


def test_json_mode_and_logprobs_through_the_openai_client(servers):
    ours, theirs = servers
    kw = {"model": "smollm2", "messages": ASK, "temperature": 0, "max_tokens": 48,
          "extra_body": {"repeat_penalty": 1.0}}
    for extra in ({"response_format": {"type": "json_object"}}, {"logprobs": True, "top_logprobs": 3}):
        _same_start(ours)
        a = ours.client().chat.completions.create(**kw, **extra)
        _same_start(theirs)
        b = theirs.client().chat.completions.create(**kw, **extra)
        assert a.choices[0].message.content == b.choices[0].message.content
        if "logprobs" in extra:
            assert [t.model_dump() for t in a.choices[0].logprobs.content] == \
                   [t.model_dump() for t in b.choices[0].logprobs.content]


def test_a_tool_call_round_trip_through_the_openai_client(servers):
    """The model calls the tool; the client sends the call and its result back, as
    every tool-using client does (llama-cpp-python's server answers that with a 500)."""
    ours, _ = servers
    client = ours.client()
    kw = {"model": "smollm2", "temperature": 0, "max_tokens": 48, "extra_body": {"repeat_penalty": 1.0}}
    first = client.chat.completions.create(messages=ASK, tools=[PERSON_TOOL], tool_choice=FORCED, **kw)
    call = first.choices[0].message.tool_calls[0]
    assert call.function.name == "record_person"
    Person.model_validate_json(call.function.arguments)
    history = [*ASK, first.choices[0].message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "recorded"}]
    second = client.chat.completions.create(messages=history, tools=[PERSON_TOOL], **kw)
    assert second.choices[0].message.content
    assert (second.model_extra or {})["speculative"]["used"] is True
