"""CopyProposer: the evidence a copy token rests on, its match and its run."""
from __future__ import annotations

from ngramspec.proposers.copy import N_COPY_SOURCES, CopyProposer, copy_agreement, copy_source, copy_sources


def test_buckets_climb_with_the_evidence_and_split_on_continuing():
    fresh = [copy_source(n) for n in (2, 4, 8, 16, 32, 64, 128, 256, 10_000)]
    assert fresh == sorted(fresh) and fresh[-1] == fresh[-2] == N_COPY_SOURCES // 2 - 1
    cont = [copy_source(n, continuing=True) for n in (2, 300)]
    assert min(cont) == N_COPY_SOURCES // 2 and max(cont) == N_COPY_SOURCES - 1


def test_a_long_run_lifts_a_short_match():
    # A copy right for 200 tokens rests on its run, not on the matcher's capped match.
    assert copy_sources(8, True, 1, run=200) == [copy_source(200, True)]
    assert copy_sources(8, True, 3, run=0) == [copy_source(8 + i, True) for i in range(3)]


def test_agreement_counts_a_copy_right_over_the_pass_and_refuses_a_wrong_one():
    assert copy_agreement([1, 2, 3], [1, 2]) == 2
    assert copy_agreement([1, 2], [1, 2, 9]) == 2
    assert copy_agreement([1, 5], [1, 2]) == -1
    assert copy_agreement([], [1]) == -1


def test_the_run_grows_while_the_copy_is_right_and_resets_on_a_miss():
    text = list(range(100, 160))
    p = CopyProposer()
    p.begin(text + text[:4])               # the text again: a copy of what followed
    draft = p.propose(8)
    assert draft.tokens.tolist() == text[4:12]
    p.accept(text[4:12])                   # all 8 right
    draft = p.propose(8)
    assert draft.sources[0] == copy_source(max(draft.match_length, 8), True)
    p.accept(text[12:20])
    assert p.propose(4).sources[0] == copy_source(max(p.propose(4).match_length, 16), True)
    p.accept([7])                          # a miss: the run starts again
    again = p.propose(4)
    assert not again.sources or again.sources[0] < N_COPY_SOURCES // 2


def test_a_copy_drafts_at_most_twice_as_far_as_it_has_been_right():
    from ngramspec.proposers.copy import RAMP_FACTOR, RAMP_FLOOR

    text = list(range(1000, 1300))
    p = CopyProposer()
    p.begin(text + text[:4])
    assert len(p.propose(64)) == RAMP_FLOOR            # a fresh copy: the floor
    t = 4
    p.accept(text[t:t + RAMP_FLOOR])
    t += RAMP_FLOOR
    assert len(p.propose(64)) == RAMP_FACTOR * RAMP_FLOOR   # right for 8: up to 16
    p.accept(text[t:t + 16])
    t += 16
    assert len(p.propose(64)) == 2 * 24                 # right for 24: up to 48
    p.accept(text[t:t + 48])
    assert len(p.propose(64)) == 64                     # right for 72: the caller's cap
    p.accept([7])                                       # wrong: back to the floor
    p.accept(text[:4])
    assert len(p.propose(64)) <= RAMP_FLOOR
