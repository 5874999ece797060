"""The server's own state (``app.state.ngramspec``): the model and the names it
answers to, its locks, the queue count, the options. Each app has its own, so two
apps in one process serve their own models."""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio

from ngramspec.server.errors import ClientError, as_client_error, raised_by_a_template, template_refusal
from ngramspec.server.messages import ChatTemplate
from ngramspec.server.served_model import SpeculativeProxy
from ngramspec.server.settings import ServeOptions

__all__ = ["ServerState"]


class ServerState:
    """The server's own state: the proxy, the queue count, the options."""

    def __init__(self, proxy: SpeculativeProxy, options: ServeOptions, server_settings: Any) -> None:
        self.proxy = proxy
        self.options = options
        self.interrupt = bool(server_settings.interrupt_requests)
        self.pending = 0
        self.served = 0
        self.cancelled = 0  # streams that ended before their end: the client went away (or was interrupted)
        self.chat = ChatTemplate(proxy.wrapper.llm)
        # llama-cpp-python's double lock (its get_llama_proxy), this app's own: requests
        # take the model in arrival order, and a running stream can see one waiting.
        self._outer = anyio.Lock()
        self._inner = anyio.Lock()
        #: sse-starlette's keep-alive comment, or an empty one under --disable_ping_events.
        self.ping: Callable[[], bytes] | None = (lambda: b"") if server_settings.disable_ping_events else None

    @contextlib.asynccontextmanager
    async def model(self) -> AsyncIterator[SpeculativeProxy]:
        """The model, held until the block ends; requests wait in arrival order."""
        await self._outer.acquire()
        release_outer = True
        try:
            await self._inner.acquire()
            try:
                self._outer.release()
                release_outer = False
                yield self.proxy
            finally:
                self._inner.release()
        finally:
            if release_outer:
                self._outer.release()

    def someone_waits(self) -> bool:
        """Whether another request waits for the model (``--interrupt_requests``)."""
        return self._outer.locked()

    def refusal(self, exc: BaseException, body: Any, kwargs: dict[str, Any]) -> BaseException:
        """What a request's call raised, as a 4xx when the request caused it
        (``errors.as_client_error``); messages the chat template cannot render name
        the first message it fails on."""
        if raised_by_a_template(exc) and kwargs.get("messages"):
            return template_refusal(exc, self.chat.failing_message(kwargs["messages"]))
        return as_client_error(exc, body)

    def check_model(self, model: str | None) -> None:
        """Serving one model, any name is that model, as llama.cpp's server and
        llama-cpp-python's answer (tools send fixed or placeholder names);
        ``--strict_model_names true`` answers other names with a 404."""
        if self.options.strict_model_names and model is not None and model not in self.proxy.names:
            raise ClientError(404, f"The model `{model}` does not exist; this server serves `{self.proxy.alias}` "
                                   "(GET /v1/models)", param="model", code="model_not_found")

    def enter(self) -> None:
        if self.pending >= self.options.max_queue:
            raise ClientError(503, f"Server busy: {self.pending} requests are running or waiting (max_queue "
                                   f"{self.options.max_queue}); retry later", type="server_error",
                              code="queue_full")
        self.pending += 1

    def leave(self) -> None:
        self.pending -= 1
        self.served += 1
