"""SpeculativeLlama: drop-in shapes and text, streaming, chat, delegation, refusals."""
from __future__ import annotations

from typing import Any

import llama_cpp
import llama_cpp.llama_tokenizer
import numpy as np
import pytest

import ngramspec
from ngramspec import NGramDraftModel, SpeculativeLlama
from tests.support.prompts import PROMPTS

UNICODE = "Animals in Japanese: cat = 猫, dog = 犬, bird = 鳥, fish = 魚, cat = 猫, dog ="


@pytest.fixture()
def spec(llm, invariance):
    llm.reset()
    return ngramspec.wrap(llm, invariance=invariance)


def plain(llm, prompt, **kw):
    llm.reset()
    out = llm.create_completion(prompt, temperature=0.0, **kw)
    llm.reset()
    return out


@pytest.mark.parametrize("name", ["list", "json", "code_edit"])
@pytest.mark.parametrize("kw", [{"max_tokens": 40}, {"max_tokens": 24, "stop": ["\n\n", "grapes"]},
                                {"max_tokens": 12, "echo": True},
                                # "" is found at index 0: plain stops after one token with no text
                                {"max_tokens": 8, "stop": ["", "grapes"]}])
def test_completion_matches_llama(llm, spec, name, kw):
    ref = plain(llm, PROMPTS[name], **kw)
    out = spec.create_completion(PROMPTS[name], temperature=0.0, **kw)
    assert set(out) == set(ref) | {"speculative"}
    assert out["object"] == ref["object"] and out["model"] == ref["model"]
    assert out["id"].startswith("cmpl-") and isinstance(out["created"], int)
    assert out["choices"] == ref["choices"]
    assert out["usage"] == ref["usage"]
    assert out["speculative"]["used"] is True
    assert out["speculative"]["generated_tokens"] == out["usage"]["completion_tokens"]


def test_call_and_top_k_1_are_greedy(llm, spec):
    ref = plain(llm, PROMPTS["list"], max_tokens=20)
    assert spec(PROMPTS["list"], max_tokens=20, temperature=0.0)["choices"] == ref["choices"]
    llm.reset()
    out = spec(PROMPTS["list"], max_tokens=20, temperature=0.7, top_k=1)
    assert out["speculative"]["used"] is True
    assert out["choices"][0]["text"] == ref["choices"][0]["text"]


def test_max_tokens_none_or_zero_fills_the_context(smollm2_path, invariance):
    # n_ctx=64 is rounded up to 256 by llama.cpp, and plain create_completion fills
    # llama.cpp's context, not the one asked for: so does the wrapper.
    small = llama_cpp.Llama(smollm2_path, n_ctx=64, seed=0, verbose=False)
    try:
        s = SpeculativeLlama(small, invariance=invariance)
        for mt in (None, 0, -1):
            small.reset()
            ref = small.create_completion(PROMPTS["repetitive"], max_tokens=mt, temperature=0.0)
            assert isinstance(ref, dict)  # not streamed
            small.reset()
            out = s.create_completion(PROMPTS["repetitive"], max_tokens=mt, temperature=0.0)
            assert out["usage"]["total_tokens"] == ref["usage"]["total_tokens"] == small.n_ctx()
            assert out["choices"][0]["text"] == ref["choices"][0]["text"]
            assert out["choices"][0]["finish_reason"] == "length"
    finally:
        small.close()


@pytest.mark.parametrize("prompt, stop", [(PROMPTS["list"], []), (PROMPTS["repetitive"], ["four, one"]),
                                          (UNICODE, []), (UNICODE, ["魚, c"])])
def test_stream_concatenates_to_the_full_text(llm, spec, prompt, stop):
    whole = spec.create_completion(prompt, max_tokens=48, temperature=0.0, stop=stop)
    llm.reset()
    chunks = list(spec.create_completion(prompt, max_tokens=48, temperature=0.0, stop=stop, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert chunks[-1]["choices"][0]["text"] == ""   # as plain's stream ends
    assert chunks[-1]["speculative"]["used"] is True
    assert all("\ufffd" not in c["choices"][0]["text"] for c in chunks)
    if stop:
        for s in stop:
            assert all(s not in c["choices"][0]["text"] for c in chunks)
    ref = plain(llm, prompt, max_tokens=48, stop=stop)
    assert whole["choices"][0]["text"] == ref["choices"][0]["text"]


@pytest.mark.parametrize("max_tokens", [3, 5])
def test_chat_stream_keeps_text_held_back_for_a_stop_string(llm, spec, max_tokens):
    # The output ends in "\n", which might start the stop "\n\n": held back until
    # the end, it went out in the finishing chunk, whose text the chat handler drops.
    messages = [{"role": "user", "content": "Write a Python function that adds two numbers, with a docstring."}]
    kw = {"temperature": 0, "max_tokens": max_tokens, "stop": ["\n\n"]}
    whole = spec.create_chat_completion(messages, **kw)["choices"][0]["message"]["content"]
    streamed = "".join(c["choices"][0]["delta"].get("content") or ""
                       for c in spec.create_chat_completion(messages, stream=True, **kw))
    llm.reset()
    ref = "".join(c["choices"][0]["delta"].get("content") or ""
                  for c in llm.create_chat_completion(messages, stream=True, **kw))
    assert streamed == whole == ref


def test_stream_really_streams_and_handles_multibyte(llm, spec):
    chunks = list(spec.create_completion(UNICODE, max_tokens=48, temperature=0.0, stream=True))
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert len(chunks) > 3
    assert any(ord(ch) > 0x2E80 for ch in text), "the completion should contain CJK characters"


def test_chat_completion_end_to_end(llm, spec):
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "List three fruits, one per line."}]
    llm.reset()
    ref = llm.create_chat_completion(messages, temperature=0.0, max_tokens=40)
    llm.reset()
    out = spec.create_chat_completion(messages, temperature=0.0, max_tokens=40)
    assert out["choices"][0]["message"] == ref["choices"][0]["message"]
    assert out["choices"][0]["finish_reason"] == ref["choices"][0]["finish_reason"]
    assert out["object"] == "chat.completion" and out["usage"] == ref["usage"]
    assert out["speculative"]["used"] is True
    llm.reset()
    chunks = list(spec.create_chat_completion(messages, temperature=0.0, max_tokens=40, stream=True))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == ref["choices"][0]["message"]["content"]


def test_sampled_requests_are_speculative_and_seed_reproducible(llm, spec):
    kw = {"max_tokens": 24, "temperature": 0.8, "seed": 42}
    llm.reset()
    a = spec.create_completion(PROMPTS["list"], **kw)
    llm.reset()
    b = spec.create_completion(PROMPTS["list"], **kw)
    assert a["speculative"]["used"] is True
    assert a["choices"] == b["choices"]
    llm.reset()
    c = spec.create_completion(PROMPTS["list"], **{**kw, "seed": 43})
    llm.reset()
    d = spec.create_completion(PROMPTS["list"], **{**kw, "seed": 44})
    assert len({a["choices"][0]["text"], c["choices"][0]["text"], d["choices"][0]["text"]}) > 1


@pytest.mark.parametrize("bias, error", [({10**6: 5.0}, "out of range"), ({-1: 100.0}, "out of range"),
                                         ({"five": 1.0}, "token ids"), ({5: float("nan")}, "number"),
                                         ({5: "high"}, "number"), ({2.5: 1.0}, "token ids")])
def test_bad_logit_bias_is_a_clear_error(llm, spec, bias, error):
    # An id past the vocabulary was an IndexError (a 500 from the server); -1 biased
    # the last token of the vocabulary.
    with pytest.raises((ValueError, TypeError), match=error):
        spec.create_completion("Hello", max_tokens=4, temperature=0.8, logit_bias=bias)
    out = spec.create_completion("Hello", max_tokens=4, temperature=0.8, seed=1,
                                 logit_bias={llm.n_vocab() - 1: 1.0})
    assert out["choices"][0]["finish_reason"] in ("length", "stop")


def test_logit_bias_is_read_as_plain_reads_it(llm, spec):
    # OpenAI (and llama-cpp-python's server) send ids as strings; plain takes
    # {int(id): float(bias)}, so {"5": 1.0} and numpy numbers work there, and here.
    banned = spec.tokenize(b" the", add_bos=False)[0]
    kw = {"max_tokens": 12, "temperature": 0.8, "seed": 3}
    as_ints = spec.create_completion("Once upon a time", logit_bias={banned: -100.0}, **kw)
    as_strs = spec.create_completion("Once upon a time", logit_bias={str(banned): np.float32(-100.0)}, **kw)
    assert as_strs["choices"][0]["text"] == as_ints["choices"][0]["text"]
    assert banned not in spec.tokenize(as_strs["choices"][0]["text"].encode(), add_bos=False)


def test_the_llamas_own_seed_makes_unseeded_sampling_reproducible(smollm2_path, invariance):
    """As llama-cpp-python: without a per-call seed, each call takes the next seed
    of the Llama's own sequence, so Llama(seed=42) gives the same texts every time
    (a fresh OS-random seed per call made Llama(seed=) and set_seed no-ops)."""
    def texts(seed: int) -> list[str]:
        llm = llama_cpp.Llama(smollm2_path, n_ctx=256, n_threads=1, n_threads_batch=1, seed=seed, verbose=False)
        try:
            spec = ngramspec.wrap(llm, invariance=invariance)
            return [spec.create_completion("Once upon a time", max_tokens=12, temperature=0.9)["choices"][0]["text"]
                    for _ in range(3)]
        finally:
            llm.close()

    first, again, other = texts(42), texts(42), texts(7)
    assert first == again
    assert len(set(first)) > 1       # successive calls follow the sequence, not one seed
    assert other != first


@pytest.mark.parametrize("seed", [-1, 2**32 - 1])
def test_seed_minus_one_samples_at_random_as_plain_does(spec, seed):
    # llama.cpp reads the seed 0xFFFFFFFF (-1) as "take one from std::random_device":
    # plain's texts differ call by call; ours were the same every time.
    texts = {spec.create_completion("Once upon a time", max_tokens=10, temperature=1.2, seed=seed)["choices"][0]["text"]
             for _ in range(3)}
    assert len(texts) > 1
    again = {spec.create_completion("Once upon a time", max_tokens=10, temperature=1.2, seed=5)["choices"][0]["text"]
             for _ in range(2)}
    assert len(again) == 1


def test_a_refused_call_leaves_the_llamas_seed_alone(smollm2_path, invariance):
    # Plain checks the prompt before it touches the seed; ours set it first, so the
    # Llama's next unseeded sampled text changed after a refused request.
    def next_text(refused_first: bool) -> str:
        llm = llama_cpp.Llama(smollm2_path, n_ctx=256, n_threads=1, n_threads_batch=1, seed=1, verbose=False)
        try:
            spec = ngramspec.wrap(llm, invariance=invariance)
            if refused_first:
                with pytest.raises(ValueError, match="exceed context window"):
                    spec("word " * 400, max_tokens=5, temperature=0.9)
                with pytest.raises(TypeError, match="seed must be an int"):
                    spec("Once", max_tokens=5, temperature=0.9, seed=1.5)  # type: ignore[arg-type]
            out: Any = llm("Once upon a time", max_tokens=12, temperature=0.9)
            return str(out["choices"][0]["text"])
        finally:
            llm.close()

    assert next_text(True) == next_text(False)


def test_empty_prompt_on_a_bos_model_generates_from_bos(smollm2_path, invariance):
    # Plain generates from [BOS]; ours refused "prompt is empty". Plain counts the BOS
    # as a completion token, so its text is one token shorter (README's quirks).
    kv: dict[str, bool | int | float | str] = {"tokenizer.ggml.add_bos_token": True}
    a = llama_cpp.Llama(smollm2_path, n_ctx=256, n_threads=1, verbose=False, kv_overrides=kv)
    b = llama_cpp.Llama(smollm2_path, n_ctx=256, n_threads=1, verbose=False, kv_overrides=kv)
    try:
        ref: Any = a("", max_tokens=8, temperature=0)
        got = ngramspec.wrap(b, invariance=invariance)("", max_tokens=8, temperature=0)
        assert got["usage"]["prompt_tokens"] == ref["usage"]["prompt_tokens"] == 1
        assert got["usage"]["completion_tokens"] == 8
        assert ref["choices"][0]["text"] and got["choices"][0]["text"].startswith(ref["choices"][0]["text"])
        # Plain's completion starts with its BOS, so its text drops a leading space.
        the = a.tokenize(b" The", add_bos=False)[0]
        kw: Any = {"max_tokens": 3, "temperature": 0.8, "seed": 1, "logit_bias": {the: 100.0}}
        ref = a("", **kw)
        got = ngramspec.wrap(b, invariance=invariance)("", **kw)
        assert ref["choices"][0]["text"] == "The The"
        assert got["choices"][0]["text"] == "The The The"
    finally:
        a.close()
        b.close()


class _HFLikeDecoder:
    """What LlamaHFTokenizer calls, decoding as Hugging Face's SentencePiece
    tokenizers do: bytes to text with U+FFFD for an incomplete character, and the
    text's leading space dropped. So a token's bytes depend on what precedes it."""

    def __init__(self, llm: llama_cpp.Llama) -> None:
        self.model = llm._model

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        text = self.model.detokenize(list(ids), special=not skip_special_tokens).decode("utf-8", errors="replace")
        return text[1:] if text.startswith(" ") else text

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.model.tokenize(text.encode(), add_bos=False, special=True)


@pytest.mark.parametrize("prompt", ["def fibonacci(n):", UNICODE])
def test_a_tokenizer_that_renders_by_context_gives_plains_text(smollm2_path, invariance, prompt):
    # Each token was rendered alone and memoised: "return max(fib" came out as
    # "returnmax(fib"; then, rendered against the tokens before it, a character split
    # across tokens came out as U+FFFD.
    from llama_cpp.llama_tokenizer import LlamaHFTokenizer

    texts = []
    for wrapped in (False, True):
        llm = llama_cpp.Llama(smollm2_path, n_ctx=256, n_threads=1, verbose=False)
        try:
            llm.tokenizer_ = LlamaHFTokenizer(_HFLikeDecoder(llm))
            f: Any = ngramspec.wrap(llm, invariance=invariance) if wrapped else llm
            texts.append(f(prompt, max_tokens=24, temperature=0, stop=["bird"])["choices"][0]["text"])
            if wrapped:
                streamed = "".join(c["choices"][0]["text"] for c in f(prompt, max_tokens=24, temperature=0,
                                                                        stop=["bird"], stream=True))
                assert streamed == texts[-1]
        finally:
            llm.close()
    assert " " in texts[0] and "\ufffd" not in texts[0] and texts[1] == texts[0]


def test_generate_yields_plain_greedy_tokens(llm, spec):
    from ngramspec.engine.request import prompt_tokens_for

    tokens = prompt_tokens_for(llm, PROMPTS["json"])
    llm.reset()
    ref = []
    for t in llm.generate(tokens, temp=0.0):
        ref.append(t)
        if len(ref) == 30:
            break
    llm.reset()
    got = []
    stream = spec.generate(tokens, temp=0.0)
    for t in stream:
        got.append(t)
        if len(got) == 30:
            break
    stream.close()
    assert got == ref


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_abandoned_stream_is_safe_after_the_llama_is_closed(smollm2_path, invariance):
    import gc

    model = llama_cpp.Llama(smollm2_path, n_ctx=256, seed=0, verbose=False)
    s = SpeculativeLlama(model, invariance=invariance)
    stream = s.create_completion(PROMPTS["list"], max_tokens=20, temperature=0.0, stream=True)
    next(stream)
    model.close()
    del stream
    gc.collect()  # finalising the abandoned generator must not touch the freed model
    # (an exception there is "unraisable": the filter above turns it into a failure)
    with pytest.raises(ValueError, match="closed"):
        s.create_completion("Hi", max_tokens=2, temperature=0.0)


def test_attributes_pass_through(llm, spec):
    assert spec.tokenize(b"hello") == llm.tokenize(b"hello")
    assert spec.n_ctx() == llm.n_ctx()


@pytest.mark.parametrize("ids", [[10**8], [-1], [5, 2**40]])
def test_detokenize_checks_ids_instead_of_aborting(spec, ids):
    # Llama.detokenize([10**8]) ends the process (std::out_of_range in llama.cpp).
    with pytest.raises(ValueError, match="out of range"):
        spec.detokenize(ids)
    with pytest.raises(ValueError, match="out of range"):
        spec.detokenize([5], prev_tokens=ids)
    assert spec.detokenize([5, 6]) == spec.llm.detokenize([5, 6])
    prev = np.array([7, 8], dtype=np.intc)   # plain takes a numpy context too
    assert spec.detokenize([5, 6], prev_tokens=prev) == spec.llm.detokenize([5, 6], prev_tokens=prev)


def test_attributes_set_on_the_wrapper_reach_the_llama(llm, spec):
    # As on a plain Llama, setting chat_format changes the chat template used; it
    # was kept on the wrapper and ignored. copy.copy recursed in __getattr__.
    import copy

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    before = spec.create_chat_completion(messages, max_tokens=2, temperature=0)["usage"]["prompt_tokens"]
    saved = llm.chat_format
    try:
        spec.chat_format = "alpaca"
        assert llm.chat_format == "alpaca" and "chat_format" not in vars(spec)
        after = spec.create_chat_completion(messages, max_tokens=2, temperature=0)["usage"]["prompt_tokens"]
        llm.reset()
        ref = llm.create_chat_completion(messages, max_tokens=2, temperature=0)["usage"]["prompt_tokens"]
        assert after == ref != before
    finally:
        llm.chat_format = saved
    spec.note = "mine"                 # a name the Llama lacks stays on the wrapper
    assert vars(spec)["note"] == "mine" and not hasattr(llm, "note")
    twin = copy.copy(spec)
    assert twin.llm is llm and twin.engine is spec.engine
    from unittest import mock

    with mock.patch.object(spec, "chat_format", "alpaca"):
        assert llm.chat_format == "alpaca"
    assert llm.chat_format == saved and "chat_format" not in vars(spec)
    del spec.note
    assert not hasattr(spec, "note")


def test_ngram_draft_model_interface(smollm2_path):
    draft = NGramDraftModel(num_pred_tokens=4)
    ids = np.array([1, 2, 3, 1, 2], dtype=np.intc)
    assert draft(ids).tolist() == [3, 1, 2, 3]
    assert draft(np.append(ids, 3).astype(np.intc)).tolist() == [1, 2, 3, 1]  # incremental
    assert draft(np.array([7, 8, 7], dtype=np.intc)).tolist() == [8, 7, 8, 7]  # a new sequence
    assert draft(ids).dtype == np.intc
    with pytest.raises(ValueError):
        NGramDraftModel(num_pred_tokens=-1)
    with pytest.raises(ValueError):
        draft(np.zeros((2, 2), dtype=np.intc))
    model = llama_cpp.Llama(smollm2_path, n_ctx=512, seed=0, verbose=False, draft_model=NGramDraftModel())
    try:
        out = model.create_completion(PROMPTS["list"], max_tokens=24, temperature=0.0)
        assert isinstance(out, dict)  # not streamed
        assert out["usage"]["completion_tokens"] > 0
    finally:
        model.close()


def test_exact_can_be_chosen_per_call(llm, spec, invariance):
    # SmolLM2's Q4_1 kernels are bit-exact at every batch size on this build, so fast
    # mode must give plain greedy's text here too: a real check that it verifies right.
    assert all(r.invariant for r in invariance.results.values()), "precondition: SmolLM2 fully invariant"
    ref = plain(llm, PROMPTS["code_edit"], max_tokens=40)["choices"][0]["text"]
    llm.reset()
    fast = spec.create_completion(PROMPTS["code_edit"], temperature=0.0, max_tokens=40, exact=False)
    assert fast["choices"][0]["text"] == ref
    # One engine, one plan per exactness: fast mode's allows every size.
    assert spec.engine.exact is True and spec.engine.plan(False).allowed[1:].all()

    messages = [{"role": "user", "content": "Repeat: one two three four, one two three four."}]
    llm.reset()
    ref_chat = llm.create_chat_completion(messages, temperature=0.0, max_tokens=24)
    llm.reset()
    out = spec.create_chat_completion(messages, temperature=0.0, max_tokens=24, exact=False)
    assert out["choices"][0]["message"] == ref_chat["choices"][0]["message"]
    assert out["speculative"]["verify_batch_sizes"]   # the wrapper's own stats reached the chat response

    fast_default = ngramspec.wrap(llm, exact=False)
    llm.reset()
    again = fast_default.create_completion(PROMPTS["code_edit"], temperature=0.0, max_tokens=40, exact=True)
    assert again["choices"][0]["text"] == ref
    assert fast_default.engine.exact is False and True in fast_default.engine._plans
    tokens = llm.tokenize(PROMPTS["list"].encode())
    llm.reset()
    want = [t for _, t in zip(range(16), llm.generate(tokens, temp=0.0))]
    llm.reset()
    got = [t for _, t in zip(range(16), spec.generate(tokens, temp=0.0, exact=False))]
    assert got == want


@pytest.mark.parametrize("call", ["create_completion", "create_chat_completion", "generate"])
def test_exact_must_be_a_bool(spec, call):
    arg: str | list[int] | list[dict[str, str]] = "hi"
    if call == "create_chat_completion":
        arg = [{"role": "user", "content": "hi"}]
    if call == "generate":
        arg = [1, 2, 3]
    with pytest.raises(TypeError, match="exact must be True, False or None"):
        out = getattr(spec, call)(arg, exact="no")
        next(iter(out))
