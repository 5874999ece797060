"""``ngramspec serve`` as a benchmark method: the package's own OpenAI-compatible
server in a subprocess, driven over loopback HTTP (what serving adds: http_overhead.py).

The server loads the same model file with the same context size and thread counts
as the suite's in-process Llama (and llama-cpp-python's other defaults, where
``ngramspec serve``'s would differ: no mlock, seed 0), with the engine's default
options (exact, the default max_draft), as the in-process "ngramspec" method.
Each request is a greedy ``/v1/completions`` with the item's prompt, max_tokens
and stops, so its text is the in-process method's.

``complete`` answers in llama-server's shape (``content`` and ``timings``: decode
time ``predicted_ms``, prefill ``prompt_ms``, ``predicted_n``, ``draft_n``,
``draft_n_accepted``), plus ``latency_s``: the request's end-to-end wall time
measured by the client, from before the request is encoded to after the response
is decoded (a new loopback connection each time, stdlib urllib, no proxy).
Everything in ``latency_s`` that is not in ``prompt_ms + predicted_ms`` is what
serving adds: HTTP, the JSON and request models, the wrapper, the thread hop.

Unlike the suite's Llama, the server's is not reset between requests: as in any
``ngramspec serve``, a prompt prefix the last request left in the cache is reused,
which shortens prefill only.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

from ngramspec.suite.llama_server import ServerError, ServerProcess, free_port

# A direct opener: a proxy from the environment (http_proxy) must not carry loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class NgramspecServer(ServerProcess):
    """``ngramspec serve`` on a free loopback port, for one model.

    model: the GGUF path (the suite's). n_ctx, threads, threads_batch: the suite's
    Llama's (threads_batch None: ``threads``). python: the interpreter that runs
    ``-m ngramspec serve`` (default: this one). Log to a temporary file, read back
    only in errors. Raises ServerError if it exits or is not healthy within
    ``startup_timeout_s`` (model load plus the engine's warm-up, which may measure
    the batch invariance and cost curve once per machine)."""

    stop_timeout_s = 15.0   # uvicorn finishes a request in flight before it exits

    def __init__(self, model: str, n_ctx: int, threads: int, threads_batch: int | None = None, *,
                 startup_timeout_s: float = 600.0, python: str | None = None,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.cmd = [python or sys.executable, "-m", "ngramspec", "serve", "--model", model,
                    "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(n_ctx),
                    "--n_threads", str(threads), "--n_threads_batch", str(threads_batch or threads),
                    "--use_mlock", "false", "--seed", "0", "--verbose", "false", *extra_args]
        # An unread pipe would fill up and stall the server: its log goes to a file.
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - kept open for the server's life, closed in close()
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     text=True)
        try:
            self._wait_healthy(startup_timeout_s)
        except BaseException:
            self.close()
            raise

    def _log_tail(self, lines: int = 5) -> str:
        try:
            self.log.flush()
            self.log.seek(0)
            return " | ".join(self.log.read().strip().splitlines()[-lines:])
        except (OSError, ValueError):
            return ""

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"ngramspec serve exited with {self.proc.returncode}: {self._log_tail()}")
            try:
                with _OPENER.open(f"{self.base}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        raise ServerError(f"ngramspec serve did not become healthy in {timeout_s:.0f} s: {self._log_tail()}")

    def complete(self, prompt: str, max_tokens: int, stop: list[str] | None) -> dict[str, Any]:
        """One greedy completion: llama-server's result shape (content, timings),
        plus latency_s (client-side, end to end), usage and speculative (our stats)."""
        t0 = time.perf_counter()
        # repeat_penalty 1.0: the in-process methods' (Llama's default); the server's is
        # llama-cpp-python's server's, 1.1, which would give other text.
        body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "repeat_penalty": 1.0,
                           "stop": list(stop) if stop else None, "stream": False}).encode()
        req = urllib.request.Request(f"{self.base}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with _OPENER.open(req, timeout=1800) as r:
                out: dict[str, Any] = json.loads(r.read())
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:500]
            raise ServerError(f"ngramspec serve answered {e.code}: {detail}") from None
        latency = time.perf_counter() - t0
        return {"content": out["choices"][0]["text"], "timings": out["timings"], "latency_s": latency,
                "usage": out.get("usage", {}), "speculative": out.get("speculative", {}),
                "finish_reason": out["choices"][0].get("finish_reason")}
