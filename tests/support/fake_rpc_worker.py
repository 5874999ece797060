"""A stand-in RPC worker that speaks just enough of the protocol to test the
handshake and the guard: it answers HELLO (with any version), DEVICE_COUNT,
ALLOC_BUFFER and GET_TENSOR (a byte pattern), takes SET_TENSOR and FREE_BUFFER
silently, and can misbehave on cue (close, go silent, stop halfway)."""
from __future__ import annotations

import contextlib
import hashlib
import socket
import struct
import threading
from collections.abc import Callable

from ngramspec.rpc import protocol

__all__ = ["FakeWorker", "pattern"]


def pattern(n: int) -> bytes:
    return bytes(i % 251 for i in range(n))


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


class FakeWorker:
    """Listens on 127.0.0.1 (``port``); one client at a time, as a real worker.

    version: what HELLO answers. on_command: called with (command, payload) before
    answering; it returns "close" (hang up), "silent" (never answer), "half" (send
    half the answer, then hang up), "extra" (answer a command that has no answer)
    or None (answer as the protocol says). ``received`` records
    (command, size, sha256 of the payload) of every command."""

    def __init__(self, version: tuple[int, int, int] = protocol.PROTOCOL, hello_size: int | None = None,
                 on_command: Callable[[int, bytes], str | None] | None = None) -> None:
        self.version, self.hello_size = version, hello_size
        self.on_command = on_command or (lambda command, payload: None)
        self.received: list[tuple[int, int, str]] = []
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(1)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop.set()
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):   # a client that hangs up is not the fake's failure
                self._client(conn)

    def _answer(self, command: int, payload: bytes) -> bytes | None:
        if command == protocol.HELLO:
            body = bytes([*self.version, 0]) + bytes(protocol.CONN_CAPS_SIZE)
            return body if self.hello_size is None else bytes(self.hello_size)
        if command == protocol.DEVICE_COUNT:
            return struct.pack("<I", 1)
        if command == protocol.ALLOC_BUFFER:
            size = struct.unpack_from("<Q", payload, 4)[0]
            return struct.pack("<QQ", 0x1000 + len(self.received), size)
        if command == protocol.GET_TENSOR:
            return pattern(struct.unpack_from("<Q", payload, len(payload) - 8)[0])
        return None

    def _client(self, conn: socket.socket) -> None:
        while True:
            head = _recv_exactly(conn, 9)
            if head is None:
                return
            command, size = head[0], struct.unpack_from("<Q", head, 1)[0]
            payload = _recv_exactly(conn, size)
            if payload is None:
                return
            self.received.append((command, size, hashlib.sha256(payload).hexdigest()))
            cue = self.on_command(command, payload)
            if cue == "close":
                return
            if cue == "silent":
                self._stop.wait()
                return
            if cue == "extra":   # an answer to a command that has none
                conn.sendall(struct.pack("<Q", 4) + b"oops")
                continue
            answer = self._answer(command, payload)
            if answer is None:
                continue
            message = struct.pack("<Q", len(answer)) + answer
            if cue == "half":
                conn.sendall(message[: 8 + len(answer) // 2])
                return
            conn.sendall(message)
