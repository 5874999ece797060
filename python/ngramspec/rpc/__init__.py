"""Models split across machines with llama.cpp's RPC backend: ``ngramspec
rpc-worker`` serves a machine's CPU, and ``rpc=["host:port", ...]`` (``--rpc`` on
the command line) loads a model onto such workers.

- ``address``: parsing ``host:port``;
- ``protocol``: what ngramspec knows of the wire protocol (the handshake, the
  framing, stand-in answers);
- ``guard``: the relay that keeps a dying worker from ending the process;
- ``workers``: the checks before llama.cpp is told of a worker, and registration;
- ``loading``: loading a model onto workers, and where its weights went;
- ``errors``: one exception class per thing a caller tells apart.

docs/rpc.md says how to run workers, what each mode gives over them, and what a
worker that dies does.
"""
from __future__ import annotations

from ngramspec.rpc.errors import (
    RpcAddressError,
    RpcError,
    RpcProtocolMismatchError,
    RpcUnavailableError,
    RpcWorkerError,
    RpcWorkerLostError,
)

__all__ = ["RpcError", "RpcAddressError", "RpcUnavailableError", "RpcWorkerError", "RpcProtocolMismatchError",
           "RpcWorkerLostError"]
