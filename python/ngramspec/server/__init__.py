"""``ngramspec serve``: llama-cpp-python's OpenAI-compatible server with speculative routes."""
from __future__ import annotations

from ngramspec.server.app import ServeOptions, build_parser, create_app, main

__all__ = ["ServeOptions", "build_parser", "create_app", "main"]
