"""What a repetition penalty costs speculation: plain llama-cpp-python against
ngramspec.wrap (exact mode), greedy, at repeat_penalty 1.0 and 1.1, rounds interleaved;
per prompt the median wall time of each, the speed-up, tokens a pass, drafted and
accepted tokens and whether the texts match; one thread (steadier on a shared machine).

    .venv/bin/python bench/repeat_penalty_cost.py --rounds 3 --prompts code,code_edit,prose,json
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, cast

import llama_cpp

import ngramspec
from ngramspec import models
from ngramspec.suite.sample_prompts import PROMPTS

PENALTIES = (1.0, 1.1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prompts", default="code,code_edit,prose,json", help=f"names from {sorted(PROMPTS)}")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--no-warmup", action="store_true",
                    help="certify sizes as generations start instead of first (timings then include it)")
    opts = ap.parse_args()
    names = opts.prompts.split(",")
    llm = llama_cpp.Llama(str(models.fetch(opts.model)), n_ctx=2048, seed=0, n_threads=1, n_threads_batch=1,
                          verbose=False)
    spec = ngramspec.wrap(llm, warmup=not opts.no_warmup)   # the whole check first: not part of the timings
    runs: dict[tuple[float, str, str], list[dict]] = {}
    for _ in range(opts.rounds):
        for penalty in PENALTIES:
            for name in names:
                for method, model in (("plain", llm), ("ngramspec", spec)):
                    llm.reset()
                    start = time.perf_counter()
                    out: dict[str, Any] = cast(dict, model.create_completion(
                        PROMPTS[name], max_tokens=opts.max_tokens, temperature=0, repeat_penalty=penalty))
                    runs.setdefault((penalty, name, method), []).append(
                        {"s": time.perf_counter() - start, "text": out["choices"][0]["text"],
                         "stats": out.get("speculative")})
    print(f"{opts.model}, {opts.rounds} rounds, max_tokens {opts.max_tokens}, 1 thread; medians")
    print("| repeat_penalty | prompt | plain s | ngramspec s | speed-up | tokens a pass | drafted | accepted "
          "| same text |")
    print("|---|---|---|---|---|---|---|---|---|")
    for penalty in PENALTIES:
        total_plain = total_spec = 0.0
        for name in names:
            plain, spec_runs = runs[(penalty, name, "plain")], runs[(penalty, name, "ngramspec")]
            p = statistics.median(r["s"] for r in plain)
            s = statistics.median(r["s"] for r in spec_runs)
            total_plain, total_spec = total_plain + p, total_spec + s
            stats = spec_runs[-1]["stats"]
            same = all(a["text"] == b["text"] for a, b in zip(plain, spec_runs))
            print(f"| {penalty} | {name} | {p:.2f} | {s:.2f} | {p / s:.2f}x | {stats['tokens_per_forward']:.2f} | "
                  f"{stats['drafted_tokens']} | {stats['accepted_tokens']} | {'yes' if same else 'NO'} |")
        print(f"| {penalty} | all | {total_plain:.2f} | {total_spec:.2f} | {total_plain / total_spec:.2f}x | | | | |")


if __name__ == "__main__":
    main()
