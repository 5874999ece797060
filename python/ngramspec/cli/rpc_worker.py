"""``ngramspec rpc-worker``: serve this machine's CPU to a model split across
machines (llama.cpp's RPC backend).

The worker is llama.cpp's own RPC server (``ggml_backend_rpc_start_server``, what
llama.cpp's ``rpc-server`` runs) in the ggml library of the installed
llama-cpp-python: the very build the driving process uses, so both speak the same
protocol version and run the same kernels (the exact build's, after
``ngramspec install-llama``), with nothing more to build.

The RPC protocol has no authentication and no encryption; llama.cpp's RPC README:
"Never run the RPC server on an open network or in a sensitive environment!"
"""
from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import signal
import socket
import sys

from ngramspec.errors import UserError

WARNING = ("ngramspec: warning: an RPC worker runs whatever computation any client sends it, with no "
           "authentication and no encryption: serve it only on a trusted network, never an open one.")


def default_threads() -> int:
    """llama-cpp-python's default for n_threads (half the cores, at least one)."""
    return max((os.cpu_count() or 2) // 2, 1)


def _check(args: argparse.Namespace) -> str:
    """The endpoint to serve, after every check that can fail with one line."""
    try:
        host = str(ipaddress.IPv4Address(args.host))
    except ValueError:
        raise UserError(f"--host {args.host!r}: give an IPv4 address of this machine (llama.cpp's RPC server "
                        "binds IPv4 addresses only), e.g. 127.0.0.1 or 0.0.0.0") from None
    if not 1 <= args.port <= 65535:
        raise UserError(f"--port must be in 1..65535, got {args.port}")
    if args.threads is not None and args.threads < 1:
        raise UserError("--threads must be >= 1")
    from ngramspec import _rpc

    if not _rpc.supports_rpc():
        from ngramspec.builds.build_info import INSTALL_COMMAND

        raise UserError(f"this llama-cpp-python was built without RPC support (GGML_RPC=ON): `{INSTALL_COMMAND}` "
                        "rebuilds it with it")
    # llama.cpp's server says only "Failed to create server socket": try the port first.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, args.port))
        except OSError as e:
            raise UserError(f"cannot listen on {host}:{args.port}: {e.strerror or e}") from None
    return f"{host}:{args.port}"


def run(args: argparse.Namespace) -> int:
    endpoint = _check(args)
    threads = args.threads or default_threads()
    print(WARNING, file=sys.stderr, flush=True)
    print(f"ngramspec: RPC worker on {endpoint}, {threads} thread(s); load a model onto it with "
          f"--rpc {endpoint if not endpoint.startswith('0.0.0.0') else 'THIS-HOST:' + str(args.port)}",
          file=sys.stderr, flush=True)
    from ngramspec import _rpc

    # Stopped by a signal, the worker ends at once, as llama.cpp's rpc-server does:
    # Python's own handlers would only run once llama.cpp's loop returned.
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, signal.SIG_DFL)
    _rpc.start_server(endpoint, threads)
    raise UserError(f"llama.cpp's RPC server on {endpoint} stopped (its reason is above)")
