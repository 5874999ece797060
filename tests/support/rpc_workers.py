"""Real RPC workers for the tests: ``ngramspec rpc-worker`` subprocesses on
127.0.0.1, started, killed and started again on the same port."""
from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ngramspec.rpc.errors import RpcWorkerError
from ngramspec.rpc.protocol import handshake
from ngramspec.suite.llama_server import free_port

__all__ = ["Worker", "rpc_workers"]

START_TIMEOUT_S = 60


class Worker:
    """One ``ngramspec rpc-worker --host 127.0.0.1 --port PORT --threads N``."""

    def __init__(self, threads: int = 1, port: int | None = None) -> None:
        self.port = port or free_port()
        self.threads = threads
        self.log = Path(tempfile.mkstemp(prefix="ngramspec-rpc-worker-", suffix=".log")[1])
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Worker:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "ngramspec", "rpc-worker", "--host", "127.0.0.1",
                                          "--port", str(self.port), "--threads", str(self.threads)],
                                         stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rpc-worker exited with {self.proc.returncode}:\n{self.log.read_text()[-2000:]}")
            try:   # a handshake, not a bare connect: the worker answers once it serves
                handshake("127.0.0.1", self.port, timeout=1.0)
                return self
            except RpcWorkerError:
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"rpc-worker did not start:\n{self.log.read_text()[-2000:]}") from None
                time.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@contextlib.contextmanager
def rpc_workers(n: int = 2, threads: int = 1) -> Iterator[list[Worker]]:
    """``n`` workers on 127.0.0.1, killed at the end."""
    workers = [Worker(threads) for _ in range(n)]
    try:
        for w in workers:
            w.start()
        yield workers
    finally:
        for w in workers:
            w.kill()
