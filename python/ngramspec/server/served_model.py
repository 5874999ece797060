"""The model the server serves: loaded as llama-cpp-python's ``LlamaProxy`` loads it;
requests get the wrapper (``SpeculativeProxy``, ``build_wrapper``)."""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ngramspec import models
from ngramspec.integrations.wrapper import wrap
from ngramspec.server.settings import ServeOptions

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["SpeculativeProxy", "build_wrapper", "short_model_id"]

log = logging.getLogger(__name__)


class SpeculativeProxy:
    """Stands in for llama-cpp-python's ``LlamaProxy`` (its ``__call__``,
    ``__iter__``, ``free``): one model, handed out as the ``SpeculativeLlama``."""

    def __init__(self, wrapper: Any, alias: str, names: Sequence[str], rpc_model: Any = None) -> None:
        self.wrapper = wrapper
        self.alias = alias
        self.names = {n for n in names if n}
        self.rpc_model = rpc_model   # server.rpc_model.RpcModel with --rpc: reloads after a lost worker

    def __call__(self, model: str | None = None) -> Any:
        if self.rpc_model is not None:   # called under the model lock, before each request
            self.wrapper = self.rpc_model.current(self.wrapper)
        return self.wrapper

    def __iter__(self) -> Iterator[str]:
        yield self.alias

    def free(self) -> None:
        self.wrapper.llm.close()


def short_model_id(given: str) -> str:
    """The id ``/v1/models`` lists when ``--model_alias`` is not given: a name from
    ngramspec.models as it is, a file path as its stem (``SmolLM2-135M-Instruct.Q4_1``
    for ``/any/where/SmolLM2-135M-Instruct.Q4_1.gguf``), never a path on disk."""
    if given in models.MODELS:
        return given
    name = os.path.basename(given.rstrip("/" + os.sep)) or given
    stem, ext = os.path.splitext(name)
    return stem if ext.lower() == ".gguf" and stem else name


def build_wrapper(llm: Llama, options: ServeOptions, memory: Any = None) -> Any:
    """The server's one wrapper (one engine, holding the ``--memory`` if given, or
    ``memory``: the one the previous wrapper held), warmed up with ``--warmup true``."""
    path = options.memory
    if memory is None and path is not None:
        # One memory for every request of this server: sharing across its users is
        # what `--memory` asks for (docs/memory.md). Saved atomically at shutdown.
        from ngramspec.memory.store import Memory

        memory = Memory.load(path) if os.path.exists(path) else Memory()
    # The engine binds the memory to llm's tokenizer as it is built, before anything is
    # measured: a memory of another tokenizer fails startup here (TokenizerMismatchError,
    # one line from main).
    # The engine's checks say how far they are in log records (over 2 s), as the server's other lines;
    # with --warmup true the whole invariance check and cost curve run here, before listening.
    wrapper = wrap(llm, options.engine.replace(progress="log"), memory=memory)
    if options.warmup:
        _warm_up(wrapper)
    return wrapper


def _warm_up(wrapper: Any) -> None:
    """Before the server listens (``--warmup true``): the engine's first-use work (the
    verify plan: the whole batch-invariance check and cost curve, unless cached on
    disk; the engine did it as it was made) and a first decode
    on the Llama itself ("Hello", evaluated: the model's weights paged in), so that
    neither is paid by the first request; then the context is cleared, so the first
    request starts cold, as on a fresh Llama. Nothing is generated through the
    engine, so the warm-up's text never reaches a ``--memory``: no second wrapper."""
    t0 = time.perf_counter()
    llm = wrapper.llm
    try:
        wrapper.engine.prepare()
        llm.eval(llm.tokenize(b"Hello"))
    except Exception as e:  # the requests will say what is wrong; the server still starts
        log.warning("warm-up failed: %s: %s", type(e).__name__, e)
    llm.reset()
    log.info("warmed up in %.1f s", time.perf_counter() - t0)
