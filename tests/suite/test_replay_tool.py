"""bench/replay.py's hindsight bound: the offered proposal right for longest,
verified exactly as far as it is right, when that beats a plain pass."""
from __future__ import annotations

import numpy as np

import replay as replay_tool  # bench/replay.py (pyproject.toml puts bench/ on the tests' path)
from ngramspec.drafting.policy import CostAwarePolicy
from ngramspec.proposers.base import Proposal

COST = [1.0 + 0.5 * k for k in range(9)]            # r(k + 1) for a k-token draft
ALL = np.array([False] + [True] * 9, dtype=bool)     # every batch of 1..9 tokens


def _p(tokens: list[int], name: str) -> Proposal:
    return Proposal(np.asarray(tokens, dtype=np.int32), [0] * len(tokens), name)


def test_hindsight_takes_the_proposal_right_longest_cut_where_it_goes_wrong() -> None:
    truth = [1, 2, 3, 4, 5]
    got = replay_tool.best_in_hindsight([_p([1, 2, 9, 9], "a"), _p([1, 2, 3, 9, 9], "b")], truth, COST, ALL)
    assert got.name == "b" and got.tokens.tolist() == [1, 2, 3]


def test_hindsight_keeps_to_the_allowed_batch_sizes() -> None:
    allowed = ALL.copy()
    allowed[4] = False      # no batch of 4: three draft tokens are not allowed
    got = replay_tool.best_in_hindsight([_p([1, 2, 3, 9], "a")], [1, 2, 3, 4], COST, allowed)
    assert got.tokens.tolist() == [1, 2]


def test_hindsight_decodes_plainly_when_nothing_pays() -> None:
    assert len(replay_tool.best_in_hindsight([_p([7, 7], "a")], [1, 2], COST, ALL)) == 0
    dear = [1.0, 2.5, 3.5]  # one right draft token yields 2 tokens for 2.5: worse than plain
    assert len(replay_tool.best_in_hindsight([_p([1, 9], "a")], [1, 2], dear, ALL[:4])) == 0
    assert len(replay_tool.best_in_hindsight([], [1, 2], COST, ALL)) == 0


def test_hindsight_verifies_a_wrong_token_where_a_batch_costs_less_than_one():
    # At split thread counts r(2) can be under 1: one draft token, right or wrong,
    # then yields a token for less than a plain pass does.
    cheap = [1.0, 0.8, 1.1]
    got = replay_tool.best_in_hindsight([_p([9, 9], "a")], [1, 2], cheap, ALL[:4])
    assert got.tokens.tolist() == [9]
    got = replay_tool.best_in_hindsight([_p([1, 2], "a")], [1, 2], cheap, ALL[:4])
    assert got.tokens.tolist() == [1, 2]        # 3 tokens for 1.1 beat 2 for 0.8


def test_hindsight_replay_copies_a_repeated_text_in_full_passes() -> None:
    # The output repeats the prompt: the copy proposer offers the rest of it every
    # pass, so in hindsight each pass verifies max_draft tokens, all accepted.
    prompt = list(range(100, 140))
    output = prompt[:33]
    policy = CostAwarePolicy(9, learn_cost=False)
    policy.calibrate({b + 1: c for b, c in enumerate(COST)})
    spent, passes, _ = replay_tool.replay(prompt, output, COST, ALL, 8, policy, hindsight=True)
    # 32 tokens after the first (which prefill gives): 9 + 9 + 9 + 5.
    assert passes == 4 and spent == 3 * COST[8] + COST[4]
