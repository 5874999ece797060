"""Speculative sampling that keeps the model's distribution exactly.

``target_distribution`` turns one row of logits into the distribution p that
llama-cpp-python's sampler chain samples from (logit_bias, then repeat /
frequency / presence penalties over the last ``penalty_last_n`` tokens (none when
``penalty_last_n`` <= 0), top_k,
typical_p, top_p, min_p, temperature), as a sparse (ids, probs) pair.

Randomness is per position: the uniform number used at absolute position t is
a hash of (seed, t), not the next draw of a shared stream. Sampling token t is
then a fixed function of (p_t, seed, t), so the tokens do not depend on how
the work was split into draft/verify passes: speculative sampling returns
exactly what non-speculative sampling with the same seed returns.

With the n-gram drafter's one-hot draft distribution q, modified rejection
sampling (accept d with probability min(1, p(d)/q(d)), else sample from
max(0, p - q) renormalised) reduces to: sample x from p with the position's
uniform; accept the draft if x == d, else emit x. ``verify_draft`` is the
general form, for proposers with a real q.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ngramspec.arg_checks import checked_int

__all__ = ["SamplingParams", "target_distribution", "position_uniform", "sample", "verify_draft", "verify_token"]

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class SamplingParams:
    """llama-cpp-python's sampling parameters, with its defaults for create_completion."""
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    logit_bias: Mapping[int, float] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("top_k", "penalty_last_n", "seed"):
            checked_int(getattr(self, name), name)
        if not self.temperature > 0:
            raise ValueError("sampling needs temperature > 0 (temperature <= 0 is greedy decoding)")
        if not 0.0 <= self.top_p <= 1.0 or not 0.0 <= self.min_p <= 1.0 or not 0.0 < self.typical_p <= 1.0:
            raise ValueError("top_p and min_p must be in [0, 1] and typical_p in (0, 1]")
        if self.repeat_penalty <= 0:
            raise ValueError("repeat_penalty must be > 0")

    @property
    def penalizes(self) -> bool:
        """Whether repeat / frequency / presence penalties apply. llama.cpp's penalties
        sampler takes penalty_last_n <= 0 as "no penalties" (Llama(last_n_tokens_size=-1)
        gives plain no penalties at all)."""
        return self.penalty_last_n > 0 and (self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0
                                            or self.presence_penalty != 0.0)


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def position_uniform(seed: int, position: int, stream: int = 0) -> float:
    """A uniform number in [0, 1) fixed by (seed, absolute position, stream)."""
    h = _splitmix64(_splitmix64(_splitmix64(seed & _MASK64) ^ (position & _MASK64)) ^ stream)
    return (h >> 11) * (1.0 / (1 << 53))


def _softmax(x: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """softmax(x / temperature), shifted by the largest logit first: dividing the
    raw logits by a subnormal temperature overflowed to inf - inf = NaN, and a
    +inf logit_bias gave the same. A +inf logit takes all the mass (shared among
    such tokens); if every logit is -inf nothing can be sampled."""
    top = x.max()
    if top == np.inf:
        p: np.ndarray = (x == np.inf).astype(np.float64)
        p /= p.sum()
        return p
    if not np.isfinite(top):
        raise ValueError("no token can be sampled: every candidate's logit is -inf (logit_bias or penalties)")
    with np.errstate(over="ignore"):   # a tiny temperature sends the others to -inf: probability 0
        e = np.exp((x - top) / temperature)
    p = e / e.sum()
    return p


def target_distribution(logits: np.ndarray, params: SamplingParams,
                        history: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(candidate ids, probabilities summing to 1) for one row of logits.
    history: the tokens generated before this position (llama-cpp-python's
        penalties see only sampled tokens, not the prompt)."""
    x = np.array(logits, dtype=np.float64)  # a copy: the row belongs to llama.cpp
    if params.logit_bias:
        for tok, bias in params.logit_bias.items():
            x[int(tok)] += float(bias)
    if params.penalizes:
        recent = list(history)[-params.penalty_last_n:]
        if recent:
            toks, counts = np.unique(np.asarray(recent, dtype=np.int64), return_counts=True)
            vals = x[toks]
            vals = np.where(vals <= 0, vals * params.repeat_penalty, vals / params.repeat_penalty)
            x[toks] = vals - counts * params.frequency_penalty - params.presence_penalty
    ids = np.arange(len(x))
    if 0 < params.top_k < len(x):
        keep = np.argpartition(-x, params.top_k - 1)[: params.top_k]
        ids, x = ids[keep], x[keep]
    order = np.argsort(-x, kind="stable")  # descending, ties by token id
    ids, x = ids[order], x[order]
    if params.typical_p < 1.0:
        p = _softmax(x)
        entropy = -np.sum(p * np.log(np.maximum(p, 1e-300)))
        shifted = np.abs(-np.log(np.maximum(p, 1e-300)) - entropy)
        by_typical = np.argsort(shifted, kind="stable")
        cum = np.cumsum(p[by_typical])
        n = int(np.searchsorted(cum, params.typical_p) + 1)
        keep = np.sort(by_typical[: max(1, n)])
        ids, x = ids[keep], x[keep]
    if params.top_p < 1.0:
        cum = np.cumsum(_softmax(x))
        n = int(np.searchsorted(cum, params.top_p) + 1)
        ids, x = ids[: max(1, n)], x[: max(1, n)]
    if params.min_p > 0.0 and len(x) > 1:
        keep = x >= x[0] + np.log(params.min_p)
        keep[0] = True
        ids, x = ids[keep], x[keep]
    return ids, _softmax(x, params.temperature)


def sample(ids: np.ndarray, probs: np.ndarray, u: float) -> int:
    """Inverse-CDF draw with the uniform u."""
    cum = np.cumsum(probs)
    if not cum[-1] > 0 or not np.isfinite(cum[-1]):   # NaN would silently pick the last candidate
        raise ValueError(f"cannot sample from probabilities summing to {cum[-1]}")
    i = int(np.searchsorted(cum, u * cum[-1], side="right"))
    return int(ids[min(i, len(ids) - 1)])


def verify_draft(p_rows: Sequence[np.ndarray], q_rows: Sequence[np.ndarray], draft: Sequence[int],
                 seed: int, start_position: int) -> tuple[int, int]:
    """Modified rejection sampling over dense distributions (Leviathan et al.;
    Chen et al.). p_rows has len(draft) + 1 target distributions, q_rows one
    draft distribution per draft token. Returns (accepted count, next token):
    the bonus token sampled from the residual at the first rejection, or from
    the last p row when every draft token is accepted."""
    for i, d in enumerate(draft):
        p, q = p_rows[i], q_rows[i]
        pos = start_position + i
        if q[d] <= 0:
            raise ValueError(f"draft token {d} has zero probability under its own q")
        if position_uniform(seed, pos, stream=1) < min(1.0, p[d] / q[d]):
            continue
        residual = np.maximum(p - q, 0.0)
        total = residual.sum()
        if total <= 0:  # p == q exactly: rejection had probability 0
            residual, total = p, p.sum()
        return i, sample(np.arange(len(p)), residual / total, position_uniform(seed, pos))
    last = p_rows[len(draft)]
    return len(draft), sample(np.arange(len(last)), last, position_uniform(seed, start_position + len(draft)))


def verify_token(p: tuple[np.ndarray, np.ndarray], q: tuple[np.ndarray, np.ndarray], token: int,
                 seed: int, position: int) -> tuple[bool, int]:
    """One position of ``verify_draft`` on sparse (ids, probs) distributions, for a
    generation loop that computes the target rows lazily and stops at the first
    rejection. ``token`` is the draft token at absolute ``position``, drawn from q
    with randomness independent of streams 0 and 1 (the draft model uses stream 2).

    Accept with probability min(1, p(token)/q(token)), tested with
    ``position_uniform(seed, position, stream=1)``: returns (True, token). Else
    returns (False, x), x drawn from max(0, p - q) renormalised with
    ``position_uniform(seed, position)``, over ids in ascending order: the same
    token ``verify_draft`` draws from the same dense rows. After a fully accepted
    draft the bonus token is an ordinary draw from the next p row (any fixed rule
    keeps the distribution; ``verify_draft`` draws over ascending ids)."""
    p_ids, p_probs = np.asarray(p[0]), np.asarray(p[1], dtype=np.float64)
    q_ids, q_probs = np.asarray(q[0]), np.asarray(q[1], dtype=np.float64)
    token = int(token)
    qd = float(q_probs[q_ids == token].sum())
    if qd <= 0:
        raise ValueError(f"draft token {token} has zero probability under its own q")
    pd = float(p_probs[p_ids == token].sum())
    if position_uniform(seed, position, stream=1) < min(1.0, pd / qd):
        return True, token
    ids = np.union1d(p_ids, q_ids)  # sorted ascending, unique
    residual = np.zeros(len(ids))
    np.add.at(residual, np.searchsorted(ids, p_ids), p_probs)
    np.subtract.at(residual, np.searchsorted(ids, q_ids), q_probs)
    np.maximum(residual, 0.0, out=residual)
    total = residual.sum()
    if total <= 0:  # p == q: rejection had probability 0
        residual = np.zeros(len(ids))
        np.add.at(residual, np.searchsorted(ids, p_ids), p_probs)
        total = residual.sum()
    return False, sample(ids, residual / total, position_uniform(seed, position))
