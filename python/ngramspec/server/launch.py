"""``ngramspec serve``'s command line: llama-cpp-python server's arguments
(``python -m llama_cpp.server``), then ours; ``main`` builds the app and runs it."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

import uvicorn
from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

from ngramspec import models
from ngramspec.cli.spellings import add_other_spellings
from ngramspec.errors import UserError
from ngramspec.log import show_on_stderr
from ngramspec.options import add_arguments, from_arguments, parse_bool
from ngramspec.server.app import create_app
from ngramspec.server.served_model import short_model_id
from ngramspec.server.settings import DEFAULT_MAX_QUEUE, ServeOptions
from ngramspec.server.shutdown import CancelledLifespanIsShutdown

__all__ = ["build_parser", "main", "settings_from_args"]


#: The help of llama-cpp-python's settings whose default differs here (settings_from_args).
_OUR_HELP = {
    "logits_all": "Whether to keep the logits of every position (default: False here: the engine asks for logits "
                  "only on the rows it verifies)",
    "interrupt_requests": "Whether a waiting request cuts a running stream short (default: False here)",
    "n_gpu_layers": "The number of layers to put on the RPC workers (or a GPU); -1 = all (default: all with --rpc, "
                    "else 0)",
    "rpc_servers": "The same as --rpc (llama-cpp-python's own spelling, which it ignores)",
}


class _ServeParser(argparse.ArgumentParser):
    """llama-cpp-python's ``add_args_from_model`` adds its settings one ``add_argument``
    at a time: those whose default differs here get our help."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        if kwargs.get("dest") in _OUR_HELP:
            kwargs["help"] = _OUR_HELP[kwargs["dest"]]
        return super().add_argument(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """llama-cpp-python server's arguments (``python -m llama_cpp.server``), then ours."""
    parser = _ServeParser(
        prog="ngramspec serve", allow_abbrev=False,   # as the CLI's: no option stands for another
        description="OpenAI-compatible server (llama-cpp-python's) with exact n-gram speculative decoding. "
                    "Takes the settings of `python -m llama_cpp.server`, spelled the same way; --model also "
                    "takes a name from ngramspec.models.")
    add_args_from_model(parser, Settings)
    ours = parser.add_argument_group("ngramspec")
    add_arguments(ours, style="underscore")   # the engine's options (ngramspec.EngineOptions)
    ours.add_argument("--max_queue", dest="max_queue", type=int, default=DEFAULT_MAX_QUEUE,
                      help=f"completion requests running or waiting; more get 503 (default: {DEFAULT_MAX_QUEUE})")
    ours.add_argument("--memory", dest="memory", default=None, metavar="FILE",
                      help="a Memory of earlier requests shared by every request of this server: loaded from FILE "
                           "if it exists, saved there when the server stops (SIGINT or SIGTERM) (docs/memory.md)")
    ours.add_argument("--rpc", dest="rpc", default=None, metavar="HOST:PORT,...",
                      help="load the model onto these RPC workers (`ngramspec rpc-worker` on each), every layer on "
                           "them unless --n_gpu_layers says otherwise: comma-separated host:port, in order; a lost "
                           "worker fails the requests until it is back, then the model is loaded again (docs/rpc.md)")
    ours.add_argument("--strict_model_names", dest="strict_model_names", type=parse_bool, default=False,
                      help="answer a request that names another model with 404 model_not_found (default: false: "
                           "serving one model, any name is that model, as llama.cpp's server does)")
    # The other commands' spellings work here too (--n-ctx, --threads, --max-draft), except
    # --draft-model: generate's is a second model drafting, llama-cpp-python's
    # --draft_model its prompt-lookup decoder (ngramspec's own engine drafts here).
    add_other_spellings(parser, skip=("--draft_model",))
    return parser


def settings_from_args(args: argparse.Namespace) -> tuple[Any, Any, ServeOptions, list[str]]:
    """llama-cpp-python's server and model settings, ours, and the names the model
    answers to, from ``build_parser``'s arguments; a bad one is a ``UserError``."""
    if not args.model:
        raise UserError("--model is required: a GGUF path or one of " + ", ".join(models.MODELS))
    if args.max_queue < 1:
        raise UserError("--max_queue must be >= 1")
    try:
        engine = from_arguments(args)
    except (TypeError, ValueError) as e:
        raise UserError(f"--{e}") from None
    rpc = _rpc_option(args)
    if args.n_gpu_layers is None:
        args.n_gpu_layers = -1 if rpc else 0
    given = args.model
    args.model = _model_path(given)
    if args.model_alias is None:
        args.model_alias = short_model_id(given)
    if args.logits_all is None:
        args.logits_all = False
    if args.interrupt_requests is None:
        args.interrupt_requests = False
    try:
        server_settings = parse_model_from_args(ServerSettings, args)
        model_settings = parse_model_from_args(ModelSettings, args)
    except Exception as e:  # pydantic's ValidationError: a setting out of range
        errors = getattr(e, "errors", None)
        if callable(errors):
            raise UserError("; ".join(f"--{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in errors())) from None
        raise UserError(str(e)) from None
    if not 0 <= server_settings.port <= 65535:   # uvicorn would bind some other port and say it had this one
        raise UserError(f"--port must be in 0..65535, got {server_settings.port}")
    if args.memory is not None:
        _check_memory_file(args.memory)
    options = ServeOptions(engine=engine, max_queue=args.max_queue,
                           warmup=engine.warmup, memory=args.memory, strict_model_names=args.strict_model_names,
                           rpc=rpc)
    return server_settings, model_settings, options, [given]


def _rpc_option(args: argparse.Namespace) -> str | None:
    """--rpc, or llama-cpp-python's --rpc_servers (which llama-cpp-python ignores)
    spelling the same thing; the addresses are checked here, before anything loads."""
    rpc, theirs = args.rpc, getattr(args, "rpc_servers", None)
    if rpc and theirs and rpc != theirs:
        raise UserError(f"--rpc {rpc!r} and --rpc_servers {theirs!r} name different workers: give one of them")
    rpc = rpc or theirs
    if rpc:
        from ngramspec.rpc.address import parse_endpoints
        from ngramspec.rpc.errors import RpcAddressError

        try:
            parse_endpoints(rpc)
        except RpcAddressError as e:
            raise UserError(f"--rpc: {e}") from None
    return rpc or None


def _model_path(given: str) -> str:
    """``--model``: a GGUF path, or a name from ngramspec.models (fetched if needed)."""
    resolve = getattr(models, "resolve_model_path", None)
    if resolve is not None:
        path: str = resolve(given)
        return path
    if given in models.MODELS:
        return str(models.fetch(given))
    if os.path.isfile(given):
        return given
    raise UserError(f"model {given!r} is neither a file nor one of: {', '.join(models.MODELS)}")


def _check_memory_file(path: str) -> None:
    """``--memory FILE`` is saved there at shutdown: a path that cannot be, or a file
    that is not a memory, is refused now, before the model loads."""
    from ngramspec.memory.file_format import check_save_path
    from ngramspec.memory.store import Memory

    try:
        check_save_path(path)
    except (ValueError, IsADirectoryError) as e:
        raise UserError(f"--memory: {e}") from None
    if os.path.exists(path):
        try:
            Memory.load(path)
        except ValueError as e:
            raise UserError(f"--memory: {e}") from None
    elif not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise UserError(f"--memory {path!r}: its directory does not exist")


def main(argv: Sequence[str] | None = None) -> int:
    """``ngramspec serve ARGS``: build the app and run it with uvicorn until stopped."""
    from ngramspec.models import ModelFetchError
    from ngramspec.rpc.errors import RpcError

    show_on_stderr()   # the server's log lines (warm-up, memory saved, RPC reloads), as the CLI shows them
    args = build_parser().parse_args(argv)
    try:
        server_settings, model_settings, options, names = settings_from_args(args)
        app = create_app(server_settings, model_settings, options, names)
    except (UserError, ValueError, ModelFetchError, FileNotFoundError, RpcError) as e:
        print(f"ngramspec: error: {e}", file=sys.stderr)
        return 2
    uvicorn.run(CancelledLifespanIsShutdown(app), host=os.getenv("HOST", server_settings.host),
                port=int(os.getenv("PORT", server_settings.port)), ssl_keyfile=server_settings.ssl_keyfile,
                ssl_certfile=server_settings.ssl_certfile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
