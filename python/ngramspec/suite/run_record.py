"""One timed run of one method on one prompt, and the clock that splits it.

Timing: a run's prefill ends when its first generated token is known (the
first call of its stopping criteria, which llama-cpp-python and the engine both
make right after choosing a token); decode is the rest. Decode speed is
(generated tokens - 1) / decode time, because the first token comes with the
prefill.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


class FirstTokenClock:
    """A stopping criterion that never stops: it notes when the first token was chosen."""

    def __init__(self) -> None:
        self.first: float | None = None

    def __call__(self, input_ids: Any, logits: Any) -> bool:
        if self.first is None:
            self.first = time.perf_counter()
        return False


@dataclass
class Run:
    method: str
    workload: str
    item: str
    round: int
    prefill_s: float
    decode_s: float
    tokens: int                      # generated tokens
    text: str
    error: str = ""
    output_ids: list[int] = field(default_factory=list)   # ngramspec only
    stats: dict[str, Any] = field(default_factory=dict)   # ngramspec only

    @property
    def decode_tokens(self) -> int:
        return max(0, self.tokens - 1)
