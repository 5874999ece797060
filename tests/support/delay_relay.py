"""A TCP relay that delays every byte by a fixed time each way: test equipment
standing in for a network with a round-trip time (kernel netem is not available
on these machines). Order is kept; bandwidth is not limited."""
from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time

from tests.support.relay import Relay

__all__ = ["DelayRelay"]


class DelayRelay(Relay):
    """Listens on 127.0.0.1 (``port``) and relays each connection to ``target``
    (host, port), adding ``rtt_ms / 2`` to each direction."""

    def __init__(self, target: tuple[str, int], rtt_ms: float) -> None:
        self.one_way = rtt_ms / 2000.0
        super().__init__(target)

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for src, dst in ((client, upstream), (upstream, client)):
            pending: queue.Queue[tuple[float, bytes]] = queue.Queue()
            threading.Thread(target=self._read, args=(src, pending), daemon=True).start()
            threading.Thread(target=self._write, args=(dst, pending), daemon=True).start()

    def _read(self, src: socket.socket, pending: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            try:
                data = src.recv(1 << 20)
            except OSError:
                data = b""
            pending.put((time.perf_counter() + self.one_way, data))
            if not data:
                return

    def _write(self, dst: socket.socket, pending: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            due, data = pending.get()
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            if not data:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
                return
            try:
                dst.sendall(data)
            except OSError:
                return

