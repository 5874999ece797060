"""``ngramspec serve``: llama-cpp-python's OpenAI-compatible server with speculative routes.

Split as llama-cpp-python's server is: app.py (create_app and the routes),
cli.py (the command line and main), settings.py, types.py (request types),
errors.py, model.py (the proxy and the wrapper), plus streaming.py, state.py,
response_fields.py and memory_saver.py.
"""
from __future__ import annotations

from ngramspec.errors import UserError  # the package's one: ngramspec.server.UserError still names it
from ngramspec.server.app import create_app
from ngramspec.server.cli import build_parser, main, settings_from_args
from ngramspec.server.settings import ServeOptions

__all__ = ["ServeOptions", "UserError", "build_parser", "create_app", "main", "settings_from_args"]
