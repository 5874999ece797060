"""Greedy requests with penalties, logit_bias and min_tokens: speculative, and plain's
tokens (each verified row treated as plain llama-cpp-python's sampler chain treats it)."""
from __future__ import annotations

import llama_cpp
import pytest

import ngramspec
from tests.support.prompts import PROMPTS

CHAT = [{"role": "user", "content": "List five fruits, one per line."}]


@pytest.fixture()
def spec(llm, invariance):
    llm.reset()
    return ngramspec.wrap(llm, invariance=invariance)


def _both(llm, spec, call, *args, **kw):
    llm.reset()
    ref = getattr(llm, call)(*args, **kw)
    llm.reset()
    out = getattr(spec, call)(*args, **kw)
    return ref, out


@pytest.mark.parametrize("kw", [
    {"repeat_penalty": 1.1},   # llama-cpp-python's server's default
    {"repeat_penalty": 1.3},
    {"frequency_penalty": 0.7},
    {"presence_penalty": 0.9, "repeat_penalty": 1.1},
    {"logit_bias": {"28": -4.0, "30": 2.5, 1024: 1.25}},
    {"logit_bias": {"198": -100.0}, "frequency_penalty": 0.3},   # no newline, as OpenAI clients ban one
])
@pytest.mark.parametrize("name", ["list", "json", "code_edit"])
def test_greedy_penalties_and_bias_are_speculative_and_plains(llm, spec, name, kw):
    ref, out = _both(llm, spec, "create_completion", PROMPTS[name], max_tokens=48, temperature=0, **kw)
    assert out["choices"] == ref["choices"] and out["usage"] == ref["usage"]
    assert out["speculative"]["used"] is True


def test_repeat_penalty_1_1_past_its_window_is_plains(llm, spec):
    # 200 tokens: the penalty's window (last_n_tokens_size, 64) slides past the
    # prompt and over the output, as the server's default request has it.
    assert llm.last_n_tokens_size == 64
    for name in ("code", "code_edit"):
        ref, out = _both(llm, spec, "create_completion", PROMPTS[name], max_tokens=200, temperature=0,
                         repeat_penalty=1.1)
        assert out["choices"] == ref["choices"] and out["usage"] == ref["usage"]
        assert ref["usage"]["completion_tokens"] > 64, name
        assert out["speculative"]["used"] is True and out["speculative"]["tokens_per_forward"] > 1, name


def test_greedy_chat_with_penalties_is_plains(llm, spec):
    ref, out = _both(llm, spec, "create_chat_completion", CHAT, max_tokens=48, temperature=0, repeat_penalty=1.2,
                     frequency_penalty=0.2)
    assert out["choices"] == ref["choices"] and out["speculative"]["used"] is True


def test_repeat_penalty_0_under_a_grammar_is_plains(llm, spec):
    # repeat_penalty 0 (the server's lower bound) divides a seen token's positive logit
    # by 0: +inf, a score the grammar may allow, which plain's greedy sampler takes.
    # The grammar check took any non-finite score for a refusal (a RuntimeError, a 500).
    chat = [{"role": "user", "content": "Give a JSON object."}]
    ref, out = _both(llm, spec, "create_chat_completion", chat, max_tokens=16, temperature=0, repeat_penalty=0.0,
                     response_format={"type": "json_object", "schema": {}})
    assert out["choices"] == ref["choices"]
    assert out["choices"][0]["message"]["content"].startswith("{")


def _min_tokens(llm, n):
    return llama_cpp.LogitsProcessorList([llama_cpp.MinTokensLogitsProcessor(n, llm.token_eos())])


def test_min_tokens_is_speculative_and_plains(llm, spec):
    chat = [{"role": "user", "content": "Say hi."}]
    short, _ = _both(llm, spec, "create_chat_completion", chat, max_tokens=64, temperature=0)
    n = short["usage"]["completion_tokens"]
    assert short["choices"][0]["finish_reason"] == "stop" and n < 30
    llm.reset()
    ref = llm.create_chat_completion(chat, max_tokens=64, temperature=0, logits_processor=_min_tokens(llm, n + 10))
    llm.reset()
    out = spec.create_chat_completion(chat, max_tokens=64, temperature=0, logits_processor=_min_tokens(llm, n + 10))
    assert out["choices"] == ref["choices"] and out["usage"]["completion_tokens"] >= n + 10
    assert out["speculative"]["used"] is True


def test_a_used_min_tokens_processor_takes_the_plain_path(llm, spec):
    # It counts from the first prompt it saw: only plain knows what it will do now.
    procs = _min_tokens(llm, 5)
    procs[0](llm.tokenize(b"hello"), llm.scores[0].copy())
    out = spec.create_completion("Hello", max_tokens=4, temperature=0, logits_processor=procs)
    assert out["speculative"]["used"] is False and "logits_processor" in out["speculative"]["reason"]
