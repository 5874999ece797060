"""The ``ngramspec`` command: reads the command line and runs one command.

generate  completion (or --chat) with speculative decoding, streamed, then one
          line of stats; --compare also runs plain decoding and checks identity.
doctor    the llama.cpp build, the AMX hazard, bit-exact batch sizes, the
          verify-cost curve, and a verdict per mode with the command to run.
install-llama  rebuild llama-cpp-python with the flags exact speculation needs.
bench     plain vs llama-cpp-python's prompt lookup vs ngramspec on your machine.
serve     an OpenAI-compatible server answering with speculative decoding.
rpc-worker  serve this machine's CPU to a model split across machines (--rpc).
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence

from ngramspec.cli import bench, doctor, generate, install_llama, rpc_worker, serve
from ngramspec.cli.common import print_error
from ngramspec.cli.parser import build_parser
from ngramspec.errors import UserError
from ngramspec.log import show_on_stderr


def _check_shared_args(args: argparse.Namespace) -> None:
    """Lower bounds of the numeric options that several commands share; each
    command checks its own further limits."""
    for name in ("threads", "max_batch"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1")
    temperature = getattr(args, "temperature", None)
    if temperature is not None and not math.isfinite(temperature):
        raise UserError(f"--temperature must be a finite number, got {temperature}")


def main(argv: Sequence[str] | None = None) -> int:
    show_on_stderr()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:  # its settings are llama-cpp-python server's: server.py parses them
        return serve.run(argv[1:])
    args = build_parser().parse_args(argv)
    from ngramspec.models import ModelFetchError, ModelLoadError
    from ngramspec.rpc.errors import RpcError

    # Looked up on each call, so that a test can replace a command's ``run``.
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "generate": generate.run, "doctor": doctor.run, "bench": bench.run, "install-llama": install_llama.run,
        "rpc-worker": rpc_worker.run}
    try:
        _check_shared_args(args)
        return commands[args.command](args)
    except (UserError, ModelFetchError, ModelLoadError, RpcError) as e:
        # Only mistakes in the user's input or environment end in one line; anything
        # else is a bug in ngramspec and keeps its traceback.
        print_error(f"error: {e}")
        return 2
    except KeyboardInterrupt:
        print_error("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
