"""Loading a model onto RPC workers: ``models.load_llama(..., rpc=[...])``, the
server's loader (``onto`` and ``attach`` around llama-cpp-python's own), and what a
loaded model reports (``placement``, ``workers_of``).

A model loaded here:
- uses exactly the workers named, in that order (``llama_model_params.devices``),
  whatever other workers this process registered earlier;
- puts every layer and the output layer on them unless ``n_gpu_layers`` says
  otherwise (llama-cpp-python's default, 0, would leave them all here); the token
  embeddings stay on this machine, as llama.cpp keeps them on the CPU;
- splits the layers by the workers' free memory, or by ``tensor_split`` (one
  share per worker device, in order), as llama.cpp does;
- checks its workers before and after every decode (``rpc.workers``), so a lost
  worker raises ``RpcWorkerLostError`` instead of giving meaningless logits.
"""
from __future__ import annotations

import contextlib
import math
import re
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ngramspec import _llama, _rpc
from ngramspec.rpc.workers import RpcWorkers, connect

if TYPE_CHECKING:
    from llama_cpp import Llama

__all__ = ["Placement", "load", "load_onto", "onto", "attach", "with_rpc_defaults", "placement", "workers_of",
           "rpc_fingerprint"]


@dataclass
class Placement:
    """Where a model's weights went, from llama.cpp's own load log."""

    layers: tuple[int, int] | None = None          # (offloaded to the workers, offloadable)
    weights_mib: dict[str, float] = field(default_factory=dict)  # worker "host:port" or "this machine" -> MiB

    def describe(self) -> str:
        where = ", ".join(f"{k} {v:.1f} MiB" for k, v in self.weights_mib.items())
        layers = f"{self.layers[0]}/{self.layers[1]} layers on the workers" if self.layers else "layers: unknown"
        return f"{layers}; weights: {where or 'unknown'}"


_attached: weakref.WeakKeyDictionary[Any, tuple[RpcWorkers, Placement, Any]] = weakref.WeakKeyDictionary()


def with_rpc_defaults(kwargs: dict[str, Any], n_devices: int) -> dict[str, Any]:
    """``Llama`` keyword arguments for a model over ``n_devices`` worker devices:
    every layer on them unless ``n_gpu_layers`` is given; then, unless threads are
    given, one thread here: this process computes only the token embeddings, and
    idle llama.cpp threads spin (with llama-cpp-python's default of every core for
    batches, two workers on the same busy 2-core machine ran exact mode's
    preparation in 234 s instead of 34 s; on a quieter one, 18 s against 20 s:
    bench/results/rpc-driver-threads-smollm2-135m.md);
    ``tensor_split`` checked (one non-negative share per device at most, not all zero)."""
    out = dict(kwargs)
    out.setdefault("n_gpu_layers", -1)
    if out["n_gpu_layers"] == -1 and out.get("n_threads") is None:
        out["n_threads"] = 1
        out.setdefault("n_threads_batch", 1)
    split = out.get("tensor_split")
    if split is not None:
        shares = list(split)
        if not shares or len(shares) > n_devices:
            raise ValueError(f"tensor_split has {len(shares)} shares for {n_devices} RPC worker device(s): give "
                             "one share per worker, in the order the workers are named")
        if any(not isinstance(s, (int, float)) or not math.isfinite(s) or s < 0 for s in shares) \
                or not any(shares):
            raise ValueError(f"tensor_split {shares}: each share must be a finite number >= 0, and one above 0")
        out["tensor_split"] = [float(s) for s in shares]
    return out


@contextlib.contextmanager
def onto(workers: RpcWorkers) -> Iterator[tuple[list[str], Any]]:
    """While open, a ``llama_cpp.Llama`` constructed loads onto ``workers`` (and any
    local GPU, as llama.cpp would); yields (llama.cpp's log lines, the device array
    to hand to ``attach``)."""
    with _llama.model_devices(workers.devices + _rpc.local_offload_devices()) as array, \
            _llama.llama_log_lines() as lines:
        yield lines, array


def attach(llm: Llama, workers: RpcWorkers, log_lines: Sequence[str], devices: Any) -> Placement:
    """Makes a Llama loaded ``onto`` the workers check them around every decode, and
    records where its weights went."""
    _llama.after_each_decode(llm, workers.check)
    where = _placement(log_lines, workers)
    _attached[llm] = (workers, where, devices)
    return where


def load(path: str, rpc: str | Sequence[str], kwargs: dict[str, Any], construct: Callable[..., Any]) -> Any:
    """``construct(path, **kwargs)`` (``llama_cpp.Llama``) over the workers ``rpc``;
    raises an ``RpcError`` for a worker problem, else what ``construct`` raises."""
    workers = connect(rpc)
    kwargs = with_rpc_defaults(kwargs, len(workers.devices))
    return load_onto(workers, lambda: construct(path, **kwargs))


def load_onto(workers: RpcWorkers, construct: Callable[[], Any],
              llm_of: Callable[[Any], Any] = lambda made: made) -> Any:
    """``construct()`` with the model it loads onto ``workers``, then ``attach``ed;
    ``llm_of(result)`` is that Llama (the result itself by default). A worker lost
    during the load raises ``RpcWorkerLostError``, whatever else failed with it."""
    with onto(workers) as (lines, devices):
        try:
            made = construct()
        except Exception:
            workers.check()   # a worker lost during the load is the reason to give
            raise
    llm = llm_of(made)
    try:
        workers.check()
    except Exception:
        llm.close()
        raise
    attach(llm, workers, lines, devices)
    return made


def placement(llm: Llama) -> Placement | None:
    """Where a model loaded over workers put its weights (None: not loaded over workers here)."""
    found = _attached.get(llm)
    return None if found is None else found[1]


def workers_of(llm: Llama) -> RpcWorkers | None:
    found = _attached.get(llm)
    return None if found is None else found[0]


_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER = re.compile(r"^\S*:\s*(\S+) model buffer size =\s*([\d.]+) MiB", re.M)


def _placement(lines: Sequence[str], workers: RpcWorkers) -> Placement:
    text = "".join(lines)
    found = _OFFLOADED.search(text)
    out = Placement(layers=(int(found.group(1)), int(found.group(2))) if found else None)
    for name, mib in _BUFFER.findall(text):
        worker = workers.worker_of(name)
        key = str(worker) if worker is not None else "this machine"
        out.weights_mib[key] = out.weights_mib.get(key, 0.0) + float(mib)
    return out


def rpc_fingerprint(llm: Llama) -> dict[str, Any] | None:
    """What of a Llama's RPC set-up a cached measurement depends on (the workers'
    kernels, and how the layers are split among them); None for a model that uses
    no worker. A model loaded here names its workers; one the user loaded over RPC
    themselves (``Llama`` with ``n_gpu_layers``, after registering workers) is on
    every RPC device registered in this process, named by their addresses."""
    workers = workers_of(llm)
    split = [float(s) for s in (getattr(llm, "tensor_split", None) or [])]
    if workers is not None:
        return {"workers": [str(e) for e in workers.endpoints], "tensor_split": split}
    if not getattr(getattr(llm, "model_params", None), "n_gpu_layers", 0) or not _rpc.supports_rpc():
        return None
    found = _rpc.registered_rpc_devices()
    return {"devices": [_rpc.device_description(d) for d in found], "tensor_split": split} if found else None
