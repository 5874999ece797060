"""Engine overhead outside llama_decode, per forward pass, on SmolLM2-135M.

Target: at most 0.3 ms per pass on the reference machine.
Run: .venv/bin/python -m pytest bench/test_engine_overhead.py --benchmark-only

The figure reported (extra_info.overhead_ms_per_pass) is everything the
generation spent outside prefill and llama_decode -- predictor, policy, batch
filling, argmax over the logits rows, stop/EOG checks, bookkeeping -- divided
by the number of forward passes, and includes the once-per-call costs.
"""
from __future__ import annotations

import statistics

import llama_cpp
import pytest

from ngramspec import SpeculativeEngine, check_batch_invariance, models
from ngramspec.suite.sample_prompts import PROMPTS


@pytest.fixture(scope="module")
def llm():
    model = llama_cpp.Llama(str(models.fetch("smollm2-135m")), n_ctx=2048, seed=0, verbose=False)
    yield model
    model.close()


@pytest.mark.parametrize("mode", ["plain", "adaptive", "eager"])
@pytest.mark.parametrize("workload", ["code_edit", "prose"])
def test_overhead_per_pass(benchmark, llm, mode, workload):
    report = check_batch_invariance(llm, max_batch=9)
    engine = SpeculativeEngine(llm, invariance=report, max_draft=0 if mode == "plain" else 8,
                               adaptive=mode == "adaptive")
    overheads = []

    def run():
        llm.reset()
        gen = engine.generate(PROMPTS[workload], max_tokens=192)
        overheads.append(gen.stats.overhead_per_step_ms)
        return gen

    gen = benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    benchmark.extra_info["overhead_ms_per_pass"] = statistics.median(overheads)
    benchmark.extra_info["forward_passes"] = gen.stats.forward_passes
    benchmark.extra_info["tokens"] = gen.stats.generated_tokens
    print(f"\n{workload}/{mode}: overhead {statistics.median(overheads):.3f} ms/pass "
          f"(runs: {', '.join(f'{o:.3f}' for o in overheads)})")
