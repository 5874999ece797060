"""Structured output, speculative: grammars (grammar=, JSON mode, a JSON schema, a forced
tool call) verified row by row, token-identical to plain llama-cpp-python's greedy
output with the same grammar, streamed and not; sampled output keeps the
constrained distribution."""
from __future__ import annotations

import json
from typing import Any

import pytest
from llama_cpp.llama_grammar import LlamaGrammar
from pydantic import BaseModel

import ngramspec
from ngramspec.sampling import SamplingParams

ASK = [{"role": "system", "content": "You extract data as JSON."},
       {"role": "user", "content": "Alice is 31 and lives in Paris. Bob is 42 and lives in Rome. "
                                   "Give each person's name, age and city."}]


class Person(BaseModel):
    name: str
    age: int
    city: str


class People(BaseModel):
    people: list[Person]


TOOL = {"type": "function", "function": {"name": "record_person", "description": "Record one person",
                                         "parameters": Person.model_json_schema()}}

CHAT_CASES: dict[str, dict[str, Any]] = {
    "json_object": {"response_format": {"type": "json_object"}},
    "a Pydantic json_schema": {"response_format": {"type": "json_object", "schema": People.model_json_schema()}},
    "a forced tool call": {"tools": [TOOL], "tool_choice": {"type": "function",
                                                            "function": {"name": "record_person"}}},
}


@pytest.fixture()
def spec(llm, invariance):
    llm.reset()
    return ngramspec.wrap(llm, invariance=invariance)


def _without_ids(out):
    """A chat response without what is random in it (ids, times, our stats)."""
    out = json.loads(json.dumps(out))
    out.pop("id"), out.pop("created"), out.pop("speculative", None)
    for choice in out["choices"]:
        for call in choice["message"].get("tool_calls") or []:
            call.pop("id")
    return out


@pytest.mark.parametrize("case", list(CHAT_CASES))
def test_structured_chat_is_speculative_and_plains_greedy_output(llm, spec, case):
    kw = {"max_tokens": 80, "temperature": 0, **CHAT_CASES[case]}
    llm.reset()
    ref = llm.create_chat_completion(ASK, **kw)
    llm.reset()
    out = spec.create_chat_completion(ASK, **kw)
    assert _without_ids(out) == _without_ids(ref)
    stats = out["speculative"]
    assert stats["used"] is True and stats["grammar_rows"] >= stats["generated_tokens"]   # + the end/audited rows
    # The cheap check settles most rows: the grammar is applied to a whole row only
    # where the model's own choice breaks it.
    assert stats["grammar_full_rows"] < stats["grammar_rows"]


@pytest.mark.parametrize("case", list(CHAT_CASES))
def test_structured_chat_streams_plains_text(llm, spec, case):
    kw = {"max_tokens": 80, "temperature": 0, **CHAT_CASES[case]}
    llm.reset()
    ref = llm.create_chat_completion(ASK, **kw)["choices"][0]["message"]
    llm.reset()
    chunks = list(spec.create_chat_completion(ASK, stream=True, **kw))
    if case == "a forced tool call":
        args = "".join(c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] or ""
                       for c in chunks if c["choices"] and c["choices"][0]["delta"].get("tool_calls"))
        assert args == ref["tool_calls"][0]["function"]["arguments"]
    else:
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        assert text == ref["content"]
    assert chunks[-1]["speculative"]["used"] is True


def test_completion_with_a_grammar_matches_plain(llm, spec):
    grammar = LlamaGrammar.from_string(
        'root ::= "def " name "(" name ("," " "? name)* "):" "\\n" "    return " [a-z +*]+ "\\n"\n'
        'name ::= [a-z_]+')
    prompt = "# Python\ndef add(a, b):\n    return a + b\n\n"
    llm.reset()
    ref = llm.create_completion(prompt, max_tokens=40, temperature=0, grammar=grammar)
    llm.reset()
    out = spec.create_completion(prompt, max_tokens=40, temperature=0, grammar=grammar)
    assert out["choices"] == ref["choices"] and out["speculative"]["used"] is True


def test_a_grammar_llama_cpp_cannot_parse_is_a_value_error(spec):
    # Plain adds the NULL sampler llama.cpp returns to its chain and crashes.
    with pytest.raises(ValueError, match="grammar could not be parsed"):
        spec.create_completion("Hi", max_tokens=4, temperature=0,
                               grammar=LlamaGrammar.from_string("root ::= nothing-defined"))
    with pytest.raises(ValueError, match="grammar could not be parsed"):
        spec.create_completion("Hi", max_tokens=4, temperature=0.8, mirostat_mode=2,
                               grammar=LlamaGrammar.from_string("root ::= ("))


def test_sampled_structured_output_keeps_the_constrained_distribution(llm, invariance):
    """Exact speculative sampling under a grammar: with the same seed, the tokens of
    non-speculative sampling (max_draft=0) under the same grammar, and JSON."""
    from ngramspec import SpeculativeEngine

    grammar = LlamaGrammar.from_json_schema(json.dumps(People.model_json_schema()))
    prompt = llm.tokenize(b"<|im_start|>user\nAlice is 31, Bob is 42. JSON please.<|im_end|>\n"
                          b"<|im_start|>assistant\n", special=True)
    texts = set()
    for seed in (1, 2, 3):
        sampling = SamplingParams(temperature=0.9, seed=seed)
        llm.reset()
        fast = SpeculativeEngine(llm, invariance=invariance).generate(prompt, max_tokens=60, sampling=sampling,
                                                                      grammar=grammar)
        llm.reset()
        slow = SpeculativeEngine(llm, invariance=invariance, max_draft=0).generate(
            prompt, max_tokens=60, sampling=sampling, grammar=grammar)
        assert fast.tokens == slow.tokens
        texts.add(fast.text)
        if fast.finish_reason == "stop":
            People.model_validate_json(fast.text)
    assert len(texts) > 1   # it samples
