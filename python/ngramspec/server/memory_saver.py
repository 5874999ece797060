"""``--memory FILE``: saved when the server stops, however it stops."""
from __future__ import annotations

import atexit
import contextlib
import logging
from typing import Any

__all__ = ["MemorySaver", "save_at_shutdown"]

log = logging.getLogger(__name__)


class MemorySaver:
    """Saves a server's ``--memory`` once the server stops, however it stops: at
    the app's lifespan shutdown, which uvicorn runs on SIGINT and SIGTERM alike
    before it re-raises the signal (after which ``atexit`` never runs: a plain
    ``kill``, systemd or ``docker stop`` lost the memory), and at interpreter exit
    for an app that was built but never served."""

    def __init__(self, memory: Any, path: str) -> None:
        self.memory, self.path, self.saved = memory, path, False

    def save(self) -> None:
        if self.saved:
            return
        self.saved = True
        try:
            self.memory.save(self.path)
            log.info("memory saved to %s", self.path)
        except Exception as e:  # a full disk must not hide the shutdown; say so
            log.error("could not save the memory to %s: %s: %s", self.path, type(e).__name__, e)


def save_at_shutdown(app: Any, memory: Any, path: str) -> None:
    """Wrap ``app``'s lifespan so that ``memory`` is saved to ``path`` at its end
    (and at interpreter exit, whichever comes first)."""
    saver = MemorySaver(memory, path)
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> Any:
        async with inner(a) as state:
            try:
                yield state
            finally:
                saver.save()

    app.router.lifespan_context = lifespan
    atexit.register(saver.save)
