"""``ngramspec serve`` in a subprocess on 127.0.0.1, for the live-server tests."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from ngramspec.suite.llama_server import free_port

__all__ = ["Server", "llama_cpp_serving", "serving"]

#: The warm-up may measure the engine's cost curve (cached on disk after the first time).
START_TIMEOUT_S = 300


class Server:
    """A running ``ngramspec serve``: its process, base URL and log file."""

    def __init__(self, proc: subprocess.Popen[bytes], base: str, log: Path) -> None:
        self.proc, self.base, self.log = proc, base, log

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def client(self, **kw: Any) -> Any:
        import openai

        return openai.OpenAI(base_url=self.base + "/v1", api_key=kw.pop("api_key", "unused"), max_retries=0,
                             timeout=120, **kw)

    def post(self, path: str, content: bytes | str | None = None, **kw: Any) -> httpx.Response:
        headers = {"content-type": "application/json", **kw.pop("headers", {})}
        return httpx.post(self.base + path, content=content, timeout=120, headers=headers, **kw)


@contextlib.contextmanager
def serving(*args: str, env: dict[str, str] | None = None) -> Iterator[Server]:
    """``python -m ngramspec serve ARGS --host 127.0.0.1 --port FREE``, healthy, then
    stopped. Fails the test if it does not start, and if its log holds a traceback
    when it stops (a 500's traceback included)."""
    with _running([sys.executable, "-m", "ngramspec", "serve", *args], "ngramspec-serve", "/health",
                  "server", env) as (srv, log):
        yield srv
    text = log.read_text(errors="replace")
    log.unlink()
    assert "Traceback" not in text, text[-4000:]


@contextlib.contextmanager
def llama_cpp_serving(*args: str) -> Iterator[Server]:
    """llama-cpp-python's own server (``python -m llama_cpp.server ARGS``) from this
    venv on 127.0.0.1, ready, then stopped: the server ``ngramspec serve`` is built on,
    to compare answers with."""
    with _running([sys.executable, "-m", "llama_cpp.server", *args], "llama-cpp-server", "/v1/models",
                  "llama-cpp-python's server") as (srv, log):
        yield srv
    log.unlink()


@contextlib.contextmanager
def _running(cmd: list[str], prefix: str, ready_path: str, what: str,
             env: dict[str, str] | None = None) -> Iterator[tuple[Server, Path]]:
    """``cmd`` with ``--host 127.0.0.1 --port P`` on a free port, its output in a log
    file, until ``ready_path`` answers 200; stopped when the block ends. Fails the test
    if it exits or does not answer in time."""
    import pytest

    port = free_port()
    log = Path(tempfile.mkstemp(prefix=f"{prefix}-", suffix=".log")[1])
    with open(log, "wb") as out:
        proc = subprocess.Popen([*cmd, "--host", "127.0.0.1", "--port", str(port)], stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    srv = Server(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(srv.base + ready_path, timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{what} did not start in {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    try:
        yield srv, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
