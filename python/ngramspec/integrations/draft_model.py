"""``NGramDraftModel``: the n-gram predictor behind llama-cpp-python's own
``Llama(draft_model=...)`` interface.

Prefer ``ngramspec.wrap(llm)``: llama-cpp-python's draft-model path forces
``logits_all=True`` (an n_ctx x n_vocab float32 array, filled on every decode),
ignores whether KV rollback succeeded, and verifies every draft whatever it
costs. This class exists for code that is already built around that interface.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from llama_cpp.llama_speculative import LlamaDraftModel

from ngramspec._core import NGramPredictor
from ngramspec.arg_checks import checked_int

__all__ = ["NGramDraftModel"]


class NGramDraftModel(LlamaDraftModel):
    """num_pred_tokens: draft length asked of the predictor on each call.
    min_order, max_order, window: passed to ``NGramPredictor``."""

    def __init__(self, num_pred_tokens: int = 8, *, min_order: int = 2, max_order: int = 4,
                 window: int = 512) -> None:
        self.num_pred_tokens = checked_int(num_pred_tokens, "num_pred_tokens", minimum=0)
        self.predictor = NGramPredictor(min_order=min_order, max_order=max_order, window=window)
        self._seen = np.empty(0, dtype=np.intc)

    def __call__(self, input_ids: Any, /, **kwargs: Any) -> np.ndarray:
        ids = np.asarray(input_ids)
        if ids.ndim != 1:
            raise ValueError("input_ids must be 1-D")
        n = len(self._seen)
        # Llama calls with the whole sequence each time; feed only what is new,
        # and start over when the sequence is not an extension of the last one.
        if len(ids) >= n and np.array_equal(ids[:n], self._seen):
            self.predictor.update_batch(ids[n:])
        else:
            self.predictor.reset()
            self.predictor.update_batch(ids)
        self._seen = ids.astype(np.intc, copy=True)
        return self.predictor.predict(self.num_pred_tokens).astype(np.intc)
