"""ngramspec's own server settings, on top of llama-cpp-python's (``llama_cpp.server.settings``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ngramspec.options import EngineOptions

__all__ = ["DEFAULT_MAX_QUEUE", "ServeOptions"]

DEFAULT_MAX_QUEUE = 16


@dataclass
class ServeOptions:
    """ngramspec's own settings, on top of llama-cpp-python's."""

    engine: EngineOptions = field(default_factory=EngineOptions)   # the engine's (--exact, --max_draft...)
    max_queue: int = DEFAULT_MAX_QUEUE  # completion requests running or waiting; the next gets 503
    warmup: bool = False               # before listening: the engine's whole check (engine.warmup), a first decode
    memory: str | None = None          # `--memory FILE`: loaded at start if it exists, saved when the server stops
    strict_model_names: bool = False   # True: a request naming another model gets 404 (default: any name is this model)
    rpc: str | None = None             # `--rpc HOST:PORT,...`: the model's layers on these RPC workers

    @property
    def exact(self) -> bool:
        return self.engine.exact
