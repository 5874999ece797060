"""The ``ngramspec`` command."""
from __future__ import annotations

# ``ngramspec.cli.main`` is the function (the console script ``ngramspec.cli:main``),
# not the module of that name; `from ngramspec.cli.main import ...` still reaches the module.
from ngramspec.cli.main import main
from ngramspec.cli.parser import build_parser

__all__ = ["build_parser", "main"]
