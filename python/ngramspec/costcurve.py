"""The verify-cost curve r(B): the time of one llama_decode of B tokens (logits
on every row, as verification needs) divided by the time of one token."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from . import _llama

# Real text, so that attention sees a plausible cache; repeated to any length.
_TEXT = ("def total_price(items, tax_rate):\n    subtotal = 0\n    for item in items:\n"
         "        subtotal += item.price * item.quantity\n    return subtotal * (1 + tax_rate)\n")


@dataclass
class CostCurve:
    relative: list[float]     # relative[b - 1] = r(b); relative[0] == 1
    single_seconds: float     # median time of a one-token pass

    def __call__(self, batch: int) -> float:
        return self.relative[batch - 1]


def measure_verify_cost(llm: Any, max_batch: int, *, reps: int = 5, context_tokens: int = 128,
                        progress: bool = False) -> CostCurve:
    """Median over ``reps`` sweeps of B = 1..max_batch, each pass after
    ``context_tokens`` cached tokens. Clears the Llama's cache (its bookkeeping
    is reset, so the next call re-evaluates its prompt)."""
    if max_batch < 1 or reps < 1:
        raise ValueError("max_batch and reps must be >= 1")
    if context_tokens < 1:
        raise ValueError("context_tokens must be >= 1")
    if max_batch > llm.n_batch:
        raise ValueError(f"max_batch {max_batch} exceeds the context's n_batch ({llm.n_batch})")
    if context_tokens + max_batch > _llama.usable_n_ctx(llm):
        raise ValueError(f"context_tokens + max_batch ({context_tokens + max_batch}) exceeds the context "
                         f"({_llama.usable_n_ctx(llm)} tokens)")
    from tqdm import tqdm

    piece = llm.tokenize(_TEXT.encode(), add_bos=False)
    tokens = piece * ((context_tokens + max_batch) // len(piece) + 1)
    chunk = llm.n_batch
    batch = _llama.Batch(max(min(context_tokens, chunk), max_batch))
    times: dict[int, list[float]] = {b: [] for b in range(1, max_batch + 1)}
    try:
        _llama.clear_memory(llm)
        for start in range(0, context_tokens, chunk):      # llama_decode takes at most n_batch tokens
            batch.fill(tokens[start:min(start + chunk, context_tokens)], start, all_logits=False)
            _llama.decode(llm, batch)
        for _ in tqdm(range(reps), desc="verify cost", unit="sweep", disable=not progress):
            for b in times:
                _llama.remove_from(llm, context_tokens)
                batch.fill(tokens[context_tokens:context_tokens + b], context_tokens, all_logits=True)
                t0 = time.perf_counter()
                _llama.decode(llm, batch)
                times[b].append(time.perf_counter() - t0)
    finally:
        batch.close()
        _llama.clear_memory(llm)
    one = statistics.median(times[1])
    return CostCurve([statistics.median(times[b]) / one for b in times], one)


@dataclass
class ContextCost:
    """Verify-pass times that depend on how many tokens are cached.

    Attention reads the whole cache for every row of a batch, so on a CPU a long
    context makes a B-token pass dearer relative to one token than the short-context
    curve says. Between (and beyond) the measured context lengths, each batch
    size's time is interpolated (extrapolated) linearly in the context length.

    contexts: the measured context lengths, ascending, at least one.
    seconds: seconds[j][b - 1] = time of a b-token pass after contexts[j] tokens."""
    contexts: list[int]
    seconds: list[list[float]]

    def __post_init__(self) -> None:
        if not self.contexts or len(self.contexts) != len(self.seconds):
            raise ValueError("need one curve per context length, and at least one")
        if any(b <= a for a, b in zip(self.contexts, self.contexts[1:])):
            raise ValueError("context lengths must be strictly ascending")
        if len({len(s) for s in self.seconds}) != 1:
            raise ValueError("every curve must cover the same batch sizes")

    @classmethod
    def from_curves(cls, curves: dict[int, CostCurve]) -> "ContextCost":
        contexts = sorted(curves)
        return cls(contexts, [[r * curves[c].single_seconds for r in curves[c].relative] for c in contexts])

    @property
    def max_batch(self) -> int:
        return len(self.seconds[0])

    def time(self, batch: int, context: int) -> float:
        """Seconds of a ``batch``-token pass after ``context`` cached tokens (never
        below the shortest context's time, since a pass cannot get cheaper with
        more context)."""
        cs, s, b = self.contexts, self.seconds, batch - 1
        if len(cs) == 1:
            return s[0][b]
        j = 0
        while j < len(cs) - 2 and context > cs[j + 1]:
            j += 1
        lo, hi = s[j][b], s[j + 1][b]
        t = lo + (hi - lo) * (context - cs[j]) / (cs[j + 1] - cs[j])
        return max(t, min(row[b] for row in s))
