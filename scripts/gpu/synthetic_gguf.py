"""Writes a GGUF model of a real model's shape with random weights, so that the
GPU run can time and check bigger models without carrying them (generated on the
machine, which has 16 cores and no network).

Only what does not depend on the weights' values means anything here: the
verify cost curve r(B) and which batch sizes are bit-exact (the same kernels
run for random weights as for trained ones, chosen by shape and type). Its text
and acceptance mean nothing.

The layout is Qwen2's (llama.cpp's "qwen2" architecture: q/k/v biases, SwiGLU,
RMSNorm, RoPE), with Qwen2.5's sizes. Quantized blocks are random bytes with one
fp16 scale per block picked so that every weight has a standard deviation of
about 1/sqrt(fan-in): activations stay in range through the layers, and the
logits are finite. The vocabulary is a SentencePiece one of the real size
(151,936 or 152,064 tokens): three specials, the 256 byte tokens, the printable
ASCII characters, and unused filler, so any text tokenizes (characters, with
bytes as the fallback).

gguf-py comes from the llama.cpp that llama-cpp-python vendors (pass its folder
with --gguf-py, or have ``gguf`` importable).

Usage: python scripts/gpu/synthetic_gguf.py SHAPE OUT.gguf [--type q8_0|q4_0|q4_k] [--gguf-py DIR] [--seed N]
       SHAPE: tiny, qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Shape:
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    n_vocab: int
    tied: bool            # the output matrix is the token embedding (no output.weight)
    weight_type: str      # the default block type of the matrices


SHAPES = {
    # A shape for tests: every dimension a multiple of 256 (the K-quant block).
    "tiny": Shape(2, 256, 512, 4, 2, 512, True, "q8_0"),
    # Qwen2.5's published sizes; the default types are those of common GGUFs of each.
    "qwen2.5-0.5b": Shape(24, 896, 4864, 14, 2, 151936, True, "q8_0"),
    "qwen2.5-1.5b": Shape(28, 1536, 8960, 12, 2, 151936, True, "q4_k"),
    "qwen2.5-7b": Shape(28, 3584, 18944, 28, 4, 152064, False, "q4_k"),
}

# block type -> (weights per block, bytes per block, std of a weight over the scale d)
# q8_0: d, then 32 int8 (uniform: std 73.9 d); q4_0: d, then 32 nibbles q, weight d (q - 8)
# (std 4.6 d); q4_k: d, dmin, 12 bytes of 6-bit scales and mins, 256 nibbles; weight
# d sc q - dmin m with dmin = 7.5 d (centred on average; std about 255 d).
BLOCKS = {"q8_0": (32, 34, 73.9), "q4_0": (32, 18, 4.6), "q4_k": (256, 144, 255.0)}


def _load_gguf(gguf_py: Path | None) -> Any:
    if gguf_py is not None:
        sys.path.insert(0, str(gguf_py))
    import gguf

    return gguf


def _quantized(rng: np.random.Generator, rows: int, cols: int, kind: str) -> np.ndarray:
    """Random blocks of ``kind`` for a rows x cols matrix (cols = fan-in), as bytes."""
    per_block, block_bytes, spread = BLOCKS[kind]
    if cols % per_block:
        raise ValueError(f"{kind} needs the fan-in ({cols}) to be a multiple of {per_block}")
    blocks = rows * cols // per_block
    data = rng.integers(0, 256, size=(blocks, block_bytes), dtype=np.uint8)
    d = (rng.uniform(0.75, 1.25, size=blocks) / (math.sqrt(cols) * spread)).astype(np.float16)
    data[:, 0:2] = d.view(np.uint8).reshape(blocks, 2)
    if kind == "q4_k":
        data[:, 2:4] = (d.astype(np.float32) * 7.5).astype(np.float16).view(np.uint8).reshape(blocks, 2)
    return data.reshape(rows, cols // per_block * block_bytes)


def _vocab(n_vocab: int) -> tuple[list[str], list[int]]:
    """SentencePiece tokens and their types (gguf.TokenType values)."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256                   # UNKNOWN, CONTROL, BYTE
    printable = ["\u2581"] + [chr(c) for c in range(33, 127)]
    tokens += printable
    types += [1] * len(printable)                   # NORMAL
    if len(tokens) > n_vocab:
        raise ValueError(f"a vocabulary needs at least {len(tokens)} tokens")
    tokens += [f"\u27e6{i}\u27e7" for i in range(n_vocab - len(tokens))]
    types += [5] * (n_vocab - len(types))           # UNUSED
    return tokens, types


def write(shape_name: str, out: Path, *, weight_type: str | None = None, gguf_py: Path | None = None,
          seed: int = 0) -> Path:
    """Writes the synthetic model ``shape_name`` (a key of SHAPES) to ``out``; returns ``out``."""
    if shape_name not in SHAPES:
        raise ValueError(f"unknown shape {shape_name!r}; choose from {', '.join(SHAPES)}")
    shape = SHAPES[shape_name]
    kind = weight_type or shape.weight_type
    if kind not in BLOCKS:
        raise ValueError(f"unknown block type {kind!r}; choose from {', '.join(BLOCKS)}")
    gguf = _load_gguf(gguf_py)
    qtype = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0,
             "q4_k": gguf.GGMLQuantizationType.Q4_K}[kind]
    rng = np.random.default_rng(seed)
    head_dim = shape.n_embd // shape.n_head
    kv = shape.n_head_kv * head_dim
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    w = gguf.GGUFWriter(str(tmp), "qwen2")
    w.add_name(f"synthetic {shape_name} ({kind}, random weights, seed {seed})")
    w.add_context_length(32768)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    tokens, types = _vocab(shape.n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def matrix(name: str, rows: int, cols: int) -> None:
        w.add_tensor(name, _quantized(rng, rows, cols, kind), raw_dtype=qtype)

    def vector(name: str, n: int, value: float | None = None) -> None:
        data = np.full(n, value, dtype=np.float32) if value is not None else \
            rng.normal(0.0, 0.02, size=n).astype(np.float32)
        w.add_tensor(name, data)

    matrix("token_embd.weight", shape.n_vocab, shape.n_embd)
    vector("output_norm.weight", shape.n_embd, 1.0)
    if not shape.tied:
        matrix("output.weight", shape.n_vocab, shape.n_embd)
    for i in range(shape.n_layer):
        vector(f"blk.{i}.attn_norm.weight", shape.n_embd, 1.0)
        matrix(f"blk.{i}.attn_q.weight", shape.n_embd, shape.n_embd)
        matrix(f"blk.{i}.attn_k.weight", kv, shape.n_embd)
        matrix(f"blk.{i}.attn_v.weight", kv, shape.n_embd)
        vector(f"blk.{i}.attn_q.bias", shape.n_embd)
        vector(f"blk.{i}.attn_k.bias", kv)
        vector(f"blk.{i}.attn_v.bias", kv)
        matrix(f"blk.{i}.attn_output.weight", shape.n_embd, shape.n_embd)
        vector(f"blk.{i}.ffn_norm.weight", shape.n_embd, 1.0)
        matrix(f"blk.{i}.ffn_gate.weight", shape.n_ff, shape.n_embd)
        matrix(f"blk.{i}.ffn_up.weight", shape.n_ff, shape.n_embd)
        matrix(f"blk.{i}.ffn_down.weight", shape.n_embd, shape.n_ff)
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out", type=Path)
    ap.add_argument("--type", choices=sorted(BLOCKS), default=None, help="block type of the matrices")
    ap.add_argument("--gguf-py", type=Path, default=None, help="llama.cpp's gguf-py folder")
    ap.add_argument("--seed", type=int, default=0)
    opts = ap.parse_args()
    t0 = time.perf_counter()
    path = write(opts.shape, opts.out, weight_type=opts.type, gguf_py=opts.gguf_py, seed=opts.seed)
    print(f"{path}: {path.stat().st_size / 2**20:.1f} MiB in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
