"""How much memory could give on the memory sequences, at best.

Replays the plain outputs recorded by ``bench/memory_sequences.py`` (its JSON) with
an oracle for the draft length: every pass verifies exactly as many tokens as the
best offered draft gets right (the copy matcher over prompt + output, the n-gram
tables, and, with memory, the longest match in the earlier requests' prompt tails
and outputs, as ``ngramspec.Memory`` stores them, and the memory proposer's own
draft, which may follow the document it drafted from), priced by the cost curve the
run calibrated, with its exact batch sizes. No causal policy can do better with
these drafts, so memory / no memory here bounds what the benchmark can show on
this machine's curve.

Usage: PYTHONPATH=python python bench/memory_ceiling.py bench/results/memory-qwen2.5-coder-0.5b-2t.json
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import memory_replay  # a sibling in bench/ (run as a script, bench/ is on sys.path)
from ngramspec._core import NGramPredictor, SuffixMatcher
from ngramspec.memory.proposer import MemoryProposer
from ngramspec.memory.store import Memory
from ngramspec.models import load_llama


def _agree(draft: Any, truth: Sequence[int]) -> int:
    n = 0
    while n < len(draft) and n < len(truth) and int(draft[n]) == truth[n]:
        n += 1
    return n


def oracle_cost(prompt: list[int], out: list[int], costs: dict[int, float], max_draft: int,
                memory: MemoryProposer | None) -> float:
    """Cost of ``out`` after its first token (which prefill gives) in units of one
    single-token decode, verifying every pass the longest draft prefix that is right.
    With ``memory``, its store's longest match and the proposer's own draft (which
    may follow the document it drafted from) are offered too; the proposer adds
    ``out`` to its memory at the end."""
    copy, ngram = SuffixMatcher(), NGramPredictor()
    copy.update_batch(prompt + out[:1])
    ngram.update_batch(prompt + out[:1])
    if memory is not None:
        memory.begin(prompt)
        memory.accept(out[:1])
    context, pos, cost = prompt + out[:1], 1, 0.0
    while pos < len(out):
        k, truth = min(max_draft, len(out) - pos), out[pos:]
        n = max(_agree(copy.predict(k)[0], truth), _agree(ngram.predict(k), truth))
        if memory is not None:
            n = max(n, _agree(memory.memory.predict_at(context, k)[0], truth), _agree(memory.propose(k).tokens, truth))
        cost += costs.get(n + 1, float(n + 1))
        new = out[pos:pos + n + 1]
        copy.update_batch(new)
        ngram.update_batch(new)
        if memory is not None:
            memory.accept(new)
        context += new
        pos += n + 1
    if memory is not None:
        memory.end(out)
    return cost


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="a bench/results/memory-<model>-<threads>t.json")
    args = ap.parse_args(argv)
    data = json.loads(Path(args.results).read_text())
    llm = load_llama(data["meta"]["model"], n_ctx=data["meta"]["n_ctx"], vocab_only=True)
    max_draft = memory_replay.max_exact_batch(data) - 1
    for name in ("extraction", "tool_calls"):   # the repeated-structure sequences
        requests = memory_replay.recorded(data, llm, name)
        if not requests:
            continue
        proposer = Memory().proposer_for(llm)   # the shipped defaults: anchor, match lengths, prompt tail
        total = {"no memory": 0.0, "memory": 0.0}
        tokens = 0
        for _label, prompt, out, costs in requests:
            total["no memory"] += oracle_cost(prompt, out, costs, max_draft, None)
            total["memory"] += oracle_cost(prompt, out, costs, max_draft, proposer)
            tokens += len(out) - 1
        print(f"{name}: oracle-length ceiling over plain: no memory {tokens / total['no memory']:.2f}x, "
              f"memory {tokens / total['memory']:.2f}x; memory / no memory {total['no memory'] / total['memory']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
