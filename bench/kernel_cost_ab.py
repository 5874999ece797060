"""Kernel cost of two or more llama-cpp-python builds side by side: bench/kernel_cost.py
run in each build's Python, alternating, for several rounds, on each model; prints a
Markdown table of medians and each build's ratio to the first (the stock build).

Each round starts one build later than the last (stock, exact; then exact, stock), so no
build always runs right after another: with a fixed order two runs of the same kernels
differed by up to 1.43x (bench/results/exact-kernels-0014-xeon-avx512.md). With two or more
rounds a ratio cell also gives the range of the per-round ratios.

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


def round_order(builds: list[list[str]], round_no: int) -> list[list[str]]:
    """The builds in the order round `round_no` runs them: rotated by one each round."""
    k = round_no % len(builds)
    return builds[k:] + builds[:k]


def ratio_cell(value: float, ref: float, per_round: list[float], unit: str, digits: int) -> str:
    """'12.3 ms (1.02x)', with ', 0.97-1.08' inside the brackets when there are rounds to span."""
    spread = f", {min(per_round):.2f}-{max(per_round):.2f}" if len(per_round) > 1 else ""
    return f"{value:.{digits}f} {unit} ({value / ref:.2f}x{spread})"


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
    names = [b[0] for b in builds]
    if any(len(b) != 2 or not b[0] or not b[1] for b in builds) or len(set(names)) != len(names):
        ap.error(f"builds must be distinct name=python pairs, got {opts.builds}")
    if opts.rounds < 1 or opts.reps < 1:
        ap.error("--rounds and --reps must be at least 1")
    batches = " | ".join(f"B={b}" for b in sizes[1:])
    print(f"| model | build | {opts.depth or 600}-token prefill | one token | {batches} |")
    print("|---|---|---|---|" + "---|" * (len(sizes) - 1))
    for model in opts.models.split(","):
        runs: dict[str, list[dict]] = {name: [] for name, _ in builds}
        for r in range(opts.rounds):
            for name, python in round_order(builds, r):
                runs[name].append(run(python, model, opts.reps, opts.depth, sizes))
        # one row of values per round: prefill in s, then each size in ms
        rows = {name: [[x["prefill_s"], *(x["batch_ms"][b] for b in sizes)] for x in rs] for name, rs in runs.items()}
        ref_name = builds[0][0]
        ref = [statistics.median(col) for col in zip(*rows[ref_name])]
        units = [("s", 2)] + [("ms", 1)] * len(sizes)
        for name, _ in builds:
            med = [statistics.median(col) for col in zip(*rows[name])]
            if name == ref_name:
                cells = [f"{v:.{d}f} {u}" for v, (u, d) in zip(med, units)]
            else:
                per_round = [[x / y for x, y in zip(mine, theirs)] for mine, theirs in zip(rows[name], rows[ref_name])]
                cells = [ratio_cell(v, ref[i], [pr[i] for pr in per_round], *units[i]) for i, v in enumerate(med)]
            print(f"| {model} | {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
