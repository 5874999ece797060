"""Which of a user's logits processors the engine may apply to verified rows.

Plain llama-cpp-python calls each processor once per sampled token, with the tokens
before it (``input_ids``) and that token's scores. The engine calls a row processor
for each verified row in the same order, with the same input_ids, and only for rows
whose tokens before them were kept (``engine/row_rules.py``). The one call plain
never makes: after an audit in exact mode finds a row changed (a rare event), a
pass's rows are processed again from its start, with earlier input_ids than the
last call's. So a processor may go through the engine when it answers such a call
as it did the first time:

- llama-cpp-python's ``MinTokensLogitsProcessor``: its only state is the prompt's
  length, set at its first call (the prompt's row, never processed again);
- outlines' structured generation (outlines_core's ``OutlinesCoreLogitsProcessor``,
  behind a Pydantic schema, a JSON schema or a regex): ``OutlinesRows`` below;
- any processor that declares it, with a true ``ngramspec_row_safe`` attribute.

Any other processor is decoded by the wrapped Llama's own path, as before: nobody
said it is safe to call it again.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["OutlinesRows", "row_processors_of"]


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


def row_processors_of(logits_processor: Any) -> list[Any] | None:
    """The row processors for ``logits_processor`` (a ``LogitsProcessorList`` or a
    list), in order; None when any of them is not known or declared safe to apply to
    verified rows (the module docstring), or when one is there twice (a stateful one
    would advance twice per token, in plain too), or for a bare callable (plain
    iterates over it inside its sampler callback, which fails and is ignored: the
    processor is never applied there)."""
    if not isinstance(logits_processor, (list, tuple)):
        return None
    from llama_cpp import MinTokensLogitsProcessor

    procs: Sequence[Any] = list(logits_processor)
    if len({id(p) for p in procs}) != len(procs):
        return None
    rows: list[Any] = []
    for proc in procs:
        if type(proc) is MinTokensLogitsProcessor and proc.prompt_tokens is None:
            rows.append(proc)
        elif OutlinesRows.fits(proc):
            rows.append(OutlinesRows(proc))
        elif getattr(proc, "ngramspec_row_safe", False) is True and callable(proc):
            rows.append(proc)
        else:
            return None
    return rows or None
