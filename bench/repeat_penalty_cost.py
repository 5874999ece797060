"""What a repetition penalty costs speculation: plain llama-cpp-python against
ngramspec.wrap (exact mode), greedy, at repeat_penalty 1.0 and 1.1, rounds interleaved;
per prompt the median wall time of each, the speed-up, tokens a pass, drafted and
accepted tokens and whether the texts match; one thread (steadier on a shared machine).
The prompts are sample prompts (``--prompts``) or the benchmark suite's items
(``--suite quick``: one short prompt per default workload; ``--suite long``: the six
long-output workloads), each with its own max_tokens and stop strings.

    .venv/bin/python bench/repeat_penalty_cost.py --rounds 3 --prompts code,code_edit,prose,json
    .venv/bin/python bench/repeat_penalty_cost.py --rounds 3 --suite quick --model qwen2.5-coder-0.5b
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
    ap.add_argument("--max-tokens", type=int, default=128, help="for --prompts (a suite item has its own)")
    ap.add_argument("--suite", choices=("quick", "long"), default=None,
                    help="the benchmark suite's items instead of --prompts")
    ap.add_argument("--no-warmup", action="store_true",
                    help="certify sizes as generations start instead of first (timings then include it)")
    opts = ap.parse_args()
    llm = llama_cpp.Llama(str(models.fetch(opts.model)), n_ctx=4096, seed=0, n_threads=1, n_threads_batch=1,
                          verbose=False)
    prompts = _prompts(llm, opts)
    names = list(prompts)
    spec = ngramspec.wrap(llm, warmup=not opts.no_warmup)   # the whole check first: not part of the timings
    runs: dict[tuple[float, str, str], list[dict]] = {}
    for _ in range(opts.rounds):
        for penalty in PENALTIES:
            for name in names:
                for method, model in (("plain", llm), ("ngramspec", spec)):
                    llm.reset()
                    start = time.perf_counter()
                    prompt, max_tokens, stop = prompts[name]
                    out: dict[str, Any] = cast(dict, model.create_completion(
                        prompt, max_tokens=max_tokens, temperature=0, repeat_penalty=penalty, stop=stop))
                    runs.setdefault((penalty, name, method), []).append(
                        {"s": time.perf_counter() - start, "text": out["choices"][0]["text"],
                         "stats": out.get("speculative")})
    what = f"the {opts.suite} suite's items" if opts.suite else f"max_tokens {opts.max_tokens}"
    print(f"{opts.model}, {opts.rounds} rounds, {what}, 1 thread; medians")
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


def _prompts(llm: llama_cpp.Llama, opts: argparse.Namespace) -> dict[str, tuple[str, int, list[str]]]:
    """name -> (prompt, max_tokens, stop)."""
    if opts.suite is None:
        return {name: (PROMPTS[name], opts.max_tokens, []) for name in opts.prompts.split(",")}
    from ngramspec.suite import sources
    from ngramspec.suite.long_sources import LONG_WORKLOADS

    names = LONG_WORKLOADS if opts.suite == "long" else sources.DEFAULT_WORKLOADS
    out = {}
    for w in sources.build(llm, quick=True, names=names):
        for i, item in enumerate(w.items):
            out[f"{w.name}#{i}"] = (item.prompt, item.max_tokens, list(item.stop))
    return out


if __name__ == "__main__":
    main()
