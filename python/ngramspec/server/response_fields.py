"""What ngramspec adds to every completion response: ``usage.completion_tokens_details``
(predicted-output counts), ``timings`` (llama.cpp server's names) and ``speculative``
(the engine's full stats)."""
from __future__ import annotations

from typing import Any

__all__ = ["DECODING_HEADER", "decoding_headers", "finish_response", "plain_reason_of", "timings"]

#: The response header that says how a request was decoded: "speculative", or
#: "plain; reason=..." when the wrapper sent it down the Llama's own path.
DECODING_HEADER = "X-Ngramspec-Decoding"


def decoding_headers(plain_reason: str | None) -> dict[str, str]:
    """The ``X-Ngramspec-Decoding`` header for a request decoded speculatively
    (``plain_reason`` None) or plainly."""
    value = "speculative" if plain_reason is None else f"plain; reason={plain_reason}"
    return {DECODING_HEADER: value}


def plain_reason_of(stats: dict[str, Any] | None) -> str | None:
    """Why a response was decoded plainly, from its ``speculative`` stats (None: it was not)."""
    if stats and stats.get("used") is False:
        return str(stats.get("reason") or "plain")
    return None


def _prediction_details(out: dict[str, Any]) -> dict[str, int]:
    """OpenAI's usage.completion_tokens_details: the wrapper's counts, 0 without a prediction."""
    details = dict((out.get("usage") or {}).get("completion_tokens_details") or {})
    for key in ("accepted_prediction_tokens", "rejected_prediction_tokens"):
        details[key] = int(details.get(key) or 0)
    return details


def timings(stats: dict[str, Any]) -> dict[str, Any]:
    """Our stats under llama.cpp server's ``timings`` names."""
    n = int(stats.get("generated_tokens", 0))
    prompt_n = int(stats.get("prefill_tokens", 0))
    prompt_ms = float(stats.get("time_prefill_s", 0.0)) * 1e3
    predicted_ms = max(0.0, float(stats.get("time_total_s", 0.0)) * 1e3 - prompt_ms)
    return {
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n / prompt_ms * 1e3 if prompt_ms else 0.0,
        "predicted_n": n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / n if n else 0.0,
        "predicted_per_second": n / predicted_ms * 1e3 if predicted_ms else 0.0,
        "draft_n": int(stats.get("drafted_tokens", 0)),
        "draft_n_accepted": int(stats.get("accepted_tokens", 0)),
        "forward_passes": int(stats.get("forward_passes", 0)),
        "tokens_per_forward": float(stats.get("tokens_per_forward", 0.0)),
    }


def finish_response(out: dict[str, Any], stats: dict[str, Any] | None) -> dict[str, Any]:
    """A full response (or a stream's last chunk): usage with the prediction
    counts, timings and speculative stats."""
    stats = dict(stats or out.get("speculative") or {})
    usage = dict(out.get("usage") or {})
    if not usage:
        p, c = int(stats.get("prompt_tokens", 0)), int(stats.get("generated_tokens", 0))
        usage = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    usage["completion_tokens_details"] = _prediction_details(out)
    out["usage"] = usage
    out["timings"] = timings(stats)
    out["speculative"] = stats
    return out
