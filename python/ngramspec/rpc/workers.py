"""Connecting to RPC workers: every check that can fail with one clear line runs
here, before llama.cpp is told anything (told a worker it cannot reach, or one of
another protocol version, llama.cpp ends the process).

``connect(addresses)``, in order:

1. the addresses parse (``RpcAddressError``);
2. this llama-cpp-python can use workers: built with ``GGML_RPC=ON``, and of a
   version whose RPC protocol ngramspec knows (``RpcUnavailableError``);
3. each worker answers the protocol's handshake with a compatible version, within
   ``timeout`` seconds (``RpcWorkerError``, ``RpcProtocolMismatchError``); two
   addresses of one worker are refused (a worker serves one client at a time);
4. each worker gets its guard (``rpc.guard``), once per process, and the guard's
   address is registered with ggml as llama.cpp's ``--rpc`` registers a worker.

The result, ``RpcWorkers``, holds the workers' devices (for the model's device
list) and ``check()``, which raises ``RpcWorkerLostError`` once a worker's connection
was lost (the guard answered for it, so what llama.cpp computed is meaningless).
"""
from __future__ import annotations

import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from ngramspec import _rpc
from ngramspec.rpc import protocol
from ngramspec.rpc.address import Endpoint, parse_endpoints
from ngramspec.rpc.errors import RpcAddressError, RpcUnavailableError, RpcWorkerError, RpcWorkerLostError
from ngramspec.rpc.guard import WorkerGuard

__all__ = ["RpcWorkers", "connect", "HANDSHAKE_SECONDS"]

#: How long a worker may take to accept a connection and answer the handshake.
HANDSHAKE_SECONDS = 5.0
#: How long a model that lost a worker may take to let go of it once closed.
_RELEASE_SECONDS = 5.0

# One guard per worker and process, registered with ggml once (ggml's registry
# only grows: a second registration would list the worker's devices twice).
_guards: dict[Endpoint, WorkerGuard] = {}
_devices: dict[Endpoint, list[int]] = {}
_lock = threading.Lock()


@dataclass
class RpcWorkers:
    """The workers one model is loaded onto, in the order given."""

    endpoints: list[Endpoint]
    guards: list[WorkerGuard]
    devices: list[int]

    def check(self) -> None:
        """Raises ``RpcWorkerLostError`` if a worker's connection was lost."""
        for guard in self.guards:
            why = guard.lost
            if why is not None:
                raise RpcWorkerLostError(f"RPC worker {guard.worker} {why} while a model used it: the layers it held "
                                    "are gone; close the model and load it again once the worker is back")

    def worker_of(self, buffer_name: str) -> Endpoint | None:
        """The worker behind a ggml buffer or device name ("RPC0[127.0.0.1:40123]")."""
        for guard in self.guards:
            if f"[{guard.endpoint}]" in buffer_name:
                return guard.worker
        return None


def _check_llama_cpp() -> None:
    import llama_cpp

    version = getattr(llama_cpp, "__version__", "?")
    if not _rpc.supports_rpc():
        from ngramspec.builds.build_info import INSTALL_COMMAND

        raise RpcUnavailableError(f"this llama-cpp-python {version} was built without RPC support (GGML_RPC=ON): "
                             f"`{INSTALL_COMMAND}` rebuilds it with it")
    if version not in protocol.PROTOCOLS:
        known = ", ".join(protocol.PROTOCOLS)
        raise RpcUnavailableError(f"ngramspec knows the RPC protocol of llama-cpp-python {known}, not of {version}: "
                             "install a known version to use RPC workers")


def _check_distinct(endpoints: list[Endpoint]) -> None:
    seen: dict[tuple[str, int], Endpoint] = {}
    for e in endpoints:
        try:
            address = (socket.gethostbyname(e.host), e.port)
        except OSError:
            continue   # the handshake says it cannot be resolved
        if address in seen:
            raise RpcAddressError(f"RPC workers {seen[address]} and {e} are the same worker ({address[0]}:{e.port})")
        seen[address] = e


def connect(addresses: str | Iterable[str], *, timeout: float = HANDSHAKE_SECONDS) -> RpcWorkers:
    """Checks the workers and registers them with ggml (module docstring); raises
    an ``RpcError`` with one line saying what is wrong."""
    endpoints = parse_endpoints(addresses)
    _check_llama_cpp()
    _check_distinct(endpoints)
    with _lock:
        for e in endpoints:
            guard = _guards.get(e)
            if guard is not None and guard.lost is not None and not guard.wait_until_released(_RELEASE_SECONDS):
                raise RpcWorkerLostError(f"RPC worker {e}: an earlier model lost its connection to it and is still "
                                    "open; close it (Llama.close()) before loading over this worker again")
            # A worker serves one client at a time: while a model of this process is
            # connected to it, it answers no handshake (and needs none).
            if guard is None or not guard.connected:
                protocol.handshake(e.host, e.port, timeout)
        guards, devices = [], []
        for e in endpoints:
            guard = _guards.get(e)
            if guard is None:
                guard = _guards[e] = WorkerGuard(e)
            if e not in _devices:
                # Kept even if the worker was lost meanwhile: llama.cpp keeps the
                # registration (its devices are the same whatever the guard answered).
                _devices[e] = _rpc.add_server(str(guard.endpoint))
                if guard.lost is not None:
                    raise RpcWorkerError(f"RPC worker {e} {guard.lost} while it was being registered")
            if not _devices[e]:
                raise RpcWorkerError(f"RPC worker {e} offers no device")
            guards.append(guard)
            devices += _devices[e]
    return RpcWorkers(endpoints, guards, devices)
