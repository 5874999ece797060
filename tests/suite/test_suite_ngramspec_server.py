"""`ngramspec serve` as a benchmark-suite method: the server in a
subprocess beside in-process ngramspec, its end-to-end latency, and the report's
HTTP-overhead section."""
from __future__ import annotations

import importlib.util
import json
import math
import stat
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from ngramspec.suite import report, runner
from ngramspec.suite.http_overhead import http_overhead, http_section
from ngramspec.suite.llama_server import ServerError
from ngramspec.suite.methods import MEASURED_MAX_BATCH, SERVE_METHOD
from ngramspec.suite.ngramspec_server import NgramspecServer
from ngramspec.suite.run_record import Run
from tests.support.cli import TEST_THREADS

needs_server = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("fastapi", "uvicorn", "sse_starlette")),
    reason="needs llama-cpp-python's server extras")


def _run(method: str, item: str, rnd: int, decode_s: float, tokens: int = 11, **stats) -> Run:
    return Run(method, "w", item, rnd, 0.1, decode_s, tokens, "text", stats=stats)


def test_http_overhead_pairs_each_request_with_the_in_process_run():
    suite = SimpleNamespace(workloads=[SimpleNamespace(name="w")], methods=("plain", "ngramspec", SERVE_METHOD))
    runs = [
        _run("ngramspec", "a", 0, 1.0, time_total_s=1.1, time_prefill_s=0.1),
        _run("ngramspec", "a", 1, 2.0, time_total_s=2.1, time_prefill_s=0.1),
        # 10 ms and 30 ms outside the server's prompt_ms + predicted_ms
        _run(SERVE_METHOD, "a", 0, 1.0, latency_s=1.11, prompt_ms=100.0, predicted_ms=1000.0),
        _run(SERVE_METHOD, "a", 1, 2.0, latency_s=2.13, prompt_ms=100.0, predicted_ms=2000.0),
        Run(SERVE_METHOD, "w", "b", 0, 0.0, 0.0, 0, "", error="ServerError: x"),   # failed: left out
    ]
    (h,) = http_overhead(suite, runs)   # type: ignore[arg-type]
    assert h.requests == 2
    assert h.overhead == pytest.approx([0.01, 0.015])
    assert h.overhead_ms == pytest.approx(20.0)
    assert h.latency_ms == pytest.approx(1620.0)
    assert h.inproc_tok_s == pytest.approx(h.server_tok_s) == pytest.approx(7.5)   # 10 tokens in 1 s and 2 s
    text = "\n".join(http_section([h]))
    assert "## HTTP overhead (ngramspec serve vs in-process ngramspec)" in text
    assert "+1.25%" in text and "under the 2% goal" in text
    # No in-process ngramspec to pair with: said, not a crash.
    (alone,) = http_overhead(suite, [r for r in runs if r.method != "ngramspec"])  # type: ignore[arg-type]
    assert math.isnan(alone.overhead_median) and "no request could be paired" in "\n".join(http_section([alone]))


@needs_server
def test_server_that_exits_or_never_answers_is_an_error(tmp_path):
    with pytest.raises(ServerError, match="exited with 2.*neither a file nor one of"):
        NgramspecServer(str(tmp_path / "missing.gguf"), 512, 1, startup_timeout_s=120)
    fake = tmp_path / "python"      # an "interpreter" that ignores its arguments and never listens
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    t0 = time.monotonic()
    with pytest.raises(ServerError, match="did not become healthy"):
        NgramspecServer("model.gguf", 512, 1, startup_timeout_s=1.0, python=str(fake))
    assert time.monotonic() - t0 < 30      # terminated, not waited for


@pytest.mark.model
@needs_server
def test_serve_method_matches_in_process_ngramspec(smollm2_path, invariance):
    from ngramspec.calibration.cost_curve import CostCurve
    from ngramspec.suite import summary

    # A made-up cost curve: it only feeds the report's model-free limit, and
    # measuring one would only make this test longer; so would checking 65 sizes
    # (the session's report goes to 17).
    cost = CostCurve([1.0 + 0.05 * b for b in range(MEASURED_MAX_BATCH)], 0.01)
    suite = runner.Suite(smollm2_path, quick=True, n_ctx=2048, threads=TEST_THREADS, methods=("plain", "ngramspec"),
                         progress=False, workloads=["code_editing"], cost=cost, serve=True, invariance=invariance)
    try:
        assert suite.methods == ("plain", "ngramspec", SERVE_METHOD)
        proc = suite.servers[SERVE_METHOD].proc
        assert proc.poll() is None
        w = suite.workloads[0]
        w.items = [replace(w.items[0], max_tokens=16)]
        runs = suite.run(2)   # the second request of the server finds the first's prompt in its cache
        figs = summary.summarize(suite, runs)
        assert suite.servers[SERVE_METHOD].peak_rss_mib() > 50
    finally:
        suite.close()
    assert proc.poll() is not None   # closed with the suite
    by = {(r.method, r.round): r for r in runs}
    assert not [r.error for r in runs if r.error]
    for rnd in (0, 1):
        served, inproc = by[(SERVE_METHOD, rnd)], by[("ngramspec", rnd)]
        assert served.text == inproc.text == by[("plain", rnd)].text
        assert served.tokens == inproc.tokens > 1
        s = served.stats
        engine_s = (s["prompt_ms"] + s["predicted_ms"]) / 1e3
        assert s["latency_s"] >= engine_s >= served.decode_s > 0
        assert served.prefill_s == pytest.approx(s["prompt_ms"] / 1e3)
    assert figs[0].methods[SERVE_METHOD].identical

    md = report.to_markdown(suite, figs, 2, "test", "HEAD", {}, [], runs)
    assert "## HTTP overhead (ngramspec serve vs in-process ngramspec)" in md
    row = next(line for line in md.splitlines() if line.startswith("| code_editing | 2 |"))
    assert "ms" in row and "% |" in row
    assert "over 2 requests" in md
    data = report.json_safe(report.to_json(suite, figs, runs, "test", "HEAD", {}))
    assert data["http_overhead"]["workloads"][0]["requests"] == 2
    json.dumps(data, allow_nan=False)
    # Without the method, no section.
    suite.methods = ("plain", "ngramspec")
    assert "HTTP overhead" not in report.to_markdown(suite, figs, 2, "test", "HEAD", {}, [], runs)


def test_cli_wires_serve():
    from ngramspec.cli import build_parser

    args = build_parser().parse_args(["bench", "--serve", "--quick"])
    assert args.serve is True
    assert build_parser().parse_args(["bench"]).serve is False
