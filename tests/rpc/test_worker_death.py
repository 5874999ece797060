"""A worker that dies in the middle of a decode (a command sent, its answer owed):
llama.cpp's own RPC client would end the process (GGML_ABORT). Through ngramspec's
guard the decode returns, ``RpcWorkerLostError`` is raised in the driving process, and
once the worker is back the model loads onto it again and answers as before.

The driving process is a subprocess (a process keeps the workers it registers);
a tap relay in front of each worker (tests/support/tap_relay.py) kills the worker
the moment the next logits are asked of it."""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from ngramspec.rpc import protocol
from tests.support.rpc_workers import rpc_workers
from tests.support.tap_relay import TapRelay

pytestmark = pytest.mark.model

DRIVER = """
import sys
from ngramspec import check_batch_invariance, models, wrap
from ngramspec.rpc import RpcWorkerLostError
path, *workers = sys.argv[1:]
prompt = "Count from 1 to 300, one number per line:\\n1\\n2\\n3\\n4\\n"
def load():
    return models.load_llama(path, n_ctx=512, n_threads=1, rpc=workers)
def wrapped(llm):
    # Sizes 1-5 (max_draft=4), checked at one depth: this test is about a worker's death.
    # wrap()'s own certification (every size, to the context's end, over the relays)
    # took most of this test's 112 s on a 2-core Zen 2.
    return wrap(llm, max_draft=4, invariance=check_batch_invariance(llm, max_batch=5, depths=[8]))
llm = load()
before = wrapped(llm).create_completion(prompt, max_tokens=24, temperature=0)["choices"][0]["text"]
print("ready", flush=True)
sys.stdin.readline()                       # the test arms the tap
try:
    llm.create_completion(prompt, max_tokens=24, temperature=0)
    print("no error", flush=True)
except RpcWorkerLostError as e:
    print("lost:", e, flush=True)
try:
    load()                                 # refused while the lost model is open
except Exception as e:
    print("reload refused:", type(e).__name__, e, flush=True)
llm.close()
sys.stdin.readline()                       # the test restarts the worker
llm = load()
after = wrapped(llm).create_completion(prompt, max_tokens=24, temperature=0)["choices"][0]["text"]
print("same text after the worker came back:", after == before, flush=True)
"""


def test_a_worker_killed_with_an_answer_owed(smollm2_path, tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    armed = threading.Event()
    with rpc_workers(2) as (a, b):
        def kill_on_logits(command: int, payload: bytes) -> None:
            # The next GET_TENSOR the last worker (it holds the output layer) is asked.
            if armed.is_set() and command == protocol.GET_TENSOR:
                armed.clear()
                b.kill()

        taps = [TapRelay(("127.0.0.1", a.port), lambda c, p: None), TapRelay(("127.0.0.1", b.port), kill_on_logits)]
        proc = subprocess.Popen([sys.executable, str(script), smollm2_path, *(t.address for t in taps)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdin is not None
            assert proc.stdout.readline() == "ready\n", proc.stderr.read() if proc.stderr else ""
            armed.set()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            lost = proc.stdout.readline()
            assert lost.startswith(f"lost: RPC worker {taps[1].address} closed the connection while a model used "
                                   "it"), lost
            refused = proc.stdout.readline()
            assert refused.startswith("reload refused: RpcWorkerLostError"), refused
            b.start()                                 # the same port: the tap relays to it again
            proc.stdin.write("go\n")
            proc.stdin.flush()
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
            for t in taps:
                t.close()
    assert proc.returncode == 0, err
    assert out == "same text after the worker came back: True\n", out + err
