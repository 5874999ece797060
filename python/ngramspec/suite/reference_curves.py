"""Reference verify-cost curves r(B): one ``llama_decode`` of B tokens over one
token's, measured once on a quiet machine, for the predicted-edit benchmark's
``--cost-curve reference`` (a machine too busy to time a curve of its own).
docs/predicted-outputs.md says what was measured, how and on which machine."""
from __future__ import annotations

# Measured on a quiet 2-core Xeon, 2 threads, the exact build (LLAMAFILE=OFF,
# CPU_REPACK=OFF); Qwen 0.5B at the default tiled threshold, with B=17 from its longer
# B=1..25 measurement. Sizes not listed are interpolated linearly (B=17 of SmolLM2
# extrapolated). Keyed by a part of the model's name or GGUF path.
REFERENCE_CURVES = {
    "smollm2": {1: 1.0, 2: 1.42, 3: 1.72, 4: 2.10, 5: 2.53, 6: 2.91, 8: 3.43, 12: 4.79, 16: 6.11},
    "qwen2.5-coder-0.5b": {1: 1.0, 2: 1.43, 3: 1.73, 4: 2.05, 5: 2.37, 6: 2.74, 8: 3.45, 12: 4.65, 16: 5.83,
                           17: 6.93},
}
# Where a report says the curve came from.
REFERENCE_CURVE_ORIGIN = "reference curve measured on a quiet 2-core Xeon, 2 threads"


def reference_model(model: str) -> str | None:
    """The REFERENCE_CURVES key that ``model`` (a name from ngramspec.models or a
    GGUF path) or else its resolved GGUF path contains, or None."""
    from ngramspec.models import resolve_model_path

    return next((k for k in REFERENCE_CURVES if k in model.lower() or k in resolve_model_path(model).lower()),
                None)


def reference_curve(model: str, max_batch: int) -> list[float]:
    """The reference r(1..max_batch) for ``model``, interpolated; StopIteration if none."""
    key = next(k for k in REFERENCE_CURVES if k in model.lower())
    pts = sorted(REFERENCE_CURVES[key].items())
    out = []
    for b in range(1, max_batch + 1):
        lo = max((p for p in pts if p[0] <= b), key=lambda p: p[0])
        hi = min((p for p in pts if p[0] >= b), key=lambda p: p[0], default=None)
        if hi is None:   # beyond the last point: the last segment's slope
            (b0, r0), (b1, r1) = pts[-2], pts[-1]
            out.append(r1 + (r1 - r0) / (b1 - b0) * (b - b1))
        elif hi[0] == lo[0]:
            out.append(lo[1])
        else:
            out.append(lo[1] + (hi[1] - lo[1]) * (b - lo[0]) / (hi[0] - lo[0]))
    return out
