"""Side-by-side speed of plain greedy decoding, llama-cpp-python's prompt-lookup
decoder and ngramspec on one model (ngramspec.benchmark), as a markdown table.

Run:  .venv/bin/python bench/compare.py --model smollm2-135m --rounds 3 \
          --out bench/results/compare-smollm2-135m.md
"""
from __future__ import annotations

import argparse
import sys

from ngramspec.benchmark import WORKLOADS, emit_report, run_benchmark


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--no-lookup", action="store_true")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    res = run_benchmark(args.model, rounds=args.rounds, max_tokens=args.max_tokens,
                        workloads=args.workloads.split(","), lookup=not args.no_lookup,
                        temperature=args.temperature)
    emit_report(res.to_markdown(".venv/bin/python bench/compare.py " + " ".join(sys.argv[1:])), args.out)


if __name__ == "__main__":
    main()
