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


def git_commit() -> str:
    """The commit of the git checkout the benchmark runs from (the current
    directory), for reports; "unknown" outside a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "") if out.returncode == 0 \
            else "unknown"
    except OSError:
        return "unknown"


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
    temperature: float = 0.0

    def median(self, workload: str, method: str) -> float:
        return statistics.median(self.times[(workload, method)])

    def to_markdown(self, command: str) -> str:
        ms = self.methods
        lines = [
            f"# {self.model}: " + " vs ".join(ms),
            "",
            f"Machine: {self.machine}; max_tokens={self.max_tokens}; median of {self.rounds} interleaved rounds; "
            "wall time including prefill; "
            + ("greedy." if self.temperature <= 0 else f"sampled at temperature {self.temperature} (seed = round; "
               "texts differ between methods, so times are per generated token and 'tokens' is plain's "
               "count in the last round)."),
            "",
            f"Command: `{command}`; commit: {git_commit()}.",
            "",
            "| workload | tokens | " + " | ".join(f"{m} ({'s' if self.temperature <= 0 else 's/token'})" for m in ms)
            + " | "
            + " | ".join(f"{m} speed-up" for m in ms[1:]) + " | ngramspec detail |",
            "|---" * (2 + 2 * len(ms)) + "|",
        ]
        for w in self.workloads:
            fmt = "{:.2f}" if self.temperature <= 0 else "{:.4f}"
            row = [w, str(self.tokens[w])] + [fmt.format(self.median(w, m)) for m in ms]
            row += [f"{self.median(w, 'plain') / self.median(w, m):.2f}x{self.notes.get((w, m), '')}" for m in ms[1:]]
            row.append(self.notes.get((w, "detail"), ""))
            lines.append("| " + " | ".join(row) + " |")
        return "\n".join(lines) + "\n"


def run_benchmark(model: str, *, rounds: int = 3, max_tokens: int = 128, n_ctx: int = 2048,
                  workloads: list[str] | None = None, lookup: bool = True, progress: bool = True,
                  temperature: float = 0.0) -> BenchResult:
    """temperature > 0 benchmarks sampling (seeded per round; texts are not compared)."""
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    from tqdm import tqdm

    from . import models
    from .engine import SpeculativeEngine
    from .invariance import check_batch_invariance
    from .sampling import SamplingParams

    workloads = workloads or WORKLOADS
    unknown = [w for w in workloads if w not in PROMPTS]
    if unknown:
        raise ValueError(f"unknown workload(s) {unknown}; choose from {sorted(PROMPTS)}")
    path = str(models.fetch(model)) if model in models.MODELS else model
    llm = llama_cpp.Llama(path, n_ctx=n_ctx, seed=0, verbose=False)
    engine = SpeculativeEngine(llm, invariance=check_batch_invariance(llm, max_batch=9))
    others: dict[str, Any] = {}
    methods = ["plain", "ngramspec"]
    if lookup:
        # llama-cpp-python's own draft_model path, with its prompt-lookup decoder
        # and with ngramspec's predictor behind the same interface.
        from .draft_model import NGramDraftModel

        others["prompt lookup"] = llama_cpp.Llama(path, n_ctx=n_ctx, seed=0, verbose=False,
                                                  draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10))
        others["NGramDraftModel"] = llama_cpp.Llama(path, n_ctx=n_ctx, seed=0, verbose=False,
                                                    draft_model=NGramDraftModel())
        methods[1:1] = list(others)
    res = BenchResult(model, methods, workloads, rounds, max_tokens, temperature=temperature,
                      machine=f"{cpu_name()}, {os.cpu_count()} cores, llama-cpp-python {llama_cpp.__version__}, "
                              f"n_threads={llm.context_params.n_threads}")
    plain_text: dict[str, str] = {}
    steps = tqdm(total=rounds * len(workloads) * len(methods), desc="bench", unit="run", disable=not progress)
    try:
        for r in range(rounds):
            for w in workloads:
                prompt = PROMPTS[w]
                for m in methods:  # interleaved: each round runs every method once
                    if m == "ngramspec":
                        llm.reset()
                        sampling = SamplingParams(temperature=temperature, seed=r) if temperature > 0 else None
                        gen = engine.generate(prompt, max_tokens=max_tokens, sampling=sampling)
                        dt, text, n_out = gen.stats.time_total_s, gen.text, len(gen.tokens)
                        s = gen.stats
                        res.notes[(w, "detail")] = (f"{s.tokens_per_forward:.2f} tok/pass, acceptance "
                                                    f"{s.acceptance_rate:.0%}, overhead {s.overhead_per_step_ms:.2f} ms/pass")
                    else:
                        target = llm if m == "plain" else others[m]
                        target.reset()
                        t0 = time.perf_counter()
                        out = target.create_completion(prompt, max_tokens=max_tokens, temperature=temperature,
                                                       seed=r)
                        dt, text = time.perf_counter() - t0, out["choices"][0]["text"]
                        n_out = out["usage"]["completion_tokens"]
                        if m == "plain":
                            plain_text[w] = text
                            res.tokens[w] = out["usage"]["completion_tokens"]
                    if m != "plain" and temperature <= 0 and text != plain_text.get(w):
                        res.notes[(w, m)] = " (text differs)"
                    # Sampled outputs differ in length between methods: compare time per token.
                    res.times.setdefault((w, m), []).append(dt if temperature <= 0 else dt / max(1, n_out))
                    steps.update()
    finally:
        steps.close()
        llm.close()
        for other in others.values():
            other.close()
    return res


def emit_report(text: str, out: str | None) -> None:
    """Print a markdown report and, when asked, write it to ``out``."""
    from pathlib import Path

    print(text)
    if out:
        Path(out).write_text(text)
