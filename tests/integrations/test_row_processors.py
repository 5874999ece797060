"""A user's logits processors on verified rows (integrations/row_processors.py,
engine/row_rules.py): called in plain's order with plain's input_ids, never with a
rejected draft token, and answering the audit's second look at a pass as the first."""
from __future__ import annotations

import llama_cpp
import numpy as np
import pytest
from outlines.backends.outlines_core import OutlinesCoreLogitsProcessor
from outlines_core import Index, Vocabulary

from ngramspec.integrations.row_processors import OutlinesRows, row_processors_of
from tests.support.libraries import COPY_JSON, wrap

# -- outlines_core's processor, rewound (a toy vocabulary, no model) --------------

VOCAB = {"a": [0], "b": [1], "c": [2], "ab": [3]}
EOS = 4
N_VOCAB = 5


def _processor() -> OutlinesCoreLogitsProcessor:
    return OutlinesCoreLogitsProcessor(Index("(ab|c)+a?", Vocabulary(EOS, VOCAB)), "numpy")


def _allowed(proc, ids) -> list[int]:
    out = proc(np.asarray(ids, dtype=np.intc), np.zeros(N_VOCAB, dtype=np.float32))
    return [int(t) for t in np.flatnonzero(out > -np.inf)]


def _plain_answers(paths: list[list[int]]) -> list[list[int]]:
    """What a fresh processor answers when called along each path, one token at a time,
    as plain decoding calls it (the prompt is [9, 9])."""
    answers = []
    for path in paths:
        proc = _processor()
        for n in range(len(path) + 1):
            got = _allowed(proc, [9, 9] + path[:n])
        answers.append(got)
    return answers


def test_outlines_rows_answers_a_second_look_at_a_pass_as_the_first():
    rows = OutlinesRows(_processor())
    calls = [[], [2], [2, 0], [2, 0, 1],       # a pass: c, a, b
             [2, 0], [2, 0, 1], [2, 0, 1, 2],  # the audit looks at it again from its second row
             [2], [2, 2], [2, 2, 3]]           # and again, choosing other tokens
    got = [_allowed(rows, [9, 9] + path) for path in calls]
    assert got == _plain_answers(calls)
    assert got[2] == [1, EOS]       # after "c a": "b" (for "ab"), or the end ("a?")
    assert got[5] == [0, 2, 3, 4] and got[8] == got[5]   # after "c a b" and after "c c": a new "ab", "c" or "a"


def test_without_the_rewind_the_guide_would_be_wrong():
    """The check above can fail: calling the bare processor along the same calls
    advances its guide twice through the second look."""
    proc = _processor()
    calls = [[], [2], [2, 0], [2], [2, 0]]   # the pass after "c" looked at again
    got = [_allowed(proc, [9, 9] + path) for path in calls]
    assert got != _plain_answers(calls)


def test_which_processors_go_through_the_engine():
    fresh = _processor()
    rows = row_processors_of([fresh])
    assert rows is not None and isinstance(rows[0], OutlinesRows) and rows[0].processor is fresh
    used = _processor()
    _allowed(used, [9])                                      # its first call has been made
    assert row_processors_of([used]) is None                 # its state is a generation's we did not see
    min_tokens = llama_cpp.MinTokensLogitsProcessor(3, EOS)
    assert (row_processors_of([min_tokens, fresh]) or [None])[0] is min_tokens

    def undeclared(ids, scores):
        return scores

    def declared(ids, scores):
        return scores

    declared.ngramspec_row_safe = True  # type: ignore[attr-defined]
    assert row_processors_of([undeclared]) is None
    assert row_processors_of([declared, undeclared]) is None
    assert row_processors_of([declared]) == [declared]
    assert row_processors_of(declared) is None              # plain never applies a bare callable
    assert row_processors_of([declared, declared]) is None  # nor calls one twice a token here
    assert row_processors_of([]) is None and row_processors_of(None) is None


# -- on the model ---------------------------------------------------------------


class Recorder:
    """A declared row processor that bans nothing and records every input_ids it is
    given, and the token greedy decoding takes from the row (no other rule is in play)."""

    ngramspec_row_safe = True

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.best: list[int] = []

    def __call__(self, input_ids, scores):
        self.calls.append([int(t) for t in input_ids])
        self.best.append(int(np.argmax(scores)))
        return scores


@pytest.mark.model
@pytest.mark.parametrize("stop", [None, ['"date"']], ids=["to max_tokens", "to a stop string"])
def test_a_declared_processor_sees_plains_calls_and_never_a_rejected_draft(llm, invariance, stop):
    spec = wrap(llm, invariance)
    llm.reset()
    plain_rec = Recorder()
    plain = llm.create_completion(COPY_JSON, max_tokens=40, temperature=0.0, stop=stop,
                                  logits_processor=llama_cpp.LogitsProcessorList([plain_rec]))
    llm.reset()
    rec = Recorder()
    out = spec.create_completion(COPY_JSON, max_tokens=40, temperature=0.0, stop=stop,
                                 logits_processor=llama_cpp.LogitsProcessorList([rec]))
    assert out["choices"][0]["text"] == plain["choices"][0]["text"]
    stats = spec.last_speculative
    assert stats["used"] is True and stats["accepted_tokens"] > 0, stats
    assert stats["forward_passes"] < stats["generated_tokens"]
    assert rec.calls[:len(plain_rec.calls)] == plain_rec.calls
    # Each call's input_ids are the prompt and plain's own tokens, never a rejected draft
    # token; rows past the end of the output may be processed (the pass that ended it
    # went on), and each token a call adds is the one greedy chose at the call before.
    whole = plain_rec.calls[-1] + [plain_rec.best[-1]]
    assert all(call == whole[:len(call)] or call[:len(whole)] == whole for call in rec.calls)
    for before, call, best in zip(rec.calls, rec.calls[1:], rec.best):
        if len(call) == len(before) + 1:
            assert call[:-1] == before and call[-1] == best


@pytest.mark.model
def test_a_processor_that_raises_ends_the_call_with_its_error(llm, invariance):
    """Plain prints an error raised inside its sampler callback and goes on without the
    processor (unconstrained text, without a word); the wrapper raises it."""

    def broken(ids, scores):
        raise ImportError("numba is missing")

    broken.ngramspec_row_safe = True  # type: ignore[attr-defined]
    spec = wrap(llm, invariance)
    llm.reset()
    with pytest.raises(ImportError, match="numba is missing"):
        spec.create_completion("Hello", max_tokens=4, temperature=0.0,
                               logits_processor=llama_cpp.LogitsProcessorList([broken]))
