"""DraftModelProposer on real models: SmolLM2-135M drafting for itself.

Every reference is plain llama-cpp-python greedy decoding from a cold cache
(``reset()``), so that the draft's proposals are checked against what the draft
model itself would generate after the same text."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp")

from ngramspec import _llama, models  # noqa: E402
from ngramspec.proposers.base import CostlyProposer, Proposer  # noqa: E402
from ngramspec.proposers.draft_model import DRAFT_STREAM, DraftModelProposer  # noqa: E402
from ngramspec.proposers.draft_model_loading import check_compatible, load_draft_model, memory_report  # noqa: E402
from ngramspec.sampling import (  # noqa: E402
    SamplingParams,
    position_uniform,
    sample,
    target_distribution,
    verify_draft,
    verify_token,
)
from tests.support.loaders import N_CTX, load_llama  # noqa: E402

PROMPTS = [b"def fibonacci(n):\n", b"The capital of France is"]


@pytest.fixture(scope="module")
def target(smollm2_path):
    m = load_llama(smollm2_path)
    yield m
    m.close()


@pytest.fixture(scope="module")
def draft(smollm2_path):
    m = load_llama(smollm2_path)
    yield m
    m.close()


@pytest.fixture(scope="module")
def ref(smollm2_path):
    """A third Llama on the same file: plain greedy decoding from a cold cache."""
    m = load_llama(smollm2_path)
    yield m
    m.close()


@pytest.fixture()
def proposer(draft, target):
    draft.reset()
    return DraftModelProposer(draft, target)


def plain_greedy(ref, tokens, k):
    """llama-cpp-python's own greedy tokens after ``tokens``, cold cache; stops
    after (and including) an end-of-generation token, as a greedy draft does."""
    ref.reset()
    out = []
    for tok in ref.generate(list(tokens), temp=0.0):
        out.append(int(tok))
        if len(out) == k or llama_cpp.llama_vocab_is_eog(ref._model.vocab, tok):
            break
    ref.reset()
    return out


def fresh_logits(ref, tokens):
    ref.reset()
    ref.eval(list(tokens))
    row = np.array(_llama.last_logits(ref), dtype=np.float32)
    ref.reset()
    return row


def tok(llm, text: bytes):
    return llm.tokenize(text, add_bos=True)


def assert_cache_coherent(prop):
    """The draft Llama's bookkeeping holds the text (plus drafted tokens after it)."""
    llm, text = prop.draft, prop.text
    held = llm.input_ids[: llm.n_tokens].tolist()
    n = min(len(held), len(text))
    assert held[:n] == text[:n]


# -- greedy proposals ---------------------------------------------------------------
def test_is_a_proposer(proposer):
    assert isinstance(proposer, Proposer)
    assert proposer.name == "draft_model"
    assert len(proposer.source_priors) == 8


@pytest.mark.parametrize("text", PROMPTS)
def test_greedy_proposal_equals_plain_greedy(proposer, ref, target, text):
    prompt = tok(target, text)
    proposer.begin(prompt)
    assert proposer.draft.n_tokens == len(prompt)  # prefilled in begin
    got = proposer.propose(8)
    assert got.draft_probs is None
    assert got.tokens.dtype == np.int32
    assert got.tokens.tolist() == plain_greedy(ref, prompt, 8)
    assert got.sources == list(range(len(got)))
    assert_cache_coherent(proposer)
    assert proposer.seconds_per_token > 0 and proposer.decode_seconds > 0


def test_rollback_after_divergent_token(proposer, ref, target):
    """accept() with a token the draft did not propose: the next proposal continues
    from the true text (compared with a cold plain greedy decode of that text)."""
    prompt = tok(target, PROMPTS[0])
    proposer.begin(prompt)
    first = proposer.propose(6).tokens.tolist()
    divergent = next(t for t in (13, 28, 11, 30) if t != first[2])
    proposer.accept(first[:2] + [divergent])
    assert proposer.draft.n_tokens == len(prompt) + 5  # nothing decoded until the next propose
    again = proposer.propose(6).tokens.tolist()
    true_text = prompt + first[:2] + [divergent]
    assert again == plain_greedy(ref, true_text, 6)
    assert proposer.draft.input_ids[: len(true_text)].tolist() == true_text
    assert_cache_coherent(proposer)


def test_follows_a_text_it_did_not_write(proposer, ref, target):
    """Several rounds against a fixed 'true' continuation: accept the longest agreeing
    prefix and the true token after it (a target's verify step), every proposal
    equal to cold plain greedy after the text so far."""
    prompt = tok(target, b"Write a haiku about the sea:\n")
    truth = target.tokenize(b"Waves fold into foam, the tide keeps its old promise, gulls argue with wind.",
                            add_bos=False)
    proposer.begin(prompt)
    done, rounds, rejections = 0, 0, 0
    while done < len(truth) - 1 and rounds < 6:
        got = proposer.propose(4).tokens.tolist()
        assert got == plain_greedy(ref, prompt + truth[:done], 4)
        assert_cache_coherent(proposer)
        m = 0
        while m < len(got) and done + m < len(truth) and got[m] == truth[done + m]:
            m += 1
        rejections += m < len(got)
        step = truth[done: done + m + 1]
        proposer.accept(step)
        done += len(step)
        rounds += 1
    assert rejections > 0


def test_all_accepted_plus_bonus(proposer, ref, target):
    prompt = tok(target, PROMPTS[1])
    proposer.begin(prompt)
    first = proposer.propose(3).tokens.tolist()
    bonus = plain_greedy(ref, prompt + first, 1)[0]
    proposer.accept(first + [bonus])
    assert proposer.propose(4).tokens.tolist() == plain_greedy(ref, prompt + first + [bonus], 4)


def test_accept_inside_draft_then_propose(proposer, ref, target):
    """The text ends on a drafted token whose logits were never kept: the last token
    is decoded again, as Llama.generate does for a fully cached prompt."""
    prompt = tok(target, PROMPTS[0])
    proposer.begin(prompt)
    first = proposer.propose(5).tokens.tolist()
    proposer.accept(first[:2])
    assert proposer.propose(3).tokens.tolist() == plain_greedy(ref, prompt + first[:2], 3)


def test_propose_twice_without_accept(proposer, target):
    proposer.begin(tok(target, PROMPTS[0]))
    a = proposer.propose(5).tokens.tolist()
    b = proposer.propose(5).tokens.tolist()
    c = proposer.propose(2).tokens.tolist()
    assert a == b and c == a[:2]


def test_prefix_reuse_and_lazy_prefill(draft, target, ref, monkeypatch):
    draft.reset()
    prompt = tok(target, PROMPTS[0])
    lazy = DraftModelProposer(draft, target, lazy_prefill=True)
    lazy.begin(prompt)
    assert draft.n_tokens == 0  # nothing decoded yet
    want = plain_greedy(ref, prompt, 5)
    assert lazy.propose(5).tokens.tolist() == want
    # A second generation on the same prompt reuses the draft's cached prefix: no decode.
    eager = DraftModelProposer(draft, target)
    decoded = []
    real_decode = eager._decode

    def counting_decode(tokens):
        decoded.append(len(tokens))
        return real_decode(tokens)

    monkeypatch.setattr(eager, "_decode", counting_decode)
    eager.begin(prompt)
    assert decoded == [] and draft.input_ids[: len(prompt)].tolist() == prompt
    assert eager.propose(5).tokens.tolist() == want
    assert decoded == [1, 1, 1, 1, 1]  # the prompt's last token again (for its logits), then 4 drafts
    # A longer prompt sharing that prefix.
    longer = prompt + want[:3]
    eager.begin(longer)
    assert eager.propose(3).tokens.tolist() == plain_greedy(ref, longer, 3)


def test_greedy_draft_stops_after_end_of_generation(proposer, target):
    prompt = tok(target, PROMPTS[0])
    proposer.begin(prompt)
    full = proposer.propose(6).tokens.tolist()
    proposer._is_eog[full[2]] = True  # pretend the third draft token ends generation
    proposer.begin(prompt)
    assert proposer.propose(6).tokens.tolist() == full[:3]


def test_source_buckets_by_position(draft, target):
    draft.reset()
    prop = DraftModelProposer(draft, target, n_buckets=3, prior=0.6)
    assert list(prop.source_priors) == [0.6] * 3
    prop.begin(tok(target, PROMPTS[0]))
    assert prop.propose(6).sources == [0, 1, 2, 2, 2, 2]       # its own buckets; the Drafter places them


def test_proposal_stops_at_the_context_end(smollm2_path):
    small_target, small = load_llama(smollm2_path, n_ctx=64), load_llama(smollm2_path, n_ctx=64)
    try:
        prop = DraftModelProposer(small, small_target)
        n_ctx = small.n_ctx()  # llama.cpp rounds 64 up; the draft decodes up to its real n_ctx
        prop.begin([1] + [28] * (n_ctx - 5))  # 4 positions left
        assert len(prop.propose(8)) == 4
        assert small.n_tokens == n_ctx - 1  # the last draft token is never decoded
        prop.accept([28] * 4)
        assert len(prop.propose(8)) == 0
    finally:
        small.close()
        small_target.close()


# -- sampled proposals -----------------------------------------------------------------
def test_sampled_proposal_keeps_q(proposer, ref, target):
    params = SamplingParams(temperature=0.9, seed=7)
    prompt = tok(target, PROMPTS[1])
    proposer.sampling = params
    proposer.begin(prompt)
    got = proposer.propose(4)
    assert len(got) == 4 and len(got.draft_probs) == 4
    text = list(prompt)
    for t, (ids, probs) in zip(got.tokens.tolist(), got.draft_probs):
        want_ids, want_probs = target_distribution(fresh_logits(ref, text), params, text[len(prompt):])
        assert ids.tolist() == want_ids.tolist()
        np.testing.assert_allclose(probs, want_probs, rtol=1e-12)
        assert t == sample(ids, probs, position_uniform(7, len(text), stream=DRAFT_STREAM))
        assert probs[ids.tolist().index(t)] > 0
        text.append(t)
    # Fixed by (seed, position): the same text gives the same draft.
    assert proposer.propose(4).tokens.tolist() == got.tokens.tolist()
    # Greedy drafts under a sampled generation: one-hot q.
    proposer.sample_draft = False
    assert proposer.propose(3).draft_probs is None


def test_sampled_penalty_history_is_the_generated_tokens(proposer, ref, target):
    params = SamplingParams(temperature=0.7, repeat_penalty=1.3, presence_penalty=0.5, seed=3)
    prompt = tok(target, PROMPTS[0])
    proposer.sampling = params
    proposer.begin(prompt)
    emitted = target.tokenize(b"    if n", add_bos=False)
    proposer.accept(emitted)
    got = proposer.propose(2)
    ids, probs = target_distribution(fresh_logits(ref, prompt + emitted), params, emitted)
    assert got.draft_probs[0][0].tolist() == ids.tolist()
    np.testing.assert_allclose(got.draft_probs[0][1], probs, rtol=1e-12)


# -- verify_token: modified rejection sampling with a real q -------------------------------
def _dense(ids, probs, n):
    out = np.zeros(n)
    out[ids] = probs
    return out


def _random_sparse(rng, n, size) -> tuple[np.ndarray, np.ndarray]:
    ids = np.sort(rng.choice(n, size=size, replace=False))
    probs = rng.dirichlet(np.ones(size))
    return ids, probs


def test_verify_token_matches_verify_draft():
    rng = np.random.default_rng(0)
    n = 12
    for _trial in range(300):
        p = _random_sparse(rng, n, int(rng.integers(1, n + 1)))
        q = _random_sparse(rng, n, int(rng.integers(1, n + 1)))
        d = int(rng.choice(q[0], p=q[1]))
        seed, pos = int(rng.integers(1 << 40)), int(rng.integers(1000))
        pd, qd = _dense(*p, n), _dense(*q, n)
        m, nxt = verify_draft([pd, pd], [qd], [d], seed, pos)
        ok, got = verify_token(p, q, d, seed, pos)
        assert ok == (m == 1)
        if not ok:
            assert got == nxt
        else:
            assert got == d


def test_verify_token_keeps_the_target_distribution():
    """Draft d ~ q with stream 2, verify with streams 1 and 0: the emitted token is
    distributed as p (chi-square over many seeds), and the acceptance rate is
    sum(min(p, q))."""
    n = 6
    p = (np.arange(n), np.array([0.4, 0.25, 0.15, 0.1, 0.07, 0.03]))
    q = (np.array([0, 1, 2, 5]), np.array([0.2, 0.5, 0.2, 0.1]))
    trials = 20000
    counts = np.zeros(n)
    accepted = 0
    for s in range(trials):
        d = sample(q[0], q[1], position_uniform(s, 40, stream=DRAFT_STREAM))
        ok, t = verify_token(p, q, d, s, 40)
        accepted += ok
        counts[t] += 1
    expected = p[1] * trials
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 20.5, (chi2, counts)  # 5 degrees of freedom, p ~ 0.001
    overlap = np.minimum(p[1], _dense(*q, n)).sum()
    assert abs(accepted / trials - overlap) < 0.015


def test_verify_token_refuses_a_token_outside_q():
    with pytest.raises(ValueError, match="zero probability"):
        verify_token((np.array([0, 1]), np.array([0.5, 0.5])), (np.array([0]), np.array([1.0])), 1, 0, 0)


# -- construction and bad input -----------------------------------------------------------
def test_not_a_llama(target, draft):
    with pytest.raises(TypeError, match="draft_llm must be a llama_cpp.Llama"):
        DraftModelProposer(object(), target)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="target_llm must be a llama_cpp.Llama"):
        DraftModelProposer(draft, "model.gguf")  # type: ignore[arg-type]


def test_same_llama_refused(target):
    with pytest.raises(ValueError, match="separate Llama"):
        DraftModelProposer(target, target)


def test_closed_llama(smollm2_path, target):
    closed = load_llama(smollm2_path, n_ctx=64)
    closed.close()
    with pytest.raises(ValueError, match="draft_llm has been closed"):
        DraftModelProposer(closed, target)


def test_closed_after_construction(smollm2_path, target):
    d = load_llama(smollm2_path)
    prop = DraftModelProposer(d, target)
    prop.begin(tok(target, PROMPTS[0]))
    d.close()
    with pytest.raises(ValueError, match="the draft model's Llama has been closed"):   # said only "this Llama"
        prop.propose(2)
    with pytest.raises(ValueError, match="the draft model's Llama has been closed"):
        prop.begin(tok(target, PROMPTS[0]))


def test_bad_k_and_order(proposer, target):
    with pytest.raises(RuntimeError, match="begin"):
        proposer.propose(2)
    with pytest.raises(RuntimeError, match="begin"):
        proposer.accept([1])
    proposer.begin(tok(target, PROMPTS[0]))
    with pytest.raises(ValueError, match="k must be >= 0"):
        proposer.propose(-1)
    with pytest.raises(TypeError, match="k must be an int"):
        proposer.propose(2.5)
    with pytest.raises(TypeError, match="k must be an int"):
        proposer.propose(True)
    empty = proposer.propose(0)
    assert len(empty) == 0 and empty.sources == []


def test_bad_prompts(proposer):
    with pytest.raises(ValueError, match="empty"):
        proposer.begin([])
    with pytest.raises(ValueError, match=r"\[0, 49152\)"):
        proposer.begin([1, 49152])
    with pytest.raises(ValueError, match="does not fit"):
        proposer.begin([1] * N_CTX)


def test_bad_options(draft, target):
    with pytest.raises(ValueError, match="n_buckets"):
        DraftModelProposer(draft, target, n_buckets=0)
    with pytest.raises(ValueError, match="prior"):
        DraftModelProposer(draft, target, prior=1.5)


def test_draft_context_shorter_than_target(smollm2_path, target):
    short = load_llama(smollm2_path, n_ctx=256)
    try:
        with pytest.raises(ValueError, match=r"draft model's context \(256 tokens\).*target's \(512\)"):
            DraftModelProposer(short, target)
    finally:
        short.close()


def test_special_tokens_differ(draft, target, monkeypatch):
    monkeypatch.setattr(draft._model, "token_eos", lambda: 7)
    eos = target.token_eos()
    with pytest.raises(ValueError, match=rf"EOS 7 \(draft\) vs {eos} \(target\)"):
        check_compatible(draft, target)


def test_vocabulary_mismatch_names_both_sizes(target):
    try:
        qwen_path = models.fetch("qwen2.5-coder-0.5b")
    except models.ModelFetchError as e:  # pragma: no cover - offline machine without the model cached
        pytest.skip(f"Qwen2.5-Coder-0.5B not available: {e}")
    qwen = load_llama(str(qwen_path))
    try:
        with pytest.raises(ValueError, match=r"151936 tokens and the target's has 49152"):
            DraftModelProposer(qwen, target)
        with pytest.raises(ValueError, match=r"49152 tokens and the target's has 151936"):
            DraftModelProposer(target, qwen)
    finally:
        qwen.close()


# -- cost and memory ------------------------------------------------------------------------
def test_expected_seconds(draft, target, ref):
    draft.reset()
    prop = DraftModelProposer(draft, target, lazy_prefill=True)
    assert prop.expected_seconds(4) is None and prop.size_ratio == pytest.approx(1.0)
    prompt = tok(target, PROMPTS[0])
    prop.begin(prompt)
    first = prop.propose(4).tokens.tolist()  # the lazy prefill is timed apart
    assert prop.catchup_seconds > 0 and prop.batch_token_seconds is not None and prop.batch_token_seconds > 0
    four, eight = prop.expected_seconds(4), prop.expected_seconds(8)
    assert four is not None and four > 0 and prop.expected_seconds(0) == 0.0
    assert eight is not None and eight > four
    prop.accept(first + plain_greedy(ref, prompt + first, 20))  # 21 tokens to catch up
    one, per = prop.decode_seconds, prop.batch_token_seconds
    assert one is not None and per is not None
    assert prop.expected_seconds(4) == pytest.approx(max(one, 21 * per) + 3 * one)


def test_memory_report(draft, target, smollm2_path):
    import os

    rep = memory_report(draft, target)
    size = os.path.getsize(smollm2_path)
    assert 0.8 * size < rep["draft_weights_bytes"] <= size
    # 30 layers x 3 kv heads x 64 dims x (K + V) x f16 x 512 positions
    assert rep["draft_kv_bytes"] == 512 * 30 * 3 * 64 * 2 * 2
    assert rep["draft_total_bytes"] == rep["draft_weights_bytes"] + rep["draft_kv_bytes"]


def test_load_draft_model(smollm2_path, target):
    d = load_draft_model(smollm2_path, target)
    try:
        assert d.n_ctx() >= target.n_ctx() and d.n_batch == target.n_batch
        DraftModelProposer(d, target)
    finally:
        d.close()
    with pytest.raises(ValueError, match="neither a file nor a known model name"):
        load_draft_model("no-such-model", target)
    with pytest.raises(TypeError):
        load_draft_model(3, target)  # type: ignore[arg-type]  # the wrong type is the point


# -- CostlyGate: when the draft model is worth calling ------------------------------------
class _FakeCost:
    def __init__(self, single=float("nan"), slope=0.4, n=10):
        self.single_seconds = single
        self.costs = [1.0 + slope * (b - 1) for b in range(n + 1)]


class _PolicyStub:
    """The Policy protocol's methods, doing nothing, and no prices (an eager policy)."""

    def declare_sources(self, base, priors, *, keep=False) -> None: ...
    def new_generation(self) -> None: ...
    def choose_proposal(self, proposals, allowed) -> tuple[int, int]: return 0, 0
    def observe(self, batch, seconds, sources, accepted) -> None: ...
    def defer(self, start, tokens, sources) -> None: ...
    def settle(self, output) -> None: ...
    def pricing(self): return None


class _FakePolicy(_PolicyStub):
    """Prices: a linear cost curve and an acceptance per source (the gate reads these only)."""

    score: Callable[..., float]   # the scorer of the other proposals (plain decoding: 1)

    def __init__(self, acceptance, single=float("nan")):
        self.acceptance = list(acceptance)
        self.cost = _FakeCost(single)
        self.score = lambda sources, allowed: 1.0

    def pricing(self):
        return self

    @property
    def costs(self):
        return self.cost.costs

    @property
    def single_seconds(self):
        return self.cost.single_seconds

    def acceptance_of(self, source):
        return self.acceptance[source]


class _FakeDraft(CostlyProposer):
    """A costly proposer's pricing side: its buckets are draft positions (0, 1, 2, 2, ...)."""

    def __init__(self, size_ratio=0.1, seconds_per_token=None, n_buckets=3):
        self.size_ratio, self.spt, self.n_buckets = size_ratio, seconds_per_token, n_buckets

    def planned_sources(self, k):
        return [min(i, self.n_buckets - 1) for i in range(k)]

    def expected_seconds(self, k):
        return None if self.spt is None else k * self.spt


def test_gate_calls_a_cheap_accurate_draft():
    from ngramspec.drafting.cost_gate import CostlyGate

    allowed = np.ones(10, dtype=bool)
    policy = _FakePolicy([0.9, 0.9, 0.9])
    gate = CostlyGate()
    # Priced by size before timings: 1 + sum 0.9^i over 1 + 0.4 j + 0.1 j peaks at j = 3.
    assert gate.plan(_FakeDraft(size_ratio=0.1), policy, allowed, 8) == 3
    assert gate.plan(_FakeDraft(size_ratio=0.01), _FakePolicy([.99, .99, .99]), allowed, 8) == 8
    # Timed: a draft token costs a fifth of a target token -> 2 tokens pay best;
    # at half a target token nothing pays.
    policy.cost.single_seconds = 0.01
    assert gate.plan(_FakeDraft(seconds_per_token=0.002), policy, allowed, 8) == 2
    assert gate.plan(_FakeDraft(seconds_per_token=0.005), policy, allowed, 8) == 0
    # A better alternative this pass (e.g. a long copy) -> refused.
    assert gate.plan(_FakeDraft(seconds_per_token=0.002), policy, allowed, 8, 3.0) == 0
    from ngramspec.proposers.base import Proposal

    copy = Proposal(np.arange(6, dtype=np.int32), [0] * 6, "copy")
    policy.score = lambda sources, allowed: 3.0  # the policy scores the copy at 3
    assert gate.plan(_FakeDraft(seconds_per_token=0.002), policy, allowed, 8, [copy, Proposal.none()]) == 0
    policy.score = lambda sources, allowed: 1.0
    assert gate.plan(_FakeDraft(seconds_per_token=0.002), policy, allowed, 8, [copy]) == 2  # a copy as good as plain
    # Only allowed batch sizes: verify at most 3 tokens (batch 4).
    allowed[5:] = False
    assert gate.plan(_FakeDraft(size_ratio=0.01), policy, allowed, 8) <= 3


def test_gate_prices_with_the_cost_aware_policys_public_api():
    from ngramspec.drafting.cost_gate import CostlyGate
    from ngramspec.drafting.policy import CostAwarePolicy
    from ngramspec.proposers.base import Proposal

    policy = CostAwarePolicy(8, learn_cost=False)
    allowed = np.ones(len(policy.cost.costs), dtype=bool)
    base = len(policy.acceptance)  # a draft model's sources, after the n-gram and copy ones
    policy.declare_sources(base, [0.9, 0.9, 0.9])
    assert policy.acceptance_of(base) == 0.9 and policy.acceptance_of(0) == policy.acceptance[0]
    assert policy.score([base, base + 1], allowed) == policy._best([base, base + 1], allowed)[1] > 1.0
    assert policy.score([], allowed) == 1.0  # plain decoding
    draft = _FakeDraft(size_ratio=0.1)
    assert CostlyGate().plan(draft, policy, allowed, 6, base=base) > 0  # pays against plain decoding
    # A free proposal from sources as good as the draft's always scores higher -> refused.
    copy = Proposal(np.arange(6, dtype=np.int32), [base] * 6, "copy")
    assert CostlyGate().plan(draft, policy, allowed, 6, [copy], base=base) == 0


def test_gate_probes_a_refused_draft_once_per_interval():
    from ngramspec.drafting.cost_gate import CostlyGate

    allowed = np.ones(10, dtype=bool)
    policy = _FakePolicy([0.9, 0.9, 0.9])
    gate = CostlyGate(probe_interval=32, probe_tokens=4)
    # Cheap, but refused: the other proposers offer more this pass -> one probe per interval.
    cheap = _FakeDraft(size_ratio=0.01)
    calls = [gate.plan(cheap, policy, allowed, 8, 50.0) for _ in range(100)]
    assert [i for i, n in enumerate(calls) if n] == [31, 63, 95]
    assert set(calls) == {0, 4} and gate.probes == 3 and gate.refusals == 100


def test_gate_probes_only_within_its_budget_of_decode_time():
    from ngramspec.drafting.cost_gate import CATCHUP_SHARE, PROBE_BUDGET, CostlyGate

    allowed = np.ones(10, dtype=bool)
    policy = _FakePolicy([0.9, 0.9, 0.9])
    # As costly as the target: a 4-token probe costs 4 target tokens, so it waits
    # until the refused passes since the last call are worth 4 / PROBE_BUDGET of them.
    gate = CostlyGate(probe_interval=32, probe_tokens=4)
    as_big = _FakeDraft(size_ratio=1.0)
    calls = [gate.plan(as_big, policy, allowed, 8) for _ in range(200)]
    wait = int(np.ceil(4 / PROBE_BUDGET))
    assert [i for i, n in enumerate(calls) if n] == [wait - 1, 2 * wait - 1]
    # A draft model that has not seen the prompt yet pays its catch-up in the probe.
    behind = _FakeDraft(size_ratio=0.1)
    behind.pending_tokens = lambda: 1000  # type: ignore[method-assign]
    gate = CostlyGate(probe_interval=32, probe_tokens=4)
    calls = [gate.plan(behind, policy, allowed, 8, 50.0) for _ in range(1000)]
    first = [i for i, n in enumerate(calls) if n][0]
    assert first + 1 == int(np.ceil(0.1 * (4 + CATCHUP_SHARE * 1000) / PROBE_BUDGET))
    # Timed: its measured seconds (catch-up included) price the probe.
    policy.cost.single_seconds = 0.01
    timed = _FakeDraft(seconds_per_token=0.01)   # a probe of 4 tokens = 4 target tokens
    gate = CostlyGate(probe_interval=32, probe_tokens=4)
    calls = [gate.plan(timed, policy, allowed, 8, 50.0) for _ in range(100)]
    assert [i for i, n in enumerate(calls) if n] == [wait - 1]
    # Across short generations: a probe must also fit this generation's budget, so
    # 40-pass generations never carry the 4-token probe of a draft as dear as the target...
    gate = CostlyGate(probe_interval=32, probe_tokens=4)
    calls = []
    for _ in range(5):
        gate.new_generation()
        calls += [gate.plan(as_big, policy, allowed, 8) for _ in range(40)]
    assert not any(calls) and gate.refused == 200
    # ... while a cheap one is still probed once per interval.
    gate = CostlyGate(probe_interval=32, probe_tokens=4)
    calls = []
    for _ in range(3):
        gate.new_generation()
        calls += [gate.plan(_FakeDraft(size_ratio=0.01), policy, allowed, 8, 50.0) for _ in range(40)]
    assert [i for i, n in enumerate(calls) if n] == [31, 63, 95]
    with pytest.raises(ValueError):
        CostlyGate(probe_budget=0)


def test_gate_without_a_cost_model_always_calls():
    from ngramspec.drafting.cost_gate import CostlyGate

    class Eager(_PolicyStub):
        pass

    assert CostlyGate().plan(_FakeDraft(size_ratio=1.0), Eager(), np.ones(10, dtype=bool), 5) == 5
    assert CostlyGate().plan(_FakeDraft(), Eager(), np.ones(10, dtype=bool), 0) == 0
    with pytest.raises(ValueError):
        CostlyGate(probe_interval=0)


def test_planned_sources_match_the_proposal(proposer, target):
    proposer.begin(tok(target, PROMPTS[0]))
    assert proposer.planned_sources(10) == proposer.propose(10).sources


def test_draft_temperature(proposer, ref, target):
    params = SamplingParams(temperature=0.8, seed=11)
    prompt = tok(target, PROMPTS[1])
    proposer.sampling, proposer.draft_temperature = params, 1.7
    proposer.begin(prompt)
    got = proposer.propose(1)
    ids, probs = target_distribution(fresh_logits(ref, prompt), SamplingParams(temperature=1.7, seed=11), [])
    np.testing.assert_allclose(got.draft_probs[0][1], probs, rtol=1e-12)
    with pytest.raises(ValueError, match="draft_temperature"):
        DraftModelProposer(proposer.draft, target, draft_temperature=0)


def test_as_draft_proposer(draft, target, smollm2_path):
    from ngramspec.proposers.draft_model import as_draft_proposer

    prop = as_draft_proposer(draft, target, sample_draft=False)
    assert isinstance(prop, DraftModelProposer) and prop.draft is draft and not prop.sample_draft
    assert as_draft_proposer(prop, target) is prop
    with pytest.raises(ValueError, match="another target"):
        as_draft_proposer(prop, draft)
    with pytest.raises(TypeError, match="draft_model must be"):
        as_draft_proposer(3, target)
    loaded = as_draft_proposer(smollm2_path, target)
    assert loaded.draft is not target and loaded.draft.n_ctx() >= target.n_ctx()
    loaded.draft.close()
    prop.set_sampling(SamplingParams(seed=1))
    assert prop.sampling is not None and prop.sampling.seed == 1
    with pytest.raises(TypeError):
        prop.set_sampling({"temperature": 1})  # type: ignore[arg-type]  # the wrong type is the point
