"""The listening half of the tests' TCP relays (``DelayRelay``, ``TapRelay``): a socket
on 127.0.0.1 whose every connection is paired with one to ``target`` and handed to
the subclass's ``_relay``."""
from __future__ import annotations

import socket
import threading

__all__ = ["Relay"]


class Relay:
    """Listens on 127.0.0.1 (``port``, ``address``) and relays each connection to
    ``target`` (host, port) through ``_relay(client, upstream)``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._relay(client, upstream)

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        raise NotImplementedError
