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
    from tqdm import tqdm

    piece = llm.tokenize(_TEXT.encode(), add_bos=False)
    tokens = piece * ((context_tokens + max_batch) // len(piece) + 1)
    batch = _llama.Batch(max(context_tokens, max_batch))
    times: dict[int, list[float]] = {b: [] for b in range(1, max_batch + 1)}
    try:
        _llama.clear_memory(llm)
        batch.fill(tokens[:context_tokens], 0, all_logits=False)
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
