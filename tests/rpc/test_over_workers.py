"""A real model split across two real RPC workers on 127.0.0.1 (``ngramspec
rpc-worker`` subprocesses), driven by the ``ngramspec`` command in a subprocess
(a process that registers workers keeps them for its life: never this one).

- exact mode's text equals plain's over the same workers, with more than one
  token per pass, the model's layers on the workers;
- a worker killed mid-generation: a clear error, no hang, and the driving process
  answers again once the worker is back;
- each bad input is one line: a bad address, no worker there, a worker of another
  protocol version.
"""
from __future__ import annotations

import json
import re
import time

import pytest

from tests.support.cli import ngramspec
from tests.support.fake_rpc_worker import FakeWorker
from tests.support.rpc_workers import rpc_workers

pytestmark = pytest.mark.model

#: Small, so that exact mode's invariance check (to the context's end, every size
#: up to max_draft + 1) stays cheap over the network: CI time.
N_CTX = "512"
MAX_DRAFT = "4"


def _placement(stderr: str) -> str:
    line = next((ln for ln in stderr.splitlines() if ln.startswith("ngramspec: model on RPC workers")), "")
    assert line, stderr
    return line


def test_generate_compare_is_identical_with_the_layers_on_the_workers(smollm2_path):
    with rpc_workers(2) as (a, b):
        p = ngramspec("generate", "--rpc", f"{a.address},{b.address}", "--compare", "--max-tokens", "40",
                      "--n-ctx", N_CTX, "--threads", "1", "--max-draft", MAX_DRAFT, "--warmup", "true",
                      timeout=600)   # --warmup: every size certified before the run, so it speculates
    assert p.returncode == 0, p.stderr
    assert "identical text: yes" in p.stderr, p.stderr
    per_pass = re.search(r"tokens per pass: ([\d.]+)", p.stderr)
    assert per_pass is not None and float(per_pass.group(1)) > 1.0, p.stderr
    where = _placement(p.stderr)
    layers = re.search(r"(\d+)/(\d+) layers on the workers", where)
    assert layers is not None and layers.group(1) == layers.group(2), where   # every layer, the output too
    for w in (a, b):
        held = re.search(re.escape(w.address) + r" ([\d.]+) MiB", where)
        assert held is not None and float(held.group(1)) > 1.0, where    # each worker holds a share


def _stream(srv, prompt: str, max_tokens: int, on_chunk=None) -> tuple[str, list[dict]]:
    """(text, error objects) of a streamed completion."""
    import httpx

    text, errors = [], []
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    with httpx.stream("POST", srv.base + "/v1/completions", json=body, timeout=120) as resp:
        assert resp.status_code == 200, resp.read()
        for n, line in enumerate(resp.iter_lines()):
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                errors.append(event["error"])
            else:
                text.append(event["choices"][0]["text"])
            if on_chunk is not None:
                on_chunk(n)
    return "".join(text), errors


def test_a_worker_killed_mid_generation(smollm2_path):
    pytest.importorskip("fastapi")
    import httpx

    from tests.support.live_server import serving

    prompt = "Count from 1 to 300, one number per line:\n1\n2\n3\n4\n"
    with rpc_workers(2) as (a, b), \
            serving("--model", smollm2_path, "--rpc", f"{a.address},{b.address}", "--n_ctx", N_CTX,
                    "--n_threads", "1", "--n_threads_batch", "1", "--max_draft", MAX_DRAFT,
                    "--verbose", "false") as srv:
        before, errors = _stream(srv, prompt, 24)
        assert before and not errors

        killed: list[float] = []

        def kill_once(n: int) -> None:
            if n >= 6 and not killed:
                b.kill()
                killed.append(time.monotonic())

        t0 = time.monotonic()
        _, errors = _stream(srv, prompt, 400, on_chunk=kill_once)
        assert killed, "the generation ended before the worker was killed"
        assert time.monotonic() - t0 < 60                                  # no hang
        assert errors and errors[0]["code"] == "rpc_worker_lost", errors
        assert f"RPC worker {b.address}" in errors[0]["message"], errors

        # While the worker is down: a clear 503, at once.
        r = httpx.post(srv.base + "/v1/completions", json={"prompt": prompt, "max_tokens": 4}, timeout=60)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "rpc_worker_unavailable"
        assert f"RPC worker {b.address}: connection refused" in r.json()["error"]["message"]
        t = httpx.post(srv.base + "/extras/tokenize", json={"input": "hi"}, timeout=60)   # llama-cpp-python's route
        assert t.status_code == 503 and t.json()["error"]["code"] == "rpc_worker_unavailable", t.text

        # The worker is back (same port, empty: the model is loaded onto it again).
        b.start()
        after, errors = _stream(srv, prompt, 24)
        assert not errors and after == before
        assert httpx.get(srv.base + "/health", timeout=10).json()["rpc"]["reloads"] == 1


@pytest.mark.parametrize("rpc, says", [
    ("127.0.0.1", "RPC worker address '127.0.0.1' is not host:port"),
    ("127.0.0.1:99999", "the port must be a number in 1..65535"),
    ("[::1]:50052", "IPv4 only"),
])
def test_a_bad_address_is_one_line(smollm2_path, rpc, says):
    p = ngramspec("generate", "hi", "--rpc", rpc, "--max-tokens", "2")
    assert p.returncode == 2 and says in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_no_worker_there_is_one_line(smollm2_path):
    from ngramspec.suite.llama_server import free_port

    port = free_port()
    p = ngramspec("generate", "hi", "--rpc", f"127.0.0.1:{port}", "--max-tokens", "2")
    assert p.returncode == 2, p.stderr
    assert p.stderr == (f"ngramspec: error: RPC worker 127.0.0.1:{port}: connection refused (start one there with "
                        f"`ngramspec rpc-worker --host 127.0.0.1 --port {port}`)\n")


def test_a_worker_of_another_protocol_is_one_line(smollm2_path):
    old = FakeWorker(version=(6, 1, 0))
    try:
        p = ngramspec("generate", "hi", "--rpc", old.address, "--max-tokens", "2")
    finally:
        old.close()
    assert p.returncode == 2, p.stderr
    assert "speaks RPC protocol 6.1.0, this llama-cpp-python speaks 7.0.0" in p.stderr
    assert p.stderr.count("\n") == 1, p.stderr


def test_serve_refuses_a_bad_address_at_start(smollm2_path):
    p = ngramspec("serve", "--model", smollm2_path, "--rpc", "nowhere")
    assert p.returncode == 2 and "--rpc: RPC worker address 'nowhere' is not host:port" in p.stderr, p.stderr


USER_SCRIPT = """
import sys
import llama_cpp, ngramspec
from ngramspec import _rpc   # what a user does by ctypes: llama-cpp-python binds no ggml_backend_* call
path, n_ctx, *addresses = sys.argv[1:]
for address in addresses:
    _rpc.add_server(address)
llm = llama_cpp.Llama(path, n_ctx=int(n_ctx), n_gpu_layers=-1, n_threads=1, n_threads_batch=1, seed=0, verbose=False)
prompt = "def add(a, b):\\n    return a + b\\n\\ndef sub(a, b):\\n    return a - b\\n\\ndef mul(a, b):\\n"
plain = llm.create_completion(prompt, max_tokens=48, temperature=0)["choices"][0]["text"]
llm.reset()
out = ngramspec.wrap(llm, max_draft=4).create_completion(prompt, max_tokens=48, temperature=0)
print(out["choices"][0]["text"] == plain, out["speculative"]["tokens_per_forward"])
"""


def test_a_llama_loaded_over_rpc_by_its_user_works_with_wrap(smollm2_path, tmp_path):
    """No ngramspec loading: the user registers the workers (as llama.cpp's --rpc
    does) and loads with n_gpu_layers; wrap() speculates exactly over them."""
    import subprocess
    import sys

    script = tmp_path / "user.py"
    script.write_text(USER_SCRIPT)
    with rpc_workers(2) as (a, b):
        p = subprocess.run([sys.executable, str(script), smollm2_path, N_CTX, a.address, b.address],
                           capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    same, per_pass = p.stdout.split()
    assert same == "True" and float(per_pass) > 1.0, p.stdout


@pytest.mark.stock
def test_a_build_without_rpc_is_one_line(smollm2_path):
    """In .venv-stock (a stock build: no GGML_RPC); skipped on a build that has it."""
    from ngramspec import _rpc

    if _rpc.supports_rpc():
        pytest.skip("this llama-cpp-python has RPC support")
    p = ngramspec("generate", "hi", "--rpc", "127.0.0.1:50052", "--max-tokens", "2")
    assert p.returncode == 2 and "was built without RPC support (GGML_RPC=ON)" in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1, p.stderr
    w = ngramspec("rpc-worker", "--port", "50052")
    assert w.returncode == 2 and "was built without RPC support (GGML_RPC=ON)" in w.stderr, w.stderr



SPLIT_SCRIPT = """
import sys
from ngramspec import models
from ngramspec.rpc.loading import placement
path, *workers = sys.argv[1:]
for split in ([1, 3], [3, 1]):
    llm = models.load_llama(path, n_ctx=256, n_threads=1, rpc=workers, tensor_split=split)
    where = placement(llm).weights_mib
    print(where[workers[0]], where[workers[1]])
    llm.close()
"""


def test_tensor_split_is_passed_through(smollm2_path):
    import subprocess
    import sys

    with rpc_workers(2) as (a, b):
        p = subprocess.run([sys.executable, "-c", SPLIT_SCRIPT, smollm2_path, a.address, b.address],
                           capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    (a1, b1), (a2, b2) = [tuple(map(float, line.split())) for line in p.stdout.splitlines()]
    assert a2 > 2 * a1 and b1 > b2 + (a2 - a1) / 2, p.stdout   # b holds the output layer either way
