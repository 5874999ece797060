"""The model-free limit: the best any copy drafter could do on a given text.

Decoding emits one token per forward pass. A speculative pass feeds the token
just emitted plus k draft tokens, costs r(k + 1) single-token passes (the
measured verify-cost curve), and, when the whole draft is right, emits k + 1
tokens. Given the true greedy output, an oracle that

* may draft only tokens that continue an earlier occurrence of the token just
  emitted: what followed that token at some earlier place in the context
  (prompt plus the output so far), the least context any n-gram or
  prompt-lookup drafter conditions on; a copy may run on into the tokens it is
  producing, as in LZ77, which is what a chained n-gram draft does on a
  repeating run), and
* knows how far each copy stays right,

chooses every draft length by dynamic programming to minimise total verify cost.
Its speed-up over one-token decoding bounds every n-gram and prompt-lookup
drafter on that text. The perfect-drafter ceiling drops the copy rule: every
draft of any allowed length is right, so only r(B) limits it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable


def copy_lengths(prompt: Sequence[int], output: Sequence[int]) -> list[int]:
    """L[i] for each output index i: the longest run output[i+1 : i+1+L] equal to
    seq[p+1 : p+1+L] for some earlier occurrence seq[p] == output[i] of the token
    just emitted (seq = prompt + output, p before output[i]'s own index; the
    span may overlap the run)."""
    seq = list(prompt) + list(output)
    positions: dict[int, list[int]] = {}
    for p, t in enumerate(seq[: len(prompt)]):
        positions.setdefault(t, []).append(p)
    end = len(seq)
    lengths = []
    for i in range(len(output)):
        anchor = len(prompt) + i         # output[i], the token the draft would follow
        q = anchor + 1                   # index in seq of the first draft token
        best = 0
        if q < end:
            for p in positions.get(seq[anchor], ()):
                n = 0
                while q + n < end and seq[p + 1 + n] == seq[q + n]:
                    n += 1
                best = max(best, n)
        lengths.append(best)
        # Once emitted, output[i] is an earlier occurrence for the drafts after it.
        positions.setdefault(seq[anchor], []).append(anchor)
    return lengths


@dataclass
class Limit:
    tokens: int            # output tokens after the first (the first comes with prefill)
    cost: float            # the oracle's total verify cost, in single-token passes
    passes: int
    plain_cost: float | None = None   # one-token decoding of the same tokens, in the same unit
    #                                   as cost, where a pass's price depends on its position

    @property
    def speedup(self) -> float:
        plain = self.tokens if self.plain_cost is None else self.plain_cost
        return plain / self.cost if self.cost else 1.0

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens / self.passes if self.passes else 1.0


def best_schedule(draftable: Sequence[float], cost: Sequence[float], allowed: Sequence[bool],
                  cost_at: Callable[[int, int], float] | None = None) -> Limit:
    """Minimum-cost passes over the output.

    draftable[i]: how many correct draft tokens may follow output[i] (math.inf
        for the perfect drafter); only the first len(output) - 1 entries count.
    cost[b - 1]: r(b), the cost of a b-token pass relative to one token.
    allowed[b - 1]: whether a b-token verify batch may be used (exact mode uses
        only the batch sizes found bit-exact).
    cost_at: if given, cost_at(i, b) is the price of the b-token pass that
        follows output[i] (its cost may grow with the context), used instead of
        ``cost``; plain decoding is then priced as the sum of cost_at(i, 1)."""
    n = len(draftable)
    by_position = cost_at is not None
    if n <= 1:
        return Limit(0, 0.0, 0, 0.0 if by_position else None)
    if cost_at is None:
        def cost_at(i: int, b: int) -> float:
            return cost[b - 1]
    sizes = [b for b in range(1, len(cost) + 1) if allowed[b - 1]]
    if 1 not in sizes:
        raise ValueError("a one-token pass must be allowed")
    best = [math.inf] * n
    passes = [0] * n
    best[n - 1] = 0.0                      # the last token is already emitted
    for i in range(n - 2, -1, -1):
        reach = min(draftable[i], n - 2 - i)   # draft tokens beyond the last one are wasted
        for b in sizes:
            k = b - 1
            if k > reach:
                break
            c = cost_at(i, b) + best[i + k + 1]
            if c < best[i]:
                best[i], passes[i] = c, passes[i + k + 1] + 1
    plain = sum(cost_at(i, 1) for i in range(n - 1)) if by_position else None
    return Limit(n - 1, best[0], passes[0], plain)


def model_free_limit(prompt: Sequence[int], output: Sequence[int], cost: Sequence[float],
                     allowed: Sequence[bool], cost_at: Callable[[int, int], float] | None = None) -> Limit:
    return best_schedule(copy_lengths(prompt, output), cost, allowed, cost_at)


def perfect_limit(n_output: int, cost: Sequence[float], allowed: Sequence[bool],
                  cost_at: Callable[[int, int], float] | None = None) -> Limit:
    return best_schedule([math.inf] * n_output, cost, allowed, cost_at)


def priced_by_context(prompt_length: int, seconds: Callable[[int, int], float]) -> Callable[[int, int], float]:
    """cost_at for best_schedule from a pass-time model ``seconds(batch, context)``
    (e.g. ContextCost.time): the pass after output[i] sees prompt_length + i
    cached tokens."""
    return lambda i, b: seconds(b, prompt_length + i)


def combine(limits: Sequence[Limit]) -> Limit:
    """The limit of several generations run one after another."""
    priced = [x.plain_cost for x in limits if x.plain_cost is not None]
    if priced and len(priced) < len(limits):
        raise ValueError("cannot combine limits priced per position with limits priced per pass")
    plain = sum(priced) if len(priced) == len(limits) else None
    return Limit(sum(x.tokens for x in limits), sum(x.cost for x in limits), sum(x.passes for x in limits),
                 plain)
