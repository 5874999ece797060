"""Guards, rollback, stop handling and bad input for SpeculativeEngine."""
from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

from ngramspec import SpeculativeEngine, _llama
from ngramspec.engine.request import prompt_tokens_for
from tests.support.plain import plain_tokens
from tests.support.prompts import PROMPTS

OK_CHAT = (
    "<|im_start|>system\nAnswer with OK.<|im_end|>\n"
    + "<|im_start|>user\nSay OK.<|im_end|>\n<|im_start|>assistant\nOK.<|im_end|>\n" * 3
    + "<|im_start|>user\nSay OK.<|im_end|>\n<|im_start|>assistant\n"
)


def test_rollback_leaves_no_rejected_draft_in_the_cache(llm, eager_engine, smollm2_path):
    engine = eager_engine
    prompt = PROMPTS["prose"]
    llm.reset()
    gen = engine.generate(prompt, max_tokens=60)
    assert gen.stats.drafted_tokens - gen.stats.accepted_tokens >= 5, "need many rejections"
    prompt_ids = prompt_tokens_for(llm, prompt)
    kept = prompt_ids + gen.tokens[:-1]
    assert llm.n_tokens == len(kept)
    assert llm.input_ids[: llm.n_tokens].tolist() == kept
    # The engine's next-token logits: decode the last emitted token on its cache.
    batch = _llama.Batch(1)
    batch.fill([gen.tokens[-1]], llm.n_tokens, all_logits=True)
    _llama.decode(llm, batch)
    ours = _llama.output_logits(llm, 1)[0].copy()
    llm.reset()
    # A fresh context that decodes exactly the emitted tokens, one at a time.
    fresh = llama_cpp.Llama(smollm2_path, n_ctx=512, seed=0, verbose=False)
    try:
        ref_batch = _llama.Batch(len(prompt_ids))
        ref_batch.fill(prompt_ids, 0, all_logits=False)
        _llama.decode(fresh, ref_batch)
        for i, tok in enumerate(gen.tokens):
            ref_batch.fill([tok], len(prompt_ids) + i, all_logits=True)
            _llama.decode(fresh, ref_batch)
        ref = _llama.output_logits(fresh, 1)[0].copy()
    finally:
        fresh.close()
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))


def test_eos_inside_an_accepted_draft_ends_generation(llm, eager_engine):
    llm.reset()
    gen = eager_engine.generate(OK_CHAT, max_tokens=20)
    assert gen.finish_reason == "stop"
    assert gen.stats.stopped_inside_draft, "the end-of-generation token should arrive inside a draft"
    assert all(not llama_cpp.llama_vocab_is_eog(llm._model.vocab, t) for t in gen.tokens)
    assert gen.tokens == plain_tokens(llm, OK_CHAT, 20)
    llm.reset()
    plain = llm.create_completion(OK_CHAT, max_tokens=20, temperature=0.0)
    assert gen.text == plain["choices"][0]["text"] == "OK."


def test_stop_string_across_a_draft_boundary(llm, eager_engine):
    engine = eager_engine
    prompt = PROMPTS["repetitive"]
    llm.reset()
    # Find a pass that accepted a long draft, and a stop string that spans two of
    # its tokens, so the stop is found in the middle of an accepted draft.
    chunks = list(engine.stream(prompt, max_tokens=48))
    long_chunk = next(c for c in chunks if len(c) >= 3)
    a = llm.detokenize([long_chunk[0]]).decode()
    b = llm.detokenize([long_chunk[1]]).decode()
    stop = a[-1] + b[:2]
    full = llm.detokenize([t for c in chunks for t in c]).decode()
    llm.reset()
    gen = engine.generate(prompt, max_tokens=48, stop=[stop])
    assert gen.finish_reason == "stop"
    assert stop not in gen.text
    assert gen.text == full[: full.index(stop)]
    llm.reset()
    plain = llm.create_completion(prompt, max_tokens=48, temperature=0.0, stop=[stop])
    assert gen.text == plain["choices"][0]["text"]
    assert plain["choices"][0]["finish_reason"] == "stop"


def test_stop_string_spanning_two_tokens_and_several_stops(llm, engine):
    llm.reset()
    gen = engine.generate(PROMPTS["facts"], max_tokens=30, stop=["nomatch", "Ro", "is R"])
    llm.reset()
    plain = llm.create_completion(PROMPTS["facts"], max_tokens=30, temperature=0.0, stop=["nomatch", "Ro", "is R"])
    assert gen.text == plain["choices"][0]["text"]
    assert gen.finish_reason == plain["choices"][0]["finish_reason"]


def test_generation_stops_at_a_full_context(smollm2_path, invariance):
    small = llama_cpp.Llama(smollm2_path, n_ctx=64, seed=0, verbose=False)
    try:
        eng = SpeculativeEngine(small, invariance=invariance)
        prompt = PROMPTS["repetitive"]
        n_prompt = len(prompt_tokens_for(small, prompt))
        # llama.cpp rounds n_ctx=64 up to 256, and plain create_completion fills that.
        n_ctx = small.n_ctx()
        for max_tokens in (None, 1000):
            small.reset()
            gen = eng.generate(prompt, max_tokens=max_tokens)
            assert gen.finish_reason == "length"
            assert len(gen.tokens) == n_ctx - n_prompt
            assert small.n_tokens <= n_ctx
            assert gen.tokens == plain_tokens(small, prompt, n_ctx - n_prompt)
    finally:
        small.close()


def test_batches_respect_n_batch_and_n_ubatch(smollm2_path, invariance):
    small = llama_cpp.Llama(smollm2_path, n_ctx=512, n_batch=4, n_ubatch=4, seed=0, verbose=False)
    try:
        eng = SpeculativeEngine(small, invariance=invariance, adaptive=False)
        assert eng.max_draft == 3
        gen = eng.generate(PROMPTS["repetitive"], max_tokens=40)
        assert max(gen.stats.verify_batch_sizes) <= 4
        assert gen.stats.accepted_tokens > 0
        assert gen.tokens == plain_tokens(small, PROMPTS["repetitive"], 40)
    finally:
        small.close()


def test_draft_is_clipped_to_max_tokens(llm, engine):
    for max_tokens in (2, 3, 5):
        llm.reset()
        gen = engine.generate(PROMPTS["repetitive"], max_tokens=max_tokens)
        assert len(gen.tokens) == max_tokens
        assert max(gen.stats.verify_batch_sizes) <= max_tokens - 1


def test_user_llama_stays_usable_and_coherent(llm, engine):
    llm.reset()
    gen = engine.generate(PROMPTS["list"], max_tokens=10)
    assert llm.input_ids[: llm.n_tokens].tolist() == prompt_tokens_for(llm, PROMPTS["list"]) + gen.tokens[:-1]
    again = llm.create_completion(PROMPTS["list"], max_tokens=10, temperature=0.0)
    assert again["choices"][0]["text"] == gen.text


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"max_tokens": 0}, ValueError, "max_tokens must be >= 1"),
        ({"max_tokens": -5}, ValueError, "max_tokens must be >= 1"),
        ({"max_tokens": 2.5}, TypeError, "max_tokens must be an int"),
        ({"max_tokens": True}, TypeError, "max_tokens must be an int"),
        ({"stop": [1]}, TypeError, "stop must be"),
        ({"prompt": ""}, ValueError, "prompt is empty"),
        ({"prompt": []}, ValueError, "prompt is empty"),
        ({"prompt": b"bytes"}, TypeError, "not bytes"),
        ({"prompt": [1, -1]}, ValueError, r"token ids must be in \[0, 49152\)"),
        ({"prompt": [1, 49152]}, ValueError, r"token ids must be in \[0, 49152\)"),
        ({"prompt": [1.0, 2.0]}, TypeError, "token ids"),
        ({"prompt": "word " * 3000}, ValueError, "exceed context window of 2048"),
    ],
)
def test_generate_rejects(llm, engine, kwargs, exc, match):
    args = {"prompt": "Hello", "max_tokens": 4, **kwargs}
    prompt = args.pop("prompt")
    llm.reset()
    with pytest.raises(exc, match=match):
        engine.generate(prompt, **args)
    assert engine.generate("Hello", max_tokens=2).tokens  # still works afterwards


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [({"max_draft": -1}, ValueError, "max_draft must be >= 0"), ({"max_draft": 2.0}, TypeError, "max_draft"),
     ({"invariance": "yes"}, TypeError, "InvarianceReport"), ({"max_order": 9}, ValueError, "max_order")],
)
def test_engine_rejects_bad_settings(llm, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        SpeculativeEngine(llm, **kwargs)


def test_engine_rejects_non_llama():
    with pytest.raises(TypeError, match="expected a llama_cpp.Llama"):
        SpeculativeEngine(object())  # type: ignore[arg-type]


def test_closed_llama_is_a_clear_error(smollm2_path, invariance):
    model = llama_cpp.Llama(smollm2_path, n_ctx=128, seed=0, verbose=False)
    eng = SpeculativeEngine(model, invariance=invariance)
    model.close()
    with pytest.raises(ValueError, match="closed"):
        eng.generate("Hello", max_tokens=3)
    with pytest.raises(ValueError, match="closed"):
        SpeculativeEngine(model)
