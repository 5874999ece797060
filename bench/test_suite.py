"""The benchmark suite under pytest-benchmark, one test per workload.

pytest-benchmark times ngramspec on the workload's prompts (wall time, prefill
included); each round's plain and prompt-lookup runs happen in its untimed
setup, right before, so the methods stay interleaved. The decode figures, the
pair-by-pair speed-ups and the model-free limit go into each test's extra_info.

Run (JSON saved):
  .venv/bin/python -m pytest bench/test_suite.py --benchmark-only \
      --benchmark-json bench/results/suite-smollm2-135m-pytest.json
Environment: NGRAMSPEC_BENCH_MODEL (default smollm2-135m), NGRAMSPEC_BENCH_QUICK=1
for one short prompt per workload, NGRAMSPEC_BENCH_ROUNDS (default 3),
NGRAMSPEC_BENCH_THREADS. `ngramspec bench` runs the same suite for users.
"""
from __future__ import annotations

import os

import pytest

from ngramspec.suite import runner, summary
from ngramspec.suite.run_record import Run

MODEL = os.environ.get("NGRAMSPEC_BENCH_MODEL", "smollm2-135m")
QUICK = os.environ.get("NGRAMSPEC_BENCH_QUICK", "0") == "1"
ROUNDS = int(os.environ.get("NGRAMSPEC_BENCH_ROUNDS", "3"))
THREADS = int(os.environ["NGRAMSPEC_BENCH_THREADS"]) if os.environ.get("NGRAMSPEC_BENCH_THREADS") else None
WORKLOADS = ["code_completion", "code_editing", "structured_extraction", "grounded_qa", "open_prose",
             "multi_turn_chat"]


@pytest.fixture(scope="module")
def suite():
    s = runner.Suite(MODEL, quick=QUICK, threads=THREADS, progress=False)
    yield s
    s.close()


@pytest.mark.parametrize("name", WORKLOADS)
def test_workload(benchmark, suite, name):
    w = suite.workload(name)
    runs: list[Run] = []
    round_ = [0]

    def peers():
        for item in w.items:
            for m in suite.methods:
                if m != "ngramspec":
                    runs.append(suite.run_once(m, name, item, round_[0]))

    def ngramspec():
        for item in w.items:
            runs.append(suite.run_once("ngramspec", name, item, round_[0]))
        round_[0] += 1

    benchmark.pedantic(ngramspec, setup=peers, rounds=ROUNDS, iterations=1)
    (fig,) = summary.summarize(suite, runs, [name])
    benchmark.extra_info.update({
        "model": MODEL, "source": fig.source, "output_tokens": fig.output_tokens,
        "plain_decode_tok_s": fig.methods["plain"].decode_tok_s,
        **{f"{m} speed-ups": fig.methods[m].speedups for m in suite.methods if m != "plain"},
        "model_free_limit": fig.limit.speedup, "perfect_limit": fig.perfect.speedup,
        "acceptance": fig.acceptance, "tokens_per_pass": fig.tokens_per_pass,
    })
    assert fig.methods["ngramspec"].identical, "greedy speculation must return plain greedy's text"
