"""Which draft tokens a verify pass accepts, and the model's own next token.

Given the logits of a verify batch [token just emitted, draft...], row i holds
the model's distribution for the position after row i's token. The result is
``targets``: the model's token for each position from the first, up to and
including the first one where it disagrees with the draft (or one past the
draft, the bonus token). ``len(targets) - 1`` draft tokens were accepted.

Greedy: the argmax of each row, stopping at the first mismatch: rows after a
rejection are never needed, and each row is n_vocab floats.

Sampled, one-hot draft (every model-free proposer, a greedy draft model): draw
from p with the position's fixed uniform (``sampling.position_uniform``) and
accept the draft token when the draw equals it. That is modified rejection
sampling with q = one-hot, and the draws are exactly those of non-speculative
sampling with the same seed, whatever the draft.

Sampled, with a real draft distribution q (a sampled draft model): modified
rejection sampling (``sampling.verify_draft``: accept d with probability
min(1, p(d)/q(d)), else draw from norm(max(0, p - q))). The output distribution
is exactly the model's, but the draws depend on the drafts, so the same seed
reproduces the same text only with the same draft model and settings.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ngramspec.sampling import SamplingParams, position_uniform, sample, target_distribution, verify_draft

__all__ = ["accept_greedy", "accept_sampled", "pick"]


def pick(row: np.ndarray, sampling: SamplingParams | None, position: int, history: Sequence[int]) -> int:
    """The token at absolute ``position``: argmax, or a draw fixed by (seed, position)."""
    if sampling is None:
        return int(np.argmax(row))
    ids, probs = target_distribution(row, sampling, history)
    return sample(ids, probs, position_uniform(sampling.seed, position))


def accept_greedy(rows: np.ndarray, draft: np.ndarray) -> list[int]:
    targets = [int(rows[0].argmax())]   # the method skips np.argmax's dispatch
    m, k = 0, len(draft)
    while m < k and draft[m] == targets[m]:
        m += 1
        targets.append(int(rows[m].argmax()))
    return targets


def accept_sampled(rows: np.ndarray, draft: np.ndarray, sampling: SamplingParams, start_position: int,
                   history: list[int], draft_probs: list[tuple[np.ndarray, np.ndarray]] | None = None) -> list[int]:
    """``start_position``: the absolute position of rows[0]'s prediction.
    ``history``: the generated tokens before it, for the penalties (extended here
    with the accepted draft tokens)."""
    if draft_probs is not None:
        return _accept_with_q(rows, draft, sampling, start_position, history, draft_probs)
    targets = [pick(rows[0], sampling, start_position, history)]
    m, k = 0, len(draft)
    while m < k and draft[m] == targets[m]:
        history.append(int(draft[m]))
        m += 1
        targets.append(pick(rows[m], sampling, start_position + m, history))
    return targets


def _dense(ids: np.ndarray, probs: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.float64)
    out[ids] = probs
    return out


def _accept_with_q(rows: np.ndarray, draft: np.ndarray, sampling: SamplingParams, start_position: int,
                   history: list[int], draft_probs: list[tuple[np.ndarray, np.ndarray]]) -> list[int]:
    n_vocab, tokens = rows.shape[1], [int(t) for t in draft]
    # Row i's p only matters if draft[:i] was accepted, so its penalties see them.
    p_rows = [_dense(*target_distribution(rows[i], sampling, history + tokens[:i]), n_vocab)
              for i in range(len(tokens) + 1)]
    q_rows = [_dense(ids, probs, n_vocab) for ids, probs in draft_probs[: len(tokens)]]
    accepted, token = verify_draft(p_rows, q_rows, tokens, sampling.seed, start_position)
    history.extend(tokens[:accepted])
    return tokens[:accepted] + [token]
