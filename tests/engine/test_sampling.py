"""Exact speculative sampling: distributions, the one-hot case, seed reproducibility.

Chi-square tests use fixed seeds (deterministic, not flaky) and the critical value
at significance 0.001 for the degrees of freedom used."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ngramspec import SpeculativeEngine
from ngramspec.sampling import SamplingParams, position_uniform, sample, target_distribution, verify_draft
from tests.support.prompts import PROMPTS

CHI2_CRIT_DF4_P001 = 18.467


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    return float(np.sum((counts - expected) ** 2 / expected))


def test_position_uniform_is_fixed_by_seed_and_position():
    u = [position_uniform(7, pos) for pos in range(2000)]
    assert u == [position_uniform(7, pos) for pos in range(2000)]
    assert u != [position_uniform(8, pos) for pos in range(2000)]
    assert min(u) >= 0 and max(u) < 1 and abs(np.mean(u) - 0.5) < 0.03


def test_general_q_keeps_the_target_distribution():
    # A stub "model" with a 5-token vocabulary: fixed target p and draft q rows.
    p = [np.array([0.1, 0.4, 0.2, 0.2, 0.1]), np.array([0.3, 0.1, 0.1, 0.3, 0.2])]
    q = [np.array([0.5, 0.1, 0.1, 0.2, 0.1])]
    first = np.zeros(5)
    trials = 20000
    for seed in range(trials):
        # the draft token itself comes from q, with its own randomness
        d = sample(np.arange(5), q[0], position_uniform(seed, 0, stream=2))
        accepted, bonus = verify_draft(p, q, [d], seed=seed, start_position=0)
        first[d if accepted == 1 else bonus] += 1
    assert chi_square(first, p[0]) < CHI2_CRIT_DF4_P001


def test_one_hot_q_equals_sample_and_compare():
    p = np.array([0.1, 0.4, 0.2, 0.2, 0.1])
    for d in range(5):
        q = np.eye(5)[d]
        counts = np.zeros(5)
        for seed in range(4000):
            accepted, bonus = verify_draft([p, p], [q], [d], seed=seed, start_position=3)
            counts[d if accepted else bonus] += 1
            if not accepted:
                assert bonus != d  # the residual is p with d removed
        assert chi_square(counts, p) < CHI2_CRIT_DF4_P001
    # and "sample from p, accept if equal" is that same law: the acceptance rate is p(d)
    hits = sum(sample(np.arange(5), p, position_uniform(s, 0)) == 1 for s in range(20000))
    assert abs(hits / 20000 - p[1]) < 0.015


def test_target_distribution_semantics():
    logits = np.log(np.array([0.05, 0.1, 0.2, 0.3, 0.35]))
    ids, probs = target_distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0))
    assert sorted(ids.tolist()) == [0, 1, 2, 3, 4] and abs(probs.sum() - 1) < 1e-12
    assert np.allclose(probs, [0.35, 0.3, 0.2, 0.1, 0.05])  # sorted, most likely first
    ids, _ = target_distribution(logits, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0))
    assert ids.tolist() == [4, 3]
    ids, _ = target_distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.6, min_p=0.0))
    assert ids.tolist() == [4, 3]  # 0.35 + 0.3 crosses 0.6
    ids, _ = target_distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.5))
    assert ids.tolist() == [4, 3, 2]  # p >= 0.5 * 0.35
    _, cold = target_distribution(logits, SamplingParams(temperature=0.1, top_k=0, top_p=1.0, min_p=0.0))
    assert cold[0] > 0.8
    ids, probs = target_distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                                                            logit_bias={0: 10.0}))
    assert ids[0] == 0
    ids, probs = target_distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                                                            repeat_penalty=2.0, presence_penalty=1.0),
                                     history=[4, 4])
    assert ids[0] == 3  # token 4 was penalised below token 3


@pytest.mark.parametrize("last_n", [0, -1])
def test_penalty_last_n_zero_or_negative_means_no_penalties(last_n):
    # llama.cpp's penalties sampler clamps penalty_last_n to >= 0 and skips at 0, so
    # Llama(last_n_tokens_size=-1) samples with no penalties; we penalised the whole history.
    logits = np.log(np.array([0.05, 0.1, 0.2, 0.3, 0.35]))
    wide: dict[str, Any] = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    free = target_distribution(logits, SamplingParams(**wide), history=[4, 4])
    off = target_distribution(logits, SamplingParams(**wide, repeat_penalty=3.0, frequency_penalty=1.0,
                                                     presence_penalty=1.0, penalty_last_n=last_n), history=[4, 4])
    assert free[0].tolist() == off[0].tolist() and np.allclose(free[1], off[1])
    on = target_distribution(logits, SamplingParams(**wide, repeat_penalty=3.0, penalty_last_n=1), history=[4, 4])
    assert on[0][0] != 4


@pytest.mark.parametrize("bad", [{"temperature": 0.0}, {"temperature": 1.0, "top_p": 1.5},
                                 {"temperature": 1.0, "repeat_penalty": 0.0}])
def test_bad_sampling_params(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad)


def test_speculative_sampling_equals_plain_sampling_with_the_same_seed(llm, invariance):
    plain = SpeculativeEngine(llm, invariance=invariance, max_draft=0)
    eager = SpeculativeEngine(llm, invariance=invariance, adaptive=False)
    drafted = 0
    for seed in range(4):
        params = SamplingParams(temperature=0.7, seed=seed, repeat_penalty=1.1)
        llm.reset()
        a = plain.generate(PROMPTS["list"], max_tokens=48, sampling=params)
        llm.reset()
        b = eager.generate(PROMPTS["list"], max_tokens=48, sampling=params)
        assert a.tokens == b.tokens
        drafted += b.stats.drafted_tokens
        assert b.stats.forward_passes <= a.stats.forward_passes
    assert drafted > 0


def test_engine_rejects_bad_sampling_argument(llm, engine):
    with pytest.raises(TypeError, match="SamplingParams"):
        engine.generate("Hi", max_tokens=2, sampling={"temperature": 0.7})


def chi2_critical(df: int, z: float = 3.0902) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile (z = 3.09: p = 0.001)."""
    return df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3


def test_real_model_distribution_matches_llama_cpp_python_sampling(llm, invariance):
    """2,000 samples of the first two generated tokens: ngramspec's speculative
    sampler (eager drafts, so the second token usually comes from a verified draft)
    against llama-cpp-python's own sampler, as a two-sample chi-square test of
    homogeneity over (token 1, token 2) pairs, rare pairs pooled. Fixed seeds."""
    from collections import Counter

    prompt = "Fruits: apples, bananas, cherries, apples, bananas, cherries, apples,"
    n = 2000
    eager = SpeculativeEngine(llm, invariance=invariance, adaptive=False)
    ours: Counter[tuple[int, ...]] = Counter()
    theirs: Counter[str] = Counter()
    drafted = 0
    llm.reset()
    for seed in range(n):
        # max_tokens=3: the pass that yields token 2 can verify a draft for it
        gen = eager.generate(prompt, max_tokens=3, sampling=SamplingParams(temperature=1.0, seed=seed))
        ours[tuple(gen.tokens[:2])] += 1
        drafted += gen.stats.drafted_tokens
        out = llm.create_completion(prompt, max_tokens=2, temperature=1.0, seed=10_000 + seed, logprobs=None)
        theirs[out["choices"][0]["text"]] += 1
    # compare by text, which both sides give
    ours_text: Counter[str] = Counter()
    for toks, c in ours.items():
        ours_text[llm.detokenize(list(toks)).decode("utf-8", errors="ignore")] += c
    cats = set(ours_text) | {k for k in theirs if isinstance(k, str)}
    big = [c for c in cats if ours_text[c] + theirs[c] >= 20]
    rows = [(ours_text[c], theirs[c]) for c in big]
    rest = (n - sum(a for a, _ in rows), n - sum(b for _, b in rows))
    if min(rest) > 0:
        rows.append(rest)
    obs = np.array(rows, dtype=float)
    expected = obs.sum(axis=1, keepdims=True) / 2
    stat = float(np.sum((obs - expected) ** 2 / expected))
    df = len(rows) - 1
    assert drafted > n // 2, "the second token should usually be verified from a draft"
    assert df >= 2, "the prompt should give a spread of continuations"
    assert stat < chi2_critical(df), (stat, df, sorted(rows, reverse=True)[:8])


_WIDE: dict[str, Any] = {"top_k": 0, "top_p": 1.0, "min_p": 0.0}


@pytest.mark.parametrize("temperature", [1e-310, 1e-300, 1e-6])
def test_a_tiny_temperature_is_the_argmax(temperature):
    # Dividing the raw logits by a subnormal temperature overflowed to inf - inf = NaN,
    # and sample() then returned the least likely candidate, silently.
    ids, p = target_distribution(np.array([5.0, 3.0, 1.0, -2.0]), SamplingParams(temperature=temperature, **_WIDE))
    assert ids[0] == 0 and p[0] == 1.0 and np.isfinite(p).all()


def test_infinite_logit_bias():
    ids, p = target_distribution(np.array([5.0, 3.0, 1.0]),
                                 SamplingParams(temperature=0.8, logit_bias={2: float("inf")}, **_WIDE))
    assert ids[0] == 2 and p[0] == 1.0 and np.isfinite(p).all()
    with pytest.raises(ValueError, match="every candidate's logit is -inf"):
        target_distribution(np.full(4, -np.inf), SamplingParams(temperature=0.8))


def test_sample_refuses_probabilities_that_are_not_finite():
    with pytest.raises(ValueError, match="cannot sample"):
        sample(np.arange(3), np.array([np.nan, 0.5, 0.5]), 0.3)
    with pytest.raises(ValueError, match="cannot sample"):
        sample(np.arange(2), np.zeros(2), 0.3)


@pytest.mark.parametrize("field, value", [("seed", None), ("seed", 1.5), ("seed", "7"), ("seed", True),
                                          ("top_k", 2.5), ("penalty_last_n", 64.0)])
def test_sampling_params_check_their_integers(field, value):
    # seed=None failed after prefill with "unsupported operand type(s) for &".
    with pytest.raises(TypeError, match=f"{field} must be an int"):
        SamplingParams(temperature=0.7, **{field: value})
