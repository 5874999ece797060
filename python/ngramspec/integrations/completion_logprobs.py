"""A completion's ``logprobs`` object, as plain llama-cpp-python builds it.

Plain's non-streamed ``create_completion(logprobs=n)`` (without ``echo``) returns
``{"tokens", "text_offset", "token_logprobs", "top_logprobs"}``, one entry per
completion token (a BOS token among them is skipped): the token's text detokenized
after the completion tokens before it, its offset (the prompt's length plus the
length of the text of the tokens before it), its logprob, and a dict of the ``n``
best tokens' texts to their logprobs, to which the token itself is added. The
numbers come from the engine's ``TokenLogprobs``; this builds the same object from
them, for the whole completion or for the tokens a stream chunk carries.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ngramspec.engine.logprobs import TokenLogprobs

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["completion_logprobs"]


def completion_logprobs(llm: Llama, prompt: Any, tokens: Sequence[int], recorded: TokenLogprobs, start: int = 0,
                        end: int | None = None) -> dict[str, Any]:
    """Plain's ``logprobs`` object for ``tokens[start:end]`` of a completion of ``prompt``."""
    out: dict[str, Any] = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
    bos = llm.token_bos()
    tokens = list(tokens)

    def text(ids: list[int], before: list[int] | None = None) -> str:
        return bytes(llm.detokenize(ids, prev_tokens=before)).decode("utf-8", errors="ignore")

    for idx in range(start, min(len(tokens), len(recorded.token_logprobs)) if end is None else end):
        token = tokens[idx]
        if token == bos:
            continue
        token_str = text([token], tokens[:idx])
        top = {text([i], tokens[:idx]): lp for i, lp in recorded.top_logprobs[idx]}
        top[token_str] = recorded.token_logprobs[idx]
        out["tokens"].append(token_str)
        out["text_offset"].append(len(prompt) + len(text(tokens[:idx])))
        out["token_logprobs"].append(recorded.token_logprobs[idx])
        out["top_logprobs"].append(top)
    return out
