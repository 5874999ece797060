"""``n`` > 1: n generations of one request, one after another, each speculative.

llama-cpp-python's server ignores ``n`` (one choice whatever it says); OpenAI returns
``n`` choices. Here each choice is its own call of the wrapper, with ``index`` i; a
sampled request with a ``seed`` gives choice i the seed ``seed + i`` (the same seed
would give n copies of one text), and without one each call takes the Llama's next
seed. A greedy request's choices are all the same text, as OpenAI's are at
temperature 0. The response's usage counts the prompt once and every choice's
tokens; its ``speculative`` stats are the first choice's, with every choice's under
``choices``, and its counts summed.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ngramspec.server.errors import ClientError

__all__ = ["MAX_CHOICES", "choice_kwargs", "merged_response", "n_choices", "numbered_chunks"]

#: The most choices one request may ask for: each is a full generation on the one model.
MAX_CHOICES = 16

#: The stats that add up over choices (the rest are the first choice's).
_SUMMED = ("generated_tokens", "prefill_tokens", "forward_passes", "drafted_tokens", "accepted_tokens",
           "time_prefill_s", "time_decode_s", "time_total_s")


def n_choices(body: Any) -> int:
    n = 1 if body.n is None else body.n
    if not 1 <= n <= MAX_CHOICES:
        raise ClientError(400, f"n must be between 1 and {MAX_CHOICES}, got {n}", param="n", code="invalid_value")
    return int(n)


def choice_kwargs(kwargs: dict[str, Any], i: int) -> dict[str, Any]:
    """Choice ``i``'s call: its own seed when the request gave one."""
    if i == 0 or kwargs.get("seed") is None:
        return kwargs
    return {**kwargs, "seed": int(kwargs["seed"]) + i}


def _summed_stats(stats: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(stats[0])
    for key in _SUMMED:
        if all(key in s for s in stats):
            out[key] = sum(s[key] for s in stats)
    if out.get("forward_passes"):
        out["tokens_per_forward"] = out.get("generated_tokens", 0) / out["forward_passes"]
    out["used"] = all(s.get("used") for s in stats)
    out["choices"] = stats
    return out


def merged_response(outs: list[dict[str, Any]]) -> dict[str, Any]:
    """One response with the choices of ``outs`` (each a whole response, in order)."""
    if len(outs) == 1:
        return outs[0]
    first = dict(outs[0])
    first["choices"] = [{**out["choices"][0], "index": i} for i, out in enumerate(outs)]
    usage = dict(first.get("usage") or {})
    completion = sum(int((out.get("usage") or {}).get("completion_tokens") or 0) for out in outs)
    usage["completion_tokens"] = completion
    usage["total_tokens"] = int(usage.get("prompt_tokens") or 0) + completion
    first["usage"] = usage
    first["speculative"] = _summed_stats([out.get("speculative") or {} for out in outs])
    return first


def numbered_chunks(call: Callable[..., Any], kwargs: dict[str, Any], n: int,
                    first: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The chunks of n streamed choices one after another, each chunk's choice
    numbered; ``first`` is choice 0's stream, already started."""
    for i in range(n):
        chunks = first if i == 0 else iter(call(**choice_kwargs(kwargs, i)))
        for chunk in chunks:
            for choice in chunk.get("choices") or []:
                choice["index"] = i
            yield chunk
