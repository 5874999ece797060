"""The user's predicted output (OpenAI's ``prediction=``) as a proposer.

A code edit returns mostly the file it was given, and the caller knows it:
``prediction={"type": "content", "content": "..."}`` carries that text. It is
tokenized once. The proposer follows the output through it: while the output
agrees, it drafts the prediction's next tokens; where the output departs from
it (an inserted line, a renamed identifier, a deleted block), it finds where the
output's recent tokens meet the prediction again, anywhere in it, and drafts
from there. One wrong line never ends its use.

Its buckets, like the copy proposer's, are the length of the match the draft
follows (start of the output; 1; 2-3; 4-7; 8-15; 16+ tokens), in three sets:
fresh; continuing a draft that agreed with everything the last pass emitted; and
resumed in order, the first draft after a resync that lands at most _NEAR tokens
past where the output left the prediction (an edited line ends and the file goes
on), apart from a resync that jumps elsewhere (code repeats itself: after a new
function's blank lines, the next "def" of the file). Replayed with no model on
the true tokens of the main job's edit and 12 more edits of this package's files
(bench/edit_replay.py), the third set cut the main job's verify time by 6% and the
others' by 0.3%. The policy learns their acceptance, so a useless
prediction is soon refused and costs nothing but its hindsight scoring.

Verification makes the output exactly what it would be without a prediction:
the prediction only changes how many tokens each forward pass yields.
"""
from __future__ import annotations

import bisect
from collections.abc import Sequence
from difflib import SequenceMatcher
from typing import Any, ClassVar

import numpy as np

from ngramspec.proposers.base import Proposal, Proposer

__all__ = ["PredictionProposer", "prediction_text", "prediction_usage"]

_BUCKETS = 6
#: A resync that lands this many tokens or fewer past where the output left the
#: prediction resumes it in order (an edit's hunk ends and the file goes on).
_NEAR = 64
# Fresh, continuing, then resumed in order (from the fresh priors: what separates it
# is that it learns its own). A prediction is the caller's own statement of what the
# output will be, so it starts more trusted than a copy from the prompt.
_FRESH = (0.5, 0.3, 0.45, 0.6, 0.75, 0.85)
_PRIORS = _FRESH + (0.6, 0.6, 0.7, 0.8, 0.9, 0.95) + _FRESH
_MAX_CANDIDATES = 256   # resync: most occurrences of the anchor examined
_MAX_MATCH = 64         # resync: longest backward match measured


def prediction_text(prediction: Any) -> str:
    """The text of an OpenAI ``prediction`` (``{"type": "content", "content": str |
    [{"type": "text", "text": str}, ...]}``), or a plain str; None gives "".
    Raises TypeError / ValueError naming the offending field."""
    if prediction is None:
        return ""
    if isinstance(prediction, str):
        return prediction
    if not isinstance(prediction, dict):
        raise TypeError(f"prediction must be a dict like {{'type': 'content', 'content': ...}} or a str, "
                        f"got {type(prediction).__name__}")
    unknown = set(prediction) - {"type", "content"}
    if unknown:
        raise ValueError(f"prediction has unknown field(s): {', '.join(sorted(map(str, unknown)))}")
    kind = prediction.get("type")
    if kind != "content":
        raise ValueError(f"prediction.type must be 'content', got {kind!r}")
    if "content" not in prediction:
        raise ValueError("prediction.content is missing")
    content = prediction["content"]
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise TypeError(f"prediction.content must be a str or a list of text parts, got {type(content).__name__}")
    parts = []
    for i, part in enumerate(content):
        if not isinstance(part, dict):
            raise TypeError(f"prediction.content[{i}] must be a dict like {{'type': 'text', 'text': ...}}, "
                            f"got {type(part).__name__}")
        if part.get("type") != "text":
            raise ValueError(f"prediction.content[{i}].type must be 'text', got {part.get('type')!r}")
        text = part.get("text")
        if not isinstance(text, str):
            raise TypeError(f"prediction.content[{i}].text must be a str, got {type(text).__name__}")
        parts.append(text)
    return "".join(parts)


#: Above this many (prediction x output) cells left after trimming the common
#: head and tail, ``prediction_usage`` aligns greedily instead of with difflib,
#: whose time grows with the product on repetitive text (a 1,000 x 1,000 token
#: repetition took 4 s, 5,000 x 500 took 7 s, under the engine's lock).
_DIFF_CELLS = 200_000
_GREEDY_WINDOW = 256   # greedy alignment: how far ahead in the prediction a token may match


def prediction_usage(predicted: Sequence[int], output: Sequence[int]) -> dict[str, int]:
    """OpenAI's ``completion_tokens_details`` counts: prediction tokens that
    appear in the completion (aligned in order, as a diff would), and those that
    do not. The common head and tail are matched first; what lies between is
    aligned by difflib when small, else greedily in order (each output token
    matches its next occurrence in the prediction, at most _GREEDY_WINDOW ahead):
    a common subsequence too, found in near-linear time, so the count never costs
    more than a moment whatever the texts."""
    if not predicted:
        return {"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
    a, b = [int(t) for t in predicted], [int(t) for t in output]
    n = min(len(a), len(b))
    head = 0
    while head < n and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < n - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    mid_a, mid_b = a[head: len(a) - tail], b[head: len(b) - tail]
    if len(mid_a) * len(mid_b) <= _DIFF_CELLS:
        matcher = SequenceMatcher(None, mid_a, mid_b, autojunk=False)
        middle = sum(block.size for block in matcher.get_matching_blocks())
    else:
        middle = _greedy_common(mid_a, mid_b)
    accepted = head + tail + middle
    return {"accepted_prediction_tokens": accepted, "rejected_prediction_tokens": len(predicted) - accepted}


def _greedy_common(a: list[int], b: list[int]) -> int:
    """The length of a common subsequence of ``a`` and ``b``: each token of ``b``
    in turn matches its next occurrence in ``a`` (at most _GREEDY_WINDOW ahead)."""
    where: dict[int, list[int]] = {}
    for i, t in enumerate(a):
        where.setdefault(t, []).append(i)
    at = count = 0
    for t in b:
        places = where.get(t)
        if not places:
            continue
        k = bisect.bisect_left(places, at)
        if k < len(places) and places[k] - at <= _GREEDY_WINDOW:
            count += 1
            at = places[k] + 1
    return count


def _bucket(match: int) -> int:
    return 0 if match <= 0 else min(_BUCKETS - 1, match.bit_length())


class PredictionProposer(Proposer):
    """tokens: the prediction, tokenized once."""

    name: ClassVar[str] = "prediction"

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = [int(t) for t in tokens]
        self._array = np.asarray(self.tokens, dtype=np.int32)
        self.source_priors: Sequence[float] = _PRIORS
        # (a, b) -> positions j with tokens[j-2:j] == [a, b]: where a draft could resume.
        self._index: dict[tuple[int, int], list[int]] = {}
        for j in range(2, len(self.tokens) + 1):
            self._index.setdefault((self.tokens[j - 2], self.tokens[j - 1]), []).append(j)
        self.begin(())

    def begin(self, prompt: Sequence[int]) -> None:
        self._context: list[int] = []   # the output so far (the prediction is compared with it only)
        self._pos = 0                  # the prediction index the next output token is expected at
        self._synced = True            # the output so far ends where _pos says
        self._match = 0                # output tokens matched in a row, ending at _pos
        self._continuing = False
        self._last = 0                 # tokens drafted by the latest propose
        self._lost_at = 0              # the prediction index where the output last left it
        self._near = False             # synced again just past where it left (not yet drafted from)

    def _resync(self) -> None:
        ctx = self._context
        if len(ctx) < 2:
            return
        candidates = self._index.get((ctx[-2], ctx[-1]))
        if not candidates:
            return
        if len(candidates) > _MAX_CANDIDATES:   # keep those nearest the last known place
            i = int(np.searchsorted(candidates, self._pos))
            lo = max(0, i - _MAX_CANDIDATES // 2)
            candidates = candidates[lo: lo + _MAX_CANDIDATES]
        best_j, best_len = -1, 0
        for j in candidates:
            n = 2
            limit = min(_MAX_MATCH, j, len(ctx))
            while n < limit and self.tokens[j - 1 - n] == ctx[-1 - n]:
                n += 1
            # Longest match wins; on a tie, the first place at or after the last known one.
            if n > best_len or (n == best_len and best_j < self._pos <= j):
                best_j, best_len = j, n
        if best_j >= 0:
            self._pos, self._match, self._synced = best_j, best_len, True
            self._near = 0 <= best_j - self._lost_at <= _NEAR

    def propose(self, k: int) -> Proposal:
        if not self._synced:
            self._resync()
        if not self._synced or self._pos >= len(self.tokens):
            self._last = 0
            return Proposal.none(self.name)
        draft = self._array[self._pos: self._pos + k]
        self._last = len(draft)
        base = _BUCKETS if self._continuing else 2 * _BUCKETS if self._near else 0
        cont = _BUCKETS
        sources = [base + _bucket(self._match)] + [cont + _bucket(self._match + i) for i in range(1, len(draft))]
        return Proposal(draft, sources, self.name, self._match)

    def accept(self, tokens: Sequence[int]) -> None:
        drafted, self._last = self._last, 0
        agreed = bool(tokens) and drafted > 0
        for t in tokens:
            t = int(t)
            self._context.append(t)
            if self._synced and self._pos < len(self.tokens) and self.tokens[self._pos] == t:
                self._pos += 1
                self._match += 1
            else:
                if self._synced:
                    self._lost_at = self._pos
                self._synced, self._match, agreed = False, 0, False
        if drafted:
            self._near = False
        self._continuing = agreed and self._synced

