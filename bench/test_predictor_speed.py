"""Predictor speed: targets are <= 1 us per update and <= 2 us per predict(8).

Run: .venv/bin/python -m pytest bench/test_predictor_speed.py --benchmark-only
"""
from __future__ import annotations

import numpy as np
import pytest

from ngramspec import NGramPredictor

TOKENS = 100_000


def code_like_stream(size: int, seed: int = 0) -> np.ndarray:
    # Repetitive text over a 32k vocabulary: random phrases that recur, the kind
    # of stream where drafting happens.
    rng = np.random.default_rng(seed)
    phrases = [rng.integers(0, 32_000, size=rng.integers(3, 20)) for _ in range(20)]
    out = np.concatenate([phrases[i] for i in rng.integers(0, len(phrases), size=size // 5)])
    return out[:size].astype(np.int32)


@pytest.mark.parametrize("kind", ["random", "repetitive"])
def test_update_batch_per_token(benchmark, kind):
    stream = (np.random.default_rng(0).integers(0, 32_000, size=TOKENS).astype(np.int32)
              if kind == "random" else code_like_stream(TOKENS))
    p = NGramPredictor()

    def run():
        p.update_batch(stream)

    benchmark.pedantic(run, rounds=20, iterations=1, warmup_rounds=1)
    benchmark.extra_info["tokens_per_round"] = TOKENS
    benchmark.extra_info["us_per_update"] = benchmark.stats.stats.median / TOKENS * 1e6


def test_update_single_call(benchmark):
    # One Python call per token: what an engine pays per accepted token.
    p = NGramPredictor()
    p.update_batch(code_like_stream(2000))
    tokens = [int(t) for t in code_like_stream(1000, seed=1)]

    def run():
        for t in tokens:
            p.update(t)

    benchmark.pedantic(run, rounds=50, iterations=1, warmup_rounds=2)
    benchmark.extra_info["us_per_update"] = benchmark.stats.stats.median / len(tokens) * 1e6


def test_predict_8(benchmark):
    p = NGramPredictor()
    p.update_batch(code_like_stream(5000))
    draft = benchmark(p.predict, 8)
    assert draft.size > 0
