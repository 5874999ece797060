"""A guard between llama.cpp's RPC client and one worker, so that a worker that
dies takes a model down with an exception instead of the whole process.

Why it exists: llama.cpp's RPC client (``ggml-rpc.cpp``, llama-cpp-python 0.3.36)
ends the process with ``GGML_ABORT`` ("Remote RPC server crashed or returned
malformed response") as soon as a send or receive on a worker's socket fails,
from its dispatcher thread, mid-``llama_decode``: nothing in Python can catch it.

What it does: llama.cpp is given the guard's address on 127.0.0.1 instead of the
worker's; each connection llama.cpp opens there is relayed to the worker on a
connection of its own, byte for byte. The guard follows the protocol's framing
(``rpc.protocol``), so it always knows whether an answer is outstanding and how
long it is. When the worker's side breaks (closed, reset, an answer that does
not fit the protocol, or no answer within ``dead_after`` seconds), the guard
marks the connection lost and from then on answers in the worker's place: the
rest of a half-relayed answer and every later answer are well-formed stand-ins
(``protocol.stand_in_answer``: zeros, failed allocations). llama.cpp's call
returns normally with meaningless results, and ``lost`` tells the caller to
raise ``RpcWorkerLostError`` instead of using them (``rpc.workers``).

A lost connection stays lost until llama.cpp closes it (the model and its
contexts freed); the next connection is relayed to the worker afresh.

Cost: two threads per connection, and a hop through Python for every message
(a decode sends a handful per worker); docs/rpc.md has the measured overhead.
"""
from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time

from ngramspec.errors import NgramspecError
from ngramspec.rpc import protocol
from ngramspec.rpc.address import Endpoint

__all__ = ["WorkerGuard", "DEAD_AFTER_SECONDS"]

#: A worker that leaves an answer outstanding this long is taken for dead. An
#: answer can wait for a whole graph computation (a long prefill of a large model
#: on a slow worker), so this is generous.
DEAD_AFTER_SECONDS = 120.0
#: How often a relay thread waiting for the worker looks at the clock.
_POLL_SECONDS = 1.0
#: Large payloads (weights) are relayed in pieces of this size.
_CHUNK = 1 << 20
#: How long a new connection waits to reach the worker.
_CONNECT_SECONDS = 10.0


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    """n bytes, or None at the end of the stream."""
    if n == 0:
        return b""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            return None
        got += k
    return bytes(buf)


class _LostError(NgramspecError):
    """The worker's side of a connection broke; the argument says how."""


class _Connection:
    """One connection of llama.cpp's, relayed to the worker on one of the guard's."""

    def __init__(self, guard: WorkerGuard, client: socket.socket) -> None:
        self.guard = guard
        self.client = client
        self.upstream: socket.socket | None = None
        self.lost: str | None = None
        self._state = threading.Lock()       # lost, the outstanding answer
        self._client_writes = threading.Lock()
        self._waiting: tuple[int, int] | None = None   # (command, answer size): sent, its answer not begun
        # (number, time sent) of the command whose answer is due; the number keeps an
        # answer that just ended from clearing the next command's due time.
        self._due: tuple[int, float] | None = None
        self._sent = 0
        self._buffers: dict[int, int] = {}   # remote buffer -> size, from ALLOC_BUFFER answers

    # -- life --

    def start(self) -> None:
        try:
            self.upstream = socket.create_connection((self.guard.worker.host, self.guard.worker.port),
                                                     timeout=_CONNECT_SECONDS)
            # A send waits at most dead_after (a worker that stops reading is dead); a
            # receive waits in select, _POLL_SECONDS at a time (_recv_upstream).
            self.upstream.settimeout(self.guard.dead_after)
            self.upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as e:
            self.upstream = None
            self._mark_lost(f"cannot connect ({e.strerror or e})")
        threading.Thread(target=self._from_client, name=f"rpc-guard {self.guard.worker} in", daemon=True).start()
        if self.upstream is not None:
            threading.Thread(target=self._from_worker, name=f"rpc-guard {self.guard.worker} out",
                             daemon=True).start()

    def _close(self) -> None:
        for s in (self.client, self.upstream):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()
        with self._state:
            freed = sum(self._buffers.values())
            self._buffers.clear()
        self.guard._connection_closed(self, freed)

    def _mark_lost(self, why: str) -> tuple[int, int] | None:
        """Marks the connection lost (the first reason stays); returns the command
        whose answer is outstanding and not begun, which the caller must answer."""
        with self._state:
            if self.lost is not None:
                return None
            self.lost = why
            waiting, self._waiting = self._waiting, None
        if self.upstream is not None:
            with contextlib.suppress(OSError):
                self.upstream.shutdown(socket.SHUT_RDWR)
        self.guard._connection_lost(self, why)
        return waiting

    def _lose(self, why: str) -> None:
        waiting = self._mark_lost(why)
        if waiting is not None:
            self._stand_in(*waiting)

    def _stand_in(self, command: int, size: int) -> None:
        answer = protocol.stand_in_answer(command, size)
        with contextlib.suppress(OSError), self._client_writes:
            self.client.sendall(struct.pack("<Q", len(answer)) + answer)

    # -- llama.cpp -> worker --

    def _from_client(self) -> None:
        try:
            while True:
                head = _recv_exactly(self.client, 9)
                if head is None:
                    return
                command, size = head[0], struct.unpack_from("<Q", head, 1)[0]
                self.guard.commands += 1
                self.guard.bytes_sent += size
                if size <= _CHUNK:
                    payload = _recv_exactly(self.client, size)
                    if payload is None:
                        return
                    self._relay_command(command, head, payload)
                elif not self._relay_large(head, size):
                    return
        except OSError:
            return
        finally:
            self._close()

    def _relay_command(self, command: int, head: bytes, payload: bytes) -> None:
        answer = protocol.answer_size(command, payload)
        if answer is not None:
            self.guard.round_trips += 1
        if command == protocol.FREE_BUFFER and len(payload) == 8:
            with self._state:
                freed = self._buffers.pop(struct.unpack("<Q", payload)[0], 0)
            self.guard._freed(freed)
        with self._state:
            lost = self.lost is not None
            if not lost and answer is not None:
                self._sent += 1
                self._waiting, self._due = (command, answer), (self._sent, time.monotonic())
        if lost:
            if answer is not None:
                self._stand_in(command, answer)
            return
        self._send_up(head + payload)

    def _send_up(self, data: bytes) -> bool:
        """Sends ``data`` to the worker; False (and the worker lost) when the connection broke."""
        assert self.upstream is not None
        try:
            self.upstream.sendall(data)
        except OSError as e:
            self._lose(f"the connection broke ({e.strerror or e})")
            return False
        return True

    def _relay_large(self, head: bytes, size: int) -> bool:
        """A command too large to hold (weights, a large graph), relayed piece by
        piece; commands this large are never answered. False at the end of
        llama.cpp's stream."""
        sending = self.lost is None and self._send_up(head)
        left = size
        while left:
            piece = self.client.recv(min(left, _CHUNK))
            if not piece:
                return False
            left -= len(piece)
            if sending and self.lost is None:
                sending = self._send_up(piece)
        return True

    # -- worker -> llama.cpp --

    def _from_worker(self) -> None:
        try:
            while self.lost is None:
                head = self._recv_upstream(8)
                size = struct.unpack("<Q", head)[0]
                with self._state:
                    waiting = self._waiting
                    if waiting is None or waiting[1] != size:
                        expected = "none" if waiting is None else f"{waiting[1]} bytes"
                        raise _LostError(f"sent an answer of {size} bytes where {expected} was expected "
                                    "(another RPC protocol?)")
                    self._waiting, due = None, self._due
                self._relay_answer(waiting[0], head, size)
                with self._state:
                    if self._due == due:
                        self._due = None
        except _LostError as e:
            self._lose(str(e))
        except OSError as e:
            self._lose(f"the connection broke ({e.strerror or e})")

    def _recv_upstream(self, n: int) -> bytes:
        """n bytes from the worker; _LostError when it closes, breaks, or leaves an
        answer outstanding for dead_after seconds."""
        assert self.upstream is not None
        buf = bytearray()
        while len(buf) < n:
            try:
                ready, _, _ = select.select([self.upstream], [], [], _POLL_SECONDS)
            except ValueError:   # closed here: llama.cpp hung up
                raise _LostError("closed the connection") from None
            if not ready:
                if self.lost is not None:
                    raise _LostError(self.lost)
                due = self._due
                if due is not None and time.monotonic() - due[1] > self.guard.dead_after:
                    raise _LostError(f"did not answer within {self.guard.dead_after:g} s")
                continue
            chunk = self.upstream.recv(n - len(buf))
            if not chunk:
                raise _LostError("closed the connection")
            buf += chunk
        return bytes(buf)

    def _relay_answer(self, command: int, head: bytes, size: int) -> None:
        """Relays one answer to llama.cpp. If the worker breaks partway, the rest is
        zeros (so that llama.cpp's read completes) and the connection is lost; a
        HELLO of an incompatible version is answered for the worker and lost too
        (llama.cpp would abort on it)."""
        with self._client_writes:
            if command in (protocol.HELLO, protocol.ALLOC_BUFFER):
                body = self._recv_or_lose(size)
                if body is None:
                    body = protocol.stand_in_answer(command, size)
                elif command == protocol.HELLO and not protocol.compatible((body[0], body[1], body[2])):
                    self._mark_lost(f"speaks RPC protocol {body[0]}.{body[1]}.{body[2]}")
                    body = protocol.stand_in_answer(command, size)
                elif command == protocol.ALLOC_BUFFER:
                    self._allocated(body)
                self.client.sendall(head + body)
                return
            self.client.sendall(head)
            left = size
            while left:
                piece = self._recv_or_lose(min(left, _CHUNK))
                if piece is None:
                    self.client.sendall(bytes(left))
                    return
                self.client.sendall(piece)
                left -= len(piece)

    def _recv_or_lose(self, n: int) -> bytes | None:
        """n bytes of an answer from the worker, or None (the connection marked lost)."""
        try:
            return self._recv_upstream(n)
        except _LostError as e:
            self._mark_lost(str(e))
        except OSError as e:
            self._mark_lost(f"the connection broke ({e.strerror or e})")
        return None

    def _allocated(self, body: bytes) -> None:
        remote, size = struct.unpack("<QQ", body)
        if remote:
            with self._state:
                self._buffers[remote] = size
            self.guard._allocated(size)


class WorkerGuard:
    """The stand-in address of one worker: listens on 127.0.0.1 (an ephemeral port)
    and relays every connection to ``worker`` (module docstring).

    ``lost``: why an open connection to the worker was lost (None: none is).
    ``held_bytes``: the size of the buffers llama.cpp holds on the worker now
    (weights, KV cache, compute buffers), from the allocations it relayed.
    ``commands``, ``round_trips``, ``bytes_sent``: commands relayed to the worker,
    those of them that wait for an answer, and their payload bytes, since the guard
    started (what a decode costs in network terms)."""

    def __init__(self, worker: Endpoint, dead_after: float = DEAD_AFTER_SECONDS) -> None:
        self.worker = worker
        self.dead_after = dead_after
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.endpoint = Endpoint("127.0.0.1", self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._open: set[_Connection] = set()
        self._lost_reason: dict[_Connection, str] = {}
        self.held_bytes = 0
        self.commands = 0
        self.round_trips = 0
        self.bytes_sent = 0
        threading.Thread(target=self._accept, name=f"rpc-guard {worker}", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(self, client)
            with self._lock:
                self._open.add(conn)
            conn.start()

    @property
    def lost(self) -> str | None:
        with self._lock:
            return next(iter(self._lost_reason.values()), None)

    @property
    def connected(self) -> bool:
        """Whether llama.cpp holds a connection to the worker that is not lost."""
        with self._lock:
            return any(c.lost is None for c in self._open)

    def wait_until_released(self, timeout: float) -> bool:
        """Waits for llama.cpp to close every lost connection (a freed model closes
        its own); True when none is left."""
        deadline = time.monotonic() + timeout
        while self.lost is not None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def _connection_lost(self, conn: _Connection, why: str) -> None:
        with self._lock:
            if conn in self._open:
                self._lost_reason.setdefault(conn, why)

    def _connection_closed(self, conn: _Connection, freed: int) -> None:
        with self._lock:
            self._open.discard(conn)
            self._lost_reason.pop(conn, None)
            self.held_bytes -= freed

    def _allocated(self, size: int) -> None:
        with self._lock:
            self.held_bytes += size

    def _freed(self, size: int) -> None:
        with self._lock:
            self.held_bytes -= size
