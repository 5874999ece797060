"""The main job's request (``ngramspec generate``'s demo: the model edits a source
file with the file as its prediction) in interleaved rounds of ngramspec and plain
llama-cpp-python, on a quiet machine or beside a second llama.cpp process that
decodes without pause on the same cores (what a user's other work, or a second
server, does to the 2-core machine):

    .venv/bin/python bench/contention.py [--rounds N] [--load none|llama] [--model NAME]
        [--max-tokens N] [--max-draft N]

``--load llama``: a subprocess loads SmolLM2-135M on 2 threads and decodes 400-token
completions in a loop until the rounds end. Prints, per round, each side's seconds,
plain / ngramspec, tokens per pass, the verify batch sizes and the cost model's r(B)
at the end of the generation (``relative_costs``), then the median ratio.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from ngramspec.cli.demo import DEMO_MAX_TOKENS, demo
from ngramspec.integrations.wrapper import SpeculativeLlama
from ngramspec.models import load_llama

_LOAD = """
from ngramspec.models import load_llama
llm = load_llama("smollm2-135m", n_ctx=2048, seed=0, n_threads=2, verbose=False)
while True:
    llm.reset()
    llm.create_completion("Once upon a time", max_tokens=400, temperature=0)
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--load", choices=("none", "llama"), default="none")
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--max-tokens", type=int, default=DEMO_MAX_TOKENS, help="the demo's answer length by default")
    ap.add_argument("--max-draft", type=int, default=None, help="the engine's default unless given (a smaller cap "
                    "checks fewer batch sizes at start-up: the smoke test's setting)")
    args = ap.parse_args(argv)
    llm = load_llama(args.model, n_ctx=2048, seed=0, verbose=False)
    spec = SpeculativeLlama(llm) if args.max_draft is None else SpeculativeLlama(llm, max_draft=args.max_draft)
    task = demo()
    prediction = {"type": "content", "content": task.prediction}
    load = None
    if args.load == "llama":
        load = subprocess.Popen([sys.executable, "-c", _LOAD], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(10)   # loaded and decoding
    ratios = []
    try:
        for r in range(args.rounds):
            llm.reset()
            t0 = time.perf_counter()
            out = spec.create_chat_completion(task.messages, prediction=prediction, max_tokens=args.max_tokens,
                                               temperature=0, seed=0)
            t_spec = time.perf_counter() - t0
            s = spec.last_speculative
            llm.reset()
            t0 = time.perf_counter()
            plain = llm.create_chat_completion(task.messages, max_tokens=args.max_tokens, temperature=0, seed=0)
            t_plain = time.perf_counter() - t0
            same = plain["choices"][0]["message"]["content"] == out["choices"][0]["message"]["content"]
            ratios.append(t_plain / t_spec)
            costs = s.get("relative_costs", {})
            print(f"round {r + 1}: ngramspec {t_spec:.2f} s, plain {t_plain:.2f} s, plain/ngramspec "
                  f"{t_plain / t_spec:.2f}x, tokens per pass {s['tokens_per_forward']:.2f} "
                  f"({s['forward_passes']} passes), identical {same}", flush=True)
            print(f"  batches {dict(sorted(s.get('verify_batch_sizes', {}).items()))}; explored "
                  f"{s.get('explored_passes')}; r(2..7) {[round(costs[b], 2) for b in range(2, 8) if b in costs]}",
                  flush=True)
            print(f"  cost curve: {s.get('cost_curve_origin')}", flush=True)
    finally:
        if load is not None:
            load.kill()
            load.wait()
    print(f"median plain/ngramspec over {args.rounds} rounds, load {args.load}: {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
