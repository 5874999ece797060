"""Copy drafts (SuffixMatcher) in the engine: used where text repeats, recorded in
the stats, and exact (the identity tests cover exactness on every prompt)."""
from __future__ import annotations

import pytest

from ngramspec.drafting.cost_model import MIN_BATCH_COST
from tests.support.plain import plain_tokens
from tests.support.prompts import PROMPTS

# SmolLM2 continues this list by repeating it: long copies of its own output
# (measured: 23 passes for 96 tokens).
COPY_PROMPT = PROMPTS["list"]


def fixed_cost_policy():
    # The prior cost line (r(B) = 1 + 0.4 (B - 1)), never re-timed: the decisions
    # then depend on the tokens only, not on how busy the machine is.
    from ngramspec.drafting.policy import CostAwarePolicy

    return CostAwarePolicy(9, learn_cost=False)


def test_copy_drafts_carry_a_copy_heavy_generation(llm, invariance):
    from ngramspec import SpeculativeEngine

    llm.reset()
    with_copy = SpeculativeEngine(llm, invariance=invariance, trace=True,
                                  adaptive=fixed_cost_policy()).generate(COPY_PROMPT, max_tokens=96)
    s = with_copy.stats
    assert with_copy.tokens == plain_tokens(llm, COPY_PROMPT, 96)
    assert s.passes_by_source.get("copy", 0) > 0
    assert sum(s.passes_by_source.values()) == s.forward_passes == len(s.trace)
    assert sum(s.accepted_by_source.values()) == s.accepted_tokens
    assert sum(t[3] for t in s.trace if t[0] == "copy") == s.accepted_by_source["copy"]
    llm.reset()
    without = SpeculativeEngine(llm, invariance=invariance, copy=False,
                                adaptive=fixed_cost_policy()).generate(COPY_PROMPT, max_tokens=96)
    assert without.tokens == with_copy.tokens
    assert "copy" not in without.stats.passes_by_source
    # Whole list runs are drafted: far fewer passes than tokens, and no more than
    # with 2-4-gram drafts alone (which on this text, once scored in hindsight,
    # predict the repeats as well).
    assert s.forward_passes < 96 // 2
    assert s.forward_passes <= without.stats.forward_passes


def test_calibrated_from_the_invariance_check(llm, invariance):
    from ngramspec import SpeculativeEngine

    engine = SpeculativeEngine(llm, invariance=invariance)
    engine.plan()
    costs = invariance.relative_costs()
    # The fixture runs at llama-cpp-python's default threads: on 2 cores one token on 1
    # thread, batches on 2, so r(2) can be timed under 1 (0.98 seen in a CI run). The
    # policy then prices r(2) as measured, its batch sizes on a line of their own
    # (CostModel.batch_offset); otherwise on a line through r(1) = 1, never below 1.
    # Either way the line rises.
    assert 2 in costs and costs[2] > 0.5
    top = engine.max_draft + 1
    r2 = engine.policy.relative_cost(2)
    if costs[2] < 1.0:
        assert r2 == pytest.approx(max(costs[2], MIN_BATCH_COST))
    else:
        assert r2 >= 1.0
    assert r2 <= engine.policy.relative_cost(top)
    assert engine.policy.relative_cost(top) > 1.0


def test_fast_mode_prices_every_batch_size_as_measured(llm):
    from ngramspec import SpeculativeEngine

    llm.reset()
    engine = SpeculativeEngine(llm, exact=False, max_draft=12)
    gen = engine.generate(COPY_PROMPT, max_tokens=32)
    assert len(gen.tokens) == 32
    allowed = engine.plan().allowed
    assert allowed[1:].all()
    prior = [1.0 + 0.4 * (b - 1) for b in range(1, 14)]
    assert [engine.policy.relative_cost(b) for b in range(1, 14)] != prior   # calibrated by one sweep
