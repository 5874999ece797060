"""SpeculativeLlama is a llama_cpp.Llama: it shares the wrapped instance's model,
context, cache and bookkeeping, answers every public name of Llama, never frees
the user's Llama when it is collected, and never wraps a wrapper."""
from __future__ import annotations

import copy
import gc
import pickle

import llama_cpp
import pytest
from llama_cpp.llama_cache import LlamaRAMCache

import ngramspec
from ngramspec import SpeculativeLlama
from tests.support.prompts import PROMPTS

#: The methods SpeculativeLlama overrides; every other public name of Llama is Llama's own.
OVERRIDDEN = {"create_completion", "create_chat_completion", "generate", "detokenize", "close", "from_pretrained"}


@pytest.fixture()
def spec(llm, invariance):
    llm.reset()
    return ngramspec.wrap(llm, invariance=invariance)


def greedy_text(model, prompt, n=24):
    model.reset()
    out = model.create_completion(prompt, max_tokens=n, temperature=0.0)
    model.reset()
    return out["choices"][0]["text"]


def test_the_wrapper_is_a_llama_sharing_the_wrapped_ones_model_and_context(llm, spec):
    assert isinstance(spec, llama_cpp.Llama)
    assert spec._model is llm._model and spec._ctx is llm._ctx and spec._batch is llm._batch
    assert spec.model == llm.model and spec.ctx == llm.ctx   # Llama's properties, read through the wrapper
    # Every public name of the class answers on the wrapper: Llama's own methods
    # and properties, except the ones the wrapper speeds up or must change.
    public = [n for n in dir(llama_cpp.Llama) if not n.startswith("_")]
    assert len(public) > 30
    for name in public:
        value = getattr(spec, name)
        assert value is not None, name
        if name in OVERRIDDEN:
            assert name in vars(SpeculativeLlama), name
        else:
            assert name not in vars(SpeculativeLlama), name
    # And every attribute of the instance is the wrapped Llama's own object.
    for name, value in vars(llm).items():
        assert getattr(spec, name) is value, name
    assert spec.n_ctx() == llm.n_ctx() and spec.n_vocab() == llm.n_vocab()
    assert spec.token_eos() == llm.token_eos() and spec.metadata is llm.metadata
    assert spec.tokenizer().tokenize(b"hello") == llm.tokenize(b"hello")


def test_llamas_methods_run_on_the_wrapped_llamas_state(llm, spec):
    # State that Llama's own methods set through the wrapper lands on the wrapped
    # Llama (the one llama-cpp-python reads), never in a copy on the wrapper.
    cache = LlamaRAMCache(capacity_bytes=2 << 30)
    seed = llm._seed
    try:
        spec.set_cache(cache)
        assert llm.cache is cache and spec.cache is cache and "cache" not in vars(spec)
        spec.set_seed(1234)
        assert llm._seed == 1234 and "_seed" not in vars(spec)
        tokens = llm.tokenize(PROMPTS["list"].encode())
        spec.reset()
        spec.eval(tokens)
        assert llm.n_tokens == len(tokens) and "n_tokens" not in vars(spec)
        assert list(spec.eval_tokens) == list(llm.eval_tokens) == tokens
        # A request decoded plainly (a logits processor) goes through the Llama's own
        # create_completion, which fills the cache set through the wrapper.
        out = spec.create_completion(PROMPTS["list"], max_tokens=4, temperature=0.0,
                                     logits_processor=llama_cpp.LogitsProcessorList([lambda ids, s: s]))
        assert out["speculative"]["used"] is False
        assert len(cache.cache_state) == 1
        spec.reset()
        assert llm.n_tokens == 0
    finally:
        llm.set_cache(None)
        llm.set_seed(seed)
    assert not {"cache", "_seed", "n_tokens", "_requires_eval", "input_ids"} & set(vars(spec))


def test_llamas_other_entry_points_go_through_the_speculative_path(llm, spec):
    messages = [{"role": "user", "content": "Repeat: one two three four, one two three four."}]
    llm.reset()
    ref = llm.create_chat_completion(messages, temperature=0.0, max_tokens=24)
    llm.reset()
    # Llama.create_chat_completion_openai_v1 calls self.create_chat_completion: ours.
    out = spec.create_chat_completion_openai_v1(messages, temperature=0.0, max_tokens=24)
    assert out.choices[0].message.content == ref["choices"][0]["message"]["content"]
    assert spec.last_speculative["used"] is True


def test_wrap_of_a_wrapper_wraps_the_inner_llama_with_the_new_options(llm, spec, invariance):
    again = ngramspec.wrap(spec, invariance=invariance, exact=False, max_draft=3)
    assert type(again) is SpeculativeLlama and again.llm is llm and again is not spec
    assert again.engine is not spec.engine and again.engine.llm is llm
    assert again.engine.exact is False and again.engine.max_draft == 3
    assert spec.engine.exact is True   # the old wrapper keeps its own options
    direct = SpeculativeLlama(again, invariance=invariance)
    assert direct.llm is llm and direct.engine.exact is True
    want = greedy_text(llm, PROMPTS["code_edit"])
    assert greedy_text(again, PROMPTS["code_edit"]) == want
    assert greedy_text(direct, PROMPTS["code_edit"]) == want


def test_copy_and_pickle_keep_one_wrapper_per_llama(llm, spec):
    twin = copy.copy(spec)
    assert type(twin) is SpeculativeLlama and twin.llm is llm and twin.engine is spec.engine
    # Pickled as llama-cpp-python pickles a Llama (its settings, reloaded), wrapped again
    # with the same options; before, Llama.__setstate__ called the wrapper's __init__.
    back = pickle.loads(pickle.dumps(spec))
    try:
        assert type(back) is SpeculativeLlama and isinstance(back.llm, llama_cpp.Llama)
        assert back.llm is not llm and back.engine.options == spec.engine.options
        assert greedy_text(back, PROMPTS["list"]) == greedy_text(llm, PROMPTS["list"])
    finally:
        back.close()


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_collecting_the_wrapper_leaves_the_llama_usable_and_close_frees_it_once(smollm2_path, invariance):
    model = llama_cpp.Llama(smollm2_path, n_ctx=256, seed=0, verbose=False)
    want = greedy_text(model, PROMPTS["list"], 12)
    spec = SpeculativeLlama(model, invariance=invariance)
    assert greedy_text(spec, PROMPTS["list"], 12) == want
    twin = copy.copy(spec)
    del spec, twin
    gc.collect()   # Llama.__del__ closes: the wrapper's must not close the user's Llama
    assert model._ctx.ctx is not None
    assert greedy_text(model, PROMPTS["list"], 12) == want
    spec = SpeculativeLlama(model, invariance=invariance)
    spec.close()   # Llama.close on the wrapper frees the model they share...
    assert model._ctx.ctx is None
    with pytest.raises(ValueError, match="closed"):
        spec.create_completion("Hi", max_tokens=2, temperature=0.0)
    spec.close()   # ...once: closing again, either of them, frees nothing twice
    model.close()
    del spec, model
    gc.collect()


def test_a_wrapper_answers_where_a_llama_is_expected(llm, spec):
    # The checks llama-cpp-python's neighbours make (isinstance) pass, and the
    # wrapper's type says what it is.
    assert isinstance(spec, llama_cpp.Llama) and issubclass(SpeculativeLlama, llama_cpp.Llama)
    assert repr(spec).startswith("<ngramspec.integrations.wrapper.SpeculativeLlama object")
    with pytest.raises(TypeError, match="expected a llama_cpp.Llama"):
        SpeculativeLlama("model.gguf")  # type: ignore[arg-type]


def test_a_wrapper_is_no_draft_model_for_its_own_llama(llm):
    # A wrapper is a Llama, but one sharing the target's context: drafting with it
    # would decode into the target's own cache.
    spec = ngramspec.wrap(llm)
    for target, draft in ((llm, spec), (spec, llm)):
        with pytest.raises(ValueError, match="separate Llama"):
            ngramspec.wrap(target, draft_model=draft)


def test_from_pretrained_loads_a_llama_and_wraps_it(smollm2_path, monkeypatch):
    # Llama.from_pretrained downloads (huggingface-hub) and ends in cls(model_path=...,
    # **kwargs): here the download is the local file, the rest is as there. Inherited
    # as it was, cls was SpeculativeLlama, whose constructor takes a Llama.
    def from_pretrained(cls, repo_id, filename, /, **kwargs):
        assert (repo_id, filename) == ("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "*Q4_1.gguf")
        return cls(model_path=smollm2_path, **kwargs)

    monkeypatch.setattr(llama_cpp.Llama, "from_pretrained", classmethod(from_pretrained))
    spec = SpeculativeLlama.from_pretrained("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "*Q4_1.gguf", n_ctx=256,
                                            verbose=False)
    try:
        assert type(spec) is SpeculativeLlama and type(spec.llm) is llama_cpp.Llama
        assert spec.n_ctx() == 256 and spec.model_path == smollm2_path
    finally:
        spec.close()
