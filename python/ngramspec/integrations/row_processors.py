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
  behind a Pydantic schema, a JSON schema or a regex): ``outlines_rows.OutlinesRows``;
- any processor that declares it, with a true ``ngramspec_row_safe`` attribute.

Any other processor is decoded by the wrapped Llama's own path, as before: nobody
said it is safe to call it again.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ngramspec.integrations.outlines_rows import OutlinesRows

__all__ = ["OutlinesRows", "row_processors_of"]


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
