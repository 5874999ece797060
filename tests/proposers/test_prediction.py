"""Predicted outputs: OpenAI's ``prediction=``, exact, with its usage counts."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ngramspec
from ngramspec.proposers.prediction import PredictionProposer, prediction_text, prediction_usage

FILE = (
    "def total_price(items, tax_rate):\n"
    "    subtotal = 0\n"
    "    for item in items:\n"
    "        subtotal += item.price * item.quantity\n"
    "    return subtotal * (1 + tax_rate)\n\n\n"
    "def average_price(items):\n"
    "    if not items:\n"
    "        return 0\n"
    "    return sum(item.price for item in items) / len(items)\n"
)
EDIT_PROMPT = ("<|im_start|>user\nRename the parameter tax_rate to rate in this file and return the whole "
               "file:\n" + FILE + "<|im_end|>\n<|im_start|>assistant\n")


# -- the proposer alone, no model ---------------------------------------------
def drive(pred, output, k=4):
    """Proposals made while ``output`` is emitted token by token."""
    p = PredictionProposer(pred)
    p.begin([1, 2, 3])
    seen = []
    for t in output:
        seen.append(p.propose(k).tokens.tolist())
        p.accept([t])
    return seen


def test_follows_the_prediction_and_resumes_after_an_insertion_and_a_deletion():
    pred = list(range(100, 160))
    # 10 tokens as predicted, 3 inserted, then resume at 110; skip 130..139; go on.
    output = pred[:10] + [7, 8, 9] + pred[10:30] + pred[40:50]
    seen = drive(pred, output)
    assert seen[0] == pred[:4] and seen[5] == pred[5:9]
    # Two tokens after the insertion (anchor 2), drafting resumes where they are.
    i = 13 + 2
    assert seen[i] == pred[12:16]
    j = 13 + 20 + 2
    assert seen[j] == pred[42:46]


def test_a_prediction_that_never_matches_offers_nothing():
    assert all(s == [] for s in drive(list(range(100, 130)), list(range(1, 40)))[1:])


def test_sources_are_its_own_buckets_and_grow_with_the_match():
    p = PredictionProposer(list(range(100, 140)))
    p.begin([])
    first = p.propose(4)
    assert all(0 <= s < len(p.source_priors) for s in first.sources)
    p.accept(first.tokens.tolist())
    later = p.propose(4)
    assert later.sources[0] >= first.sources[0] and later.match_length == 4


def _first_source_after(pred, output, k=4):
    """The bucket of the first draft token offered after ``output`` was emitted, and
    the number of buckets in each of the proposer's three sets."""
    p = PredictionProposer(pred)
    p.begin([])
    for t in output:
        p.propose(k)
        p.accept([t])
    return p.propose(k).sources[0], len(p.source_priors) // 3


def test_a_resync_in_order_has_buckets_of_its_own():
    # An edited stretch, then the prediction goes on where it was left (a hunk of a
    # diff ends): the first draft after the resync (two tokens past the edit) takes the
    # third set of buckets, learned apart from a resync that jumps elsewhere.
    pred = list(range(100, 200))
    source, n = _first_source_after(pred, pred[:30] + [7, 8] + pred[33:35])   # 2 tokens for 3
    assert source >= 2 * n
    source, n = _first_source_after(pred, pred[:30] + [7, 8, 9] + pred[30:32])   # 3 inserted
    assert source >= 2 * n
    # ... and only that draft: once it agrees, the continuing set
    source, n = _first_source_after(pred, pred[:30] + [7, 8, 9] + pred[30:33])
    assert n <= source < 2 * n


def test_a_resync_that_jumps_back_takes_the_fresh_buckets():
    # A block repeated in the prediction: after its second copy the output starts the
    # block again (code repeats itself), which resumes nothing in order.
    block = list(range(100, 120))
    pred = block + list(range(200, 230)) + block + list(range(300, 330))
    source, n = _first_source_after(pred, pred[:75] + [7] + block[:2])
    assert source < n


def test_a_far_jump_forward_is_not_a_resumption():
    pred = list(range(100, 300))
    source, n = _first_source_after(pred, pred[:10] + [7] + pred[150:152])   # 140 tokens skipped
    assert source < n


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=0, max_size=40), st.lists(st.integers(0, 6), min_size=1, max_size=40),
       st.integers(1, 8))
def test_every_draft_is_a_slice_of_the_prediction(pred, output, k):
    p = PredictionProposer(pred)
    p.begin([])
    for i, t in enumerate(output):
        d = p.propose(k).tokens.tolist()
        assert len(d) <= k
        if d:
            # a contiguous piece of the prediction, whose preceding tokens end like the output so far
            starts = [j for j in range(len(pred) - len(d) + 1) if pred[j:j + len(d)] == d]
            assert starts
            # After a miss it resumes only where the output's last two tokens occur.
            if not p._continuing and i >= 2 and p._pos >= 2:
                assert pred[p._pos - 2:p._pos] == output[i - 2:i] or p._match > 0
        p.accept([t])


def test_usage_counts_are_openais():
    assert prediction_usage([], [1, 2]) == {"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
    assert prediction_usage([1, 2, 3, 4], [1, 2, 9, 4]) == {"accepted_prediction_tokens": 3,
                                                           "rejected_prediction_tokens": 1}


def _lcs(a: list[int], b: list[int]) -> int:
    row = [0] * (len(b) + 1)
    for x in a:
        prev, row = row, [0]
        for j, y in enumerate(b):
            row.append(prev[j] + 1 if x == y else max(prev[j + 1], row[j]))
    return row[-1]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=40), st.lists(st.integers(0, 4), max_size=40), st.booleans())
def test_usage_counts_a_common_subsequence(predicted, output, greedy):
    """Both ways of aligning (difflib on the part between the common head and tail,
    or the greedy one used when that part is large) count a common subsequence:
    never more than the longest, never less than the common head and tail."""
    import ngramspec.proposers.prediction as pred_mod

    cells = pred_mod._DIFF_CELLS
    pred_mod._DIFF_CELLS = -1 if greedy else cells
    try:
        u = prediction_usage(predicted, output)
    finally:
        pred_mod._DIFF_CELLS = cells
    accepted = u["accepted_prediction_tokens"]
    assert accepted + u["rejected_prediction_tokens"] == len(predicted)
    assert accepted <= _lcs(predicted, output)
    if predicted == output:
        assert accepted == len(predicted)
    head = 0
    while head < min(len(predicted), len(output)) and predicted[head] == output[head]:
        head += 1
    assert accepted >= head


def test_usage_of_a_long_repetitive_prediction_is_counted_greedily():
    # difflib took 29 s on this pair (under the engine's lock): the greedy alignment
    # finds the longest common subsequence here, every "1 2" of the output.
    u = prediction_usage([1, 2] * 10_000, [1, 2, 3] * 166)
    assert u == {"accepted_prediction_tokens": 332, "rejected_prediction_tokens": 20_000 - 332}


@pytest.mark.parametrize("bad, error, field", [
    (3, TypeError, "prediction"), ({"type": "text", "content": "x"}, ValueError, "prediction.type"),
    ({"type": "content"}, ValueError, "prediction.content"),
    ({"type": "content", "content": 5}, TypeError, "prediction.content"),
    ({"type": "content", "content": [{"type": "image_url", "image_url": "x"}]}, ValueError,
     r"prediction.content\[0\].type"),
    ({"type": "content", "content": [{"type": "text", "text": 1}]}, TypeError, r"prediction.content\[0\].text"),
    ({"type": "content", "content": ["x"]}, TypeError, r"prediction.content\[0\]"),
    ({"type": "content", "content": "x", "extra": 1}, ValueError, "unknown field"),
])
def test_bad_predictions_name_the_field(bad, error, field):
    with pytest.raises(error, match=field):
        prediction_text(bad)


def test_parts_are_joined():
    assert prediction_text({"type": "content", "content": [{"type": "text", "text": "a"},
                                                           {"type": "text", "text": "b"}]}) == "ab"


# -- with the model -------------------------------------------------------------
def _plain(llm, prompt, **kw):
    llm.reset()
    out = llm.create_completion(prompt, **kw)
    llm.reset()
    return out


@pytest.mark.parametrize("prediction", [FILE, FILE.replace("tax_rate", "rate"),
                                        "import os\nprint(os.getcwd())\n" * 20, ""])
def test_greedy_output_is_plain_greedy_whatever_the_prediction(llm, invariance, prediction):
    ref = _plain(llm, EDIT_PROMPT, max_tokens=96, temperature=0)
    w = ngramspec.wrap(llm, invariance=invariance)
    out = w.create_completion(EDIT_PROMPT, max_tokens=96, temperature=0,
                              prediction={"type": "content", "content": prediction})
    assert out["choices"] == ref["choices"]
    details = out["usage"]["completion_tokens_details"]
    n_pred = len(llm.tokenize(prediction.encode(), add_bos=False)) if prediction else 0
    assert details["accepted_prediction_tokens"] + details["rejected_prediction_tokens"] == n_pred
    if prediction == FILE.replace("tax_rate", "rate"):
        assert details["accepted_prediction_tokens"] > 0
        assert out["speculative"]["accepted_by_source"].get("prediction", 0) > 0


def test_a_good_prediction_takes_fewer_passes(llm, invariance):
    from ngramspec.drafting.policy import CostAwarePolicy

    ref = _plain(llm, EDIT_PROMPT, max_tokens=96, temperature=0)["choices"][0]["text"]
    # A fixed cost curve (the prior, not learned from timings), so that a busy
    # machine cannot price drafting out and the test checks the drafting itself.
    w = ngramspec.wrap(llm, invariance=invariance, adaptive=CostAwarePolicy(9, learn_cost=False))
    llm.reset()
    without = w.create_completion(EDIT_PROMPT, max_tokens=96, temperature=0)
    llm.reset()
    with_it = w.create_completion(EDIT_PROMPT, max_tokens=96, temperature=0, prediction=ref)
    assert with_it["choices"][0]["text"] == ref
    assert with_it["usage"]["completion_tokens_details"]["rejected_prediction_tokens"] == 0
    assert with_it["speculative"]["forward_passes"] < without["speculative"]["forward_passes"]
    assert with_it["speculative"]["forward_passes"] <= len(llm.tokenize(ref.encode(), add_bos=False)) // 2


def test_sampled_output_is_the_same_with_or_without_a_prediction(llm, invariance):
    w = ngramspec.wrap(llm, invariance=invariance)
    llm.reset()
    a = w.create_completion(EDIT_PROMPT, max_tokens=48, temperature=0.7, seed=7)
    llm.reset()
    b = w.create_completion(EDIT_PROMPT, max_tokens=48, temperature=0.7, seed=7, prediction=FILE)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]


def test_streams_and_chat_carry_the_usage(llm, invariance):
    w = ngramspec.wrap(llm, invariance=invariance)
    llm.reset()
    chunks = list(w.create_completion(EDIT_PROMPT, max_tokens=40, temperature=0, stream=True, prediction=FILE))
    assert "completion_tokens_details" in chunks[-1]["usage"]
    assert all("usage" not in c for c in chunks[:-1])
    messages = [{"role": "user", "content": "Return this file unchanged:\n" + FILE}]
    llm.reset()
    ref = llm.create_chat_completion(messages, temperature=0, max_tokens=40)
    llm.reset()
    out = w.create_chat_completion(messages, temperature=0, max_tokens=40, prediction=FILE)
    assert out["choices"][0]["message"] == ref["choices"][0]["message"]
    assert out["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] >= 0
    llm.reset()
    streamed = list(w.create_chat_completion(messages, temperature=0, max_tokens=40, prediction=FILE, stream=True))
    assert "completion_tokens_details" in streamed[-1]["usage"]
    text = "".join(c["choices"][0]["delta"].get("content", "") or "" for c in streamed)
    assert text == ref["choices"][0]["message"]["content"]
    with pytest.raises(ValueError, match="prediction.type"):
        w.create_chat_completion(messages, prediction={"type": "nope", "content": "x"})


def test_a_prediction_longer_than_the_context_is_fine(llm, invariance):
    w = ngramspec.wrap(llm, invariance=invariance)
    llm.reset()
    out = w.create_completion("Hello", max_tokens=8, temperature=0, prediction=FILE * 200)
    assert out["usage"]["completion_tokens_details"]["rejected_prediction_tokens"] > llm.n_ctx()


def test_engine_generate_takes_a_prediction(engine, llm):
    gen = engine.generate(EDIT_PROMPT, max_tokens=32, prediction=FILE)
    assert gen.prediction_usage is not None and gen.stats.prediction == gen.prediction_usage
    assert np.sum([gen.stats.passes_by_source.get(s, 0) for s in gen.stats.passes_by_source]) == \
        gen.stats.forward_passes
