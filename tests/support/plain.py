"""llama-cpp-python's own greedy decoding, the reference that identity tests compare against."""
from __future__ import annotations

import llama_cpp

from ngramspec.engine.request import prompt_tokens_for


def plain_tokens(llm, prompt, limit: int) -> list[int]:
    """Greedy tokens from Llama.generate, up to `limit` or an end-of-generation token."""
    llm.reset()
    out: list[int] = []
    for tok in llm.generate(prompt_tokens_for(llm, prompt), temp=0.0):
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok) or len(out) == limit:
            break
        out.append(tok)
    llm.reset()
    return out
