"""Loading a draft model and checking that it can draft for a target.

``check_compatible`` refuses a pair whose drafts the target could not verify
token for token (another vocabulary, other special tokens, a cache that cannot be
rolled back, a shorter context); ``memory_report`` says what the second model
costs in memory; ``load_draft_model`` opens one sized for its target.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ngramspec import _llama

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["check_compatible", "is_llama", "load_draft_model", "memory_report"]


def is_llama(obj: Any) -> bool:
    """Whether ``obj`` is a ``llama_cpp.Llama``."""
    return isinstance(obj, _llama.llama_cpp_module().Llama)


def check_compatible(draft_llm: Llama, target_llm: Llama, *, check_tokenizer: bool = True) -> None:
    """Raise TypeError / ValueError unless ``draft_llm`` can draft for ``target_llm``:
    two distinct, open ``llama_cpp.Llama`` objects with the same vocabulary size,
    the same BOS/EOS/EOT ids, the same token texts (on a sample of ids), a cache
    that can be rolled back, and a draft context at least as long as the target's
    usable context (the draft's own decoding reaches llama.cpp's n_ctx)."""
    for what, llm in (("draft_llm", draft_llm), ("target_llm", target_llm)):
        if not is_llama(llm):
            raise TypeError(f"{what} must be a llama_cpp.Llama, got {type(llm).__name__}")
        try:
            _llama.context_of(llm)
        except ValueError:
            raise ValueError(f"{what} has been closed; create a new Llama") from None
    if draft_llm is target_llm or _llama.same_context(draft_llm, target_llm):   # a wrapper shares its Llama's
        raise ValueError("the draft model must be a separate Llama (its own context), not the target itself")
    n_draft, n_target = draft_llm.n_vocab(), target_llm.n_vocab()
    if n_draft != n_target:
        raise ValueError(f"the draft model's vocabulary has {n_draft} tokens and the target's has {n_target}: "
                         "a draft model must share the target's vocabulary")
    sd, st = _llama.special_tokens(draft_llm), _llama.special_tokens(target_llm)
    differ = [f"{k} {sd[k]} (draft) vs {st[k]} (target)" for k in st if k in sd and sd[k] != st[k]]
    if differ:
        raise ValueError("the draft model's special tokens differ from the target's: " + ", ".join(differ)
                         + "; use a draft model from the target's family")
    if check_tokenizer:
        step = max(1, n_target // 997)
        for t in range(0, n_target, step):
            a, b = _llama.token_text(draft_llm, t), _llama.token_text(target_llm, t)
            if a != b:
                raise ValueError(f"the draft model's tokenizer differs from the target's: token {t} is {a!r} "
                                 f"in the draft and {b!r} in the target")
    if not _llama.can_roll_back(draft_llm):
        raise ValueError("the draft model is recurrent or hybrid: its cache cannot be rolled back after a rejection")
    c_draft, c_target = int(draft_llm.n_ctx()), _llama.usable_n_ctx(target_llm)
    if c_draft < c_target:
        raise ValueError(f"the draft model's context ({c_draft} tokens) is shorter than the target's ({c_target}): "
                         f"create the draft Llama with n_ctx >= {c_target}")


# f32, f16, bf16, q8_0, q4_0, q4_1
_BYTES_PER_KV_ELEMENT = {0: 4.0, 1: 2.0, 30: 2.0, 8: 34 / 32, 2: 20 / 32, 3: 24 / 32}


def _kv_bytes(llm: Llama) -> int:
    """KV cache size estimate: n_ctx x layers x kv heads x head size x (K + V)."""
    llama_cpp = _llama.llama_cpp_module()
    model = _llama.model_handle(llm)
    n_layer = llama_cpp.llama_model_n_layer(model)
    n_head = max(1, llama_cpp.llama_model_n_head(model))
    n_head_kv = llama_cpp.llama_model_n_head_kv(model)
    head_dim = llama_cpp.llama_model_n_embd(model) // n_head
    params = llm.context_params
    per_k = _BYTES_PER_KV_ELEMENT.get(int(params.type_k), 2.0)
    per_v = _BYTES_PER_KV_ELEMENT.get(int(params.type_v), 2.0)
    return int(llm.n_ctx() * n_layer * n_head_kv * head_dim * (per_k + per_v))


def memory_report(draft_llm: Llama, target_llm: Llama) -> dict[str, int]:
    """Bytes the two models hold: weights (llama_model_size) and an estimate of
    each KV cache. The draft model's share is what it adds to the target alone."""
    llama_cpp = _llama.llama_cpp_module()
    out = {}
    for what, llm in (("draft", draft_llm), ("target", target_llm)):
        out[f"{what}_weights_bytes"] = int(llama_cpp.llama_model_size(_llama.model_handle(llm)))
        out[f"{what}_kv_bytes"] = _kv_bytes(llm)
    out["draft_total_bytes"] = out["draft_weights_bytes"] + out["draft_kv_bytes"]
    out["target_total_bytes"] = out["target_weights_bytes"] + out["target_kv_bytes"]
    return out


def load_draft_model(model: str | os.PathLike[str], target_llm: Llama, **llama_kwargs: Any) -> Any:
    """A ``llama_cpp.Llama`` for a draft model (a GGUF path or a name from
    ``ngramspec.models``) whose context covers ``target_llm``'s, with the target's
    n_batch, n_ubatch and thread counts unless ``llama_kwargs`` say otherwise."""
    llama_cpp = _llama.llama_cpp_module()
    from ngramspec import models

    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"draft model must be a GGUF path or a model name, got {type(model).__name__}")
    path = str(model)
    if path in models.MODELS:
        path = str(models.fetch(path))
    elif not os.path.isfile(path):
        raise ValueError(f"draft model {path!r} is neither a file nor a known model name "
                         f"({', '.join(sorted(models.MODELS))})")
    _llama.context_of(target_llm)
    params = target_llm.context_params
    kwargs: dict[str, Any] = {
        "n_ctx": max(int(target_llm.n_ctx()), _llama.usable_n_ctx(target_llm)), "n_batch": target_llm.n_batch,
        "n_ubatch": params.n_ubatch, "n_threads": params.n_threads, "n_threads_batch": params.n_threads_batch,
        "verbose": False}
    kwargs.update(llama_kwargs)
    return llama_cpp.Llama(path, **kwargs)
