"""The n-gram proposer: drafts from the NGramPredictor's tables over the text so far.

Its source buckets are the guess's share of its context in the tables: a context
seen once, or always followed by the same token, is a far safer guess than one
followed by many different tokens, and the share tells them apart where the
n-gram order does not (in JSON extraction the order-4 context `", "` is followed
by every field value; the one closing a row is always followed by the same
indentation).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ngramspec._core import NGramPredictor
from ngramspec.proposers.base import Proposal, Proposer

__all__ = ["DEFAULT_NGRAM_PRIOR", "N_NGRAM_SOURCES", "NGramProposer", "ngram_source", "ngram_sources"]

# Share buckets: seen once; under a half; under 0.8; under 1; always this token
# (and seen at least twice). Replaying the three suite runs (bench/replay.py),
# these five buckets beat keying on the n-gram order: geomean 1.168->1.165
# (SmolLM2), 1.071->1.102 (Qwen 0.5B), 1.074->1.117 (1.5B); JSON extraction on
# Qwen 0.5B 1.01x->1.16x. Adding the order to the key (35 sources) learned more
# slowly and gained less on Qwen.
N_NGRAM_SOURCES = 5
DEFAULT_NGRAM_PRIOR = 0.35


def ngram_source(count: int, total: int) -> int:
    """The bucket of an n-gram draft token that followed its context ``count``
    times out of the context's ``total`` occurrences (NGramPredictor.predict_detailed)."""
    if total <= 1:
        return 0
    if 2 * count < total:
        return 1
    if 5 * count < 4 * total:
        return 2
    return 3 if count < total else 4


def ngram_sources(counts: Any, totals: Any) -> list[int]:
    """ngram_source for each token of a draft."""
    if len(counts) <= 4:   # most passes: a few tokens, where numpy's per-call cost is the larger
        return [ngram_source(c, t) for c, t in zip(counts.tolist(), totals.tolist())]
    c, t = np.asarray(counts, dtype=np.int64), np.asarray(totals, dtype=np.int64)
    bucket = np.where(c < t, 3, 4)
    bucket = np.where(5 * c < 4 * t, 2, bucket)
    bucket = np.where(2 * c < t, 1, bucket)
    bucket = np.where(t <= 1, 0, bucket)
    return bucket.tolist()   # type: ignore[no-any-return]


class NGramProposer(Proposer):
    """Drafts the n-gram tables' most frequent continuation, chained."""

    name: ClassVar[str] = "ngram"

    def __init__(self, *, min_order: int = 2, max_order: int = 4, window: int = 512) -> None:
        self.predictor = NGramPredictor(min_order=min_order, max_order=max_order, window=window)
        self.source_priors: Sequence[float] = (DEFAULT_NGRAM_PRIOR,) * N_NGRAM_SOURCES

    def begin(self, prompt: Sequence[int]) -> None:
        self.predictor.reset()
        self.predictor.update_batch(prompt)

    def propose(self, k: int) -> Proposal:
        draft, _, counts, totals = self.predictor.predict_detailed(k)
        # The eager rule compares this with a copy's match length: an n-gram guess
        # rests on up to max_order - 1 tokens of context.
        match = self.predictor.max_order - 1 if len(draft) else 0
        return Proposal(draft, ngram_sources(counts, totals), self.name, match)

    def accept(self, tokens: Sequence[int]) -> None:
        if len(tokens) == 1:
            self.predictor.update(tokens[0])
        else:
            self.predictor.update_batch(tokens)

