"""What the output matrix (the vocabulary's logits) costs in a verify pass: one batch of
B rows, 300 tokens deep, decoded with logits for every row (as a verify pass needs them)
and with logits for its last row only (as prompt processing asks), alternating, medians.
The difference is the output matrix for B - 1 rows, which any exact verifier pays and a
plain decoder pays once a token. llama-cpp-python's default threads.

    .venv/bin/python bench/output_matrix_cost.py smollm2-135m qwen2.5-coder-0.5b [--size 65] [--rounds 7]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from ngramspec import _llama
from ngramspec.models import load_llama

DEPTH = 300
TEXT = Path(__file__).resolve().parent.parent / "python" / "ngramspec" / "engine" / "speculative_engine.py"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["smollm2-135m"])
    ap.add_argument("--size", type=int, default=65, help="rows in the batch (default 65, the largest verify pass)")
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds; the first is a warm-up (default 7)")
    opts = ap.parse_args()
    if not 2 <= opts.size <= 512 or opts.rounds < 2:
        ap.error("--size must be 2-512 (one batch of n_batch 512) and --rounds >= 2")
    for name in opts.models:
        llm = load_llama(name, n_ctx=1024, n_batch=512, seed=0, verbose=False, logits_all=True)
        tokens = llm.tokenize(TEXT.read_bytes())[:DEPTH + opts.size]
        assert len(tokens) == DEPTH + opts.size, f"{TEXT.name} is too short for {opts.size} rows"
        llm.reset()
        llm.eval(tokens[:DEPTH])
        batch = _llama.Batch(opts.size)
        seconds: dict[bool, list[float]] = {True: [], False: []}
        for r in range(opts.rounds):
            for every_row in (True, False):
                batch.fill(tokens[DEPTH:], DEPTH, all_logits=every_row)   # the last row's logits either way
                t0 = time.perf_counter()
                _llama.decode(llm, batch)
                dt = time.perf_counter() - t0
                _llama.remove_from(llm, DEPTH)
                if r:
                    seconds[every_row].append(dt)
        every, last = statistics.median(seconds[True]), statistics.median(seconds[False])
        print(f"{name}: {opts.size} rows {DEPTH} deep, threads {llm.context_params.n_threads}/"
              f"{llm.context_params.n_threads_batch}: every row's logits {every * 1e3:.1f} ms, the last row's only "
              f"{last * 1e3:.1f} ms: the output matrix for {opts.size - 1} rows is {(every - last) / every:.0%} "
              f"of the pass (medians of {opts.rounds - 1})")


if __name__ == "__main__":
    main()
