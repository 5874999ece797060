"""Which operation makes a verify batch's row differ from one-token decoding: the
first node of llama.cpp's compute graph whose output, for one token, is not
bit-identical between a batch of B tokens and decoding the tokens one at a time.

How: a second context on the same model, made with an eval callback
(``llama_context_params.cb_eval``) that copies every float32 node output to the
host as it is computed. At ``depth`` cached tokens, the B probe tokens are decoded
one at a time (the last decode's outputs recorded) and then as one batch; each node
of the batch is compared, in graph order, with the same node of the last single
decode, on the last token's slice (the dimension that is 1 for one token and B for
the batch). Nodes match by name, operation and occurrence. Only the last token is
compared: when it is decoded alone, the cache holds exactly what the batch wrote
before attention read it, so even K·Q's masked columns (unwritten cells, read and
then masked) match; the first token alone sees cells the batch has already filled.

Caveat: asking for every node splits the graph at each one, so llama.cpp's
fused kernels and CUDA graphs do not run here; both sides are unfused alike.
A batch that differs only through fusion shows no differing node here (the
``GGML_CUDA_DISABLE_FUSION=1`` probe of measure.py tells that case apart).

Usage (a model on the GPU, flash attention on):
  python scripts/gpu/op_diff.py MODEL.gguf --size 9 --depth 8 --n-gpu-layers -1 --flash-attn
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

_MAX_DIMS, _MAX_OP_PARAMS, _MAX_SRC, _MAX_NAME = 4, 64, 10, 64
_GGML_TYPE_F32 = 0


class _Tensor(ctypes.Structure):
    """The head of ggml.h's ``struct ggml_tensor`` (llama-cpp-python 0.3.36's llama.cpp), up to its name."""
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * _MAX_DIMS),
                ("nb", ctypes.c_size_t * _MAX_DIMS), ("op", ctypes.c_int),
                ("op_params", ctypes.c_int32 * (_MAX_OP_PARAMS // 4)), ("flags", ctypes.c_int32),
                ("src", ctypes.c_void_p * _MAX_SRC), ("view_src", ctypes.c_void_p), ("view_offs", ctypes.c_size_t),
                ("data", ctypes.c_void_p), ("name", ctypes.c_char * _MAX_NAME)]


def _ggml_base() -> Any:
    """libggml-base from llama-cpp-python's lib folder (already loaded by llama_cpp)."""
    import llama_cpp

    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    found = sorted(lib_dir.glob("libggml-base.*"))
    if not found:
        raise RuntimeError(f"no libggml-base in {lib_dir}")
    lib = ctypes.CDLL(str(found[0]))
    lib.ggml_nbytes.restype = ctypes.c_size_t
    lib.ggml_nbytes.argtypes = [ctypes.c_void_p]
    lib.ggml_op_desc.restype = ctypes.c_char_p
    lib.ggml_op_desc.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_tensor_get.restype = None
    lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    return lib


class _Recorder:
    """The eval callback: while ``on``, keeps every float32 node output (numpy, in
    ggml's ne order reversed) under (name, op, occurrence), in graph order."""

    def __init__(self) -> None:
        import llama_cpp

        self.lib = _ggml_base()
        self.on = False
        self.nodes: dict[tuple[str, str, int], np.ndarray] = {}
        self._seen: dict[tuple[str, str], int] = {}
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._call)

    def start(self) -> None:
        self.on, self.nodes, self._seen = True, {}, {}

    def stop(self) -> dict[tuple[str, str, int], np.ndarray]:
        self.on = False
        return self.nodes

    def _call(self, ptr: int, ask: bool, _user: Any) -> bool:
        if not self.on:
            return False
        t = _Tensor.from_address(ptr)
        if ask:
            return bool(t.type == _GGML_TYPE_F32)
        name, op = t.name.decode(errors="replace"), (self.lib.ggml_op_desc(ptr) or b"?").decode()
        n = self.lib.ggml_nbytes(ptr)
        raw = (ctypes.c_uint8 * n)()
        self.lib.ggml_backend_tensor_get(ptr, raw, 0, n)
        shape = tuple(int(x) for x in t.ne)[::-1]
        strides = tuple(int(x) for x in t.nb)[::-1]
        flat = np.frombuffer(raw, dtype=np.uint8)
        arr = np.lib.stride_tricks.as_strided(flat, shape=(*shape[:-1], shape[-1] * 4), strides=(*strides[:-1], 1))
        value = np.ascontiguousarray(arr).view(np.float32).reshape(shape)
        k = self._seen.get((name, op), 0)
        self._seen[(name, op)] = k + 1
        self.nodes[(name, op, k)] = value
        return True


def _token_slice(single: np.ndarray, batch: np.ndarray, size: int, row: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(single's values, the batch's values for token ``row``), or None when the shapes do not line up."""
    if single.shape == batch.shape:
        return (single, batch) if size == 1 else None
    if single.ndim != batch.ndim:
        return None
    dims = [d for d in range(single.ndim) if single.shape[d] == 1 and batch.shape[d] == size]
    others = all(single.shape[d] == batch.shape[d] for d in range(single.ndim) if d not in dims[:1])
    if len(dims) < 1 or not others:
        return None
    return single, np.take(batch, [row], axis=dims[0])


def first_differences(llm: Any, *, size: int, depth: int, tokens: list[int] | None = None,
                      keep: int = 12) -> dict[str, Any]:
    """Compares every node of a ``size``-token batch at ``depth`` with one-token
    decoding of the same tokens, for the batch's last token. Returns {"first": the
    first differing node (name, op, shape, max_abs_diff) or None, "differing": up to
    ``keep`` of them in graph order, "differing_count", "compared": nodes compared,
    "unmatched": nodes whose shapes did not line up}."""
    import llama_cpp

    from ngramspec import _llama
    from ngramspec.calibration.invariance import probe_streams

    if size < 2:
        raise ValueError("size must be >= 2")
    stream = tokens if tokens is not None else probe_streams(llm, depth + size)[0]
    if len(stream) < depth + size:
        raise ValueError(f"need {depth + size} tokens")
    recorder = _Recorder()
    # A copy: the Llama's own parameters stay as they are.
    params = type(llm.context_params).from_buffer_copy(llm.context_params)
    params.cb_eval = recorder.callback
    params.cb_eval_user_data = None
    ctx = llama_cpp.llama_init_from_model(llm.model, params)
    if not ctx:
        raise RuntimeError("could not create a context with an eval callback")
    batch = _llama.Batch(max(size, 64))
    memory = llama_cpp.llama_get_memory(ctx)

    def decode(toks: list[int], pos: int, logits: bool) -> None:
        batch.fill(toks, pos, all_logits=logits)
        rc = llama_cpp.llama_decode(ctx, batch.batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    try:
        for start in range(0, depth, 64):
            decode(stream[start:min(depth, start + 64)], start, False)
        for i in range(size):
            if i == size - 1:
                recorder.start()
            decode([stream[depth + i]], depth + i, True)
        single = recorder.stop()
        llama_cpp.llama_memory_seq_rm(memory, 0, depth, -1)
        recorder.start()
        decode(stream[depth:depth + size], depth, True)
        batched = recorder.stop()
    finally:
        batch.close()
        llama_cpp.llama_free(ctx)
    differing, compared, unmatched = [], 0, []
    for key, value in batched.items():
        ref = single.get(key)
        pair = None if ref is None else _token_slice(ref, value, size, size - 1)
        if pair is None:
            unmatched.append(f"{key[0]}/{key[1]}")
            continue
        compared += 1
        a, b = pair
        if not (a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))):
            with np.errstate(invalid="ignore"):
                diff = float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64)))) \
                    if a.shape == b.shape else float("nan")
            differing.append({"name": key[0], "op": key[1], "occurrence": key[2], "shape": list(value.shape),
                              "max_abs_diff": diff})
    order = {key: i for i, key in enumerate(batched)}
    differing.sort(key=lambda d: order[(d["name"], d["op"], d["occurrence"])])
    return {"size": size, "depth": depth, "first": differing[0] if differing else None, "differing": differing[:keep],
            "differing_count": len(differing), "compared": compared, "unmatched": sorted(set(unmatched))[:keep]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--size", type=int, default=9)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--flash-attn", action="store_true")
    opts = ap.parse_args()
    from ngramspec.models import load_llama

    llm = load_llama(opts.model, n_ctx=opts.n_ctx, n_gpu_layers=opts.n_gpu_layers, flash_attn=opts.flash_attn, seed=0)
    try:
        print(json.dumps(first_differences(llm, size=opts.size, depth=opts.depth), indent=1))
    finally:
        llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
