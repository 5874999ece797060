"""The log-probabilities of each emitted token, from the row that chose it.

Plain llama-cpp-python computes a completion's ``logprobs`` from the logits it kept
for every position (``logits_all=True``): ``Llama.logits_to_logprobs`` of the row
before each completion token (the raw logits, before any logit bias, penalty or
grammar), that token's value, and the ``logprobs`` largest values, ordered by value
and then by the larger token id (its ``sorted(zip(logprobs, ids), reverse=True)``).
The engine has the same rows for the tokens it emits (each verified row, and the
prompt's last row for the first token), so it records the same numbers as it emits,
with the same float32 arithmetic; it needs no ``logits_all``.
"""
from __future__ import annotations

import numpy as np

from ngramspec.arg_checks import checked_int

__all__ = ["TokenLogprobs", "logits_to_logprobs"]


def logits_to_logprobs(row: np.ndarray) -> np.ndarray:
    """``Llama.logits_to_logprobs`` of one row: log-softmax in float32."""
    top = np.amax(row)
    if not np.isfinite(top):
        top = 0
    shifted = np.subtract(row, top, dtype=np.single)
    with np.errstate(divide="ignore"):
        out: np.ndarray = shifted - np.log(np.sum(np.exp(shifted)))
    return out


class TokenLogprobs:
    """Per emitted token: its logprob, and the ``top`` best (id, logprob) pairs."""

    def __init__(self, top: object) -> None:
        self.top = checked_int(top, "logprobs", minimum=0)
        self.token_logprobs: list[float] = []
        self.top_logprobs: list[list[tuple[int, float]]] = []

    def add(self, token: int, row: np.ndarray) -> None:
        lp = logits_to_logprobs(row)
        self.token_logprobs.append(float(lp[token]))
        self.top_logprobs.append(self._best(lp))

    def _best(self, lp: np.ndarray) -> list[tuple[int, float]]:
        k = min(self.top, len(lp))
        if k == 0:
            return []
        kth = np.partition(lp, len(lp) - k)[len(lp) - k]
        ids = np.flatnonzero(lp >= kth)
        order = np.lexsort((-ids, -lp[ids]))[:k]   # by value, then by the larger id, as plain sorts
        return [(int(ids[i]), float(lp[ids[i]])) for i in order]
