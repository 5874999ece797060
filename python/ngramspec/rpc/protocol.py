"""What ngramspec knows of llama.cpp's RPC wire protocol (``ggml/src/ggml-rpc/``
of the llama.cpp that llama-cpp-python 0.3.36 vendors: protocol 7.0.0).

A request is ``| command (1 byte) | size (8 bytes, little-endian) | size bytes |``;
some commands are answered with ``| size (8 bytes) | size bytes |``, the others
not at all. A client is answered one command at a time (it waits for each answer
before it sends the next command), so at most one answer is outstanding.

``handshake`` asks a worker for its version (the first command of every
connection); ``answer_size`` and ``stand_in_answer`` let the guard
(``rpc.guard``) answer for a worker that is gone.
"""
from __future__ import annotations

import socket
import struct

from ngramspec.rpc.errors import RpcProtocolMismatchError, RpcWorkerError

__all__ = ["PROTOCOL", "PROTOCOLS", "HELLO", "GET_TENSOR", "ALLOC_BUFFER", "FREE_BUFFER", "SET_TENSOR",
           "GRAPH_COMPUTE", "answer_size", "stand_in_answer", "compatible", "handshake", "hello_request"]

#: The RPC protocol (major, minor, patch) of each llama-cpp-python version ngramspec knows.
PROTOCOLS = {"0.3.36": (7, 0, 0)}
PROTOCOL = PROTOCOLS["0.3.36"]

# Command numbers (enum rpc_cmd).
ALLOC_BUFFER, GET_ALIGNMENT, GET_MAX_SIZE, BUFFER_GET_BASE, FREE_BUFFER, BUFFER_CLEAR = 0, 1, 2, 3, 4, 5
SET_TENSOR, SET_TENSOR_HASH, GET_TENSOR, COPY_TENSOR, GRAPH_COMPUTE, GET_DEVICE_MEMORY = 6, 7, 8, 9, 10, 11
INIT_TENSOR, GET_ALLOC_SIZE, HELLO, DEVICE_COUNT, GRAPH_RECOMPUTE, MEMSET_TENSOR = 12, 13, 14, 15, 16, 17
COMMAND_COUNT = 19

CONN_CAPS_SIZE = 24               # transport capabilities in HELLO (all zero: plain TCP)
HELLO_ANSWER_SIZE = 4 + CONN_CAPS_SIZE
RPC_TENSOR_SIZE = 296             # sizeof(rpc_tensor), packed
GET_TENSOR_REQUEST_SIZE = RPC_TENSOR_SIZE + 16   # tensor, offset, size

# The size of the answer to each command that has one (GET_TENSOR's is in its request).
_FIXED_ANSWERS = {ALLOC_BUFFER: 16, GET_ALIGNMENT: 8, GET_MAX_SIZE: 8, BUFFER_GET_BASE: 8, SET_TENSOR_HASH: 1,
                  COPY_TENSOR: 1, GET_DEVICE_MEMORY: 16, GET_ALLOC_SIZE: 8, HELLO: HELLO_ANSWER_SIZE,
                  DEVICE_COUNT: 4}

# What stands in for a lost worker's answer: values the client accepts without
# asserting (a buffer base must not be NULL; an alignment of 32 and no size limit
# are the CPU backend's own). An allocation fails (remote pointer 0), so a model
# being loaded fails to load; everything computed is zeros.
_STAND_INS = {
    ALLOC_BUFFER: struct.pack("<QQ", 0, 0),
    GET_ALIGNMENT: struct.pack("<Q", 32),
    GET_MAX_SIZE: struct.pack("<Q", 2**64 - 1),
    BUFFER_GET_BASE: struct.pack("<Q", 4096),
    SET_TENSOR_HASH: b"\x00",
    COPY_TENSOR: b"\x00",
    GET_DEVICE_MEMORY: struct.pack("<QQ", 1 << 30, 1 << 30),
    GET_ALLOC_SIZE: struct.pack("<Q", 0),
    DEVICE_COUNT: struct.pack("<I", 1),
}


def answer_size(command: int, request: bytes) -> int | None:
    """How many bytes answer ``command`` (None: it is not answered). ``request`` is
    the command's payload (only GET_TENSOR's is read: its last 8 bytes)."""
    if command == GET_TENSOR:
        if len(request) != GET_TENSOR_REQUEST_SIZE:
            return None
        return int(struct.unpack_from("<Q", request, len(request) - 8)[0])
    return _FIXED_ANSWERS.get(command)


def stand_in_answer(command: int, size: int) -> bytes:
    """A well-formed answer of ``size`` bytes to ``command``, for a worker that is gone."""
    if command == HELLO:
        return bytes([PROTOCOL[0], PROTOCOL[1], PROTOCOL[2], 0]) + bytes(CONN_CAPS_SIZE)
    return _STAND_INS.get(command, bytes(size))


def compatible(version: tuple[int, int, int]) -> bool:
    """The client's own rule (negotiate_hello): the same major, a minor no newer."""
    return version[0] == PROTOCOL[0] and version[1] <= PROTOCOL[1]


def hello_request() -> bytes:
    return bytes([HELLO]) + struct.pack("<Q", CONN_CAPS_SIZE) + bytes(CONN_CAPS_SIZE)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def handshake(host: str, port: int, timeout: float) -> tuple[int, int, int]:
    """Connects to a worker, asks its protocol version and hangs up. Raises
    ``RpcWorkerError`` (one line, saying why) when there is no usable worker there,
    ``RpcProtocolMismatchError`` when it speaks another protocol version."""
    where = f"RPC worker {host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except socket.gaierror as e:
        raise RpcWorkerError(f"{where}: cannot resolve the host name {host!r} ({e.strerror})") from None
    except ConnectionRefusedError:
        raise RpcWorkerError(f"{where}: connection refused (start one there with `ngramspec rpc-worker "
                             f"--host {host} --port {port}`)") from None
    except (socket.timeout, TimeoutError):
        raise RpcWorkerError(f"{where}: no answer within {timeout:g} s (host down, or a firewall "
                             "drops the connection)") from None
    except OSError as e:
        raise RpcWorkerError(f"{where}: cannot connect ({e.strerror or e})") from None
    with sock:
        try:
            sock.sendall(hello_request())
            size = struct.unpack("<Q", _recv_exactly(sock, 8))[0]
            answer = _recv_exactly(sock, HELLO_ANSWER_SIZE) if size == HELLO_ANSWER_SIZE else b""
        except (socket.timeout, TimeoutError):
            raise RpcWorkerError(f"{where} accepted the connection but did not answer the handshake within "
                                 f"{timeout:g} s: it is serving another client (a worker serves one at a time) "
                                 "or it is not an RPC worker") from None
        except (EOFError, ConnectionResetError, BrokenPipeError):
            raise RpcProtocolMismatchError(f"{where} closed the connection during the handshake: it is not an RPC "
                                      f"worker of protocol {_dotted(PROTOCOL)} (one built from another "
                                      "llama.cpp?)") from None
        except OSError as e:
            raise RpcWorkerError(f"{where}: the handshake failed ({e.strerror or e})") from None
    if size != HELLO_ANSWER_SIZE:
        raise RpcProtocolMismatchError(f"{where} answered the handshake with {size} bytes, not {HELLO_ANSWER_SIZE}: it "
                                  f"speaks another RPC protocol than {_dotted(PROTOCOL)}")
    version = (answer[0], answer[1], answer[2])
    if not compatible(version):
        raise RpcProtocolMismatchError(f"{where} speaks RPC protocol {_dotted(version)}, this llama-cpp-python "
                                  f"speaks {_dotted(PROTOCOL)}: run the worker from the same llama-cpp-python "
                                  "(`ngramspec rpc-worker` of this install)")
    return version


def _dotted(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))
