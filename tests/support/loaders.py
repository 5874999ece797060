"""The test Llama loader shared by the draft-model tests (test_model_proposer.py,
test_draft_model_engine.py): a target and a draft on the same GGUF file."""
from __future__ import annotations

from typing import Any

N_CTX = 512


def load_llama(path: str, n_ctx: int = N_CTX) -> Any:
    """A quiet, seeded llama_cpp.Llama on ``path``. One thread: on a shared,
    oversubscribed CPU two threads spin at ggml's barrier (a SmolLM2 token took
    0.74 s with 2 threads and 0.055 s with 1 at load 11)."""
    import llama_cpp

    return llama_cpp.Llama(path, n_ctx=n_ctx, n_threads=1, n_threads_batch=1, seed=0, verbose=False)
