"""One batch-invariance check in a fresh process, printed as one JSON line.

llama.cpp reads its GGML_* environment switches once per process (e.g.
GGML_CUDA_DISABLE_FUSION, GGML_CUDA_DISABLE_GRAPHS, GGML_CPU_TILED_MM), so a
check under another switch needs a process of its own: measure.py starts this
one with the switch in its environment.

Usage: python scripts/gpu/invariance_probe.py '{"model": PATH, "n_ctx": 4096, "n_gpu_layers": -1,
           "flash_attn": false, "max_batch": 17, "llama_kwargs": {}, "depths": null}'
"""
from __future__ import annotations

import json
import sys
from typing import Any


def probe(job: dict[str, Any]) -> dict[str, Any]:
    from ngramspec.calibration.invariance import check_batch_invariance
    from ngramspec.models import load_llama

    llm = load_llama(job["model"], n_ctx=job["n_ctx"], n_gpu_layers=job["n_gpu_layers"], flash_attn=job["flash_attn"],
                     seed=0, **job.get("llama_kwargs", {}))
    try:
        report = check_batch_invariance(llm, max_batch=job["max_batch"], depths=job.get("depths"))
    finally:
        llm.close()
    return {"summary": report.summary(), "invariant_sizes": report.invariant_sizes,
            "failed_at": {str(b): r.failed_at for b, r in report.results.items() if not r.invariant},
            "check_seconds": report.check_seconds}


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(probe(json.loads(sys.argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
