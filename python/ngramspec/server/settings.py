"""ngramspec's own server settings, on top of llama-cpp-python's (``llama_cpp.server.settings``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_MAX_QUEUE", "ServeOptions"]

DEFAULT_MAX_QUEUE = 16


@dataclass
class ServeOptions:
    """ngramspec's own settings, on top of llama-cpp-python's."""

    exact: bool = True                 # verify only with bit-exact batch sizes (fast mode: docs/exactness.md)
    max_draft: int | None = None       # SpeculativeEngine's max_draft (None: its default)
    max_queue: int = DEFAULT_MAX_QUEUE  # completion requests running or waiting; the next gets 503
    warmup: bool = True                # before listening: the engine's first-use work, a first decode
    memory: str | None = None          # `--memory FILE`: loaded at start if it exists, saved when the server stops
    strict_model_names: bool = False   # True: a request naming another model gets 404 (default: any name is this model)
    rpc: str | None = None             # `--rpc HOST:PORT,...`: the model's layers on these RPC workers

    def engine_options(self) -> dict[str, Any]:
        out: dict[str, Any] = {"exact": self.exact}
        if self.max_draft is not None:
            out["max_draft"] = self.max_draft
        return out
