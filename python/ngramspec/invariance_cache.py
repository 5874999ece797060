"""The batch-invariance check, remembered per model, build and context settings.

The check (``check_batch_invariance``) decodes every batch size once and clears
the KV cache, a few seconds on a 1.5B model; its timings are also the engine's
first verify-cost curve. Its answer only changes with the model file, the
llama.cpp build or the context settings that pick kernels, so it is stored on
disk under a key made of exactly those, and a later engine on the same setup
starts at once. The online cost model refines the stored timings from real passes.

Files live in ``$NGRAMSPEC_CACHE_DIR/invariance`` or the user cache
(``~/.cache/ngramspec/invariance`` on Linux). A file that cannot be read or does
not match is ignored and rewritten.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

from .invariance import BatchSizeResult, InvarianceReport, check_batch_invariance

__all__ = ["cache_path", "fingerprint", "load_or_check"]

_FORMAT = 1


def _cache_root() -> Path:
    env = os.environ.get("NGRAMSPEC_CACHE_DIR")
    if env:
        return Path(env).expanduser() / "invariance"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("ngramspec")) / "invariance"


def _file_stamp(path: Path) -> list[Any]:
    st = path.stat()
    return [path.name, st.st_size, st.st_mtime_ns]


def fingerprint(llm: Any) -> dict[str, Any]:
    """What the answer depends on: the model file, the llama.cpp build (version,
    CPU features it was built for and runs with, its shared libraries) and the
    context settings that choose kernels (threads, batch sizes, KV types, GPU
    offload). The model and libraries are identified by size and modification
    time, not hashed, so building the key costs microseconds."""
    import llama_cpp

    cp, mp = llm.context_params, llm.model_params
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    libs = sorted(_file_stamp(p) for p in lib_dir.glob("*") if p.is_file()) if lib_dir.is_dir() else []
    model = Path(llm.model_path).resolve()
    settings = {name: getattr(cp, name) for name in ("n_ctx", "n_threads", "n_threads_batch", "n_batch", "n_ubatch",
                                                     "type_k",
                                                     "type_v", "offload_kqv", "flash_attn_type", "flash_attn")
                if hasattr(cp, name)}
    settings["n_gpu_layers"] = getattr(mp, "n_gpu_layers", None)
    return {
        "format": _FORMAT,
        "model": [str(model)] + _file_stamp(model),
        "llama_cpp": llama_cpp.__version__,
        "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
        "libraries": libs,
        "settings": {k: (int(v) if isinstance(v, bool) else v) for k, v in settings.items()},
    }


def cache_path(key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return _cache_root() / f"{digest}.json"


def _load(path: Path, key: dict[str, Any], max_batch: int) -> InvarianceReport | None:
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("key") != key:
            return None
        report = InvarianceReport(single_token_seconds=float(data["single_token_seconds"]))
        for b, invariant, rows, diff, seconds in data["results"]:
            report.results[int(b)] = BatchSizeResult(int(b), bool(invariant), int(rows), float(diff), float(seconds))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return report if all(b in report.results for b in range(1, max_batch + 1)) else None


def _store(path: Path, key: dict[str, Any], report: InvarianceReport) -> None:
    data = {"key": key, "single_token_seconds": report.single_token_seconds,
            "results": [[r.batch_size, r.invariant, r.rows_differing, r.max_abs_diff, r.seconds]
                        for _, r in sorted(report.results.items())]}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:
        pass   # a read-only cache only costs the next start-up a fresh check


def load_or_check(llm: Any, max_batch: int,
                  check: Callable[..., InvarianceReport] | None = None) -> InvarianceReport:
    """The stored report for this setup if it covers batch sizes 1..max_batch;
    otherwise ``check(llm, max_batch=max_batch)`` (default
    ``check_batch_invariance``), stored for next time."""
    if check is None:
        check = check_batch_invariance
    key = fingerprint(llm)
    path = cache_path(key)
    report = _load(path, key, max_batch)
    if report is None:
        report = check(llm, max_batch=max_batch)
        _store(path, key, report)
    return report
