"""Kernel cost of two or more llama-cpp-python builds side by side: bench/kernel_cost.py
run in each build's Python, alternating, for several rounds, on each model; prints a
Markdown table of medians and each build's ratio to the first (the stock build).

    .venv/bin/python bench/kernel_cost_ab.py --rounds 2 --models smollm2-135m,qwen2.5-coder-0.5b \\
        stock=.venv-stock/bin/python exact=.venv/bin/python
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).with_name("kernel_cost.py")
SIZES = ("1", "2", "4", "8", "16", "32", "64")


def run(python: str, model: str, reps: int, depth: int | None = None, sizes: tuple[str, ...] = SIZES) -> dict:
    extra = ([] if depth is None else ["--depth", str(depth)]) + ["--sizes", ",".join(sizes)]
    out = subprocess.run([python, str(SCRIPT), model, "--reps", str(reps), *extra], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="+", help="name=python, the first is the reference")
    ap.add_argument("--models", default="smollm2-135m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--depth", type=int, default=None, help="tokens cached before the batches (kernel_cost.py's "
                    "default, 600, unless given)")
    ap.add_argument("--sizes", default=",".join(SIZES), help="batch sizes, comma-separated (default: %(default)s)")
    opts = ap.parse_args()
    sizes = tuple(str(b) for b in sorted({1, *(int(b) for b in opts.sizes.split(","))}))
    builds = [b.split("=", 1) for b in opts.builds]
    batches = " | ".join(f"B={b}" for b in sizes[1:])
    print(f"| model | build | {opts.depth or 600}-token prefill | one token | {batches} |")
    print("|---|---|---|---|" + "---|" * (len(sizes) - 1))
    for model in opts.models.split(","):
        runs: dict[str, list[dict]] = {name: [] for name, _ in builds}
        for _ in range(opts.rounds):
            for name, python in builds:
                runs[name].append(run(python, model, opts.reps, opts.depth, sizes))
        med = {name: {"prefill": statistics.median(r["prefill_s"] for r in rs),
                      **{b: statistics.median(r["batch_ms"][b] for r in rs) for b in sizes}}
               for name, rs in runs.items()}
        ref = med[builds[0][0]]
        for name, _ in builds:
            m = med[name]
            cells = [f"{m['prefill']:.2f} s" + ("" if m is ref else f" ({m['prefill'] / ref['prefill']:.2f}x)")]
            cells += [f"{m[b]:.1f} ms" + ("" if m is ref else f" ({m[b] / ref[b]:.2f}x)") for b in sizes]
            print(f"| {model} | {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
