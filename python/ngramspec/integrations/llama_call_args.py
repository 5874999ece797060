"""llama-cpp-python's call arguments as the wrapper checks and converts them for the
engine: which requests are greedy, which arguments send a request down the wrapped
Llama's own path, seeds, logit bias and sampling parameters."""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ngramspec._llama import seed_of
from ngramspec.sampling import SamplingParams

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["COMPLETION_PLAIN", "COMPLETION_PLAIN_SAMPLED", "GENERATE_PLAIN", "call_seeds", "check_finite",
           "check_token_ids", "in_use", "is_greedy", "logit_bias_map", "min_tokens_of", "plain_reason",
           "sampling_params"]


def is_greedy(temperature: float, top_k: int, mirostat_mode: int = 0) -> bool:
    """Whether llama-cpp-python decodes greedily with these settings: temperature 0,
    or top_k == 1 at a positive temperature without mirostat (mirostat replaces
    top_k there; a negative temperature samples)."""
    return temperature == 0 or (temperature > 0 and top_k == 1 and not mirostat_mode)


def _given(value: Any) -> bool:
    return value is not None


def min_tokens_of(logits_processor: Any) -> tuple[int, int] | None:
    r"""(min_tokens, end-of-text token) when ``logits_processor`` is only what
    llama-cpp-python's server makes of a request's ``min_tokens`` (unused
    ``MinTokensLogitsProcessor``\ s, which the engine applies itself); None for any
    other processor. (0, -1) without one."""
    if logits_processor is None:
        return 0, -1
    from llama_cpp import MinTokensLogitsProcessor

    procs = list(logits_processor) if isinstance(logits_processor, (list, tuple)) else [logits_processor]
    if not procs or not all(type(p) is MinTokensLogitsProcessor and p.prompt_tokens is None for p in procs):
        return None
    if len({p.token_eos for p in procs}) != 1:
        return None
    return max(int(p.min_tokens) for p in procs), int(procs[0].token_eos)


#: Every argument the engine cannot speculate with, and when a call uses it (a value other than the neutral one).
_IN_USE: dict[str, Callable[[Any], bool]] = {
    "suffix": _given,
    "logprobs with echo": bool,   # the prompt's own logprobs: plain keeps every prompt row (logits_all)
    "mirostat_mode": lambda mode: mode != 0,
    "logits_processor": lambda procs: min_tokens_of(procs) is None,
    "grammar": _given,
    "frequency_penalty": lambda penalty: penalty != 0.0,
    "presence_penalty": lambda penalty: penalty != 0.0,
    "repeat_penalty": lambda penalty: penalty != 1.0,
    "reset=False": lambda reset: not reset,   # generate's reset, named as the message shows it
}
#: What sends any create_completion request down the Llama's own path, in the reason's order...
COMPLETION_PLAIN = ("suffix", "logprobs with echo", "logits_processor")
#: ... and also a sampled one (temperature 0 ignores mirostat; top_k 1 with it samples).
COMPLETION_PLAIN_SAMPLED = ("mirostat_mode",)
#: What sends a greedy ``generate`` down the Llama's own path (a sampled one always goes there).
GENERATE_PLAIN = ("repeat_penalty", "frequency_penalty", "presence_penalty", "mirostat_mode",
                  "logits_processor", "grammar", "reset=False")


def in_use(names: Sequence[str], args: dict[str, Any]) -> list[str]:
    """The names among ``names`` whose value in ``args`` is in use (``_IN_USE``), in
    the order of ``names``."""
    return [name for name in names if _IN_USE[name](args[name])]


def plain_reason(names: Sequence[str], args: dict[str, Any], greedy: bool) -> str | None:
    """Why this request is decoded by the Llama's own path (the arguments in use that
    the engine cannot speculate with), or None when it speculates."""
    used = in_use(names, args)
    if not used:
        return None
    return f"{', '.join(used)} in {'greedy' if greedy else 'sampled'} decoding"


def check_finite(values: dict[str, Any]) -> None:
    """ValueError naming the first sampling parameter that is NaN or infinite: llama.cpp
    would sample from NaN logits, or clamp the value, without a word (a NaN
    temperature was refused as if it were a greedy one). Values that are not numbers
    are left to the checks that read them."""
    for name, value in values.items():
        if isinstance(value, (float, np.floating)) and not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value}")


#: LLAMA_DEFAULT_SEED: the seed (-1, or 2**32 - 1) that llama.cpp replaces by a random one.
_RANDOM_SEED = 0xFFFFFFFF


def call_seeds(llm: Llama, seed: Any) -> tuple[int | None, int]:
    """(the seed the Llama keeps after this call, the seed this call samples with),
    as llama-cpp-python's ``create_completion`` has them: a given seed becomes the
    Llama's seed; without one, the next seed of the Llama's own sequence
    (``random.Random`` of the Llama's seed) does. So ``Llama(seed=...)`` and ``set_seed``
    make sampled text reproducible here as they do there (a fresh OS-random seed per
    call made them no-ops). A seed of -1 samples from a fresh random seed, as it
    does there. Nothing is set here: the caller sets the Llama's seed once the
    request has passed its checks (plain checks the prompt first)."""
    if seed is not None and (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
    if seed is None:
        current = seed_of(llm)
        if current is None:        # not a llama_cpp.Llama: nothing to follow
            return None, random.SystemRandom().randrange(2**32)
        seed = random.Random(current).randint(0, 2**32)
    seed = int(seed)
    if seed & 0xFFFFFFFF == _RANDOM_SEED:
        # llama.cpp's sampler takes this seed (-1 as a uint32) to mean "draw one
        # from std::random_device", so plain samples differently on every such call.
        return seed, random.SystemRandom().randrange(2**32)
    return seed, seed


def check_token_ids(ids: Any, n_vocab: int, what: str = "token id") -> None:
    """ValueError naming the first id outside the vocabulary (llama.cpp would index
    past its tables: an IndexError, or the process aborted)."""
    bad = [t for t in ids if not 0 <= t < n_vocab]
    if bad:
        raise ValueError(f"{what} {bad[0]} is out of range: the vocabulary has {n_vocab} tokens (0..{n_vocab - 1})")


def logit_bias_map(logit_bias: Any, n_vocab: int) -> dict[int, float]:
    """``logit_bias`` as llama-cpp-python reads it, ``{int(id): float(bias)}`` (so
    OpenAI's string ids are fine), with every id in the vocabulary and every bias a
    number: a bad one is a ValueError / TypeError naming it, not an IndexError."""
    out: dict[int, float] = {}
    for key, bias in logit_bias.items():
        if isinstance(key, (bool, np.bool_)):
            raise TypeError(f"logit_bias keys must be token ids, got {key!r}")
        try:
            tok = int(key)
        except (TypeError, ValueError):
            raise TypeError(f"logit_bias keys must be token ids (int, or a str of one), got {key!r}") from None
        if isinstance(key, float) and key != tok:
            raise TypeError(f"logit_bias keys must be token ids, got {key!r}")
        check_token_ids([tok], n_vocab, "logit_bias token id")
        try:
            value = float(bias)
        except (TypeError, ValueError):
            value = float("nan")
        if value != value:
            raise ValueError(f"logit_bias[{key!r}] must be a number, got {bias!r}")
        out[tok] = value
    return out


def sampling_params(llm: Llama, *, temperature: float, top_k: int, top_p: float, min_p: float, typical_p: float,
                     repeat_penalty: float, frequency_penalty: float, presence_penalty: float,
                     logit_bias: dict[int, float] | None, seed: int) -> SamplingParams:
    """A sampled request's parameters, as llama-cpp-python's sampler applies them."""
    if temperature < 0:
        # llama-cpp-python samples from the whole distribution at a negative
        # temperature: logit bias and penalties, then no truncation, T = 1.
        top_k, top_p, min_p, typical_p, temperature = 0, 1.0, 0.0, 1.0, 1.0
    return SamplingParams(
        temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
        repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
        presence_penalty=presence_penalty, penalty_last_n=llm.last_n_tokens_size,
        logit_bias=logit_bias or None,
        seed=seed)
