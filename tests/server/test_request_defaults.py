"""Every request field of /v1/completions and /v1/chat/completions defaults as in
llama-cpp-python's own server (``llama_cpp.server.types``), read from its models, so
that a default changed there (or here) fails: the same request must give the same
text from ``ngramspec serve`` and ``python -m llama_cpp.server``."""
from __future__ import annotations

import inspect

import pytest

pytest.importorskip("fastapi")

import llama_cpp  # noqa: E402
from llama_cpp.server import types as theirs  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from ngramspec.server import types as ours  # noqa: E402

PAIRS = [(theirs.CreateCompletionRequest, ours.CompletionRequest),
         (theirs.CreateChatCompletionRequest, ours.ChatCompletionRequest)]

#: Fields whose default here differs on purpose, and why.
REFUSED_HERE = {
    # theirs defaults to [] and renders an empty chat; OpenAI requires messages, and
    # an empty list is a 422 here, naming the field.
    ("CreateChatCompletionRequest", "messages"),
}


@pytest.mark.parametrize("their_type, our_type", PAIRS, ids=["completions", "chat"])
def test_every_field_defaults_as_in_llama_cpp_pythons_server(their_type, our_type):
    assert len(their_type.model_fields) > 20
    for name, field in their_type.model_fields.items():
        assert name in our_type.model_fields, name
        if (their_type.__name__, name) in REFUSED_HERE:
            assert our_type.model_fields[name].is_required(), name
            continue
        want = field.get_default(call_default_factory=True)
        got = our_type.model_fields[name].get_default(call_default_factory=True)
        assert got == want and type(got) is type(want), (name, got, want)


@pytest.mark.parametrize("their_type, our_type", PAIRS, ids=["completions", "chat"])
def test_a_request_with_no_sampling_fields_parses_to_theirs(their_type, our_type):
    body = {"prompt": "Hi"} if our_type is ours.CompletionRequest else {
        "messages": [{"role": "user", "content": "Hi"}]}
    mine, their = our_type(**body).model_dump(), their_type(**body).model_dump()
    shared = set(their) - {"messages"}   # ours keeps OpenAI's message shapes (server/messages.py)
    assert {k: mine[k] for k in shared} == {k: their[k] for k in shared}
    assert mine["repeat_penalty"] == 1.1 and mine["temperature"] == 0.8


def test_our_own_fields_default_to_what_llama_leaves_them_at():
    # typical_p is not in llama-cpp-python's request types: its Llama's default applies there.
    for method in (llama_cpp.Llama.create_completion, llama_cpp.Llama.create_chat_completion):
        default = inspect.signature(method).parameters["typical_p"].default
        assert ours.CompletionRequest.model_fields["typical_p"].default == default
        assert ours.ChatCompletionRequest.model_fields["typical_p"].default == default
    for request in (ours.CompletionRequest, ours.ChatCompletionRequest):
        assert request.model_fields["prediction"].default is None
        assert request.model_fields["stream_options"].default is None
    assert ours.ChatCompletionRequest.model_fields["max_completion_tokens"].default is None


def test_an_empty_message_list_is_refused_by_name():
    # model_validate, as the server parses a body (the constructor's keywords are typed)
    with pytest.raises(ValidationError, match="messages"):
        ours.ChatCompletionRequest.model_validate({"messages": []})
    with pytest.raises(ValidationError, match="messages"):
        ours.ChatCompletionRequest.model_validate({})
    with pytest.raises(ValidationError, match="repeat_penalty"):
        ours.CompletionRequest.model_validate({"prompt": "Hi", "repeat_penalty": -1})
