"""A real command-line client: Simon Willison's ``llm``, pointed at a live
``ngramspec serve`` through its OpenAI-compatible model configuration
(``extra-openai-models.yaml``) with a short model name the server was not started
with, as users set it up. Chat, streamed and not, and a continued conversation."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("llm")
pytest.importorskip("fastapi")

from tests.support.live_server import serving  # noqa: E402

NAME = "smollm2"     # what the user calls it; the server lists the file's stem
PROMPT = "Write one sentence about the sea."
SECOND = "Now one about the mountains."
OPTIONS = ["-o", "temperature", "0", "-o", "max_tokens", "24"]


@pytest.fixture(scope="module")
def server(smollm2_path):
    with serving("--model", smollm2_path, "--n_ctx", "1024", "--verbose", "false") as srv:
        yield srv


@pytest.fixture()
def llm_cli(server, tmp_path):
    exe = shutil.which("llm", path=os.path.dirname(sys.executable)) or shutil.which("llm")
    if exe is None:
        pytest.skip("the llm command is not installed beside this Python")
    home = tmp_path / "llm-home"
    home.mkdir()
    (home / "extra-openai-models.yaml").write_text(
        f"- model_id: {NAME}\n  model_name: {NAME}\n  api_base: \"{server.base}/v1\"\n", encoding="utf-8")

    def run(*args: str, stdin: str = "") -> str:
        env = {**os.environ, "LLM_USER_PATH": str(home)}
        p = subprocess.run([exe, *args], input=stdin, capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout

    return run


def _same_start(server) -> None:
    """Leaves the server's context holding one fixed unrelated exchange, so that the
    request after it starts from the same cache state whoever sends it: greedy text
    can depend on how much of a prompt was cached (docs/exactness.md)."""
    r = server.post("/v1/chat/completions", json.dumps({
        "messages": [{"role": "user", "content": "Count to three."}], "max_tokens": 2, "temperature": 0}))
    assert r.status_code == 200, r.text


def _reference(server, messages: list[dict[str, str]]) -> str:
    r = server.post("/v1/chat/completions", json.dumps({"model": NAME, "messages": messages, "temperature": 0,
                                                        "max_tokens": 24}))
    assert r.status_code == 200, r.text
    text: str = r.json()["choices"][0]["message"]["content"]
    return text


def test_llm_chat_streamed_and_not(server, llm_cli):
    _same_start(server)
    want = _reference(server, [{"role": "user", "content": PROMPT}])
    assert want.strip()
    _same_start(server)
    assert llm_cli("-m", NAME, "--no-stream", *OPTIONS, PROMPT) == want + "\n"
    _same_start(server)
    assert llm_cli("-m", NAME, *OPTIONS, PROMPT) == want + "\n"     # llm streams by default


def _two_turns(server) -> tuple[str, str]:
    """The server's answers to PROMPT, then to a second turn after it, as a
    conversation sends them (the second starts from the first's cache state)."""
    _same_start(server)
    first = _reference(server, [{"role": "user", "content": PROMPT}])
    second = _reference(server, [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": first},
                                 {"role": "user", "content": SECOND}])
    return first, second


def test_llm_continues_a_conversation(server, llm_cli):
    _same_start(server)
    first = llm_cli("-m", NAME, "--no-stream", *OPTIONS, PROMPT).rstrip("\n")
    second = llm_cli("-c", "--no-stream", *OPTIONS, SECOND).rstrip("\n")
    assert (first, second) == _two_turns(server) and second.strip()


def test_llm_chat_session(server, llm_cli):
    # `llm chat`: the interactive session, two turns typed on stdin, then "quit".
    _same_start(server)
    out = llm_cli("chat", "-m", NAME, *OPTIONS, stdin=f"{PROMPT}\n{SECOND}\nquit\n")
    first, second = _two_turns(server)
    assert first in out and second in out and out.index(first) < out.index(second), out


def test_llm_lists_the_configured_model(llm_cli):
    assert any(line.split(":", 1)[-1].strip().startswith(NAME) for line in llm_cli("models").splitlines())


def test_llm_log_records_the_served_answer(llm_cli):
    llm_cli("-m", NAME, "--no-stream", *OPTIONS, PROMPT)
    logs = json.loads(llm_cli("logs", "-n", "1", "--json"))
    assert logs and logs[0]["model"] == NAME and logs[0]["response"].strip()


