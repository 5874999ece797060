"""Where a plainly decoded token's time goes: llama.cpp's own server decoding plainly
(``--spec-type none``) against ngramspec's loop with nothing to draft (max_draft=0)
and llama-cpp-python's ``create_completion``, on one prompt, in interleaved rounds:

    .venv-stock/bin/python bench/plain_path_cost.py smollm2-135m LLAMA_SERVER [TOKENS] [ROUNDS]

LLAMA_SERVER: a llama-server built from the llama.cpp that this llama-cpp-python
vendors, with this build's flags (scripts/build_llama_server.py). Each method's time
per token runs from its first generated token to its last (the suite's definition;
the server's is its ``predicted_ms``). ngramspec's is split into the time inside
``llama_decode`` and the rest (its Python loop: logits view, argmax, bookkeeping,
detokenizing, the drafter's callbacks). A bare loop (llama_decode and an argmax in
ctypes and numpy, nothing else) shows what this build's llama_decode costs with the
least Python around it. The prompt is the start of the standard
library's textwrap.py with an instruction to rewrite it: 800 tokens of real text.
"""
from __future__ import annotations

import os
import statistics
import sys
import textwrap
import time
from typing import Any

import llama_cpp

from ngramspec import SpeculativeEngine, models
from ngramspec.suite.llama_server import LlamaServer
from ngramspec.suite.run_record import FirstTokenClock


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    name, binary = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    path = str(models.fetch(name))
    with open(textwrap.__file__) as f:
        prompt = f.read()[:3000] + "\n\n# Rewrite the module above with type hints:\n"
    llm = llama_cpp.Llama(path, n_ctx=4096, n_threads=2, n_threads_batch=2, verbose=False)
    engine = SpeculativeEngine(llm, max_draft=0)
    server = LlamaServer(binary, path, "none", n_ctx=4096, threads=2)
    per_token: dict[str, list[float]] = {"llama-server none": [], "ngramspec (nothing drafted)": [],
                                         "  inside llama_decode": [], "  the rest": [],
                                         "llama-cpp-python plain": [], "bare llama_decode loop": []}
    try:
        for _ in range(rounds):
            timings = server.complete(prompt, n, [])["timings"]
            per_token["llama-server none"].append(timings["predicted_ms"] / max(1, timings["predicted_n"] - 1))

            llm.reset()
            clock = FirstTokenClock()
            gen = engine.generate(prompt, max_tokens=n, stopping_criteria=clock)
            end = time.perf_counter()
            first = clock.first if clock.first is not None else end
            tokens = max(1, len(gen.tokens) - 1)
            ours = (end - first) * 1e3 / tokens
            inside = gen.stats.time_decode_s * 1e3 / tokens
            per_token["ngramspec (nothing drafted)"].append(ours)
            per_token["  inside llama_decode"].append(inside)
            per_token["  the rest"].append(ours - inside)

            llm.reset()
            clock = FirstTokenClock()
            out: Any = llm.create_completion(prompt, max_tokens=n, temperature=0.0,
                                             stopping_criteria=clock)  # type: ignore[arg-type]
            end = time.perf_counter()
            first = clock.first if clock.first is not None else end
            per_token["llama-cpp-python plain"].append(
                (end - first) * 1e3 / max(1, out["usage"]["completion_tokens"] - 1))
            per_token["bare llama_decode loop"].append(_bare_loop(llm, prompt, n))
    finally:
        server.close()
    system = llama_cpp.llama_print_system_info().decode()
    print(f"{name}, {n} tokens after an 800-token prompt, 2 threads, {rounds} interleaved rounds, "
          f"{os.cpu_count()} CPUs; this build: {system.strip()}")
    base = statistics.median(per_token["llama-server none"])
    for label, values in per_token.items():
        med = statistics.median(values)
        print(f"{label:30s} {med:7.3f} ms/token  ({med / base:.3f} of llama-server none)  "
              f"rounds: {', '.join(f'{v:.2f}' for v in values)}")


def _bare_loop(llm: llama_cpp.Llama, prompt: str, n: int) -> float:
    """ms per token of greedy decoding by llama_decode and numpy's argmax alone."""
    import numpy as np

    llm.reset()
    tokens = llm.tokenize(prompt.encode())
    llm.eval(tokens)   # the prompt in n_batch chunks, logits on its last row
    ctx = llm.ctx
    batch = llama_cpp.llama_batch_init(1, 0, 1)
    batch.n_tokens, batch.n_seq_id[0], batch.seq_id[0][0], batch.logits[0] = 1, 1, 0, 1
    decode, logits_of, n_vocab = llama_cpp.llama_decode, llama_cpp.llama_get_logits_ith, llm.n_vocab()
    pos = len(tokens)
    t0 = time.perf_counter()
    for i in range(n):
        token = int(np.ctypeslib.as_array(logits_of(ctx, -1), shape=(n_vocab,)).argmax())
        if i == n - 1:
            break
        batch.token[0], batch.pos[0] = token, pos
        pos += 1
        if decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
    seconds = time.perf_counter() - t0
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    llm.reset()
    return seconds * 1e3 / max(1, n - 1)


if __name__ == "__main__":
    main()
