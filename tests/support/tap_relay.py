"""A TCP relay that reads the RPC protocol's commands as they pass to a worker and
calls back on each, before relaying it: the tests use it to kill a worker at an
exact point (with a command sent and its answer not yet given). Answers pass
through untouched."""
from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable

from tests.support.relay import Relay

__all__ = ["TapRelay"]


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(min(n - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


class TapRelay(Relay):
    """Listens on 127.0.0.1 (``address``), relays to ``target``; ``on_command(command,
    payload)`` runs before each command is relayed."""

    def __init__(self, target: tuple[str, int], on_command: Callable[[int, bytes], None]) -> None:
        self.on_command = on_command
        super().__init__(target)

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        threading.Thread(target=self._commands, args=(client, upstream), daemon=True).start()
        threading.Thread(target=self._answers, args=(upstream, client), daemon=True).start()

    def _commands(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                head = _recv_exactly(src, 9)
                payload = None if head is None else _recv_exactly(src, struct.unpack_from("<Q", head, 1)[0])
                if head is None or payload is None:
                    break
                self.on_command(head[0], payload)
                dst.sendall(head + payload)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _answers(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = src.recv(1 << 20)
                if not data:
                    break
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
