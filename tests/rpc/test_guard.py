"""The guard between llama.cpp and a worker (ngramspec.rpc.guard): byte-for-byte
while the worker is well; once it breaks, every answer llama.cpp waits for still
comes, well-formed, and ``lost`` says why, so that llama.cpp never aborts."""
import hashlib
import socket
import struct
import time

import pytest

from ngramspec.rpc import protocol
from ngramspec.rpc.address import Endpoint
from ngramspec.rpc.guard import WorkerGuard
from ngramspec.suite.llama_server import free_port
from tests.support.fake_rpc_worker import FakeWorker, pattern


class Client:
    """What llama.cpp's dispatcher does on a connection: one command at a time."""

    def __init__(self, guard: WorkerGuard) -> None:
        self.sock = socket.create_connection(("127.0.0.1", guard.endpoint.port), timeout=10)

    def send(self, command: int, payload: bytes) -> None:
        self.sock.sendall(bytes([command]) + struct.pack("<Q", len(payload)) + payload)

    def ask(self, command: int, payload: bytes) -> bytes:
        self.send(command, payload)
        size = struct.unpack("<Q", self._recv(8))[0]
        return self._recv(size)

    def _recv(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "the guard closed the connection"
            data += chunk
        return bytes(data)

    def close(self) -> None:
        self.sock.close()


def hello() -> bytes:
    return bytes(protocol.CONN_CAPS_SIZE)


def get_tensor(size: int) -> bytes:
    return bytes(protocol.RPC_TENSOR_SIZE) + struct.pack("<QQ", 0, size)


def alloc(size: int) -> bytes:
    return struct.pack("<IQ", 0, size)


def wait_for(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture()
def worker_and_guard(request):
    cue = getattr(request, "param", None)
    worker = FakeWorker(on_command=cue)
    # Short, for the silent worker's test; long enough that a busy machine's scheduling stalls are not deaths.
    guard = WorkerGuard(Endpoint("127.0.0.1", worker.port), dead_after=3.0)
    yield worker, guard
    worker.close()


def test_relays_byte_for_byte(worker_and_guard):
    worker, guard = worker_and_guard
    c = Client(guard)
    assert c.ask(protocol.HELLO, hello())[:3] == bytes(protocol.PROTOCOL)
    assert c.ask(protocol.GET_TENSOR, get_tensor(3_000_001)) == pattern(3_000_001)   # more than one relay piece
    weights = bytes(range(256)) * 20_000                     # 5 MB: relayed in pieces, never held whole
    c.send(protocol.SET_TENSOR, weights)
    assert c.ask(protocol.DEVICE_COUNT, b"") == struct.pack("<I", 1)
    assert (protocol.SET_TENSOR, len(weights), hashlib.sha256(weights).hexdigest()) in worker.received
    assert guard.lost is None and guard.connected
    c.close()
    wait_for(lambda: not guard.connected)


def test_counts_what_llama_cpp_holds_on_the_worker(worker_and_guard):
    worker, guard = worker_and_guard
    c = Client(guard)
    c.ask(protocol.HELLO, hello())
    first = struct.unpack("<Q", c.ask(protocol.ALLOC_BUFFER, alloc(1000))[:8])[0]
    c.ask(protocol.ALLOC_BUFFER, alloc(24))
    assert guard.held_bytes == 1024
    c.send(protocol.FREE_BUFFER, struct.pack("<Q", first))
    c.ask(protocol.DEVICE_COUNT, b"")   # the free is relayed before this is answered
    assert guard.held_bytes == 24
    c.close()
    wait_for(lambda: guard.held_bytes == 0)   # a closed connection's buffers die with it


def _closes_on_get_tensor(command, payload):
    return "close" if command == protocol.GET_TENSOR else None


def _half_answers_get_tensor(command, payload):
    return "half" if command == protocol.GET_TENSOR else None


def _silent_on_get_tensor(command, payload):
    return "silent" if command == protocol.GET_TENSOR else None


@pytest.mark.parametrize("worker_and_guard, why", [
    (_closes_on_get_tensor, "closed the connection"),
    (_half_answers_get_tensor, "closed the connection"),
    (_silent_on_get_tensor, "did not answer within 3 s"),
], indirect=["worker_and_guard"])
def test_a_worker_lost_mid_answer_still_answers_in_full(worker_and_guard, why):
    worker, guard = worker_and_guard
    c = Client(guard)
    c.ask(protocol.HELLO, hello())
    answer = c.ask(protocol.GET_TENSOR, get_tensor(100_000))
    assert len(answer) == 100_000
    assert why in (guard.lost or "")
    # From now on the guard answers everything itself, well-formed.
    assert c.ask(protocol.GET_ALIGNMENT, struct.pack("<I", 0)) == struct.pack("<Q", 32)
    assert c.ask(protocol.ALLOC_BUFFER, alloc(64)) == bytes(16)     # an allocation fails
    assert struct.unpack("<Q", c.ask(protocol.BUFFER_GET_BASE, bytes(8)))[0] != 0   # llama.cpp asserts non-NULL
    c.send(protocol.GRAPH_COMPUTE, bytes(2_000_000))                # unanswered, large: swallowed
    assert c.ask(protocol.GET_TENSOR, get_tensor(10)) == bytes(10)
    # The loss lasts as long as llama.cpp holds the connection, and ends with it.
    c.close()
    wait_for(lambda: guard.lost is None)
    assert guard.wait_until_released(1)


def test_a_worker_of_another_version_is_answered_for():
    """llama.cpp aborts on a HELLO of another version: the guard answers 7.0.0 and
    marks the connection lost."""
    worker = FakeWorker(version=(6, 0, 0))
    guard = WorkerGuard(Endpoint("127.0.0.1", worker.port))
    try:
        c = Client(guard)
        assert c.ask(protocol.HELLO, hello())[:3] == bytes(protocol.PROTOCOL)
        assert "speaks RPC protocol 6.0.0" in (guard.lost or "")
        assert c.ask(protocol.DEVICE_COUNT, b"") == struct.pack("<I", 1)
        c.close()
    finally:
        worker.close()


def test_an_unreachable_worker_is_answered_for_from_the_first_command():
    guard = WorkerGuard(Endpoint("127.0.0.1", free_port()))
    c = Client(guard)
    assert c.ask(protocol.HELLO, hello())[:3] == bytes(protocol.PROTOCOL)
    assert "cannot connect" in (guard.lost or "")
    assert c.ask(protocol.GET_MAX_SIZE, struct.pack("<I", 0)) == struct.pack("<Q", 2**64 - 1)
    c.close()
    wait_for(lambda: guard.lost is None)


def test_an_answer_that_does_not_fit_the_protocol_is_a_loss():
    """A worker that answers a command that has no answer (another protocol)."""
    worker = FakeWorker(on_command=lambda command, payload: "extra" if command == protocol.SET_TENSOR else None)
    guard = WorkerGuard(Endpoint("127.0.0.1", worker.port))
    try:
        c = Client(guard)
        c.ask(protocol.HELLO, hello())
        c.send(protocol.SET_TENSOR, b"weights")
        wait_for(lambda: guard.lost is not None)
        assert "sent an answer of 4 bytes where none was expected" in (guard.lost or "")
        assert c.ask(protocol.GET_TENSOR, get_tensor(7)) == bytes(7)
        c.close()
    finally:
        worker.close()
