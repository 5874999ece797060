"""Each benchmark round meets llama-server afresh: ngram-mod keeps every request's
tokens in a pool across requests, so without a restart a second round would draft
each answer from the first round's copy of it (measured: SmolLM2's open story went
from 1.48x in round one to 2.62x in round two, bench/results/suite-builds-smollm2-135m-3rounds.md).

The server here is a stand-in on loopback that answers /health and /completion as
llama-server does and counts the requests its process has served: no llama.cpp
binary is built for the tests."""
from __future__ import annotations

import stat
import sys
import textwrap
from pathlib import Path

import pytest

from ngramspec.suite.llama_server import LlamaServer, ServerError
from ngramspec.suite.runner import Suite
from ngramspec.suite.workload import Item, Workload

FAKE = textwrap.dedent("""\
    import json, os, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    port = int(sys.argv[sys.argv.index("--port") + 1])
    served = 0
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass
        def _send(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            self._send({"status": "ok"})
        def do_POST(self):
            global served
            served += 1
            self.rfile.read(int(self.headers["Content-Length"]))
            self._send({"content": f"{os.getpid()} {served}", "timings": {"prompt_ms": 1.0, "predicted_ms": 2.0,
                        "predicted_n": 3}})
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()
""")


@pytest.fixture()
def fake_llama_server(tmp_path: Path) -> str:
    script = tmp_path / "llama-server"
    script.write_text(f"#!{sys.executable}\n" + FAKE)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def _served(server: LlamaServer) -> tuple[int, int]:
    pid, served = server.complete("a prompt", 3, [])["content"].split()
    return int(pid), int(served)


def test_restart_gives_a_fresh_process(fake_llama_server):
    server = LlamaServer(fake_llama_server, "model.gguf", "ngram-mod", n_ctx=256, threads=1, startup_timeout_s=30)
    try:
        first_pid, _ = _served(server)
        assert _served(server) == (first_pid, 2)
        old = server.proc
        server.restart()
        assert old.poll() is not None                        # the old one is gone
        pid, served = _served(server)
        assert (pid != first_pid, served) == (True, 1)       # nothing carried over
        assert server.cmd[server.cmd.index("--port") + 1] == str(server.port)
    finally:
        server.close()


def test_a_server_that_cannot_restart_says_so(fake_llama_server, tmp_path):
    server = LlamaServer(fake_llama_server, "model.gguf", "ngram-mod", n_ctx=256, threads=1, startup_timeout_s=30)
    try:
        Path(fake_llama_server).write_text("#!/bin/sh\necho 'cannot load the model' >&2\nexit 3\n")
        with pytest.raises(ServerError, match="exited with 3: cannot load the model"):
            server.restart()
    finally:
        server.close()


def test_each_round_starts_llama_server_afresh(fake_llama_server):
    # A Suite with one llama-server method and nothing else: its run() alone.
    suite = Suite.__new__(Suite)
    server = LlamaServer(fake_llama_server, "model.gguf", "ngram-mod", n_ctx=256, threads=1, startup_timeout_s=30)
    items = [Item("a", "first prompt", 3), Item("b", "second prompt", 3)]
    suite.model, suite.progress, suite.other = "fake", False, None
    suite.servers = {"llama-server ngram-mod": server}
    suite.methods = ("llama-server ngram-mod",)
    suite.workloads = [Workload("w", "two prompts", "here", items)]
    try:
        runs = suite.run(3)
    finally:
        server.close()
    seen = [(r.round, r.item, r.text.split()) for r in runs]
    pids = {r: pid for r, _, (pid, _) in seen}
    assert len(set(pids.values())) == 3                       # one process per round
    assert [(r, item, served) for r, item, (_, served) in seen] == [
        (r, item, str(i + 1)) for r in range(3) for i, item in enumerate("ab")]
    assert all(r.error == "" for r in runs)
