"""`ngramspec serve --memory FILE`: checked before the model loads (a bad file is
one line), and saved when the server stops, by SIGTERM as by SIGINT. And the
defaults its help states."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from ngramspec import server  # noqa: E402


def _options(tmp_path, *extra):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")   # resolve_model_path only needs an existing file here
    return server.settings_from_args(server.build_parser().parse_args(["--model", str(model), *extra]))


def test_memory_flag_reaches_the_options(tmp_path):
    _, _, options, _ = _options(tmp_path, "--memory", str(tmp_path / "mem.bin"))
    assert options.memory == str(tmp_path / "mem.bin")
    _, _, options, _ = _options(tmp_path)
    assert options.memory is None


@pytest.mark.parametrize("make", ["directory", "corrupt", "no parent", "symbolic link", "empty"])
def test_bad_memory_files_are_user_errors(tmp_path, make):
    path = tmp_path / "mem.bin"
    if make == "directory":
        path.mkdir()
    elif make == "corrupt":
        path.write_bytes(b"not a memory file")
    elif make == "symbolic link":   # saved by a rename over the path: the link itself would be replaced
        path.symlink_to(tmp_path / "target.bin")
    elif make == "empty":
        path = ""
    else:
        path = tmp_path / "missing" / "mem.bin"
    with pytest.raises(server.UserError, match="--memory"):
        _options(tmp_path, "--memory", str(path))


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGINT twice"])
def test_memory_is_saved_when_the_server_is_stopped(tmp_path, smollm2_path, how):
    """A plain `kill` (systemd, docker stop) stops uvicorn with SIGTERM, which it
    re-raises after its shutdown, so an `atexit` save never ran and the memory of
    every request was lost; the save now runs at the app's shutdown."""
    import signal
    import subprocess
    import sys
    import time

    httpx = pytest.importorskip("httpx")
    from ngramspec.memory.store import Memory
    from ngramspec.suite.llama_server import free_port

    port = free_port()
    path = tmp_path / "served.mem"
    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "ngramspec", "serve", "--model", smollm2_path, "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "512", "--verbose", "false", "--warmup", "false",
           "--memory", str(path)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        base, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 300
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not start in 300 s"
            time.sleep(0.2)
        r = httpx.post(base + "/v1/completions", timeout=300,
                       json={"prompt": "The quick brown fox jumps over", "max_tokens": 8, "temperature": 0})
        assert r.status_code == 200, r.text
        assert not path.exists()          # saved at shutdown, not per request
        proc.send_signal(getattr(signal, how.split()[0]))
        if how.endswith("twice"):
            # A second Ctrl-C while uvicorn shuts down: it stops at once, cancelling the app's
            # lifespan; the save ran, and an asyncio CancelledError traceback followed it.
            time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "CancelledError" not in text, text[-3000:]
    assert f"memory saved to {path}" in text
    saved = Memory.load(path)
    assert len(saved) > 0                 # the request's prompt and output


def test_help_states_our_defaults_not_llama_cpp_pythons(tmp_path):
    # The help printed llama-cpp-python's "(default: True)" for both, where ours are False.
    text = " ".join(server.build_parser().format_help().split())
    assert "--logits_all LOGITS_ALL Whether to keep the logits of every position (default: False here" in text
    assert "--interrupt_requests INTERRUPT_REQUESTS Whether a waiting request cuts a running stream short " \
           "(default: False here)" in text
    server_settings, model_settings, _, _ = _options(tmp_path)
    assert model_settings.logits_all is False and server_settings.interrupt_requests is False
