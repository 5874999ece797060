"""Is batched verification bit-exact on this model and build?

Exact speculative decoding needs the logits of a k-token verify batch to equal,
bit for bit, the logits of decoding those tokens one at a time. Some llama.cpp
kernels (llamafile sgemm, CPU repack, the tiled K-quant matmul for 8+ rows)
compute batches in a different order and break that. This module measures it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import sys
import time

import numpy as np

from . import _llama

__all__ = ["BatchSizeResult", "InvarianceReport", "check_batch_invariance"]

_PROBE_TEXT = (
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"
    "The quick brown fox jumps over the lazy dog. Speculative decoding verifies many tokens at once. "
)


@dataclass(frozen=True)
class BatchSizeResult:
    batch_size: int
    invariant: bool
    rows_differing: int      # rows whose logits are not bit-identical to one-token decoding
    max_abs_diff: float      # largest absolute logit difference over all rows
    seconds: float = float("nan")  # time of this batch's llama_decode (one sample: a rough cost)


@dataclass
class InvarianceReport:
    results: dict[int, BatchSizeResult] = field(default_factory=dict)
    single_token_seconds: float = float("nan")  # median of the check's one-token decodes

    @property
    def invariant_sizes(self) -> list[int]:
        return [b for b, r in sorted(self.results.items()) if r.invariant]

    def relative_costs(self) -> dict[int, float]:
        """{B: time of the B-token batch / a one-token decode}, from the check's
        own timings: a rough verify-cost curve that costs nothing extra."""
        one = self.single_token_seconds
        if not one > 0:
            return {}
        return {b: r.seconds / one for b, r in sorted(self.results.items()) if r.seconds == r.seconds}

    @property
    def max_invariant_batch(self) -> int:
        """Largest B such that every size 1..B is invariant (0 if even 1 is not)."""
        best = 0
        for b in sorted(self.results):
            if not self.results[b].invariant:
                break
            best = b
        return best

    def __str__(self) -> str:
        lines = ["batch  invariant  rows_differing  max_abs_diff"]
        for b, r in sorted(self.results.items()):
            lines.append(f"{b:>5}  {'yes' if r.invariant else 'NO':>9}  {r.rows_differing:>14}  {r.max_abs_diff:>12.3g}")
        return "\n".join(lines)


def check_batch_invariance(llm: Any, max_batch: int = 16, *, prefix_tokens: int = 8,
                           tokens: Sequence[int] | None = None, progress: bool = False) -> InvarianceReport:
    """For each batch size 1..max_batch, decode a batch after a short prefix and
    compare every row's logits with one-token-at-a-time decoding of the same
    tokens, bit for bit.

    The check uses ``llm``'s own context (same threads, same kernels as
    generation) and so clears its KV cache: ``llm`` is left reset, as after
    ``llm.reset()``, and its next call re-evaluates its prompt.

    max_batch: largest verify batch to test, 1..min(n_batch, n_ubatch).
    prefix_tokens: tokens decoded before the probe so positions are not 0.
    tokens: probe tokens (default: a tokenized code-and-prose snippet).
    progress: show a progress bar on stderr.
    """
    _llama.context_of(llm)
    if isinstance(max_batch, bool) or not isinstance(max_batch, (int, np.integer)):
        raise TypeError(f"max_batch must be an int, got {type(max_batch).__name__}")
    limit = min(llm.n_batch, llm.context_params.n_ubatch)
    if not 1 <= max_batch <= limit:
        raise ValueError(f"max_batch must be between 1 and min(n_batch, n_ubatch) = {limit}, got {max_batch}")
    if prefix_tokens < 1:
        raise ValueError("prefix_tokens must be >= 1")
    if tokens is None:
        tokens = llm.tokenize(_PROBE_TEXT.encode(), add_bos=False, special=False)
        while len(tokens) < prefix_tokens + max_batch:
            tokens = list(tokens) + list(tokens)
    tokens = [int(t) for t in tokens]
    need = prefix_tokens + max_batch
    if len(tokens) < need:
        raise ValueError(f"need at least {need} probe tokens, got {len(tokens)}")
    if need > _llama.usable_n_ctx(llm):
        raise ValueError(f"n_ctx {_llama.usable_n_ctx(llm)} is too small for a probe of {need} tokens")
    prefix, probe = tokens[:prefix_tokens], tokens[prefix_tokens:need]

    batch = _llama.Batch(max(max_batch, prefix_tokens))
    try:
        _llama.clear_memory(llm)
        batch.fill(prefix, 0, all_logits=False)
        _llama.decode(llm, batch)
        reference = np.empty((max_batch, llm.n_vocab()), dtype=np.float32)
        singles = []
        for i, tok in enumerate(probe):
            batch.fill([tok], prefix_tokens + i, all_logits=True)
            t0 = time.perf_counter()
            _llama.decode(llm, batch)
            singles.append(time.perf_counter() - t0)
            reference[i] = _llama.output_logits(llm, 1)[0]
        report = InvarianceReport()
        report.single_token_seconds = float(np.median(singles))
        from tqdm import tqdm

        for b in tqdm(range(1, max_batch + 1), desc="batch invariance", unit="size", disable=not progress,
                      file=sys.stderr):
            if not _llama.remove_from(llm, prefix_tokens):
                raise RuntimeError("this model cannot roll back its cache, so batch invariance cannot be probed")
            batch.fill(probe[:b], prefix_tokens, all_logits=True)
            t0 = time.perf_counter()
            _llama.decode(llm, batch)
            seconds = time.perf_counter() - t0
            got = _llama.output_logits(llm, b)
            same = np.all(got.view(np.uint32) == reference[:b].view(np.uint32), axis=1)
            diff = float(np.max(np.abs(got - reference[:b])))
            report.results[b] = BatchSizeResult(b, bool(same.all()), int((~same).sum()), diff, seconds)
        return report
    finally:
        batch.close()
        _llama.clear_memory(llm)
