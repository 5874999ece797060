"""The ``ngramspec`` command."""
from __future__ import annotations

from ngramspec.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
