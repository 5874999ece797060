"""llama.cpp's own server as a benchmark method: one ``llama-server`` process per
``--spec-type`` mode, driven over loopback.

The binary must come from the llama.cpp that the pinned llama-cpp-python
vendors, built with the same flags (scripts/build_llama_server.py), so its
kernels are ours. Settings that would make it differ from llama-cpp-python's
defaults are pinned: flash attention off, one slot, batch 512, no prompt cache.
Its decode time is the server's own ``predicted_ms`` and its prefill
``prompt_ms``.
"""
from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

from ngramspec.errors import NgramspecError
from ngramspec.suite.llama_settings import LLAMA_DEFAULTS, LlamaSettings
from ngramspec.suite.rss import vmhwm_mib

# "none" is the server decoding plainly: its own baseline, next to ours.
DEFAULT_MODES = ("none", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
# "draft": classic speculative decoding with a draft model (``-md``, ``--spec-type
# draft-simple``) at llama.cpp's default draft settings (at most 3 draft tokens,
# no minimum, p_min 0), the draft on the same threads. Run only when named.
MODES = DEFAULT_MODES + ("draft",)


class ServerError(NgramspecError, RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """A benchmarked server running as a child process, logging to ``log``."""

    proc: subprocess.Popen[Any]
    log: Any
    stop_timeout_s = 10.0

    def peak_rss_mib(self) -> float | None:
        """The server process's peak resident memory so far (Linux only)."""
        return vmhwm_mib(self.proc.pid)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.log.close()


class LlamaServer(ServerProcess):
    """binary: path to llama-server. mode: a --spec-type, "none", or "draft" (with
    ``draft``, the draft model's GGUF path). settings: GPU offload and flash
    attention, as the suite's other methods have them."""

    def __init__(self, binary: str, model: str, mode: str, n_ctx: int, threads: int,
                 startup_timeout_s: float = 300.0, draft: str | None = None,
                 threads_batch: int | None = None, settings: LlamaSettings = LLAMA_DEFAULTS) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown llama-server mode {mode!r}; choose from {list(MODES)}")
        if (mode == "draft") != (draft is not None):
            raise ValueError("llama-server's draft mode needs a draft model, and only it takes one")
        self.mode = mode
        self.port = free_port()
        batch = threads_batch or threads
        cmd = [binary, "-m", model, "-c", str(n_ctx), "-t", str(threads), "-tb", str(batch),
               "--host", "127.0.0.1", "--port", str(self.port), "-np", "1", "-b", "512", "-ub", "512",
               *settings.llama_server_args(draft=mode == "draft"), "--cache-ram", "0", "--no-webui"]
        if mode == "draft":
            assert draft is not None
            cmd += ["-md", draft, "--spec-type", "draft-simple", "-td", str(threads), "-tbd", str(batch)]
        elif mode != "none":
            cmd += ["--spec-type", mode]
        self.cmd, self.startup_timeout_s = cmd, startup_timeout_s
        self._start()

    def _start(self) -> None:
        # Its log goes to a file: an unread pipe would fill up and stall the server.
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - kept open for the server's life, closed in stop()
        from ngramspec.builds.kernel_env import peer_environ

        # llama-server runs with llama.cpp's default kernels, as its users run it.
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=self.log, text=True,
                                     env=peer_environ())
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                err = self.log.read()
                raise ServerError(f"llama-server ({self.mode}) exited with {self.proc.returncode}: "
                                  + " | ".join(err.strip().splitlines()[-3:]))
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        self.close()
        raise ServerError(f"llama-server ({self.mode}) did not become healthy in {self.startup_timeout_s:.0f} s")

    def restart(self) -> None:
        """A fresh process: ngram-mod's pool (and ngram-cache's) keeps
        every request's tokens, so in a second round it would draft each answer from
        the first round's copy of it, which no other method sees."""
        self.close()
        self.port = free_port()   # the old port may linger in TIME_WAIT
        self.cmd[self.cmd.index("--port") + 1] = str(self.port)
        self._start()

    def complete(self, prompt: str, max_tokens: int, stop: list[str]) -> dict[str, Any]:
        body = json.dumps({"prompt": prompt, "n_predict": max_tokens, "temperature": 0.0, "stop": stop,
                           "cache_prompt": False, "stream": False}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=1800) as r:
            out: dict[str, Any] = json.loads(r.read())
            return out
