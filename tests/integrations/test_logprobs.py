"""logprobs / top_logprobs computed from the verified rows: plain llama-cpp-python's
numbers (it needs logits_all=True for them; the wrapper does not)."""
from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

import ngramspec
from ngramspec.engine.logprobs import TokenLogprobs, logits_to_logprobs
from tests.support.prompts import PROMPTS


@pytest.fixture(scope="module")
def llm_all(smollm2_path):
    """Plain llama-cpp-python as its server runs it: every row's logits kept."""
    model = llama_cpp.Llama(smollm2_path, n_ctx=2048, seed=0, logits_all=True, verbose=False)
    yield model
    model.close()


@pytest.fixture()
def spec(llm, invariance):
    llm.reset()
    return ngramspec.wrap(llm, invariance=invariance)


def _same_logprobs(ours, theirs):
    assert ours["tokens"] == theirs["tokens"] and ours["text_offset"] == theirs["text_offset"]
    assert [list(t) for t in ours["top_logprobs"]] == [list(t) for t in theirs["top_logprobs"]]
    np.testing.assert_array_equal(np.asarray(ours["token_logprobs"], dtype=np.float32),
                                  np.asarray(theirs["token_logprobs"], dtype=np.float32))
    for a, b in zip(ours["top_logprobs"], theirs["top_logprobs"]):
        np.testing.assert_array_equal(np.asarray(list(a.values()), dtype=np.float32),
                                      np.asarray(list(b.values()), dtype=np.float32))


@pytest.mark.parametrize("n", [0, 1, 4])
@pytest.mark.parametrize("name", ["list", "code_edit"])
def test_completion_logprobs_are_plains(llm_all, spec, name, n):
    llm_all.reset()
    ref = llm_all.create_completion(PROMPTS[name], max_tokens=32, temperature=0, logprobs=n)
    out = spec.create_completion(PROMPTS[name], max_tokens=32, temperature=0, logprobs=n)
    assert out["choices"][0]["text"] == ref["choices"][0]["text"]
    assert out["speculative"]["used"] is True
    _same_logprobs(out["choices"][0]["logprobs"], ref["choices"][0]["logprobs"])


def test_streamed_logprobs_add_up_to_the_whole(spec):
    full = spec.create_completion(PROMPTS["list"], max_tokens=32, temperature=0, logprobs=2)["choices"][0]
    chunks = list(spec.create_completion(PROMPTS["list"], max_tokens=32, temperature=0, logprobs=2, stream=True))
    joined: dict[str, list] = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
    for c in chunks:
        lp = c["choices"][0]["logprobs"]
        if lp is not None:
            for key in joined:
                joined[key] += lp[key]
    assert joined == full["logprobs"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == full["text"]


def test_chat_logprobs_are_plains(llm_all, spec):
    chat = [{"role": "user", "content": "Name three colours."}]
    llm_all.reset()
    ref = llm_all.create_chat_completion(chat, max_tokens=24, temperature=0, logprobs=True, top_logprobs=3)
    out = spec.create_chat_completion(chat, max_tokens=24, temperature=0, logprobs=True, top_logprobs=3)
    assert out["choices"][0]["message"] == ref["choices"][0]["message"]
    ours, theirs = out["choices"][0]["logprobs"]["content"], ref["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in ours] == [e["token"] for e in theirs]
    np.testing.assert_array_equal(np.asarray([e["logprob"] for e in ours], dtype=np.float32),
                                  np.asarray([e["logprob"] for e in theirs], dtype=np.float32))


def test_chat_logprobs_true_alone_gives_the_chosen_tokens(spec):
    # OpenAI's meaning; plain's handler passed logprobs on only with top_logprobs, and gave none.
    out = spec.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0,
                                      logprobs=True)
    content = out["choices"][0]["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"] and all(e["logprob"] <= 0 for e in content)


def test_sampled_requests_get_logprobs_too(spec):
    out = spec.create_completion(PROMPTS["list"], max_tokens=16, temperature=0.8, seed=1, logprobs=2)
    lp = out["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == out["usage"]["completion_tokens"] and "".join(lp["tokens"]).strip()


def test_top_logprobs_order_ties_as_plain_does():
    # plain sorts (logprob, id) pairs in reverse: equal values, the larger id first.
    row = np.array([0.0, 2.0, 2.0, 1.0, 2.0], dtype=np.float32)
    rec = TokenLogprobs(3)
    rec.add(1, row)
    lp = logits_to_logprobs(row)
    expected = sorted(zip(lp.tolist(), range(len(lp))), reverse=True)[:3]
    assert rec.top_logprobs[0] == [(i, v) for v, i in expected] and [i for i, _ in rec.top_logprobs[0]] == [4, 2, 1]
    np.testing.assert_array_equal(lp, llama_cpp.Llama.logits_to_logprobs(row[None, :])[0])
    with pytest.raises(ValueError, match="logprobs must be >= 0"):
        TokenLogprobs(-1)
