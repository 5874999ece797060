"""How a measurement that keeps the caller waiting says so: a tqdm bar on stderr,
or logging records (the server's way), once it has taken PROGRESS_AFTER_S.

``progress(total, desc, style)`` returns a small object with ``update(n)``,
``set_total(n)`` and ``close()``. Styles:

- ``"bar"`` (or True): a tqdm bar on stderr, shown once the work has taken
  ``after`` seconds (shown at once with ``after=0``);
- ``"log"``: an INFO record on the ``ngramspec.calibration.progress`` logger when
  the work has taken ``after`` seconds (at the first ``update`` past it), then at
  most one every LOG_EVERY_S seconds, and one when it ends;
- ``"off"`` (or False, None): nothing.

Callers call ``update(0)`` inside long steps, so that a line appears soon after
``after`` seconds, not only at the end of a step.
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Any

__all__ = ["LOG_EVERY_S", "PROGRESS_AFTER_S", "STYLES", "Progress", "progress", "style_of"]

#: A wait longer than this shows a progress line (the bar, or a log record).
PROGRESS_AFTER_S = 2.0
#: With the "log" style, at most one record this often while the work goes on.
LOG_EVERY_S = 10.0
STYLES = ("bar", "log", "off")

_log = logging.getLogger(__name__)


def style_of(value: Any) -> str:
    """``value`` as one of STYLES: True is "bar", False and None are "off"."""
    if value is True:
        return "bar"
    if value is False or value is None:
        return "off"
    if value in STYLES:
        return str(value)
    raise ValueError(f"progress must be one of {', '.join(map(repr, STYLES))}, True or False, got {value!r}")


class Progress:
    """One wait's progress line (``progress`` makes one)."""

    def __init__(self, total: int | None, desc: str, style: str, after: float, unit: str) -> None:
        self.desc, self.style, self.after, self.unit = desc, style, after, unit
        self.total = total
        self.done = 0
        self.started = time.perf_counter()
        self.shown = False          # a line was shown (log style: a record was written)
        self._last_log = -1.0
        self._bar: Any = None
        if style == "bar":
            from tqdm import tqdm  # type: ignore[import-untyped]  # no types-tqdm in the dev tools

            self._bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, delay=max(0.0, after))

    def set_total(self, total: int) -> None:
        self.total = total
        if self._bar is not None:
            self._bar.total = total   # shown at the next update (a refresh now would show it before its time)

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            if time.perf_counter() - self.started >= self.after:
                self.shown = True
        elif self.style == "log":
            now = time.perf_counter() - self.started
            if now >= self.after and (self._last_log < 0 or now - self._last_log >= LOG_EVERY_S):
                self._last_log = now
                self.shown = True
                of = f" of {self.total}" if self.total else ""
                _log.info("%s: %d%s %ss done, %.0f s so far", self.desc, self.done, of, self.unit, now)

    def close(self, summary: str | None = None) -> None:
        """Ends the line; with the "log" style, a last record (with ``summary``) if one was shown."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.style == "log" and (self.shown or time.perf_counter() - self.started >= self.after):
            self.shown = True
            _log.info("%s: done in %.1f s%s", self.desc, time.perf_counter() - self.started,
                      f" ({summary})" if summary else "")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(total: int | None, desc: str, style: Any = "bar", *, after: float | None = None,
             unit: str = "step") -> Progress:
    """A progress line for ``total`` units of work (None: unknown yet), shown once
    the work has taken ``after`` seconds (default PROGRESS_AFTER_S, read when called)."""
    return Progress(total, desc, style_of(style), PROGRESS_AFTER_S if after is None else after, unit)
