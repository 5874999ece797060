"""`ngramspec serve`, live: one server subprocess per module on SmolLM2-135M,
driven with the official `openai` client (and httpx where a client would refuse to
send the request, e.g. malformed JSON)."""
from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the client types; at run time the module is skipped without them
    import httpx
    import openai
else:
    openai = pytest.importorskip("openai")
    httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("sse_starlette")

from tests.support.live_server import serving  # noqa: E402

ALIAS = "smollm2"
N_CTX = 2048
MAX_QUEUE = 6
CHAT = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Write a Python function that returns the square of a number."}]
CODE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"


@pytest.fixture(scope="module")
def server(smollm2_path):
    with serving("--model", smollm2_path, "--model_alias", ALIAS, "--n_ctx", str(N_CTX), "--verbose", "false",
                 "--max_queue", str(MAX_QUEUE)) as srv:
        yield srv


def _chat_text(resp) -> str:
    return resp.choices[0].message.content


def _extra(obj, name):
    return (obj.model_extra or {}).get(name)


def _check_stats(resp, n_tokens: int) -> None:
    """usage.completion_tokens_details, timings and speculative, consistent."""
    usage = resp.usage
    assert usage.completion_tokens == n_tokens
    details = usage.completion_tokens_details
    assert details is not None
    assert details.accepted_prediction_tokens is not None and details.rejected_prediction_tokens is not None
    timings = _extra(resp, "timings")
    spec = _extra(resp, "speculative")
    assert timings["predicted_n"] == n_tokens == spec["generated_tokens"]
    assert timings["draft_n"] == spec["drafted_tokens"] >= timings["draft_n_accepted"] == spec["accepted_tokens"]
    assert timings["predicted_ms"] >= 0 and spec["tokens_per_forward"] >= 1.0


# ---------------------------------------------------------------------------
# First, while the server's context is still cold: identity with plain llama-cpp-python.

def test_greedy_chat_equals_plain_llama(server, llm):
    client = server.client()
    # Both cold (plain greedy's cache-state caveat: docs/exactness.md): a fresh server context and a reset Llama.
    # The request leaves repeat_penalty at the server's default, llama-cpp-python's server's 1.1
    # (Llama.create_chat_completion's own is 1.0): plain is asked what that server asks it.
    llm.reset()
    plain = llm.create_chat_completion(CHAT, max_tokens=32, temperature=0,
                                       repeat_penalty=1.1)["choices"][0]["message"]["content"]
    got = client.chat.completions.create(model=ALIAS, messages=CHAT, max_tokens=32, temperature=0)
    assert _chat_text(got) == plain
    # Both warm, each with this same conversation (and the same answer) cached.
    plain2 = llm.create_chat_completion(CHAT, max_tokens=32, temperature=0,
                                        repeat_penalty=1.1)["choices"][0]["message"]["content"]
    got2 = client.chat.completions.create(model=ALIAS, messages=CHAT, max_tokens=32, temperature=0)
    assert _chat_text(got2) == plain2 == plain
    _check_stats(got2, got2.usage.completion_tokens)
    assert got2.usage.completion_tokens_details.accepted_prediction_tokens == 0
    assert got2.usage.completion_tokens_details.rejected_prediction_tokens == 0


def test_completion(server):
    resp = server.client().completions.create(model=ALIAS, prompt=CODE, max_tokens=24, temperature=0)
    assert resp.object == "text_completion" and resp.model == ALIAS
    assert resp.choices[0].finish_reason == "length" and resp.choices[0].text
    assert resp.usage.prompt_tokens > 0
    _check_stats(resp, 24)


def test_copilot_path_answers_as_completions(server):
    # llama-cpp-python's server answers completions at Copilot's path too; replacing
    # its routes had left it a 404.
    body = json.dumps({"prompt": CODE, "max_tokens": 8, "temperature": 0})
    a, b = server.post("/v1/engines/copilot-codex/completions", body), server.post("/v1/completions", body)
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    assert a.json()["choices"][0]["text"] == b.json()["choices"][0]["text"]
    assert a.json()["speculative"]["used"] is True


def test_models_and_health(server):
    assert [m.id for m in server.client().models.list().data] == [ALIAS]
    health = httpx.get(server.base + "/health", timeout=10).json()
    assert health["status"] == "ok" and health["model"] == ALIAS and health["max_queue"] == MAX_QUEUE


def test_streamed_equals_non_streamed(server):
    client = server.client()
    full = client.chat.completions.create(model=ALIAS, messages=CHAT, max_tokens=24, temperature=0)
    parts, chunks = [], []
    for chunk in client.chat.completions.create(model=ALIAS, messages=CHAT, max_tokens=24, temperature=0,
                                                stream=True, stream_options={"include_usage": True}):
        chunks.append(chunk)
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    assert "".join(parts) == _chat_text(full)
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].choices[0].finish_reason == full.choices[0].finish_reason
    # The usage chunk (stream_options.include_usage) comes last, with no choices.
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].usage.completion_tokens_details.accepted_prediction_tokens == 0
    assert _extra(finish[0], "timings")["predicted_n"] == full.usage.completion_tokens

    text = client.completions.create(model=ALIAS, prompt=CODE, max_tokens=20, temperature=0).choices[0].text
    streamed = list(client.completions.create(model=ALIAS, prompt=CODE, max_tokens=20, temperature=0,
                                                     stream=True))
    assert "".join(c.choices[0].text for c in streamed) == text
    assert _extra(streamed[-1], "timings")["predicted_n"] == 20
    assert streamed[-1].usage.completion_tokens_details.accepted_prediction_tokens == 0


def test_prediction(server):
    client = server.client()
    base = client.chat.completions.create(model=ALIAS, messages=CHAT, max_tokens=24, temperature=0)
    text = _chat_text(base)
    # A right prediction: same text, its tokens accepted.
    good = client.chat.completions.create(model=ALIAS, messages=CHAT, max_tokens=24, temperature=0,
                                          prediction={"type": "content", "content": text})
    assert _chat_text(good) == text
    d = good.usage.completion_tokens_details
    assert 0 < d.accepted_prediction_tokens <= good.usage.completion_tokens and d.rejected_prediction_tokens >= 0
    # A wrong prediction, as a list of text parts: same text, something rejected.
    bad = client.chat.completions.create(
        model=ALIAS, messages=CHAT, max_tokens=24, temperature=0,
        prediction={"type": "content", "content": [{"type": "text", "text": "Bananas are yellow. " * 4}]})
    assert _chat_text(bad) == text
    d = bad.usage.completion_tokens_details
    assert d.rejected_prediction_tokens > 0 and d.accepted_prediction_tokens <= bad.usage.completion_tokens
    # On completions, streamed too.
    full = client.completions.create(model=ALIAS, prompt=CODE, max_tokens=24, temperature=0)
    pred = {"type": "content", "content": full.choices[0].text}
    again = client.completions.create(model=ALIAS, prompt=CODE, max_tokens=24, temperature=0, extra_body={
        "prediction": pred})
    assert again.choices[0].text == full.choices[0].text
    assert again.usage.completion_tokens_details.accepted_prediction_tokens > 0
    chunks = list(client.completions.create(model=ALIAS, prompt=CODE, max_tokens=24, temperature=0, stream=True,
                                            extra_body={"prediction": pred}))
    assert "".join(c.choices[0].text for c in chunks) == full.choices[0].text
    assert chunks[-1].usage.completion_tokens_details.accepted_prediction_tokens > 0


# ---------------------------------------------------------------------------
# Bad requests: 4xx with an OpenAI error object, and the server lives on.

LONG_PROMPT = "hello " * (N_CTX + 200)
BAD = {
    "malformed JSON": ("/v1/completions", '{"prompt": "hi", "max_tokens": 4'),
    "not an object": ("/v1/chat/completions", '["hi"]'),
    "malformed JSON, llama-cpp-python's own route": ("/extras/tokenize", '{"input": '),
    "prompt of the wrong type": ("/v1/completions", {"prompt": 5, "max_tokens": 4}),
    "max_tokens not a number": ("/v1/completions", {"prompt": "hi", "max_tokens": "many"}),
    "temperature not a number": ("/v1/chat/completions", {"messages": CHAT, "temperature": "hot"}),
    "messages not a list": ("/v1/chat/completions", {"messages": "hi"}),
    "no messages": ("/v1/chat/completions", {"messages": []}),
    "prompt longer than the context": ("/v1/completions", {"prompt": LONG_PROMPT, "max_tokens": 4}),
    "chat longer than the context": ("/v1/chat/completions",
                                     {"messages": [{"role": "user", "content": LONG_PROMPT}], "max_tokens": 4}),
    "streamed prompt longer than the context": ("/v1/completions",
                                                {"prompt": LONG_PROMPT, "max_tokens": 4, "stream": True}),
    "max_tokens 0": ("/v1/completions", {"prompt": "hi", "max_tokens": 0}),
    "max_tokens negative": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": -1}),
    "max_completion_tokens 0": ("/v1/chat/completions", {"messages": CHAT, "max_completion_tokens": 0}),
    # SmolLM2 has no vision handler: an image part is refused, naming the message.
    "messages with an image part": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}, {
        "role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}],
        "max_tokens": 4}),
    "messages with an image part, streamed": ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": "https://example.com/a.png"}]}], "max_tokens": 4, "stream": True}),
    "message of an unknown role": ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "hi"}]}),
    "temperature NaN": ("/v1/completions", '{"prompt": "hi", "max_tokens": 4, "temperature": NaN}'),
    "top_p infinite, chat": ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], '
                                                      '"max_tokens": 4, "temperature": 0.5, "top_p": Infinity}'),
    # llama-cpp-python's route raised a RuntimeError (a 500) on a model loaded without it.
    "embeddings on a server not started for them": ("/v1/embeddings", {"input": "hi"}),
    "prediction of the wrong type": ("/v1/chat/completions",
                                     {"messages": CHAT, "max_tokens": 4, "prediction": {"type": "text"}}),
    "prediction without content": ("/v1/completions",
                                   {"prompt": "hi", "max_tokens": 4, "prediction": {"type": "content"}}),
    "prediction content not text": ("/v1/completions", {"prompt": "hi", "max_tokens": 4, "prediction": {
        "type": "content", "content": [{"type": "image_url", "image_url": "x"}]}}),
    "prediction a string": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "prediction": "x"}),
    "n above 16": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "n": 17}),
    "logit_bias id past the vocabulary": ("/v1/completions", {"prompt": "hi", "max_tokens": 4, "temperature": 0.8,
                                                              "logit_bias": {"1000000": 5}}),
    "logit_bias id past the vocabulary, streamed": ("/v1/completions", {
        "prompt": "hi", "max_tokens": 4, "temperature": 0.8, "logit_bias": {"1000000": 5}, "stream": True}),
    "typical_p 0": ("/v1/completions", {"prompt": "hi", "max_tokens": 4, "temperature": 0.8, "typical_p": 0}),
    "typical_p above 1, chat": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "typical_p": 1.5}),
    "several prompts": ("/v1/completions", {"prompt": ["a", "b"], "max_tokens": 4}),
    "n 0": ("/v1/completions", {"prompt": "hi", "max_tokens": 4, "n": 0}),
    "detokenize an id past the vocabulary": ("/extras/detokenize", {"tokens": [99999999]}),
    "detokenize a negative id": ("/extras/detokenize", {"tokens": [5, -1]}),
}
#: The field a refusal must name.
BAD_PARAM = {"n 0": "n", "n above 16": "n",
             "detokenize an id past the vocabulary": "tokens", "detokenize a negative id": "tokens"}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_request_is_4xx(server, case):
    path, body = BAD[case]
    r = server.post(path, body if isinstance(body, str) else json.dumps(body))
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if case.startswith("messages with an image part"):
        assert err["param"] == "messages" and err["code"] == "invalid_messages", err
        assert err["message"].startswith("messages[1]: content part 0 is an image" if "streamed" not in case
                                         else "messages[0]: content part 0 is an image"), err
    if case == "message of an unknown role":
        assert err["code"] == "invalid_messages" and err["message"].startswith("Invalid messages: messages[0].role")
    if case == "temperature NaN":
        assert err["message"] == "temperature must be a finite number, got nan", err
    if "embeddings" in case:
        assert err["code"] == "embeddings_not_enabled" and "--embedding true" in err["message"], err
    if "longer than the context" in case:
        assert err["code"] == "context_length_exceeded"
    if case in BAD_PARAM:
        assert err["param"] == BAD_PARAM[case] and BAD_PARAM[case] in err["message"], err
    if "detokenize" in case:   # llama.cpp aborted the whole process on such an id
        assert httpx.get(server.base + "/health", timeout=10).status_code == 200
        ok = server.post("/extras/detokenize", json.dumps({"tokens": [5]}))
        assert ok.status_code == 200 and isinstance(ok.json()["text"], str)


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"model": "gpt-4o", "prompt": CODE, "max_tokens": 4, "temperature": 0}),
    ("/v1/chat/completions", {"model": "any-placeholder", "messages": CHAT, "max_tokens": 4, "temperature": 0}),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "temperature": 0}),
])
def test_any_model_name_is_the_served_model(server, path, body):
    # Serving one model, the server answers any name, as llama.cpp's server does
    # (tools send fixed or placeholder names); it was a 404 model_not_found.
    r = server.post(path, json.dumps(body))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["model"] == body.get("model", ALIAS)     # the name asked for, as llama.cpp's server echoes it
    assert out["usage"]["completion_tokens"] == 4


def test_openapi_declares_no_authentication_without_an_api_key(server):
    # llama-cpp-python's routes declare bearer auth whether or not --api_key is set, so
    # generated clients (and schemathesis) sent a key this server never checks.
    schema = httpx.get(server.base + "/openapi.json", timeout=10).json()
    assert "securitySchemes" not in schema.get("components", {})
    assert not [p for p, ops in schema["paths"].items() for op in ops.values() if "security" in op]


def test_method_not_allowed_says_which_are(server):
    r = httpx.put(server.base + "/v1/chat/completions", timeout=10)
    assert r.status_code == 405 and r.json()["error"]["message"] == "Method Not Allowed"
    assert r.headers["allow"] == "POST"      # RFC 9110; our error handler had dropped it


def _chat(server, messages, **kw):
    r = server.post("/v1/chat/completions", json.dumps({"messages": messages, "max_tokens": 12, "temperature": 0,
                                                        **kw}))
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


TOOL_CALL = {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


@pytest.mark.parametrize("sent, rendered", [
    # OpenAI's content parts: the text parts joined with newlines.
    ([{"role": "user", "content": [{"type": "text", "text": "Name a colour."}, {"type": "text", "text": "One word."}]}],
     [{"role": "user", "content": "Name a colour.\nOne word."}]),
    # A system message with null content: empty text.
    ([{"role": "system", "content": None}, {"role": "user", "content": "Say hi."}],
     [{"role": "system", "content": ""}, {"role": "user", "content": "Say hi."}]),
    # OpenAI's newer name for the system role.
    ([{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Say hi."}],
     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]),
    # The history every tool-using client sends: an assistant turn with null content and
    # tool_calls (SmolLM2's template does not render tool_calls: they are written into the
    # turn), then the tool's result.
    ([{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": None,
                                                          "tool_calls": [TOOL_CALL]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}],
     [{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": '{"name": "get_weather", "arguments": {"city": "Paris"}}'},
      {"role": "tool", "content": "sunny, 21 C"}]),
])
def test_messages_as_clients_send_them(server, sent, rendered):
    # Answered (llama-cpp-python's own server answers these with a 500), as the messages
    # they render as are answered.
    assert _chat(server, sent) == _chat(server, rendered)
    client = server.client()
    r = client.chat.completions.create(model=ALIAS, messages=sent, max_tokens=12, temperature=0)
    assert r.choices[0].message.content == _chat(server, rendered)


def test_n_choices_are_n_generations(server):
    # llama-cpp-python's server ignores n; this one refused it (400). Sampled with a seed,
    # choice i has seed + i: n different texts, each reproducible.
    body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.9, "seed": 5, "n": 3}
    out = server.post("/v1/completions", json.dumps(body)).json()
    assert [c["index"] for c in out["choices"]] == [0, 1, 2]
    texts = [c["text"] for c in out["choices"]]
    assert len(set(texts)) > 1
    single = server.post("/v1/completions", json.dumps({**body, "n": 1, "seed": 6})).json()
    assert single["choices"][0]["text"] == texts[1]
    assert out["usage"]["completion_tokens"] == sum(s["generated_tokens"] for s in out["speculative"]["choices"])
    # Greedy: n copies of the one greedy text; streamed, one choice after the other.
    greedy = {"messages": CHAT, "max_tokens": 6, "temperature": 0, "n": 2}
    full = server.post("/v1/chat/completions", json.dumps(greedy)).json()
    assert [c["message"]["content"] for c in full["choices"]] == [full["choices"][0]["message"]["content"]] * 2
    client = server.client()
    parts: dict[int, str] = {0: "", 1: ""}
    usage = None
    for chunk in client.chat.completions.create(model=ALIAS, messages=CHAT, max_tokens=6, temperature=0, n=2,
                                                stream=True, stream_options={"include_usage": True}):
        for c in chunk.choices:
            parts[c.index] += c.delta.content or ""
        usage = chunk.usage or usage
    assert parts == {0: full["choices"][0]["message"]["content"], 1: full["choices"][1]["message"]["content"]}
    assert usage is not None and usage.completion_tokens == full["usage"]["completion_tokens"]


def test_decoding_header_says_how_a_request_was_decoded(server):
    # What the engine cannot speculate with (mirostat here) is decoded by the Llama's own
    # path: 200, marked in the stats and in a header, streamed or not.
    plain = {"prompt": CODE, "max_tokens": 6, "temperature": 0.8, "mirostat_mode": 2, "seed": 1}
    for body in (plain, {**plain, "stream": True}):
        r = server.post("/v1/completions", json.dumps(body))
        assert r.status_code == 200, r.text
        assert r.headers["x-ngramspec-decoding"] == "plain; reason=mirostat_mode in sampled decoding"
        if not body.get("stream"):
            assert r.json()["speculative"] == {"used": False, "reason": "mirostat_mode in sampled decoding",
                                               "prompt_tokens": r.json()["usage"]["prompt_tokens"],
                                               "generated_tokens": r.json()["usage"]["completion_tokens"]}
        else:
            events = [json.loads(line[5:]) for line in r.text.splitlines()
                      if line.startswith("data:") and "[DONE]" not in line]
            assert events[-1]["speculative"]["used"] is False
    r = server.post("/v1/completions", json.dumps({"prompt": CODE, "max_tokens": 6, "temperature": 0}))
    assert r.headers["x-ngramspec-decoding"] == "speculative" and r.json()["speculative"]["used"] is True


def test_sampled_logit_bias_with_openai_string_ids(server):
    # JSON keys are strings: the wrapper refused them, so every sampled request with
    # a logit_bias got a 400; llama-cpp-python's server reads them with int().
    for path, extra in (("/v1/completions", {"prompt": "Once upon a time"}), ("/v1/chat/completions",
                                                                             {"messages": CHAT})):
        r = server.post(path, json.dumps({**extra, "max_tokens": 4, "temperature": 0.7, "seed": 1,
                                          "logit_bias": {"5": 10}}))
        assert r.status_code == 200, r.text


def test_typical_p_reaches_the_sampler(server):
    """llama-cpp-python's request types have no typical_p, so it was dropped: the
    same seed then gave the same text whatever typical_p said."""
    def text(typical_p: float) -> str:
        r = server.post("/v1/completions", json.dumps({"prompt": "Once upon a time", "max_tokens": 24,
                                                        "temperature": 1.5, "seed": 3, "typical_p": typical_p}))
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["text"]

    assert text(1.0) == text(1.0)
    assert text(0.05) != text(1.0)


def test_bad_requests_through_the_client_and_server_lives_on(server):
    client = server.client()
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=ALIAS, messages=[{"role": "robot", "content": "hi"}], max_tokens=4)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=ALIAS, prompt="hi", max_tokens=0)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=ALIAS, prompt=LONG_PROMPT, max_tokens=4, stream=True)
    assert httpx.get(server.base + "/health", timeout=10).json()["pending"] == 0
    resp = client.completions.create(model=ALIAS, prompt=CODE, max_tokens=4, temperature=0)
    assert resp.usage.completion_tokens == 4


# ---------------------------------------------------------------------------
# Concurrency: one at a time, bounded queue, disconnects.

def test_load(server):
    """4 concurrent clients x 10 requests, each answered with the same text as alone."""
    client = server.client()
    prompts = [CODE, "The capital of France is", "1, 2, 3, 4,", "import numpy as np\n"]
    chats = [[{"role": "user", "content": q}] for q in ("Say hi.", "Name a colour.")]
    expected = {("c", i): client.completions.create(model=ALIAS, prompt=p, max_tokens=6, temperature=0)
                .choices[0].text for i, p in enumerate(prompts)}
    expected.update({("m", i): _chat_text(client.chat.completions.create(
        model=ALIAS, messages=m, max_tokens=6, temperature=0)) for i, m in enumerate(chats)})

    def one(worker: int, k: int) -> bool:
        kind, i = list(expected)[(worker * 10 + k) % len(expected)]
        stream = k % 3 == 2
        if kind == "c":
            out = client.completions.create(model=ALIAS, prompt=prompts[i], max_tokens=6, temperature=0,
                                            stream=stream)
            text = "".join(c.choices[0].text for c in out) if stream else out.choices[0].text
        else:
            out = client.chat.completions.create(model=ALIAS, messages=chats[i], max_tokens=6, temperature=0,
                                                 stream=stream)
            text = "".join(c.choices[0].delta.content or "" for c in out if c.choices) if stream \
                else _chat_text(out)
        return text == expected[(kind, i)]

    def worker(w: int) -> list[bool]:
        return [one(w, k) for k in range(10)]

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = [ok for oks in pool.map(worker, range(4)) for ok in oks]
    wall = time.perf_counter() - t0
    print(f"\nload: 4 clients x 10 requests in {wall:.1f} s ({40 / wall:.1f} req/s); "
          f"server peak RSS {server.peak_rss_mib():.0f} MiB")
    assert len(results) == 40 and all(results)
    assert httpx.get(server.base + "/health", timeout=10).json()["pending"] == 0


def _start_long_stream(server):
    """A streamed completion long enough to keep the model busy, after its first chunk."""
    client = server.client()
    stream = client.completions.create(model=ALIAS, prompt="Once upon a time", max_tokens=400, temperature=0,
                                       stream=True)
    it = iter(stream)
    first = next(it)
    return stream, it, first


def test_disconnect_mid_stream(server):
    client = server.client()
    ref = client.completions.create(model=ALIAS, prompt=CODE, max_tokens=24, temperature=0).choices[0].text
    cancelled = httpx.get(server.base + "/health", timeout=10).json()["cancelled_streams"]
    stream, it, _ = _start_long_stream(server)
    for _ in range(3):
        next(it)
    stream.close()  # the client goes away halfway
    again = client.completions.create(model=ALIAS, prompt=CODE, max_tokens=24, temperature=0)
    assert again.choices[0].text == ref
    # The cancelled generation's own prompt, answered from the now-coherent cache.
    short = client.completions.create(model=ALIAS, prompt="Once upon a time", max_tokens=8, temperature=0)
    assert short.usage.completion_tokens == 8
    health = httpx.get(server.base + "/health", timeout=10).json()
    assert health["pending"] == 0 and health["cancelled_streams"] == cancelled + 1  # stopped, not run to its end


def test_queue_full_is_503(server):
    client = server.client()
    ref = client.completions.create(model=ALIAS, prompt=CODE, max_tokens=3, temperature=0).choices[0].text
    stream, it, _ = _start_long_stream(server)  # 1 running
    results: list = []
    lock = threading.Lock()

    def fire() -> None:
        r = server.post("/v1/completions", json.dumps({"model": ALIAS, "prompt": CODE, "max_tokens": 3,
                                                       "temperature": 0}))
        with lock:
            results.append(r)

    threads = [threading.Thread(target=fire) for _ in range(MAX_QUEUE + 1)]  # 5 fit beside it, 2 do not
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while sum(r.status_code == 503 for r in results) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    stream.close()
    for t in threads:
        t.join(60)
    codes = sorted(r.status_code for r in results)
    assert codes == [200] * (MAX_QUEUE - 1) + [503, 503], codes
    for r in results:
        if r.status_code == 503:
            assert r.json()["error"]["code"] == "queue_full" and r.headers.get("retry-after")
        else:
            assert r.json()["choices"][0]["text"] == ref
