"""What the first request pays on a fresh cache: exact mode's invariance check and
cost curve before (or while) it speculates (issue 55).

Each run is a fresh process with a fresh cache (``NGRAMSPEC_CACHE_DIR`` a new
temporary folder whose ``models`` links to the real model cache, so nothing is
downloaded). In it: load the model (n_ctx 2048, THREADS threads, as ``ngramspec
generate`` does), decode a few tokens so the weights are paged in (not counted),
time plain ``create_completion`` on doctor's code-edit prompt (MAX_TOKENS, greedy),
then the same request through ``wrap(llm)`` REQUESTS times (cache reset between):
the first on the fresh cache, then the next ones. Reported per request:
wall seconds, the seconds spent before the prefill on the verify plan (the
stepwise check's slice; ``stats.time_plan_s``), the sizes certified when it
started, and tokens per pass; and the time inside the check's functions
(``invariance_cache.check_batch_invariance`` and ``measure_cost_curve``, the
whole check of the code before issue 55; ``certify.run_steps``, the stepwise
check), whichever the code being measured has. "added wait" is the first
request's wall time over plain's. The text must equal plain's.

    .venv/bin/python bench/first_request.py [MODEL ...] [--runs N] [--threads T] [--max-tokens N] [--requests N]

Defaults: smollm2-135m qwen2.5-coder-0.5b, 2 runs, 2 threads, 128 tokens, 3 requests. To measure
other code (the commit before the change), put its ``python/`` first on PYTHONPATH.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def child(model: str, threads: int, max_tokens: int, requests_n: int = 3) -> dict[str, Any]:
    """One run, in this (fresh) process."""
    spent: dict[str, float] = {}

    def timed(module: Any, name: str, label: str) -> None:
        real = getattr(module, name, None)
        if real is None:
            return

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t0

        setattr(module, name, wrapper)

    from ngramspec.calibration import invariance_cache
    timed(invariance_cache, "check_batch_invariance", "whole check")
    timed(invariance_cache, "measure_cost_curve", "cost curve")
    try:
        from ngramspec.calibration import certify
        timed(certify, "run_steps", "stepwise check")
        timed(certify, "check_batch_invariance", "whole check")
    except ImportError:   # the code before the stepwise check
        pass
    import ngramspec
    from ngramspec.cli.common import DEFAULT_PROMPT
    from ngramspec.models import load_llama

    t0 = time.perf_counter()
    llm = load_llama(model, n_ctx=2048, seed=0, n_threads=threads)
    load_s = time.perf_counter() - t0
    llm.create_completion("Hello", max_tokens=4, temperature=0)   # pages the weights in
    llm.reset()
    t0 = time.perf_counter()
    plain = llm.create_completion(DEFAULT_PROMPT, max_tokens=max_tokens, temperature=0)
    plain_s = time.perf_counter() - t0
    spec = ngramspec.wrap(llm)
    requests = []
    for _ in range(requests_n):
        llm.reset()
        before = dict(spent)
        t0 = time.perf_counter()
        out = spec.create_completion(DEFAULT_PROMPT, max_tokens=max_tokens, temperature=0)
        wall = time.perf_counter() - t0
        stats = out.get("speculative", {})
        requests.append({
            "seconds": round(wall, 2),
            "plan_s": round(float(stats.get("time_plan_s", float("nan"))), 2),
            "certified": stats.get("certified_sizes"),
            "tokens_per_pass": round(float(stats.get("tokens_per_forward", 0.0)), 2),
            "inside": {k: round(v - before.get(k, 0.0), 2) for k, v in spent.items() if v - before.get(k, 0.0) > 0},
            "identical": out["choices"][0]["text"] == plain["choices"][0]["text"],
        })
    return {"model": model, "threads": threads, "load_s": round(load_s, 2), "plain_s": round(plain_s, 2),
            "added_wait_s": round(requests[0]["seconds"] - plain_s, 2), "requests": requests}


def run_once(model: str, threads: int, max_tokens: int, requests_n: int) -> dict[str, Any]:
    """``child`` in a fresh process with a fresh cache."""
    real_models = Path(os.environ.get("NGRAMSPEC_CACHE_DIR") or Path.home() / ".cache" / "ngramspec") / "models"
    with tempfile.TemporaryDirectory(prefix="ngramspec-first-") as cache:
        os.symlink(real_models, Path(cache) / "models")
        env = dict(os.environ, NGRAMSPEC_CACHE_DIR=cache)
        code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import first_request; "
                f"print(json.dumps(first_request.child({model!r}, {threads}, {max_tokens}, {requests_n})))")
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{model}: the run failed:\n{proc.stderr[-4000:]}")
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=["smollm2-135m", "qwen2.5-coder-0.5b"])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--requests", type=int, default=3, help="requests through wrap per run (cache reset between)")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} at start", flush=True)
    for run in range(args.runs):
        for model in args.models:
            result = run_once(model, args.threads, args.max_tokens, args.requests)
            print(json.dumps(dict(result, run=run)), flush=True)
    print(f"# load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
