"""How the verify-cost curve r(B) changes with the number of cached tokens.

The engine is calibrated after a short context, but attention reads the whole
cache for every row of a batch, so at long contexts a B-token batch costs more
relative to one token. Prints time(B) and r(B) at each context length.

    python bench/context_cost.py --model smollm2-135m --contexts 128,512,1024,1536 \
        --json bench/results/context-cost-smollm2-135m.json

The JSON ({"model", "contexts", "seconds"}) is a ngramspec.costcurve.ContextCost;
bench/replay.py --context-cost prices the limit and the replay with it.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from ngramspec.calibration.cost_curve import ContextCost
from ngramspec.calibration.cost_timing import measure_verify_cost
from ngramspec.suite.loading import load, model_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--contexts", default="32,256,1024,1536")
    ap.add_argument("--max-batch", type=int, default=17)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the curves here")
    args = ap.parse_args(argv)
    contexts = [int(c) for c in args.contexts.split(",")]
    llm = load(model_path(args.model), "plain", max(contexts) + args.max_batch + 64, args.threads)
    sizes = [1, 2, 3, 5, 9, 13, 17]
    sizes = [b for b in sizes if b <= args.max_batch]
    print("| context | t(1) ms | " + " | ".join(f"r({b})" for b in sizes[1:]) + " |")
    print("|---" * (len(sizes) + 1) + "|")
    curves = {}
    for ctx in contexts:
        curve = curves[ctx] = measure_verify_cost(llm, args.max_batch, reps=args.reps, context_tokens=ctx)
        print(f"| {ctx} | {curve.single_seconds * 1e3:.2f} | "
              + " | ".join(f"{curve(b):.2f}" for b in sizes[1:]) + " |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "threads": args.threads, **asdict(ContextCost.from_curves(curves))},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
