"""The cost trap, on the real SmolLM2 model: a verify-cost curve measured under
load (clipped to r(B) = B: no draft ever pays) must not keep a quiet machine from
speculating, neither when it is the start-up curve nor when the load arrives in the
middle of a generation. Load mid-generation is *simulated*: the cost model is fed
inflated timings (x6 on every batch above one token, the worst case: the one-token
reference stays quiet) for a stretch of passes; no CPU burners are started.

Kept short (256 tokens) because the machine is shared. The model runs with one
thread for single tokens *and* batches: llama-cpp-python's defaults on 2 cores
(n_threads 1, n_threads_batch 2) make a batched decode spin on a thread barrier
when other processes hold the cores (seen here at load 11: 7 s for a 3-token
batch against 48 ms for one token), a cost that is real, and that the cost model
rightly refuses to pay; with one thread both sizes slow down alike under load,
which is the "quiet machine" this test needs. The synthetic-timing unit tests are
in test_costmodel.py."""
from __future__ import annotations

import copy
import time

import pytest

from ngramspec import SpeculativeEngine
from ngramspec.calibration.cost_curve import CostCurveResult
from ngramspec.drafting.policy import CostAwarePolicy

# As measured under load; calibrate clips it to r(B) = B.
LOADED = {1: 2.83, 2: 2.08, 3: 3.06, 4: 11.7, 5: 6.68, 6: 5.56, 7: 8.92, 8: 6.21, 9: 13.9}
PROMPT = "Continue the list.\n" + "red green blue " * 20 + "red green"
TOKENS = 256


@pytest.fixture(scope="module")
def llm1(smollm2_path):
    import llama_cpp

    model = llama_cpp.Llama(smollm2_path, n_ctx=1024, seed=0, verbose=False, n_threads=1, n_threads_batch=1)
    yield model
    model.close()


@pytest.fixture(scope="module")
def invariance1(llm1):
    from ngramspec import check_batch_invariance

    return check_batch_invariance(llm1, max_batch=9)


def loaded_report(invariance):
    """The session's invariance report with the loaded curve attached, as if it came from the cache."""
    report = copy.copy(invariance)
    report.cost_curve = CostCurveResult(dict(LOADED), "cached", True, time.time(), 5)
    return report


def test_the_trap_is_real_without_exploration(llm1, invariance1):
    llm1.reset()
    policy = CostAwarePolicy(9, explore=False)
    policy.calibrate(LOADED)
    engine = SpeculativeEngine(llm1, invariance=invariance1, adaptive=policy)
    g = engine.generate(PROMPT, max_tokens=64)
    assert g.stats.drafted_tokens == 0 and g.stats.tokens_per_forward == pytest.approx(1.0, abs=0.02)
    assert "no draft verified" in (g.stats.speculation_off_reason or "")


def test_a_loaded_start_up_curve_is_corrected_online(llm1, invariance1):
    llm1.reset()
    engine = SpeculativeEngine(llm1, invariance=loaded_report(invariance1))
    policy = engine.policy
    # Priced at the loaded curve, clipped to r(B) <= B and kept non-decreasing (exact mode)
    assert [policy.relative_cost(b) for b in range(1, 10)] == pytest.approx([1, 2, 3, 4, 5, 5.56, 7, 7, 9])
    g = engine.generate(PROMPT, max_tokens=TOKENS)
    s = g.stats
    print(f"loaded start-up curve: {s.tokens_per_forward:.2f} tokens/pass, explored {s.explored_passes}, "
          f"sizes {s.verify_batch_sizes}, r(9) at the end {s.relative_costs[9]:.2f}; {s.cost_curve_origin}")
    assert s.generated_tokens == TOKENS
    assert s.tokens_per_forward >= 2.0, (s.verify_batch_sizes, s.relative_costs)
    assert s.explored_passes >= 1
    assert s.cost_curve_origin.startswith("cached") and "corrected online" in s.cost_curve_origin
    # Corrected below the loaded cap (r(9) = 9), not to a set figure: the real r(9) is this
    # machine's and moves with its load (4.5-7.9 over repeated runs here; 7.5 on an AVX2 EPYC's
    # exact build), so a tighter bound is a timing assertion. Speculation paying at all is the
    # tokens_per_forward check above.
    assert s.relative_costs[9] < 0.95 * 9 and s.speculation_off_reason is None


def test_a_burst_of_load_mid_generation_does_not_pin_the_curve(llm1, invariance1):
    llm1.reset()
    # A straight start-up curve, so that the burst can price r(9) up to 9: on a curve that
    # bends at the first batch, as this machine's often does (r(2) = 1.7-2.0 with one
    # thread), r(B) <= B already holds the scale near 1 at B = 2.
    report = copy.copy(invariance1)
    report.cost_curve = CostCurveResult({b: 1.0 + 0.4 * (b - 1) for b in range(1, 10)}, "cached", True,
                                        time.time(), 5)
    engine = SpeculativeEngine(llm1, invariance=report, trace=True)
    cost = engine.policy.cost
    real_observe = cost.observe
    timed = {"n": 0}
    worst = {"r9": 0.0}
    burst = range(3, 15)          # timed passes 3..14 of the generation see the load

    def observe(batch, seconds, **kw):
        timed["n"] += 1
        if batch > 1 and timed["n"] in burst:
            seconds *= 6.0
        real_observe(batch, seconds, **kw)
        worst["r9"] = max(worst["r9"], cost.relative_cost(9))

    cost.observe = observe
    g = engine.generate(PROMPT, max_tokens=TOKENS)
    s = g.stats
    print(f"burst: {s.tokens_per_forward:.2f} tokens/pass, worst r(9) {worst['r9']:.2f}, explored "
          f"{s.explored_passes}, draft sizes {[t[2] for t in s.trace]}, r(9) at the end {s.relative_costs[9]:.2f}")
    assert s.generated_tokens == TOKENS
    assert worst["r9"] >= 0.9 * 9                # the burst did price a 9-token batch near r(B) = B
    assert s.tokens_per_forward >= 2.0, ([t[2] for t in s.trace], s.relative_costs)
    # Not pinned at the worst case (the cap, r(9) = 9) after the burst. Not tighter: on a
    # shared machine the one-token time itself moved 8.5-18 ms within one generation
    # (2026-11-24), and r(9) at the end ranged 4.5-7.9 over repeated runs, burst or not.
    assert s.relative_costs[9] < 0.95 * 9


# A quiet curve that bends at the first batch, as the patched exact build's does (one token
# on 1 thread, batches on 2: Qwen2.5-Coder-0.5B, 2-core EPYC, up to r(65) = 15.0)
BENT = {1: 1.0, 2: 1.68, 3: 1.93, 4: 1.91, 5: 2.27, 6: 2.20, 7: 2.50, 8: 2.47, 9: 2.69}


def test_exact_mode_prices_a_bent_curve_as_measured(llm1, invariance1):
    """A line through r(1) = 1 priced r(2) 24% below its measured cost here; the online
    timings of short drafts then pulled the whole line up and long drafts were cut."""
    report = copy.copy(invariance1)
    report.cost_curve = CostCurveResult(dict(BENT), "cached", True, time.time(), 5)
    engine = SpeculativeEngine(llm1, invariance=report)
    priced = [engine.policy.relative_cost(b) for b in range(1, 10)]
    assert priced == pytest.approx([BENT[b] for b in range(1, 10)], rel=0.12), priced
    assert priced == sorted(priced)                       # exact mode's curve never falls
