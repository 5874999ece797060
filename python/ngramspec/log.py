"""The package's diagnostics: one logger per module under ``ngramspec`` (library
code logs, it never prints), and the set-up the command line uses to show them.

A program that uses ngramspec as a library configures logging as it likes (Python's
default shows warnings on stderr); ``ngramspec`` and ``ngramspec serve`` show INFO and
up on stderr, one line each, ``ngramspec: <message>``. Warnings that tell a caller
about its own call stay ``warnings.warn``.
"""
from __future__ import annotations

import logging
import sys

__all__ = ["show_on_stderr"]

PACKAGE = "ngramspec"


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record comes (a test's capture
    included), not the stream of the moment it was made."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):  # type: ignore[no-untyped-def]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # type: ignore[no-untyped-def]
        pass


def show_on_stderr(level: int = logging.INFO) -> None:
    """Show the package's log records of ``level`` and up on stderr, each as one line
    ``ngramspec: <message>`` (once per process; the command line calls it)."""
    log = logging.getLogger(PACKAGE)
    if not any(isinstance(h, _Stderr) for h in log.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter(f"{PACKAGE}: %(message)s"))
        log.addHandler(handler)
    log.setLevel(level)
