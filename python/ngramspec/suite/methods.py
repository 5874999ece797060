"""The methods the suite compares, by name, and the ``EngineOptions`` each ngramspec
method builds its SpeculativeEngine from. Every other suite module (the runner, the
peak-RSS probe, the other build's worker, the reports) reads the names from here."""
from __future__ import annotations

import os
from collections.abc import Sequence

from ngramspec.options import EngineOptions

METHODS = ("plain", "prompt lookup", "ngramspec")
# The draft-model methods: model-free sources plus a draft model, and the draft
# model alone (no n-gram or copy drafts). The draft model is
# ``draft_model_for(model)``: DRAFT_MODELS, or the environment's
# NGRAMSPEC_BENCH_DRAFT_MODEL (a name from ngramspec.models or a GGUF path).
DRAFT_METHODS = ("ngramspec+draft", "draft-only")
# Predicted outputs: ngramspec given each item's prediction (the unedited file), and
# given an unrelated file instead. They run only on items that carry a prediction
# (the predicted_edit workload); each has its own engine.
PREDICTION_METHODS = ("ngramspec+prediction", "ngramspec+wrong-prediction")
# Run only when asked for: ngramspec without its copy drafts (an ablation), fast mode
# (exact=False: every batch size, up to 64 draft tokens; its output may drift from
# plain greedy at floating-point near-ties), the draft-model and the prediction methods.
EXTRA_METHODS: tuple[str, ...] = ("ngramspec n-gram only", "ngramspec fast") + DRAFT_METHODS + PREDICTION_METHODS
# The methods each llama.cpp build runs when two run side by side (other_build.py):
# its plain decoding, exact mode and fast mode.
OTHER_BUILD_METHODS = ("plain", "ngramspec", "ngramspec fast")
# `ngramspec serve` over loopback HTTP: the in-process "ngramspec" method behind the
# package's server, run when Suite(serve=True) (``ngramspec bench --serve``).
SERVE_METHOD = "ngramspec serve"

DRAFT_MODELS = {"qwen2.5-coder-1.5b": "qwen2.5-coder-0.5b"}
DRAFT_MODEL_ENV = "NGRAMSPEC_BENCH_DRAFT_MODEL"
# llama-cpp-python's documented prompt-lookup setting (num_pred_tokens=10 in
# llama-cpp-python's own README; max_ngram_size=2 is its default).
LOOKUP_PRED_TOKENS = 10
# Invariance and the verify-cost curve are measured up to this batch size: the
# engine's default cap (a draft of 64 tokens and the token before it).
MEASURED_MAX_BATCH = 65

# The EngineOptions each ngramspec method builds its SpeculativeEngine from (make_engine
# in loading.py): the suite, the peak-RSS probe and the other build's worker all build
# engines from this one table. "plain" and "prompt lookup" are llama-cpp-python's own
# decoding, with no engine. The draft-model methods' draft model is a loaded Llama, given
# when the engine is built (``make_engine(..., draft_model=...)``, else the engine loads
# ``draft_model_for(model)``): it is not in the table.
ENGINE_OPTIONS: dict[str, EngineOptions] = {
    "ngramspec": EngineOptions(),
    "ngramspec n-gram only": EngineOptions(copy=False),
    "ngramspec fast": EngineOptions(exact=False, max_draft=MEASURED_MAX_BATCH - 1),
    "ngramspec+draft": EngineOptions(),
    # The draft model alone (no n-gram or copy drafts), always called, every allowed draft
    # token verified, at most 3 per pass: llama-server's draft-model defaults (draft n_max
    # 3, p_min 0), so its acceptance is the draft model's own, not the gate's choice.
    "draft-only": EngineOptions(ngram=False, copy=False, adaptive=False, max_draft=3),
    **{m: EngineOptions() for m in PREDICTION_METHODS},
}


def runs_exact_mode(methods: Sequence[str]) -> bool:
    """Whether any of ``methods`` is an engine in exact mode (its report then needs a cost curve)."""
    return any(ENGINE_OPTIONS[m].exact for m in methods if m in ENGINE_OPTIONS)


def draft_model_for(model: str) -> str:
    """The draft model (a name or GGUF path) the draft-model methods use for ``model``
    (a name or GGUF path): $NGRAMSPEC_BENCH_DRAFT_MODEL, else DRAFT_MODELS."""
    from ngramspec.models import resolve_model_path

    env = os.environ.get(DRAFT_MODEL_ENV)
    if env:
        return env
    if model in DRAFT_MODELS:
        return DRAFT_MODELS[model]
    for target, draft in DRAFT_MODELS.items():
        try:
            if os.path.realpath(resolve_model_path(target)) == os.path.realpath(model):
                return draft
        except Exception:  # not fetched: cannot be this file
            continue
    raise ValueError(f"no draft model known for {model!r}: set {DRAFT_MODEL_ENV} to a draft model's name or GGUF "
                     f"path (known pairs: {DRAFT_MODELS})")
