"""The server fuzzed from its own ``/openapi.json`` with schemathesis: its examples,
coverage and fuzzing phases, over 1,000 requests against a live ``ngramspec serve``
(SmolLM2-135M, an API key set). Each response is checked: no 5xx, a documented
status code, content type, headers and body schema, OpenAI's error shape on every
4xx, a 401 for a missing or wrong key, a 405 with Allow for other methods.

Requests generate at most a few tokens (schema_fuzz_hooks.py); the seed is fixed,
so a run replays (``NGRAMSPEC_FUZZ_SEED`` picks another)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("schemathesis")
pytest.importorskip("fastapi")

from tests.support.live_server import serving  # noqa: E402

HOOKS = Path(__file__).with_name("schema_fuzz_hooks.py")
KEY = "fuzz-key"
CHECKS = ["not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_headers_conformance", "response_schema_conformance", "missing_required_header",
          "ignored_auth", "unsupported_method", "openai_error_shape"]
MAX_EXAMPLES = 60           # per operation and phase; the coverage phase adds its own (over 2,000 requests in all)
MIN_REQUESTS = 1000
BUDGET_S = 300


def _st() -> str:
    exe = shutil.which("st", path=os.path.dirname(sys.executable)) or shutil.which("st")
    if exe is None:
        pytest.skip("schemathesis's `st` command is not installed beside this Python")
    return exe


def test_schema_fuzz_finds_no_server_error(smollm2_path, tmp_path):
    st = _st()
    har = tmp_path / "fuzz.har.json"
    seed = os.environ.get("NGRAMSPEC_FUZZ_SEED", "0")
    with serving("--model", smollm2_path, "--n_ctx", "1024", "--verbose", "false", "--api_key", KEY,
                 "--max_queue", "4") as server:
        cmd = [st, "run", server.base + "/openapi.json", "-H", f"Authorization: Bearer {KEY}",
               "--phases", "examples,coverage,fuzzing", "--max-examples", str(MAX_EXAMPLES),
               "--checks", ",".join(CHECKS), "--workers", "1", "--seed", seed, "--request-timeout", "60",
               "--report", "har", "--report-har-path", str(har), "--no-color"]
        t0 = time.monotonic()
        # In tmp_path: schemathesis keeps a cache of crashes (.schemathesis/) where it runs.
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=BUDGET_S + 120, cwd=tmp_path,
                           env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)})
        elapsed = time.monotonic() - t0
        # Checked before the server stops (whose log is then checked for tracebacks),
        # so that a failure shows schemathesis's report first.
        entries = json.loads(har.read_text())["log"]["entries"] if har.exists() else []
        statuses = Counter(e["response"]["status"] for e in entries)
        summary = f"{len(entries)} requests in {elapsed:.0f} s, statuses {dict(sorted(statuses.items()))}"
        print(summary)
        assert p.returncode == 0, summary + "\n" + p.stdout[-6000:] + p.stderr[-2000:]
        assert not [s for s in statuses if s >= 500], summary
        assert len(entries) >= MIN_REQUESTS, summary
        assert statuses[200] >= 100, summary           # generation answered, not only refusals
        assert elapsed < BUDGET_S, summary
