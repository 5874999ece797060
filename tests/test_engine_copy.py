"""Copy drafts (SuffixMatcher) in the engine: used where text repeats, recorded in
the stats, and exact (the identity tests cover exactness on every prompt)."""
from __future__ import annotations

from plain import plain_tokens
from prompts import CODE

# The model is asked to repeat a function it has just seen: long copies.
COPY_PROMPT = "Here is a function.\n\n" + CODE + "\n\nThe same function again, unchanged:\n\n" + CODE[:60]


def test_copy_drafts_carry_a_copy_heavy_generation(llm, invariance):
    from ngramspec import SpeculativeEngine

    llm.reset()
    with_copy = SpeculativeEngine(llm, invariance=invariance, trace=True).generate(COPY_PROMPT, max_tokens=96)
    s = with_copy.stats
    assert with_copy.tokens == plain_tokens(llm, COPY_PROMPT, 96)
    assert s.passes_by_source.get("copy", 0) > 0
    assert sum(s.passes_by_source.values()) == s.forward_passes == len(s.trace)
    assert sum(s.accepted_by_source.values()) == s.accepted_tokens
    assert sum(t[3] for t in s.trace if t[0] == "copy") == s.accepted_by_source["copy"]
    llm.reset()
    without = SpeculativeEngine(llm, invariance=invariance, copy=False).generate(COPY_PROMPT, max_tokens=96)
    assert without.tokens == with_copy.tokens
    assert "copy" not in without.stats.passes_by_source
    # Copies of a whole function need fewer passes than 2-4-gram drafts.
    assert s.forward_passes < without.stats.forward_passes


def test_calibrated_from_the_invariance_check(llm, invariance):
    from ngramspec import SpeculativeEngine

    engine = SpeculativeEngine(llm, invariance=invariance)
    engine._allowed_sizes()
    costs = invariance.relative_costs()
    assert 2 in costs and costs[2] > 1.0
    assert 0.0 < engine.policy.slope <= 1.0 and engine.policy.slope != 0.4
