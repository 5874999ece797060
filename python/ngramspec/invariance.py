"""Is batched verification bit-exact on this model and build?

Exact speculative decoding needs the logits of a k-token verify batch to equal,
bit for bit, the logits of decoding those tokens one at a time. Some llama.cpp
kernels (llamafile sgemm, CPU repack, the tiled K-quant matmul for 8+ rows)
compute batches in a different order and break that. This module measures it.

The check answers bit-exactness only. Its timings (one decode per size) are
kept for information; the cost curve the engine prices verification with is
measured separately and robustly (``costcurve.measure_cost_curve``) and
attached by ``invariance_cache.load_or_check`` as ``InvarianceReport.cost_curve``.

Which sizes are checked (``check_sizes``): every size up to CHECK_DENSE_UP_TO,
then only a geometric set (24, 32, 48, 64, ...) plus the largest size asked
for, and never beyond MAX_CHECK_BATCH. A size that is not checked is absent
from ``results`` and so never allowed in exact mode. The check therefore costs
at most MAX_CHECK_BATCH one-token decodes plus sum(check_sizes(...)) <= 304
batched tokens, however large the request (``--max-draft 10000`` included): its
cost no longer grows with the square of the largest size.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _llama
from .costcurve import CostCurveResult, llm_threads, prior_curve, validate_curve

__all__ = ["BatchSizeResult", "InvarianceReport", "check_batch_invariance", "check_sizes", "effective_max_batch",
           "CHECK_DENSE_UP_TO", "MAX_CHECK_BATCH"]

#: Every batch size up to this one is checked.
CHECK_DENSE_UP_TO = 16
#: No batch size above this one is checked (nor, in exact mode, used). A batch of
#: 8 already costs 3-6x one token on the CPUs measured (FACTS §3), 64 rows
#: ~20x: beyond it a verify batch cannot pay for itself on a CPU.
MAX_CHECK_BATCH = 64
#: Beyond CHECK_DENSE_UP_TO, only these sizes (a ~1.5x geometric series) are checked.
_GEOMETRIC = (24, 32, 48, 64)
#: One-shot timings from the check pass as a cost curve only if the check's B=1
#: batch decode is within this fraction of its median one-token decode.
ONE_SHOT_R1_TOLERANCE = 0.25


def check_sizes(max_batch: int) -> list[int]:
    """The batch sizes a check up to ``max_batch`` decodes: 1..min(max_batch,
    CHECK_DENSE_UP_TO), then the geometric sizes below the top, then the top,
    min(max_batch, MAX_CHECK_BATCH), itself."""
    top = min(int(max_batch), MAX_CHECK_BATCH)
    if top < 1:
        return []
    sizes = list(range(1, min(top, CHECK_DENSE_UP_TO) + 1))
    sizes += [b for b in _GEOMETRIC if CHECK_DENSE_UP_TO < b < top]
    if top > CHECK_DENSE_UP_TO:
        sizes.append(top)
    return sizes


def effective_max_batch(llm: Any, max_batch: int) -> int:
    """``max_batch`` clamped to what the context decodes in one ubatch,
    min(n_batch, n_ubatch), and to MAX_CHECK_BATCH."""
    top: int = max(1, min(int(max_batch), llm.n_batch, llm.context_params.n_ubatch, MAX_CHECK_BATCH))
    return top

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
    """results: {B: BatchSizeResult} for every checked size (``check_sizes``);
    a size absent from it was not checked and must not be used in exact mode.
    cost_curve: the verify-cost curve to price these sizes with, and where it
    came from (``load_or_check`` attaches a robust one; None on a bare check)."""
    results: dict[int, BatchSizeResult] = field(default_factory=dict)
    single_token_seconds: float = float("nan")  # median of the check's one-token decodes
    cost_curve: CostCurveResult | None = None
    threads: tuple[int, int] | None = None  # (n_threads, n_threads_batch) the check ran with, if known

    @property
    def invariant_sizes(self) -> list[int]:
        return [b for b, r in sorted(self.results.items()) if r.invariant]

    def relative_costs(self) -> dict[int, float]:
        """{B: r(B)}: ``cost_curve.relative`` when a curve is attached (see its
        ``origin``); otherwise ``one_shot_curve()``'s (the check's own timings if
        they pass validation, else the prior); {} when the report has no timings."""
        curve = self.cost_curve if self.cost_curve is not None else self.one_shot_curve()
        return dict(curve.relative) if curve is not None else {}

    def one_shot_curve(self) -> CostCurveResult | None:
        """The check's own timings (one decode per size) as a curve, if they pass
        ``validate_curve`` (with r(1) within ONE_SHOT_R1_TOLERANCE, and no spread
        to judge); else the conservative prior over the same sizes, never the
        timings clipped to [1, B]. None if the report holds no timings."""
        one = self.single_token_seconds
        timed = {b: r.seconds for b, r in sorted(self.results.items())
                 if isinstance(r.seconds, float) and np.isfinite(r.seconds) and r.seconds > 0}
        if not (isinstance(one, float) and np.isfinite(one) and one > 0) or not timed:
            return None
        relative = {b: t / one for b, t in timed.items()}
        reason = validate_curve(relative, r1_tolerance=ONE_SHOT_R1_TOLERANCE, threads=self.threads)
        if reason is not None:
            return prior_curve(self.results, f"the invariance check's one-shot timings failed validation: {reason}")
        relative[1] = 1.0
        return CostCurveResult(relative, "measured", False, None, 1, "one decode per size (the invariance check)",
                               reason="one-shot timings: plausible but not repeated")

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
            verdict = "yes" if r.invariant else "NO"
            lines.append(f"{b:>5}  {verdict:>9}  {r.rows_differing:>14}  {r.max_abs_diff:>12.3g}")
        return "\n".join(lines)


def check_batch_invariance(llm: Any, max_batch: int = 16, *, prefix_tokens: int = 8,
                           tokens: Sequence[int] | None = None, progress: bool = False) -> InvarianceReport:
    """For each batch size in ``check_sizes(max_batch)`` (after clamping), decode
    a batch after a short prefix and compare every row's logits with
    one-token-at-a-time decoding of the same tokens, bit for bit.

    The check uses ``llm``'s own context (same threads, same kernels as
    generation) and so clears its KV cache: ``llm`` is left reset, as after
    ``llm.reset()``, and its next call re-evaluates its prompt.

    max_batch: largest verify batch to test, >= 1. It is clamped to
        min(n_batch, n_ubatch) (a verify batch is never larger) and to
        MAX_CHECK_BATCH; sizes above CHECK_DENSE_UP_TO are checked only on the
        geometric set of ``check_sizes``, so the check's cost is bounded.
    prefix_tokens: tokens decoded before the probe so positions are not 0
        (decoded in chunks of min(n_batch, n_ubatch)).
    tokens: probe tokens (default: a tokenized code-and-prose snippet).
    progress: show a progress bar on stderr.
    """
    _llama.context_of(llm)
    if isinstance(max_batch, bool) or not isinstance(max_batch, (int, np.integer)):
        raise TypeError(f"max_batch must be an int, got {type(max_batch).__name__}")
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    limit = min(llm.n_batch, llm.context_params.n_ubatch)
    max_batch = effective_max_batch(llm, max_batch)
    sizes = check_sizes(max_batch)
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

    batch = _llama.Batch(max(max_batch, min(prefix_tokens, limit)))
    try:
        _llama.clear_memory(llm)
        for start in range(0, prefix_tokens, limit):    # never more than n_batch / n_ubatch at once
            batch.fill(prefix[start:start + limit], start, all_logits=False)
            _llama.decode(llm, batch)
        reference = np.empty((max_batch, llm.n_vocab()), dtype=np.float32)
        singles = []
        for i, tok in enumerate(probe):
            batch.fill([tok], prefix_tokens + i, all_logits=True)
            t0 = time.perf_counter()
            _llama.decode(llm, batch)
            singles.append(time.perf_counter() - t0)
            reference[i] = _llama.output_logits(llm, 1)[0]
        report = InvarianceReport(threads=llm_threads(llm))
        report.single_token_seconds = float(np.median(singles))
        from tqdm import tqdm  # type: ignore[import-untyped]  # no types-tqdm in the dev tools

        for b in tqdm(sizes, desc="batch invariance", unit="size", disable=not progress, file=sys.stderr):
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
