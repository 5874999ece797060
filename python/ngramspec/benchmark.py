"""Side-by-side speed of plain greedy decoding, llama-cpp-python's prompt-lookup
decoder and ngramspec on one model: interleaved rounds, medians, identity check.
Used by ``ngramspec bench`` and ``bench/compare.py``."""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from .workloads import PROMPTS

WORKLOADS = ["code_edit", "json", "repetitive", "list", "chat", "prose"]
QUICK_WORKLOADS = ["code_edit", "list", "prose"]


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except Exception:
        return platform.processor() or "unknown"


@dataclass
class BenchResult:
    model: str
    methods: list[str]
    workloads: list[str]
    rounds: int
    max_tokens: int
    times: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    notes: dict[tuple[str, str], str] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    machine: str = ""

    def median(self, workload: str, method: str) -> float:
        return statistics.median(self.times[(workload, method)])

    def to_markdown(self, command: str) -> str:
        ms = self.methods
        lines = [
            f"# {self.model}: " + " vs ".join(ms),
            "",
            f"Machine: {self.machine}; max_tokens={self.max_tokens}; median of {self.rounds} interleaved rounds; "
            "wall time including prefill; greedy.",
            "",
            f"Command: `{command}`",
            "",
            "| workload | tokens | " + " | ".join(f"{m} (s)" for m in ms) + " | "
            + " | ".join(f"{m} speed-up" for m in ms[1:]) + " | ngramspec detail |",
            "|---" * (2 + 2 * len(ms)) + "|",
        ]
        for w in self.workloads:
            row = [w, str(self.tokens[w])] + [f"{self.median(w, m):.2f}" for m in ms]
            row += [f"{self.median(w, 'plain') / self.median(w, m):.2f}x{self.notes.get((w, m), '')}" for m in ms[1:]]
            row.append(self.notes.get((w, "detail"), ""))
            lines.append("| " + " | ".join(row) + " |")
        return "\n".join(lines) + "\n"


def run_benchmark(model: str, *, rounds: int = 3, max_tokens: int = 128, n_ctx: int = 2048,
                  workloads: list[str] | None = None, lookup: bool = True, progress: bool = True) -> BenchResult:
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    from tqdm import tqdm

    from . import models
    from .engine import SpeculativeEngine
    from .invariance import check_batch_invariance

    workloads = workloads or WORKLOADS
    unknown = [w for w in workloads if w not in PROMPTS]
    if unknown:
        raise ValueError(f"unknown workload(s) {unknown}; choose from {sorted(PROMPTS)}")
    path = str(models.fetch(model)) if model in models.MODELS else model
    llm = llama_cpp.Llama(path, n_ctx=n_ctx, seed=0, verbose=False)
    engine = SpeculativeEngine(llm, invariance=check_batch_invariance(llm, max_batch=9))
    other: Any = None
    methods = ["plain", "ngramspec"]
    if lookup:
        other = llama_cpp.Llama(path, n_ctx=n_ctx, seed=0, verbose=False,
                                draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10))
        methods.insert(1, "prompt lookup")
    res = BenchResult(model, methods, workloads, rounds, max_tokens,
                      machine=f"{cpu_name()}, {os.cpu_count()} cores, llama-cpp-python {llama_cpp.__version__}, "
                              f"n_threads={llm.context_params.n_threads}")
    plain_text: dict[str, str] = {}
    steps = tqdm(total=rounds * len(workloads) * len(methods), desc="bench", unit="run", disable=not progress)
    try:
        for _ in range(rounds):
            for w in workloads:
                prompt = PROMPTS[w]
                for m in methods:  # interleaved: each round runs every method once
                    if m == "ngramspec":
                        llm.reset()
                        gen = engine.generate(prompt, max_tokens=max_tokens)
                        dt, text = gen.stats.time_total_s, gen.text
                        s = gen.stats
                        res.notes[(w, "detail")] = (f"{s.tokens_per_forward:.2f} tok/pass, acceptance "
                                                    f"{s.acceptance_rate:.0%}, overhead {s.overhead_per_step_ms:.2f} ms/pass")
                    else:
                        target = llm if m == "plain" else other
                        target.reset()
                        t0 = time.perf_counter()
                        out = target.create_completion(prompt, max_tokens=max_tokens, temperature=0.0)
                        dt, text = time.perf_counter() - t0, out["choices"][0]["text"]
                        if m == "plain":
                            plain_text[w] = text
                            res.tokens[w] = out["usage"]["completion_tokens"]
                    if m != "plain" and text != plain_text.get(w):
                        res.notes[(w, m)] = " (text differs)"
                    res.times.setdefault((w, m), []).append(dt)
                    steps.update()
    finally:
        steps.close()
        llm.close()
        if other is not None:
            other.close()
    return res
