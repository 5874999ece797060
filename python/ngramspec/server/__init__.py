"""``ngramspec serve``: llama-cpp-python's OpenAI-compatible server with speculative routes.

Split after llama-cpp-python's server: app.py (create_app and the routes),
launch.py (the command line and main: its cli.py), settings.py, types.py (request
types), errors.py, served_model.py (the proxy and the wrapper: its model.py), plus
streaming.py, state.py, response_fields.py and memory_saver.py. (The ``ngramspec
serve`` subcommand itself is cli/serve.py, which calls ``launch.main``.)
"""
from __future__ import annotations

from ngramspec.errors import UserError  # the package's one: ngramspec.server.UserError still names it
from ngramspec.server.app import create_app
from ngramspec.server.launch import build_parser, main, settings_from_args
from ngramspec.server.settings import ServeOptions

__all__ = ["ServeOptions", "UserError", "build_parser", "create_app", "main", "settings_from_args"]
