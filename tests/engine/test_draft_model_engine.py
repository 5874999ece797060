"""SpeculativeEngine / wrap with a draft model, on SmolLM2-135M drafting
for itself (a second Llama on the same file).

Greedy: the output is token-for-token plain greedy decoding of the target, from
the same (cold) cache state. Sampled: the tokens decided by modified rejection
sampling with the draft's real q follow the target's own distribution (chi-square),
with drafts verified and rejected along the way."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

import ngramspec  # noqa: E402
from ngramspec import SpeculativeEngine, _llama  # noqa: E402
from ngramspec.proposers.draft_model import DraftModelProposer  # noqa: E402
from ngramspec.sampling import SamplingParams, target_distribution  # noqa: E402
from tests.support.loaders import load_llama  # noqa: E402

PROMPTS = ["def fibonacci(n):\n", "The three primary colors are", "import numpy as np\n\ndef mean(xs):\n"]


@pytest.fixture(scope="module")
def target(smollm2_path):
    m = load_llama(smollm2_path)
    yield m
    m.close()


@pytest.fixture(scope="module")
def invariance(target):
    """Measured on this module's target (verify batches up to max_draft + 1 = 9)."""
    from ngramspec import check_batch_invariance

    return check_batch_invariance(target, max_batch=9)


@pytest.fixture(scope="module")
def draft(smollm2_path):
    m = load_llama(smollm2_path)
    yield m
    m.close()


def _plain_text(llm, prompt, max_tokens):
    llm.reset()
    out = llm.create_completion(prompt, max_tokens=max_tokens, temperature=0)["choices"][0]["text"]
    llm.reset()
    return out


@pytest.mark.parametrize("adaptive", [False, True])
def test_greedy_identity_with_draft_model(target, draft, invariance, adaptive):
    engine = SpeculativeEngine(target, draft_model=draft, adaptive=adaptive, invariance=invariance)
    drafted = accepted = 0
    for prompt in PROMPTS:
        want = _plain_text(target, prompt, 40)
        target.reset()
        gen = engine.generate(prompt, max_tokens=40)
        assert gen.text == want, prompt
        drafted += gen.stats.drafted_by_source.get("draft_model", 0)
        accepted += gen.stats.accepted_by_source.get("draft_model", 0)
    if not adaptive:  # eager: the draft model rests on the whole text, so it is always verified
        assert drafted >= 60 and accepted >= 0.9 * drafted, (drafted, accepted)


def test_wrap_with_draft_model_is_plain_greedy(target, draft, invariance):
    spec = ngramspec.wrap(target, draft_model=draft, adaptive=False, invariance=invariance)
    for prompt in PROMPTS[:2]:
        want = _plain_text(target, prompt, 32)
        target.reset()
        out = spec.create_completion(prompt, max_tokens=32, temperature=0)
        assert out["choices"][0]["text"] == want
    # The draft Llama's bookkeeping stays true to its cache: it still decodes plainly.
    assert _plain_text(draft, PROMPTS[0], 8) == _plain_text(target, PROMPTS[0], 8)


@pytest.mark.parametrize("between", ["plain call on the draft", "another engine drafting with it"])
def test_a_draft_used_elsewhere_during_a_paused_stream_is_matched_again(target, draft, invariance, smollm2_path,
                                                                         between):
    # The proposer decoded after a cache that was no longer what it recorded: llama_decode
    # failed (another engine had moved it on), or drafts came from the other text.
    prompt = "The history of the printing press begins with movable type. " * 8
    want = _plain_text(target, prompt, 40)
    engine = SpeculativeEngine(target, draft_model=draft, adaptive=False, invariance=invariance)
    run = engine.stream(prompt, max_tokens=40)
    next(run)
    next(run)
    other = "def fibonacci(n):\n"   # shorter than the stream's text: decoding after it failed
    if between == "plain call on the draft":
        draft.create_completion(other, max_tokens=4, temperature=0)
    else:
        second = load_llama(smollm2_path)
        try:
            SpeculativeEngine(second, draft_model=draft, adaptive=False, invariance=invariance).generate(
                other, max_tokens=8)
        finally:
            second.close()
    for _ in run:
        pass
    assert run.result is not None
    assert target.detokenize(run.result.tokens).decode() == want
    stats = run.result.stats
    # SmolLM2 drafting for itself from the right text is right every time; from the
    # other text it was not (50 of 66 in the review's run).
    assert stats.drafted_tokens > 0 and stats.accepted_tokens == stats.drafted_tokens


def test_engine_rejects_an_incompatible_draft(target, smollm2_path):
    short = load_llama(smollm2_path, n_ctx=256)
    try:
        with pytest.raises(ValueError, match="context"):
            SpeculativeEngine(target, draft_model=short)
    finally:
        short.close()
    with pytest.raises(ValueError, match="separate Llama"):
        SpeculativeEngine(target, draft_model=target)
    with pytest.raises(TypeError, match="draft_model must be"):
        SpeculativeEngine(target, draft_model=42)


def test_sampled_with_a_real_q_keeps_the_target_distribution(target, draft, invariance):
    """The second generated token is the first one decided by verifying a sampled
    draft (the first comes from the prefill logits). Its distribution over many
    seeds must be the target's: sum over t1 of p(t1) p(t2 | t1). The draft samples
    at another temperature, so q != p and rejections (residual draws) happen."""
    params: dict[str, Any] = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
    prompt = "Once upon a time, there was a"
    tokens = target.tokenize(prompt.encode(), add_bos=True)
    # The exact distribution of the second token, from one-token decodes.
    target.reset()
    target.eval(tokens)
    p1_ids, p1 = target_distribution(_llama.last_logits(target), SamplingParams(seed=0, **params))
    expected: dict[int, float] = {}
    for t1, w in zip(p1_ids.tolist(), p1.tolist()):
        target.n_tokens = len(tokens)
        target.eval([t1])
        ids, probs = target_distribution(_llama.last_logits(target), SamplingParams(seed=0, **params), [t1])
        for t2, v in zip(ids.tolist(), probs.tolist()):
            expected[t2] = expected.get(t2, 0.0) + w * v
    target.reset()

    proposer = DraftModelProposer(draft, target, draft_temperature=1.6)
    engine = SpeculativeEngine(target, draft_model=proposer, adaptive=False, invariance=invariance, max_draft=2)
    n = 160
    counts: dict[int, int] = {}
    drafted = accepted = 0
    for seed in range(n):
        gen = engine.generate(tokens, max_tokens=3, sampling=SamplingParams(seed=seed, **params))
        assert len(gen.tokens) >= 2
        counts[gen.tokens[1]] = counts.get(gen.tokens[1], 0) + 1
        drafted += gen.stats.drafted_by_source.get("draft_model", 0)
        accepted += gen.stats.accepted_by_source.get("draft_model", 0)
    assert drafted >= n  # every generation verified a draft-model draft
    assert 0 < accepted < drafted  # with acceptances and rejections
    # Chi-square over the likely tokens, the rest pooled.
    likely = [t for t, v in expected.items() if v * n >= 5]
    obs = [counts.get(t, 0) for t in likely] + [n - sum(counts.get(t, 0) for t in likely)]
    exp = [expected[t] * n for t in likely] + [n - sum(expected[t] * n for t in likely)]
    cells = [(o, e) for o, e in zip(obs, exp) if e > 0]
    chi2 = sum((o - e) ** 2 / e for o, e in cells)
    dof = len(cells) - 1
    # 99.9th percentile of chi-square, Wilson-Hilferty approximation.
    limit = dof * (1 - 2 / (9 * dof) + 3.09 * np.sqrt(2 / (9 * dof))) ** 3 if dof else 0.0
    assert chi2 < limit, (chi2, dof, obs, exp)
