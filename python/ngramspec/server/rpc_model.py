"""``ngramspec serve --rpc``: the model on RPC workers, loaded again after a worker
was lost.

A worker that dies mid-request ends that request with a 503 (``RpcWorkerLostError``:
the layers it held are gone). The model is then closed, and each later request
first tries to load it again: while a worker is still down it gets a 503 saying
which and why; once every worker answers, the model is loaded onto them afresh
(its verify plan read from the invariance cache), and the request is served.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from ngramspec.rpc.errors import RpcWorkerLostError
from ngramspec.rpc.loading import load_onto, workers_of
from ngramspec.rpc.workers import connect

__all__ = ["RpcModel"]

log = logging.getLogger(__name__)


class RpcModel:
    """Keeps the server's wrapper on a live model: ``current(wrapper)`` is the
    wrapper to use now (a new one after a reload), or raises an ``RpcError``."""

    def __init__(self, rpc: str, reload: Callable[[], Any], rebuild: Callable[[Any, Any], Any]) -> None:
        self.rpc = rpc
        self._reload = reload      # () -> a Llama, with the server's model settings
        self._rebuild = rebuild    # (llm, old wrapper) -> the wrapper for llm
        self.reloads = 0
        self._broken = False

    def first(self, load: Callable[[], Any]) -> Any:
        """``load()`` (what loads the model at start-up) onto the workers; any worker
        problem is the start-up's error."""
        return self._onto(load, lambda made: made)

    def current(self, wrapper: Any) -> Any:
        if not self._broken:
            workers = workers_of(wrapper.llm)
            try:
                if workers is not None:
                    workers.check()
                return wrapper
            except RpcWorkerLostError as e:
                log.warning("%s", e)
                self._broken = True
                wrapper.llm.close()    # frees its buffers, so llama.cpp lets go of the lost connection
        llm = self._onto(self._reload, lambda made: made)
        self._broken = False
        self.reloads += 1
        log.info("model loaded again onto the RPC workers %s", self.rpc)
        return self._rebuild(llm, wrapper)

    def _onto(self, construct: Callable[[], Any], llm_of: Callable[[Any], Any]) -> Any:
        return load_onto(connect(self.rpc), construct, llm_of)
