"""Replay the shipped drafting on the memory sequences' recorded outputs, with no model.

``bench/memory_sequences.py`` takes 8-20 minutes a run; this prices the same
drafting decisions in seconds, so a change to the memory proposer can be ranked
before it is measured. For each sequence with independent requests (extraction,
tool_calls, edits, unrelated; the chat's prompts depend on earlier answers and
are not rebuilt here), it drives the engine's own ``Drafter`` (n-gram, copy and,
for "memory", a ``MemoryProposer`` over one ``Memory`` filled request by request,
one ``CostAwarePolicy`` through the sequence as a wrapper keeps it) on plain
greedy's recorded tokens. Each pass costs r(B) of the run's calibrated curve; a
draft token counts as accepted when it equals the next recorded token. Only the
decode cost is modelled (no Python overhead): it ranks drafters, the benchmark
measures them.

Usage: PYTHONPATH=python python bench/memory_replay.py bench/results/memory-qwen2.5-coder-0.5b-1t.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

import memory_sequences  # a sibling in bench/ (run as a script, bench/ is on sys.path)
from ngramspec.drafting.drafter import Drafter
from ngramspec.drafting.policy import CostAwarePolicy
from ngramspec.engine.request import prompt_tokens_for
from ngramspec.engine.speculative_engine import DEFAULT_MAX_DRAFT
from ngramspec.memory.store import Memory
from ngramspec.models import load_llama
from ngramspec.proposers.base import Proposer
from ngramspec.proposers.copy import CopyProposer
from ngramspec.proposers.ngram import NGramProposer
from ngramspec.suite import sources

SEQUENCES = ("extraction", "tool_calls", "edits", "unrelated")


def recorded(data: dict, llm: Any, name: str) -> list[tuple[str, list[int], list[int], dict[int, float]]]:
    """(label, prompt tokens, plain's output tokens, the calibrated curve) per request
    of sequence ``name`` in a memory_sequences.py results file; [] if it has none."""
    runs = {(r["request"], r["method"]): r for r in data["runs"] if not r.get("meta") and r["sequence"] == name}
    if not runs:
        return []
    seq = memory_sequences.builders(bool(data["meta"].get("quick")))[name]()
    chat = sources.chat_formatter(llm)
    out = []
    for i, (label, messages, _max_tokens) in enumerate(seq["requests"]):
        prompt = messages if isinstance(messages, str) else chat(messages)
        tokens = prompt_tokens_for(llm, prompt)
        text = runs[(i, "plain")]["text"]
        output = list(llm.tokenize(text.encode(), add_bos=False, special=False))
        # The no-memory run's curve: the calibration every method started from.
        costs = {int(b): float(c) for b, c in runs[(i, "no memory")]["relative_costs"].items()}
        out.append((label, tokens, output, costs))
    return out


def max_exact_batch(data: dict) -> int:
    """The largest verify batch the run's engine could use: recorded in newer
    results, else the largest any of its passes used."""
    if "max_exact_batch" in data["meta"]:
        return int(data["meta"]["max_exact_batch"])
    return max(int(b) for r in data["runs"] for b in r.get("verify_batch_sizes", {}) or {"1": 0})


def replay_sequence(requests: list[tuple[str, list[int], list[int], dict[int, float]]],
                    extra: list[Proposer], max_batch: int, max_draft: int = DEFAULT_MAX_DRAFT
                    ) -> list[tuple[float, int, int]]:
    """(verify cost in single-token passes, passes, output tokens after the first)
    per request, drafted by one policy and the given extra proposers (a memory's)
    after the engine's n-gram and copy proposers, with verify batches of at most
    ``max_batch`` tokens (the exact sizes)."""
    costs = requests[0][3]
    max_draft = min(max_draft, max(costs) - 1, max_batch - 1)
    allowed = np.array([False] + [b in costs for b in range(1, max_draft + 2)], dtype=bool)
    policy = CostAwarePolicy(max_draft + 1)
    policy.calibrate(costs)
    proposers: list[Proposer] = [NGramProposer(), CopyProposer(), *extra]
    results = []
    for _label, prompt, output, _costs in requests:
        drafter = Drafter(proposers, policy, allowed, max_draft)
        drafter.begin(prompt)
        drafter.accept(output[:1])
        t, total, passes, n = 0, 0.0, 0, len(output)
        while t < n - 1:
            draft = drafter.draft(n - 2 - t)
            k, accepted = len(draft), 0
            while accepted < k and int(draft.tokens[accepted]) == output[t + 1 + accepted]:
                accepted += 1
            drafter.verified(draft, costs[k + 1], accepted)
            total += costs[k + 1]
            passes += 1
            drafter.accept(output[t + 1: t + 2 + accepted])
            t += 1 + accepted
        drafter.end()
        results.append((total, passes, max(0, n - 1)))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="a bench/results/memory-<model>-<threads>t.json")
    ap.add_argument("--per-request", action="store_true", help="also print each request's passes and cost")
    args = ap.parse_args(argv)
    data = json.loads(Path(args.results).read_text())
    llm = load_llama(data["meta"]["model"], n_ctx=data["meta"]["n_ctx"], vocab_only=True)
    print("| sequence | tokens | passes (no memory / memory) | modelled speed-up over plain (no memory / memory) "
          "| memory / no memory |")
    print("|---|---|---|---|---|")
    for name in SEQUENCES:
        requests = recorded(data, llm, name)
        if not requests:
            continue
        memory = Memory()   # the shipped defaults
        none = replay_sequence(requests, [], max_exact_batch(data))
        mem = replay_sequence(requests, [memory.proposer_for(llm)], max_exact_batch(data))
        tokens = sum(r[2] for r in none)
        cost_none, cost_mem = sum(r[0] for r in none), sum(r[0] for r in mem)
        print(f"| {name} | {tokens} | {sum(r[1] for r in none)} / {sum(r[1] for r in mem)} | "
              f"{tokens / cost_none:.3f}x / {tokens / cost_mem:.3f}x | {cost_none / cost_mem:.3f}x |")
        if args.per_request:
            for (label, *_), a, b in zip(requests, none, mem):
                print(f"|   {label} | {a[2]} | {a[1]} / {b[1]} | {a[2] / a[0]:.3f}x / {b[2] / b[0]:.3f}x | "
                      f"{a[0] / b[0]:.3f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
