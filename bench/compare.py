"""Side-by-side speed of plain greedy decoding, llama-cpp-python's prompt-lookup
decoder and ngramspec, on one model, interleaved and repeated (medians).

Run:  .venv/bin/python bench/compare.py --model smollm2-135m --rounds 3 \
          --out bench/results/compare-smollm2-135m.md

Every method decodes greedily; ngramspec's output is checked to be identical
to plain decoding (a mismatch is reported in the table).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import llama_cpp  # noqa: E402
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding  # noqa: E402

from ngramspec import SpeculativeEngine, check_batch_invariance, models  # noqa: E402
from prompts import PROMPTS  # noqa: E402

WORKLOADS = ["code_edit", "json", "repetitive", "list", "chat", "prose"]


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except Exception:
        return platform.processor() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--no-lookup", action="store_true", help="skip llama-cpp-python's prompt-lookup decoder")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    path = str(models.fetch(args.model))
    llm = llama_cpp.Llama(path, n_ctx=args.n_ctx, seed=0, verbose=False)
    report = check_batch_invariance(llm, max_batch=9)
    engines = {
        "ngramspec": SpeculativeEngine(llm, invariance=report),
        "ngramspec eager": SpeculativeEngine(llm, invariance=report, adaptive=False),
    }
    lookup = None
    if not args.no_lookup:
        lookup = llama_cpp.Llama(path, n_ctx=args.n_ctx, seed=0, verbose=False,
                                 draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10))
    methods = ["plain"] + (["llama-cpp-python prompt lookup"] if lookup else []) + list(engines)
    times: dict[tuple[str, str], list[float]] = {}
    info: dict[tuple[str, str], str] = {}
    for r in range(args.rounds):
        for w in args.workloads.split(","):
            prompt = PROMPTS[w]
            for m in methods:  # interleaved: every round runs every method once
                if m == "plain":
                    llm.reset()
                    t0 = time.perf_counter()
                    out = llm.create_completion(prompt, max_tokens=args.max_tokens, temperature=0.0)
                    dt = time.perf_counter() - t0
                    info[(w, "plain_text")] = out["choices"][0]["text"]
                    info[(w, "plain_n")] = str(out["usage"]["completion_tokens"])
                elif m.startswith("llama-cpp-python"):
                    lookup.reset()
                    t0 = time.perf_counter()
                    out = lookup.create_completion(prompt, max_tokens=args.max_tokens, temperature=0.0)
                    dt = time.perf_counter() - t0
                    same = out["choices"][0]["text"] == info.get((w, "plain_text"))
                    info[(w, m)] = "" if same else " (text differs)"
                else:
                    llm.reset()
                    gen = engines[m].generate(prompt, max_tokens=args.max_tokens)
                    dt = gen.stats.time_total_s
                    s = gen.stats
                    same = gen.text == info.get((w, "plain_text"))
                    info[(w, m)] = (f"{s.tokens_per_forward:.2f} tok/pass, acc {s.acceptance_rate:.0%}, "
                                    f"ovh {s.overhead_per_step_ms:.2f} ms/pass" + ("" if same else ", TEXT DIFFERS"))
                times.setdefault((w, m), []).append(dt)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    lines = [
        f"# {args.model}: plain vs prompt lookup vs ngramspec",
        "",
        f"Machine: {cpu_name()}, {os.cpu_count()} cores; llama-cpp-python {llama_cpp.__version__}; "
        f"n_threads={llm.context_params.n_threads}; max_tokens={args.max_tokens}; "
        f"median of {args.rounds} interleaved rounds.",
        "",
        "Command: `.venv/bin/python bench/compare.py " + " ".join(sys.argv[1:]) + "`",
        "",
        "| workload | tokens | " + " | ".join(f"{m} (s)" for m in methods) + " | " +
        " | ".join(f"{m} speed-up" for m in methods[1:]) + " | ngramspec detail |",
        "|---" * (2 + 2 * len(methods)) + "|",
    ]
    for w in args.workloads.split(","):
        med = {m: statistics.median(times[(w, m)]) for m in methods}
        row = [w, info[(w, "plain_n")]] + [f"{med[m]:.2f}" for m in methods]
        row += [f"{med['plain'] / med[m]:.2f}x{info.get((w, m), '') if m.startswith('llama') else ''}"
                for m in methods[1:]]
        row.append(info[(w, "ngramspec")])
        lines.append("| " + " | ".join(row) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
