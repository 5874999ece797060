"""How much memory could give on the memory sequences, at best (issue 19).

Replays the plain outputs recorded by ``bench/memory_sequences.py`` (its JSON) with
an oracle for the draft length: every pass verifies exactly as many tokens as the
best offered draft gets right (the copy matcher over prompt + output, the n-gram
tables, and, with memory, the longest match in the earlier requests' prompt tails
and outputs, as ``ngramspec.Memory`` stores them), priced by the cost curve the
memory run used. No causal policy can do better with these drafts, so memory /
no memory here bounds what the benchmark can show on this machine's curve.

Usage: PYTHONPATH=python python bench/memory_ceiling.py bench/results/memory-qwen2.5-coder-0.5b-2t.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ngramspec._core import NGramPredictor, SuffixMatcher
from ngramspec.memory import Memory
from ngramspec.models import load_llama
from ngramspec.suite import sources


def _sibling(name: str) -> Any:
    """bench/<name>.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


memory_sequences = _sibling("memory_sequences")

MAX_DRAFT = 8


def _agree(draft: Any, truth: Sequence[int]) -> int:
    n = 0
    while n < len(draft) and n < len(truth) and int(draft[n]) == truth[n]:
        n += 1
    return n


def oracle_cost(prompt: list[int], out: list[int], costs: dict[int, float], memory: Memory | None) -> float:
    """Cost of ``out`` after its first token (which prefill gives) in units of one
    single-token decode, verifying every pass the longest draft prefix that is right."""
    copy, ngram = SuffixMatcher(), NGramPredictor()
    copy.update_batch(prompt + out[:1])
    ngram.update_batch(prompt + out[:1])
    context, pos, cost = prompt + out[:1], 1, 0.0
    while pos < len(out):
        k, truth = min(MAX_DRAFT, len(out) - pos), out[pos:]
        n = max(_agree(copy.predict(k)[0], truth), _agree(ngram.predict(k), truth))
        if memory is not None:
            n = max(n, _agree(memory.predict(context, k)[0], truth))
        cost += costs.get(n + 1, float(n + 1))
        new = out[pos:pos + n + 1]
        copy.update_batch(new)
        ngram.update_batch(new)
        context += new
        pos += n + 1
    return cost


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="a bench/results/memory-<model>-<threads>t.json")
    args = ap.parse_args(argv)
    data = json.loads(Path(args.results).read_text())
    llm = load_llama(data["meta"]["model"], n_ctx=data["meta"]["n_ctx"], vocab_only=True)
    chat = sources.chat_formatter(llm)
    build = memory_sequences.builders(bool(data["meta"].get("quick")))
    for name in ("extraction", "tool_calls"):   # the repeated-structure sequences
        runs = {(r["request"], r["method"]): r for r in data["runs"]
                if not r.get("meta") and r["sequence"] == name}
        if not runs:
            continue
        memory = Memory()   # the shipped defaults: anchor, match lengths, prompt tail
        memory.bind(llm)
        total = {"no memory": 0.0, "memory": 0.0}
        tokens = 0
        for i, (_label, messages, _max_tokens) in enumerate(build[name]()["requests"]):
            prompt = list(llm.tokenize(chat(messages).encode(), add_bos=False, special=True))
            out = list(llm.tokenize(runs[(i, "plain")]["text"].encode(), add_bos=False, special=False))
            costs = {int(b): c for b, c in runs[(i, "memory")]["relative_costs"].items()}
            total["no memory"] += oracle_cost(prompt, out, costs, None)
            total["memory"] += oracle_cost(prompt, out, costs, memory)
            tokens += len(out) - 1
            memory.add_tokens(prompt[-memory.prompt_tail:] + out)
        print(f"{name}: oracle-length ceiling over plain: no memory {tokens / total['no memory']:.2f}x, "
              f"memory {tokens / total['memory']:.2f}x; memory / no memory {total['no memory'] / total['memory']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
