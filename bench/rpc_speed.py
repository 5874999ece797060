"""Speculation past one machine: a model split across two RPC workers on 127.0.0.1
(``ngramspec rpc-worker`` subprocesses), driven by this process, with 0, 1 and 5 ms
of round-trip time added between the driver and each worker by a delaying TCP relay
(tests/support/delay_relay.py: kernel netem is not available here).

For each added round-trip time, and for the model loaded locally as a reference:
- the one-token pass time and r(B) = time(B-token pass) / time(1-token pass),
  ``measure_verify_cost`` over the workers;
- plain, exact and fast mode's decode tokens/s (prefill excluded) on the quick
  suite's workloads, medians over interleaved rounds, and whether exact and fast
  mode's text equals plain's;
- at 0 ms, plain decoding also without ngramspec's guard (the workers registered
  directly, as llama.cpp's --rpc does), for the guard's own cost.

Every round loads the model afresh for each configuration, one configuration at a
time (a worker serves one client at a time). Exact mode's batch sizes come from the
invariance check, run once over the workers (at +0 ms: a relay's delay does not change
the workers' kernels) and once locally, each time on the model as loaded there; its
cost curve is each configuration's own measured r(B).

Run (from the repository root):
  PYTHONPATH=.:python .venv/bin/python bench/rpc_speed.py --model smollm2-135m [--rounds 3] [--rtt 0,1,5]
Writes bench/results/rpc-<model>.md and .json (machine, commit, command, load).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.delay_relay import DelayRelay
from tests.support.rpc_workers import Worker

from ngramspec.calibration.cost_curve import CostCurveResult
from ngramspec.calibration.cost_timing import llm_threads, measure_verify_cost
from ngramspec.calibration.invariance_cache import load_or_check
from ngramspec.suite import sources
from ngramspec.suite.loading import make_engine, model_path
from ngramspec.suite.provenance import cpu_name, git_commit
from ngramspec.suite.run_record import FirstTokenClock

MODES = ("plain", "exact", "fast")
ENGINE_METHOD = {"exact": "ngramspec", "fast": "ngramspec fast"}
MAX_B = 9
N_CTX = 2048


def one_run(llm: Any, engines: dict[str, Any], mode: str, item: sources.Item) -> tuple[float, str, float]:
    """(decode tokens/s after the first token, text, tokens per pass)."""
    clock = FirstTokenClock()
    llm.reset()
    if mode == "plain":
        out = llm.create_completion(item.prompt, max_tokens=item.max_tokens, temperature=0.0,
                                    stop=item.stop or None, stopping_criteria=clock)
        n, text, per_pass = out["usage"]["completion_tokens"], out["choices"][0]["text"], 1.0
    else:
        g = engines[mode].generate(item.prompt, max_tokens=item.max_tokens, stop=item.stop or None,
                                   stopping_criteria=clock)
        n, text, per_pass = len(g.tokens), g.text, g.stats.tokens_per_forward
    t1 = time.perf_counter()
    return max(1, n - 1) / max(t1 - (clock.first or t1), 1e-9), text, per_pass


_direct: dict[str, list[int]] = {}   # workers registered directly, once per process (ggml's registry only grows)


def load(path: str, rpc: list[str] | None, threads: int, guard: bool = True) -> Any:
    from ngramspec.models import load_llama

    if rpc is None or guard:
        return load_llama(path, n_ctx=N_CTX, seed=0, n_threads=threads, rpc=rpc)
    # The workers registered directly, as llama.cpp's --rpc does: no guard between.
    import llama_cpp

    from ngramspec import _llama, _rpc

    devices = [d for address in rpc for d in _direct.setdefault(address, _rpc.add_server(address))]
    with _llama.model_devices(devices):
        return llama_cpp.Llama(path, n_ctx=N_CTX, seed=0, n_threads=threads, n_threads_batch=threads,
                               n_gpu_layers=-1, verbose=False)


def measure(llm: Any, workloads: list[sources.Workload], kernels: str, with_engines: bool) -> dict[str, Any]:
    """r(B), then every mode on every workload. Exact mode's batch sizes come from the
    invariance check on this ``kernels`` set-up ("local" or "rpc"), run (or read from
    the on-disk cache) once per process; its cost curve is this configuration's own."""
    curve = measure_verify_cost(llm, MAX_B, reps=3)
    out: dict[str, Any] = {"t1_ms": curve.single_seconds * 1e3, "r": [round(x, 3) for x in curve.relative]}
    engines = {}
    if with_engines:
        if kernels not in _verdicts:
            t0 = time.perf_counter()
            _verdicts[kernels] = load_or_check(llm, MAX_B)
            out["check_s"] = time.perf_counter() - t0
            print(f"  invariance check ({kernels}): {out['check_s']:.0f} s", flush=True)
        priced = dataclasses.replace(_verdicts[kernels], cost_curve=CostCurveResult(
            dict(enumerate(curve.relative, 1)), "measured", True, measured_at=time.time(), repeats=3,
            threads=llm_threads(llm), context_tokens=128))
        engines = {"exact": make_engine(llm, "ngramspec", invariance=priced),
                   "fast": make_engine(llm, "ngramspec fast")}
        for e in engines.values():
            e.prepare()
        allowed = engines["exact"].plan(True).allowed
        out["exact_sizes"] = [b for b in range(2, len(allowed)) if allowed[b]]
    runs: dict[str, dict[str, Any]] = {}
    for w in workloads:
        item = w.items[0]
        for mode in MODES if with_engines else ("plain",):
            tps, text, per_pass = one_run(llm, engines, mode, item)
            runs[f"{w.name}/{mode}"] = {"tok_s": tps, "text": text, "per_pass": per_pass}
    out["runs"] = runs
    return out


_verdicts: dict[str, Any] = {}   # kernels ("local", "rpc") -> the invariance report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rtt", default="0,1,5", help="added round-trip times in ms")
    ap.add_argument("--worker-threads", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="the driving process's threads (and the local run's)")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the model loaded locally and plain decoding without the guard")
    args = ap.parse_args()
    path = model_path(args.model)
    rtts = [float(x) for x in args.rtt.split(",")]
    load_before, commit = os.getloadavg(), git_commit()   # the code that runs: read before it runs
    workers = [Worker(args.worker_threads).start() for _ in range(2)]
    relays = {rtt: [DelayRelay(("127.0.0.1", w.port), rtt) for w in workers] for rtt in rtts if rtt > 0}
    addresses = {rtt: ([r.address for r in relays[rtt]] if rtt > 0 else [w.address for w in workers])
                 for rtt in rtts}
    configs: list[tuple[str, list[str] | None, bool]] = [] if args.no_reference else [("local", None, True)]
    configs += [(f"rpc +{rtt:g} ms", addresses[rtt], True) for rtt in rtts]
    if 0 in rtts and not args.no_reference:
        configs.append(("rpc +0 ms, no guard", addresses[0], False))
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in configs}
    placement: dict[str, str] = {}
    try:
        for r in range(args.rounds):
            order = configs[r % len(configs):] + configs[: r % len(configs)]
            for name, rpc, guard in order:
                t0 = time.perf_counter()
                llm = load(path, rpc, args.threads, guard)
                load_s = time.perf_counter() - t0
                if rpc is not None and guard:
                    from ngramspec.rpc.loading import placement as where

                    p = where(llm)
                    placement[name] = p.describe() if p else "unknown"
                workloads = sources.build(llm, True, None)
                m = measure(llm, workloads, "local" if rpc is None else "rpc", with_engines=guard)
                m["load_s"] = load_s
                results[name].append(m)
                llm.close()
                print(f"round {r + 1}/{args.rounds}: {name} done ({time.perf_counter() - t0:.0f} s)", flush=True)
    finally:
        for w in workers:
            w.kill()
        for rs in relays.values():
            for relay in rs:
                relay.close()
    report = {"model": args.model, "machine": f"{cpu_name()}, {os.cpu_count()} cores", "commit": commit,
              "command": "python bench/rpc_speed.py " + " ".join(sys.argv[1:]), "rounds": args.rounds,
              "worker_threads": args.worker_threads, "threads": args.threads,
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "placement": placement, "results": results}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rpc-{args.model}.json").write_text(json.dumps(report, indent=1))
    md = markdown(report)
    (out / f"rpc-{args.model}.md").write_text(md)
    print(md)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def markdown(report: dict[str, Any]) -> str:
    results = report["results"]
    lines = [f"# Speculation over RPC workers: {report['model']}", "",
             f"- Machine: {report['machine']}; commit {report['commit']}; load average "
             f"{report['load_average_before'][0]:.1f} before, {report['load_average_after'][0]:.1f} after.",
             f"- Command: `{report['command']}`",
             f"- Two `ngramspec rpc-worker` on 127.0.0.1 ({report['worker_threads']} thread(s) each), the driver "
             f"with {report['threads']} thread(s); added round-trip time by a delaying TCP relay "
             "(tests/support/delay_relay.py) between the driver and each worker.",
             f"- Where the weights went: {next(iter(report['placement'].values()), 'unknown')}.",
             f"- Medians over {report['rounds']} rounds (each round loads every configuration afresh); decode "
             "tokens/s exclude prefill; `=` marks text identical to plain's in every round.", "",
             "## One-token pass and r(B)", "",
             "| configuration | one token (ms) | r(2) | r(3) | r(4) | r(6) | r(8) | r(9) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, rounds in results.items():
        t1 = _median([m["t1_ms"] for m in rounds])
        rs = [_median([m["r"][b - 1] for m in rounds]) for b in (2, 3, 4, 6, 8, 9)]
        lines.append(f"| {name} | {t1:.1f} | " + " | ".join(f"{x:.2f}" for x in rs) + " |")
    lines += ["", "## Decode tokens/s and speed-up over plain in the same configuration", ""]
    workloads = sorted({k.split("/")[0] for rounds in results.values() for m in rounds for k in m["runs"]})
    header = "| configuration | workload | plain tok/s | exact | fast | exact tokens/pass |"
    lines += [header, "|---|---|---|---|---|---|"]
    for name, rounds in results.items():
        for w in workloads:
            plain = [m["runs"][f"{w}/plain"]["tok_s"] for m in rounds if f"{w}/plain" in m["runs"]]
            cells = [f"{_median(plain):.1f}"]
            for mode in ("exact", "fast"):
                key = f"{w}/{mode}"
                ratios = [m["runs"][key]["tok_s"] / m["runs"][f"{w}/plain"]["tok_s"] for m in rounds
                          if key in m["runs"]]
                same = all(m["runs"][key]["text"] == m["runs"][f"{w}/plain"]["text"] for m in rounds
                           if key in m["runs"])
                cells.append(f"{_median(ratios):.2f}x" + (" =" if same else " (differs)") if ratios else "-")
            per_pass = [m["runs"][f"{w}/exact"]["per_pass"] for m in rounds if f"{w}/exact" in m["runs"]]
            cells.append(f"{_median(per_pass):.2f}" if per_pass else "-")
            lines.append(f"| {name} | {w} | " + " | ".join(cells) + " |")
    lines += ["", "## Geometric mean speed-up over plain, per configuration", "",
              "| configuration | exact | fast |", "|---|---|---|"]
    for name, rounds in results.items():
        cells = []
        for mode in ("exact", "fast"):
            per_workload = []
            for w in workloads:
                ratios = [m["runs"][f"{w}/{mode}"]["tok_s"] / m["runs"][f"{w}/plain"]["tok_s"] for m in rounds
                          if f"{w}/{mode}" in m["runs"]]
                if ratios:
                    per_workload.append(_median(ratios))
            cells.append(f"{statistics.geometric_mean(per_workload):.2f}x" if per_workload else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
