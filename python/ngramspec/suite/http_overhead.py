"""What `ngramspec serve` adds over HTTP to in-process ngramspec's decode time:
each server request paired with the in-process run of the same item and round,
and the report's section on it."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ngramspec.suite.cells import ratio, signed_percent
from ngramspec.suite.headline import median_or_nan as _median
from ngramspec.suite.methods import SERVE_METHOD
from ngramspec.suite.run_record import Run
from ngramspec.suite.runner import Suite

# The serving goal: HTTP adds under this share to in-process ngramspec's decode time.
HTTP_OVERHEAD_GOAL = 0.02


@dataclass
class HttpOverhead:
    """One workload's `ngramspec serve` requests, each paired with the in-process
    ngramspec run of the same item and round."""
    workload: str
    requests: int                    # server requests that completed
    inproc_tok_s: float              # in-process ngramspec decode tok/s (engine's timers), median over rounds
    server_tok_s: float              # the server's decode tok/s from its own timings, median over rounds
    latency_ms: float                # median end-to-end latency per request (client side)
    overhead_ms: float               # median of latency - (prompt_ms + predicted_ms) per request
    overhead: list[float] = field(default_factory=list)  # per paired request: that / in-process decode time

    @property
    def overhead_median(self) -> float:
        return _median(self.overhead)


def _engine_decode(r: Run) -> tuple[int, float]:
    """(decode tokens, decode seconds) by the engine's own timers, the same split as
    the server's timings (predicted_ms = time_total - time_prefill)."""
    s = r.stats
    if "predicted_ms" in s:
        return max(0, r.tokens - 1), float(s["predicted_ms"]) / 1e3
    return max(0, r.tokens - 1), max(0.0, float(s.get("time_total_s", 0.0)) - float(s.get("time_prefill_s", 0.0)))


def _engine_rate(runs: Sequence[Run]) -> float:
    """Median over rounds of decode tokens / decode seconds (the engine's timers)."""
    rates = []
    for rnd in sorted({r.round for r in runs}):
        n, t = 0, 0.0
        for r in runs:
            if r.round == rnd:
                dn, dt = _engine_decode(r)
                n, t = n + dn, t + dt
        if t > 0:
            rates.append(n / t)
    return _median(rates)


def http_overhead(suite: Suite, runs: Sequence[Run]) -> list[HttpOverhead]:
    """Per workload: `ngramspec serve`'s decode speed and end-to-end latency, and
    HTTP overhead = (latency - (prompt_ms + predicted_ms)) / in-process ngramspec's
    decode time (the runner's wall clock, after the first token) on the same item and round."""
    out = []
    for w in suite.workloads:
        mine = [r for r in runs if r.workload == w.name and not r.error]
        served = [r for r in mine if r.method == SERVE_METHOD and "latency_s" in r.stats]
        inproc = [r for r in mine if r.method == "ngramspec"]
        pair = {(r.item, r.round): r for r in inproc}
        overhead_s = [r.stats["latency_s"] - (r.stats["prompt_ms"] + r.stats["predicted_ms"]) / 1e3 for r in served]
        ratios = [o / pair[(r.item, r.round)].decode_s for r, o in zip(served, overhead_s)
                  if (r.item, r.round) in pair and pair[(r.item, r.round)].decode_s > 0]
        out.append(HttpOverhead(w.name, len(served), _engine_rate(inproc) if inproc else math.nan,
                                _engine_rate(served) if served else math.nan,
                                _median([r.stats["latency_s"] * 1e3 for r in served]),
                                _median([o * 1e3 for o in overhead_s]), ratios))
    return out


def http_section(rows: Sequence[HttpOverhead]) -> list[str]:
    """The report's section on `ngramspec serve` against in-process ngramspec."""
    lines = ["## HTTP overhead (ngramspec serve vs in-process ngramspec)", "",
             "`ngramspec serve` in a subprocess on the same model file, n_ctx and threads, sent each prompt as a "
             "greedy /v1/completions request over loopback (Python's urllib, a new connection per request). "
             "Decode tok/s here are both by the engine's own timers (tokens after the first over time_total - "
             "time_prefill; the server reports them as timings.predicted_n / predicted_ms). Latency is end to "
             "end, measured by the client. HTTP overhead per request = (latency - (prompt_ms + predicted_ms)) / "
             "the in-process ngramspec run's decode time on the same prompt and round: what serving adds "
             "(HTTP, JSON, request validation, the wrapper, the thread hop). The server's Llama is not reset "
             "between requests, so its prefill may reuse a cached prompt prefix.", "",
             "| workload | requests | in-process decode tok/s | server decode tok/s | server / in-process | "
             "median latency per request | median overhead per request | HTTP overhead (median) |",
             "|---|---|---|---|---|---|---|---|"]
    for h in rows:
        speed = h.server_tok_s / h.inproc_tok_s if h.inproc_tok_s > 0 else math.nan
        lines.append(f"| {h.workload} | {h.requests} | {h.inproc_tok_s:.1f} | {h.server_tok_s:.1f} | {ratio(speed)} | "
                     f"{h.latency_ms:.0f} ms | {h.overhead_ms:.1f} ms | {signed_percent(h.overhead_median)} |")
    every = [v for h in rows for v in h.overhead]
    overall = _median(every)
    lines.append(f"| **all requests** | {sum(h.requests for h in rows)} | | | | | | {signed_percent(overall)} |")
    if math.isnan(overall):
        verdict = "no request could be paired with an in-process ngramspec run (is 'ngramspec' among the methods?)"
    else:
        verdict = (f"median HTTP overhead {overall:.2%} of in-process decode time over {len(every)} requests: "
                   + ("under" if overall < HTTP_OVERHEAD_GOAL else "NOT under")
                   + f" the {HTTP_OVERHEAD_GOAL:.0%} goal for ngramspec serve")
    lines += ["", f"Goal: HTTP adds under {HTTP_OVERHEAD_GOAL:.0%} to ngramspec's in-process decode time; {verdict}."]
    return lines
