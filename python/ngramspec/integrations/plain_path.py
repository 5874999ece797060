"""Requests the engine cannot speculate with, decoded by the wrapped Llama's own path.

Such a request (a user's ``logits_processor``, mirostat, an infill ``suffix``...)
gets exactly what the plain ``Llama`` returns for it: its text, its return shape,
its errors. The response says so: its ``speculative`` stats are
``{"used": False, "reason": ...}`` with the prompt and completion token counts, in
place of the engine's stats.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["mark_completion", "mark_stream", "plain_stats"]


def plain_stats(reason: str, usage: dict[str, Any] | None) -> dict[str, Any]:
    """The ``speculative`` stats of a request decoded plainly: why, and the token counts."""
    usage = usage or {}
    return {"used": False, "reason": reason, "prompt_tokens": int(usage.get("prompt_tokens") or 0),
            "generated_tokens": int(usage.get("completion_tokens") or 0)}


def mark_completion(out: dict[str, Any], reason: str) -> dict[str, Any]:
    """A plain response with its ``speculative`` stats added."""
    out["speculative"] = plain_stats(reason, out.get("usage"))
    return out


def mark_stream(chunks: Iterator[dict[str, Any]], reason: str, prompt_tokens: int,
                count_tokens: Callable[[str], int]) -> Iterator[dict[str, Any]]:
    """A plain stream whose chunk with the finish reason carries the ``speculative``
    stats. Plain's stream has no usage and does not say how many tokens it sampled,
    so the completion is counted as the tokens of the text it streamed
    (``count_tokens``); the chunk with the finish reason also gets that usage."""
    parts: list[str] = []
    for chunk in chunks:
        choices = chunk.get("choices") or []
        if choices and choices[0].get("finish_reason") is not None:
            n = count_tokens("".join(parts))
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
            chunk.setdefault("usage", usage)
            chunk["speculative"] = plain_stats(reason, chunk["usage"])
        elif choices:
            parts.append(choices[0].get("text") or "")
        yield chunk
