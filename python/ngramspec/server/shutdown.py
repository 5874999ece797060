"""A forced shutdown without a traceback.

A second Ctrl-C makes uvicorn stop at once: it skips the app's lifespan shutdown,
and asyncio then cancels the lifespan task, still waiting for that message. The
app's shutdown code runs all the same (the ``--memory`` save, in a ``finally``),
but Starlette reports the cancellation as a failed shutdown, with an asyncio
``CancelledError`` traceback, after a good save. Here that cancellation is what
it means: the shutdown message.
"""
from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["CancelledLifespanIsShutdown"]


class CancelledLifespanIsShutdown:
    """ASGI app wrapper: in the lifespan protocol, a ``receive`` cancelled while
    waiting for shutdown returns ``lifespan.shutdown``, so the app shuts down as
    on the first Ctrl-C. Every other scope goes to the app unchanged."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:   # app.state and the like, for whoever reads them
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "lifespan":
            await self.app(scope, receive, send)
            return
        started = False

        async def receive_shutdown_on_cancel() -> Any:
            nonlocal started
            try:
                message = await receive()
            except asyncio.CancelledError:
                if not started:
                    raise
                return {"type": "lifespan.shutdown"}
            started = True   # after the startup message, the next one is the shutdown
            return message

        await self.app(scope, receive_shutdown_on_cancel, send)
