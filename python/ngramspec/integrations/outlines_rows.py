"""outlines' structured generation as a row processor (``row_processors.py``).

The one module that reads outlines' private names: its processor's guides
(``_guides``), which it builds again when exact mode's audit looks at a pass a
second time. outlines 1.x keeps them there (outlines/backends/outlines_core.py).
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["OutlinesRows"]


class OutlinesRows:
    """An outlines_core processor (batch of one) as a function of input_ids.

    On every call after its first, the processor advances its guide by the last
    token of input_ids, then masks the scores to what the guide allows next. This
    keeps the tokens the guide went through, and when a call's input_ids do not
    continue them (the audit's second look at a pass), it builds the guide again
    from the kept tokens first, with the processor's own rule for advancing. So
    each call's answer depends only on its input_ids, as in plain decoding."""

    ngramspec_row_safe = True

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self._start: int | None = None         # len(input_ids) at the first call
        self._through = np.empty(0, np.intc)   # the tokens after the prompt the guide has advanced by

    @staticmethod
    def fits(processor: Any) -> bool:
        """Whether ``processor`` is an outlines_core processor this can drive: a fresh
        one (``reset`` or never called), so its first call is this generation's."""
        cls = type(processor)
        return (cls.__name__ == "OutlinesCoreLogitsProcessor" and cls.__module__.startswith("outlines.")
                and getattr(processor, "is_first_token", False) is True and hasattr(processor, "index"))

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> Any:
        proc = self.processor
        if self._start is None:
            self._start = len(input_ids)
            return proc(input_ids, scores)
        before = input_ids[self._start:len(input_ids) - 1]   # what the guide must have gone through
        through = self._through
        if len(through) > len(before) or not np.array_equal(through, before[:len(through)]):
            from outlines_core import Guide

            proc._guides[0] = Guide(proc.index)   # as its _setup made it
            through = through[:0]
        for token in before[len(through):].tolist():
            self._advance(int(token))
        self._through = np.array(input_ids[self._start:], dtype=np.intc)
        return proc(input_ids, scores)

    def _advance(self, token: int) -> None:
        """The processor's own rule (outlines.backends.outlines_core.process_logits)."""
        guide = self.processor._guides[0]
        if not guide.is_finished() or guide.accepts_tokens([token]):
            guide.advance(token_id=token, return_tokens=False)
