"""The handshake that checks a worker before llama.cpp is told of it (llama.cpp
ends the process on a worker it cannot reach or understand): each way a worker
can be unusable is a one-line RpcWorkerError, quickly."""
import socket
import time

import pytest

from ngramspec.rpc import protocol
from ngramspec.rpc.errors import RpcProtocolMismatchError, RpcWorkerError
from ngramspec.suite.llama_server import free_port
from tests.support.fake_rpc_worker import FakeWorker


def test_a_worker_of_this_protocol_answers_its_version():
    worker = FakeWorker()
    try:
        assert protocol.handshake("127.0.0.1", worker.port, timeout=2) == protocol.PROTOCOL
        assert protocol.handshake("127.0.0.1", worker.port, timeout=2) == protocol.PROTOCOL   # it hung up
    finally:
        worker.close()


def test_nothing_listening_is_refused_with_the_command_to_start_one():
    port = free_port()
    with pytest.raises(RpcWorkerError, match=f"127.0.0.1:{port}: connection refused.*ngramspec rpc-worker"):
        protocol.handshake("127.0.0.1", port, timeout=2)


def test_an_unknown_host_name():
    with pytest.raises(RpcWorkerError, match="cannot resolve the host name 'no-such-host.invalid'"):
        protocol.handshake("no-such-host.invalid", 50052, timeout=2)


@pytest.mark.parametrize("version", [(6, 0, 0), (7, 1, 0), (8, 0, 0)])
def test_another_protocol_version_is_a_mismatch(version):
    worker = FakeWorker(version=version)
    try:
        with pytest.raises(RpcProtocolMismatchError, match=f"speaks RPC protocol {'.'.join(map(str, version))}, "
                                                      "this llama-cpp-python speaks 7.0.0"):
            protocol.handshake("127.0.0.1", worker.port, timeout=2)
    finally:
        worker.close()


def test_a_newer_patch_level_is_compatible():
    worker = FakeWorker(version=(7, 0, 3))
    try:
        assert protocol.handshake("127.0.0.1", worker.port, timeout=2) == (7, 0, 3)
    finally:
        worker.close()


def test_an_answer_of_another_size_is_a_mismatch():
    worker = FakeWorker(hello_size=12)
    try:
        with pytest.raises(RpcProtocolMismatchError, match="answered the handshake with 12 bytes, not 28"):
            protocol.handshake("127.0.0.1", worker.port, timeout=2)
    finally:
        worker.close()


def test_a_worker_that_hangs_up_is_not_of_this_protocol():
    worker = FakeWorker(on_command=lambda command, payload: "close")
    try:
        with pytest.raises(RpcProtocolMismatchError, match="closed the connection during the handshake"):
            protocol.handshake("127.0.0.1", worker.port, timeout=2)
    finally:
        worker.close()


def test_a_silent_worker_is_busy_or_not_a_worker_after_the_timeout():
    """What a real worker serving another client looks like: it accepts (the
    kernel's backlog) but does not answer."""
    worker = FakeWorker(on_command=lambda command, payload: "silent")
    try:
        t0 = time.monotonic()
        with pytest.raises(RpcWorkerError, match="did not answer the handshake within 0.5 s: it is serving "
                                                 "another client"):
            protocol.handshake("127.0.0.1", worker.port, timeout=0.5)
        assert time.monotonic() - t0 < 3
    finally:
        worker.close()


def test_something_else_on_the_port():
    """An HTTP server, say: it reads the handshake, answers with what it thinks of it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    import threading

    def answer():
        conn, _ = server.accept()
        with conn:
            conn.recv(100)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    try:
        with pytest.raises(RpcProtocolMismatchError):
            protocol.handshake("127.0.0.1", server.getsockname()[1], timeout=2)
    finally:
        server.close()
