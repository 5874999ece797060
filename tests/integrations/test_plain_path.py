"""Requests the engine cannot speculate with: the wrapped Llama's own answer, marked as plain."""
from __future__ import annotations

from typing import Any

import llama_cpp
import pytest

import ngramspec
from tests.support.prompts import PROMPTS

PROMPT = PROMPTS["json"]


@pytest.fixture()
def spec(llm, invariance):
    llm.reset()
    return ngramspec.wrap(llm, invariance=invariance)


def _keep_the_text(input_ids, scores):
    return scores


#: Arguments that plain llama-cpp-python honours and the engine does not speculate with,
#: and the name the reason gives.
PLAIN_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "a user's logits_processor": ({"logits_processor": llama_cpp.LogitsProcessorList([_keep_the_text])},
                                  "logits_processor"),
    "mirostat, sampled": ({"temperature": 0.8, "mirostat_mode": 2, "seed": 7}, "mirostat_mode"),
    "mirostat with top_k 1 samples": ({"temperature": 0.8, "top_k": 1, "mirostat_mode": 1, "seed": 7},
                                      "mirostat_mode"),
    "an infill suffix": ({"suffix": "\n}"}, "suffix"),
}


def _plain(llm, **kw):
    llm.reset()
    out = llm.create_completion(PROMPT, max_tokens=24, **{"temperature": 0.0, **kw})
    llm.reset()
    return out


@pytest.mark.parametrize("case", list(PLAIN_CASES))
def test_plain_path_gives_plains_answer_and_says_why(llm, spec, case):
    kw, name = PLAIN_CASES[case]
    ref = _plain(llm, **kw)
    out = spec.create_completion(PROMPT, max_tokens=24, **{"temperature": 0.0, **kw})
    assert out["choices"] == ref["choices"] and out["usage"] == ref["usage"]
    assert set(out) == set(ref) | {"speculative"}
    stats = out["speculative"]
    assert stats["used"] is False and name in stats["reason"]
    assert stats["generated_tokens"] == ref["usage"]["completion_tokens"]
    assert spec.last_plain_reason == stats["reason"] and spec.last_speculative == stats


@pytest.mark.parametrize("case", list(PLAIN_CASES))
def test_plain_path_streams_plains_chunks(llm, spec, case):
    kw, name = PLAIN_CASES[case]
    llm.reset()
    ref = [c["choices"][0]["text"] for c in llm.create_completion(PROMPT, max_tokens=24, stream=True,
                                                                    **{"temperature": 0.0, **kw})]
    llm.reset()
    chunks = list(spec.create_completion(PROMPT, max_tokens=24, stream=True, **{"temperature": 0.0, **kw}))
    assert [c["choices"][0]["text"] for c in chunks] == ref
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] is not None
    assert last["speculative"]["used"] is False and name in last["speculative"]["reason"]
    assert last["usage"]["completion_tokens"] > 0
    assert all("speculative" not in c for c in chunks[:-1])


def test_a_speculative_call_says_so(spec):
    out = spec.create_completion(PROMPT, max_tokens=8, temperature=0.0)
    assert out["speculative"]["used"] is True and spec.last_plain_reason is None


def test_plain_errors_are_plains(llm, spec):
    # The Llama's own refusal, unchanged: this Llama keeps no logits for the prompt's rows.
    with pytest.raises(ValueError, match="logits_all"):
        spec.create_completion(PROMPT, max_tokens=4, temperature=0.0, logprobs=2, echo=True)


def test_plain_chat_goes_through_the_same_handler(llm, spec):
    messages = [{"role": "user", "content": "Say hi."}]
    kw = {"max_tokens": 12, "temperature": 0.8, "mirostat_mode": 2, "seed": 3}
    llm.reset()
    ref = llm.create_chat_completion(messages, **kw)
    llm.reset()
    out = spec.create_chat_completion(messages, **kw)
    assert out["choices"] == ref["choices"]
    assert out["speculative"]["used"] is False and "mirostat_mode" in out["speculative"]["reason"]


def test_a_plain_call_ends_an_unfinished_stream(spec):
    stream = spec.create_completion(PROMPT, max_tokens=32, temperature=0.0, stream=True)
    next(stream)
    spec.create_completion(PROMPT, max_tokens=4, temperature=0.8, mirostat_mode=2, seed=1)
    with pytest.raises(RuntimeError, match="interrupted"):
        list(stream)


def test_greedy_generate_with_a_penalty_yields_plains_tokens(llm, spec):
    from ngramspec.engine.request import prompt_tokens_for

    tokens = prompt_tokens_for(llm, PROMPT)

    def first(gen, n=20):
        out = []
        for t in gen:
            out.append(t)
            if len(out) == n:
                break
        return out

    llm.reset()
    ref = first(llm.generate(tokens, temp=0.0, repeat_penalty=1.3))
    llm.reset()
    assert first(spec.generate(tokens, temp=0.0, repeat_penalty=1.3)) == ref
