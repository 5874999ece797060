"""``ngramspec rpc-worker``: llama.cpp's RPC server in the installed ggml library.
It serves protocol 7.0.0 (the driving process's own), warns that the network must
be trusted, stops at once on SIGTERM, and refuses bad arguments in one line."""
from __future__ import annotations

import signal
import socket
import time

import pytest

from ngramspec.cli.main import main
from ngramspec.rpc import protocol
from tests.support.cli import ngramspec
from tests.support.rpc_workers import Worker


def test_serves_this_protocol_and_warns():
    w = Worker(threads=1).start()
    try:
        assert protocol.handshake("127.0.0.1", w.port, timeout=5) == protocol.PROTOCOL
        log = w.log.read_text()
        assert "warning: an RPC worker runs whatever computation any client sends it" in log
        assert "trusted network" in log and f"--rpc 127.0.0.1:{w.port}" in log
        assert w.proc is not None
        t0 = time.monotonic()
        w.proc.send_signal(signal.SIGTERM)
        assert w.proc.wait(timeout=10) == -signal.SIGTERM and time.monotonic() - t0 < 5
    finally:
        w.kill()


@pytest.mark.parametrize("args, says", [
    (["--host", "localhost"], "--host 'localhost': give an IPv4 address"),
    (["--host", "::1"], "give an IPv4 address"),
    (["--port", "0"], "--port must be in 1..65535, got 0"),
    (["--port", "65536"], "--port must be in 1..65535"),
    (["--threads", "0"], "--threads must be >= 1"),
])
def test_bad_arguments_are_one_line(args, says, capsys):
    assert main(["rpc-worker", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_a_port_in_use_is_one_line(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["rpc-worker", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in err and err.count("\n") == 1, err


def test_a_build_without_rpc_is_one_line(monkeypatch, capsys):
    from ngramspec import _rpc

    monkeypatch.setattr(_rpc, "supports_rpc", lambda: False)
    assert main(["rpc-worker"]) == 2
    err = capsys.readouterr().err
    assert "built without RPC support (GGML_RPC=ON): `ngramspec install-llama` rebuilds it" in err, err


def test_help_names_the_trust_requirement():
    p = ngramspec("rpc-worker", "--help")
    assert p.returncode == 0 and "trusted network" in " ".join(p.stdout.split())
