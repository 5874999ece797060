"""``ngramspec serve``: llama-cpp-python's OpenAI-compatible server answering with
speculative decoding. Its settings are the server's own, parsed by ngramspec.server."""
from __future__ import annotations

from ngramspec.cli.common import print_error


def run(argv: list[str]) -> int:
    try:
        from ngramspec.server.launch import main as serve
    except ImportError as e:
        print_error(f"error: `serve` needs llama-cpp-python's server extras ({e.name} is missing): "
                    "pip install 'ngramspec[server]'")
        return 2
    return serve(argv)
