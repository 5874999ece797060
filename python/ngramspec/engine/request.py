"""A generation request's arguments, checked and converted as llama-cpp-python reads them."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ngramspec import _llama

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["check_exact", "prompt_tokens_for", "stop_list"]


def prompt_tokens_for(llm: Llama, prompt: str | Sequence[int]) -> list[int]:
    """Tokens exactly as ``Llama.create_completion`` builds them for this prompt."""
    if isinstance(prompt, str):
        return _llama.completion_prompt_tokens(llm, prompt)
    if isinstance(prompt, (bytes, bytearray)):
        raise TypeError("prompt must be a str or a sequence of token ids, not bytes")
    try:
        tokens = [_token_id(t) for t in prompt]
    except TypeError as e:
        raise TypeError(f"prompt must be a str or a sequence of int token ids: {e}") from None
    n_vocab = llm.n_vocab()
    bad = [t for t in tokens if not 0 <= t < n_vocab]
    if bad:
        raise ValueError(f"prompt token ids must be in [0, {n_vocab}), got {bad[0]}")
    return tokens


def _token_id(t: Any) -> int:
    if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
        raise TypeError(f"{t!r} is not an int")
    return int(t)


def stop_list(stop: Any) -> list[str]:
    """``stop`` (None, a str or strings) as a list of stop strings."""
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    stops = list(stop)
    if not all(isinstance(s, str) for s in stops):
        raise TypeError("stop must be a str or a list of str")
    return stops


def check_exact(exact: Any) -> None:
    """A per-call verify mode: True, False, or None for the engine's (or wrapper's) default."""
    if exact is not None and not isinstance(exact, bool):
        raise TypeError(f"exact must be True, False or None, got {type(exact).__name__}")
