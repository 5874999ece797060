"""Speculative greedy output is token-for-token what plain greedy decoding gives."""
from __future__ import annotations

import numpy as np
import pytest

from ngramspec import SpeculativeEngine
from ngramspec.drafting.policy import CostAwarePolicy
from ngramspec.engine.request import prompt_tokens_for
from tests.support.plain import plain_tokens
from tests.support.prompts import PROMPTS

MAX_TOKENS = [1, 2, 17, 128]


def plain_greedy(llm, prompt: str, max_tokens: int) -> tuple[list[int], str, str]:
    """llama-cpp-python's own greedy path: tokens from Llama.generate, text and
    finish reason from create_completion(temperature=0)."""
    tokens = plain_tokens(llm, prompt, max_tokens)
    out = llm.create_completion(prompt, max_tokens=max_tokens, temperature=0.0)
    llm.reset()
    return tokens, out["choices"][0]["text"], out["choices"][0]["finish_reason"]


@pytest.fixture(scope="module")
def plain_results(llm):
    return {name: plain_greedy(llm, p, 128) for name, p in PROMPTS.items()}


@pytest.mark.parametrize("adaptive", [True, False], ids=["adaptive", "eager"])
@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_identity_with_plain_greedy(llm, invariance, plain_results, name, adaptive):
    engine = SpeculativeEngine(llm, invariance=invariance, adaptive=adaptive)
    plain_tokens, plain_text, plain_finish = plain_results[name]
    drafted = 0
    for max_tokens in MAX_TOKENS:
        llm.reset()
        gen = engine.generate(PROMPTS[name], max_tokens=max_tokens)
        assert gen.tokens == plain_tokens[:max_tokens], f"{name} max_tokens={max_tokens}"
        assert gen.stats.generated_tokens == len(gen.tokens)
        drafted += gen.stats.drafted_tokens
        if max_tokens == 128:
            assert gen.text == plain_text
            assert gen.finish_reason == plain_finish
    if name in ("code_edit", "repetitive", "list"):
        assert drafted > 0, "the predictor should have drafted on repetitive text"


def test_identity_when_reusing_the_cache(llm, engine, plain_results):
    # No reset between calls: the engine reuses the cached prompt prefix, and a
    # create_completion after the engine reuses the engine's cache.
    prompt = PROMPTS["code_edit"]
    llm.reset()
    first = engine.generate(prompt, max_tokens=40)
    second = engine.generate(prompt, max_tokens=40)
    assert second.stats.prefill_tokens == 1  # only the last prompt token is replayed
    plain = llm.create_completion(prompt, max_tokens=40, temperature=0.0)
    assert first.tokens == second.tokens == plain_results["code_edit"][0][:40]
    assert plain["choices"][0]["text"] == first.text


def test_adaptive_engine_learns_to_draft_on_predictable_text(llm, invariance):
    # Cost learning is off so the test does not depend on this machine's timing noise.
    policy = CostAwarePolicy(9, learn_cost=False)
    engine = SpeculativeEngine(llm, invariance=invariance, adaptive=policy)
    llm.reset()
    gen = engine.generate(PROMPTS["list"], max_tokens=128)
    assert gen.stats.tokens_per_forward > 1.5
    assert gen.stats.acceptance_rate > 0.5
    assert policy.acceptance.max() > 0.8  # it learned to trust some order
    llm.reset()
    prose = engine.generate(PROMPTS["prose"], max_tokens=64)
    assert prose.stats.verify_batch_sizes.get(1, 0) > prose.stats.forward_passes / 2  # mostly plain


def test_engine_speculates_and_saves_forward_passes(llm, eager_engine):
    engine = eager_engine
    llm.reset()
    gen = engine.generate(PROMPTS["repetitive"], max_tokens=64)
    s = gen.stats
    assert s.accepted_tokens > 0
    assert s.forward_passes < s.generated_tokens
    assert s.tokens_per_forward > 1.0
    assert 0 < s.acceptance_rate <= 1
    assert len(s.acceptance_by_position) == len(s.drafted_by_position) > 0
    assert s.drafted_by_position[0] >= max(s.drafted_by_position)
    assert sum(s.verify_batch_sizes.values()) == s.forward_passes
    assert s.time_decode_s > 0 and s.time_predictor_s > 0 and s.time_total_s >= s.time_decode_s
    d = s.to_dict()
    for key in ("prompt_tokens", "generated_tokens", "forward_passes", "drafted_tokens", "accepted_tokens",
                "acceptance_rate", "tokens_per_forward", "acceptance_by_position", "time_predictor_s",
                "time_decode_s", "time_other_s"):
        assert key in d


def test_plain_mode_with_max_draft_zero(llm, invariance, plain_results):
    llm.reset()
    eng = SpeculativeEngine(llm, max_draft=0, invariance=invariance)
    gen = eng.generate(PROMPTS["repetitive"], max_tokens=20)
    assert gen.tokens == plain_results["repetitive"][0][:20]
    assert gen.stats.drafted_tokens == 0
    assert gen.stats.verify_batch_sizes == {1: gen.stats.forward_passes}


def test_token_list_prompt(llm, engine, plain_results):
    llm.reset()
    tokens = prompt_tokens_for(llm, PROMPTS["json"])
    gen = engine.generate(np.array(tokens), max_tokens=17)
    assert gen.tokens == plain_results["json"][0][:17]



class _Recorder:
    """A stopping criterion that records what it is given and stops after ``after`` calls."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.ids: list[list[int]] = []
        self.choices: list[int] = []

    def __call__(self, input_ids, logits) -> bool:
        self.ids.append(input_ids.tolist())
        self.choices.append(int(np.argmax(logits)))
        return len(self.ids) >= self.after


@pytest.mark.parametrize("after", [1, 2, 70, 1000])
def test_stopping_criteria_see_what_plain_gives_them(llm, eager_engine, after):
    # Each call gets the prompt and the tokens emitted so far (llama-cpp-python's
    # input_ids), also inside accepted drafts and past the 64 spare slots the
    # engine's buffer starts with, and the row that chose the next token.
    # (llama-cpp-python's own row is all zeros without logits_all, and it calls a
    # criterion that said stop once more: only its input_ids are compared.)
    prompt = PROMPTS["repetitive"]
    tokens = plain_tokens(llm, prompt, 100)
    llm.reset()
    theirs = _Recorder(after)
    plain = llm.create_completion(prompt, max_tokens=100, temperature=0.0, stopping_criteria=theirs)
    llm.reset()
    ours = _Recorder(after)
    gen = eager_engine.generate(prompt, max_tokens=100, stopping_criteria=ours)
    if after > 2:
        assert gen.stats.accepted_tokens > 0
    prompt_ids = prompt_tokens_for(llm, prompt)
    assert len(ours.ids) == min(after, 100)
    assert ours.ids == theirs.ids[:len(ours.ids)]
    assert ours.ids == [prompt_ids + tokens[:i] for i in range(len(ours.ids))]
    assert ours.choices == tokens[:len(ours.ids)]
    assert gen.text == plain["choices"][0]["text"]
    assert gen.finish_reason == plain["choices"][0]["finish_reason"]
