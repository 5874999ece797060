"""Loads what a method runs on: the model file, its ``Llama`` and, for an
ngramspec method, its SpeculativeEngine (built from methods.ENGINE_OPTIONS).
The suite, the peak-RSS probe and the other build's worker all load through here."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ngramspec.suite.llama_settings import LLAMA_DEFAULTS, LlamaSettings
from ngramspec.suite.methods import (
    DRAFT_METHODS,
    ENGINE_OPTIONS,
    LOOKUP_PRED_TOKENS,
    MEASURED_MAX_BATCH,
    draft_model_for,
    runs_exact_mode,
)

if TYPE_CHECKING:
    from llama_cpp import Llama

    from ngramspec.calibration.invariance import InvarianceReport
    from ngramspec.engine.speculative_engine import SpeculativeEngine


def model_path(model: str) -> str:
    """The GGUF path of ``model`` (a name from ngramspec.models or a path):
    ``ngramspec.models.resolve_model_path``, kept here for the bench/ scripts."""
    from ngramspec.models import resolve_model_path

    return resolve_model_path(model)


def check_for_methods(llm: Llama, methods: Sequence[str], progress: Any, *, repeats: int = 5) -> InvarianceReport:
    """The invariance report a run's engines share: checked up to MEASURED_MAX_BATCH and,
    where one of ``methods`` runs exact mode, priced as a user's engine is, by a curve timed
    over ``repeats`` interleaved rounds (the check's one-shot timings fall to the prior on a
    noisy machine). The suite and the other build's worker both check through here."""
    from ngramspec.calibration.invariance import check_batch_invariance
    from ngramspec.calibration.invariance_cache import price_as_measured

    report = check_batch_invariance(llm, max_batch=MEASURED_MAX_BATCH, progress=progress)
    if runs_exact_mode(methods):
        price_as_measured(llm, report, MEASURED_MAX_BATCH, progress, repeats=repeats)
    return report


def load(path: str, method: str, n_ctx: int, threads: int | None, settings: LlamaSettings = LLAMA_DEFAULTS,
         rpc: str | None = None) -> Any:
    """The ``Llama`` that ``method`` runs on (prompt lookup gets its draft model),
    with the run's GPU offload and flash attention (``settings``), onto the RPC
    workers ``rpc`` if given (every layer on them unless ``settings`` offloads otherwise)."""
    from ngramspec.models import load_llama

    kwargs: dict[str, Any] = {"n_ctx": n_ctx, "seed": 0, "n_threads": threads, **settings.llama_kwargs()}
    if rpc and settings.n_gpu_layers == LLAMA_DEFAULTS.n_gpu_layers:
        del kwargs["n_gpu_layers"]   # RPC loading puts every layer on the workers
    if method == "prompt lookup":
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        kwargs["draft_model"] = LlamaPromptLookupDecoding(num_pred_tokens=LOOKUP_PRED_TOKENS)
    return load_llama(path, rpc=rpc, **kwargs)


def make_engine(llm: Llama, method: str, *, draft_model: Any = None, **changes: Any) -> SpeculativeEngine:
    """The SpeculativeEngine of an ngramspec method: ``ENGINE_OPTIONS[method]`` with
    ``changes`` (e.g. invariance, trace). A draft-model method drafts with
    ``draft_model`` (a loaded draft Llama), else with ``draft_model_for`` the target's
    file, which the engine loads with the target's n_ctx and threads."""
    from ngramspec.engine.speculative_engine import SpeculativeEngine

    options = ENGINE_OPTIONS[method].replace(**changes)
    if method in DRAFT_METHODS:
        options = options.replace(draft_model=draft_model if draft_model is not None
                                  else draft_model_for(llm.model_path))
    elif draft_model is not None:
        raise ValueError(f"{method!r} drafts without a draft model")
    return SpeculativeEngine(llm, options)
