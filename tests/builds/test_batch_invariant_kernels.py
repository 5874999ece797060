"""The patched exact build's column kernels against the one-column kernels they stand in
for, bit for bit, on random blocks: odd block counts, 1-65 columns. They are called in
the installed build's libggml-cpu through ctypes (the symbols are exported), so the test
checks the very code exact mode runs; it is skipped where the build lacks them (a stock
build, or a CPU without AVX2). The comparison has teeth: llama.cpp's scalar reference
kernels, which sum in another order, differed from the vector kernels in the last bits on
39-50 of 50 random blocks of each type, and numpy's float32 dot differs from ggml_vec_dot_f16
on 34-39 of 50 random F16 rows of 64-664 elements. scripts/kernel_sanitize.py runs this file on
builds under AddressSanitizer and UBSan, one per instruction-set level the CPU runs
(NGRAMSPEC_KERNEL_LIB). The model-level proof is bench/invariance_every_size.py."""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import pytest

PTR, INT, SIZE = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t


def _library() -> ctypes.CDLL | None:
    """The installed build's libggml-cpu, or the one NGRAMSPEC_KERNEL_LIB names
    (scripts/kernel_sanitize.py: a sanitized build, which must have the kernels)."""
    given = os.environ.get("NGRAMSPEC_KERNEL_LIB")
    if given:
        lib = ctypes.CDLL(given)
        if not hasattr(lib, "ggml_vec_dot_q6_K_q8_K_cols"):
            raise RuntimeError(f"{given} has no batch-invariant column kernels")
        lib.ggml_cpu_init()
        return lib
    try:
        import llama_cpp
    except ImportError:
        return None
    libs = sorted((Path(llama_cpp.__file__).parent / "lib").glob("libggml-cpu.so*"))
    if not libs:
        return None
    lib = ctypes.CDLL(str(libs[0]))
    if not hasattr(lib, "ggml_vec_dot_q6_K_q8_K_cols"):
        return None
    lib.ggml_cpu_init()
    return lib


LIB = _library()
pytestmark = pytest.mark.skipif(LIB is None, reason="the installed llama.cpp has no batch-invariant column kernels")

# (weight type, its block bytes, values per block, activation block bytes, where the fp16 scales sit)
BLOCKS = {
    "q8_0_q8_0": (34, 32, 34),
    "q5_0_q8_0": (22, 32, 34),
    "q4_1_q8_1": (20, 32, 36),
    "q6_K_q8_K": (210, 256, 292),
}


def _fp16_field(buf: np.ndarray, block: int, offset: int, rng: np.random.Generator) -> None:
    """Valid fp16 scales (no NaN or Inf) at ``offset`` of every ``block``-byte block."""
    n = buf.size // block
    values = rng.uniform(-0.05, 0.05, n).astype(np.float16).view(np.uint8).reshape(n, 2)
    view = buf.reshape(n, block)
    view[:, offset:offset + 2] = values


def _weights(kind: str, nblocks: int, rng: np.random.Generator) -> np.ndarray:
    block = BLOCKS[kind][0]
    buf = rng.integers(0, 256, nblocks * block, dtype=np.uint8)
    if kind == "q6_K_q8_K":
        _fp16_field(buf, block, 208, rng)                     # d after ql, qh, scales
    else:
        _fp16_field(buf, block, 0, rng)                       # d first
        if kind == "q4_1_q8_1":
            _fp16_field(buf, block, 2, rng)                   # then m
    return buf


def _activations(kind: str, nblocks: int, ncols: int, rng: np.random.Generator) -> np.ndarray:
    block = BLOCKS[kind][2]
    buf = rng.integers(0, 256, ncols * nblocks * block, dtype=np.uint8)
    if kind == "q6_K_q8_K":                                   # float d first, then 256 int8, 16 int16
        n = buf.size // block
        buf.reshape(n, block)[:, :4] = rng.uniform(0.001, 0.1, n).astype(np.float32).view(np.uint8).reshape(n, 4)
    else:
        # quantize_row_q8_0 / _q8_1 scale to +-127: -128 never occurs (patch 0009's kernel
        # relies on it, where the one-column kernel's _mm256_sign_epi8 would wrap)
        buf[buf == 128] = 129
        _fp16_field(buf, block, 0, rng)
        if kind == "q4_1_q8_1":
            _fp16_field(buf, block, 2, rng)                   # s
    return buf


def _one_column_results(kind: str, n: int, x: np.ndarray, stride: int, nrows: int, y: np.ndarray,
                        row_bytes: int, ncols: int) -> np.ndarray:
    """vec_dot on each (weight row r at x[r * stride:], column c at y[c * row_bytes:]) alone:
    the reference, as [column, row]."""
    assert LIB is not None
    single = getattr(LIB, f"ggml_vec_dot_{kind}")
    single.argtypes = [INT, PTR, SIZE, PTR, SIZE, PTR, SIZE, INT]
    want = np.zeros((ncols, nrows), dtype=np.float32)
    for c in range(ncols):
        for r in range(nrows):
            single(n, want[c, r:].ctypes.data, 0, x[r * stride:].ctypes.data, 0, y[c * row_bytes:].ctypes.data, 0, 1)
    assert np.isfinite(want).all()
    return want


@pytest.mark.parametrize("kind", sorted(BLOCKS))
@pytest.mark.parametrize("nblocks", [1, 3, 7])
def test_column_kernel_equals_the_one_column_kernel_bit_for_bit(kind, nblocks):
    assert LIB is not None
    rng = np.random.default_rng(nblocks * 101 + len(kind))
    per_block = BLOCKS[kind][1]
    n = nblocks * per_block
    row_bytes = nblocks * BLOCKS[kind][2]
    single = getattr(LIB, f"ggml_vec_dot_{kind}")
    single.argtypes = [INT, PTR, SIZE, PTR, SIZE, PTR, SIZE, INT]
    cols = getattr(LIB, f"ggml_vec_dot_{kind}_cols")
    cols.argtypes = [INT, PTR, SIZE, PTR, PTR, SIZE, INT]
    for ncols in range(1, 66):
        x = _weights(kind, nblocks, rng)
        y = _activations(kind, nblocks, ncols, rng)
        want = np.zeros(ncols, dtype=np.float32)
        for c in range(ncols):
            single(n, want[c:].ctypes.data, 0, x.ctypes.data, 0, y[c * row_bytes:].ctypes.data, 0, 1)
        got = np.full(ncols * 3, np.nan, dtype=np.float32)
        cols(n, got.ctypes.data, 3, x.ctypes.data, y.ctypes.data, row_bytes, ncols)
        assert np.array_equal(got[::3].view(np.uint32), want.view(np.uint32)), (kind, ncols)
        assert np.isfinite(want).all()


@pytest.mark.parametrize("kind", ["q8_0_q8_0", "q5_0_q8_0", "q4_1_q8_1"])
@pytest.mark.parametrize("nblocks", [1, 3, 7])
def test_two_row_column_kernel_equals_the_one_column_kernel_bit_for_bit(kind, nblocks):
    """Two weight rows a call (AVX-512 VNNI builds): each (row, column) is vec_dot's."""
    assert LIB is not None
    if not hasattr(LIB, f"ggml_vec_dot_{kind}_cols_rows2"):
        pytest.skip("this build has no two-row column kernels (they need AVX-512 VNNI)")
    rng = np.random.default_rng(nblocks * 31 + len(kind))
    n = nblocks * BLOCKS[kind][1]
    weight_bytes, row_bytes = nblocks * BLOCKS[kind][0], nblocks * BLOCKS[kind][2]
    rows2 = getattr(LIB, f"ggml_vec_dot_{kind}_cols_rows2")
    rows2.argtypes = [INT, PTR, SIZE, PTR, SIZE, PTR, SIZE, INT]
    stride = weight_bytes + 5 * BLOCKS[kind][0]                # rows apart by more than a row
    for ncols in range(1, 66):
        x = _weights(kind, 2 * stride // BLOCKS[kind][0], rng)
        y = _activations(kind, nblocks, ncols, rng)
        want = _one_column_results(kind, n, x, stride, 2, y, row_bytes, ncols)
        got = np.full((ncols, 5), np.nan, dtype=np.float32)
        rows2(n, got.ctypes.data, 5, x.ctypes.data, stride, y.ctypes.data, row_bytes, ncols)
        assert np.array_equal(got[:, :2].view(np.uint32), want.view(np.uint32)), (kind, ncols)
        assert np.isnan(got[:, 2:]).all()


@pytest.mark.parametrize("kind", ["q8_0_q8_0", "q5_0_q8_0", "q4_1_q8_1"])
@pytest.mark.parametrize("nblocks", [1, 2, 3, 7])
def test_row_block_column_kernel_equals_the_one_column_kernel_bit_for_bit(kind, nblocks):
    """A block of weight rows a call, the columns' scales converted once for them (AVX2 builds
    without the AVX-512 VNNI kernels): each (row, column) is vec_dot's, at every count of rows
    the mat-mul passes (1-16) and every count of columns, 4 a group and a tail of 1-3."""
    assert LIB is not None
    if not hasattr(LIB, f"ggml_vec_dot_{kind}_cols_rows"):
        pytest.skip("this build has no row-block column kernels (AVX2 builds without AVX-512 VNNI have them)")
    rng = np.random.default_rng(nblocks * 53 + len(kind))
    n = nblocks * BLOCKS[kind][1]
    weight_bytes, row_bytes = nblocks * BLOCKS[kind][0], nblocks * BLOCKS[kind][2]
    rows = getattr(LIB, f"ggml_vec_dot_{kind}_cols_rows")
    rows.argtypes = [INT, PTR, SIZE, PTR, SIZE, INT, PTR, SIZE, INT]
    stride = weight_bytes + 3 * BLOCKS[kind][0]                # rows apart by more than a row
    for nrows, ncols in [(r, c) for r in (1, 2, 3, 5, 16) for c in range(1, 66)] + [(r, 8) for r in range(1, 17)]:
        x = _weights(kind, nrows * stride // BLOCKS[kind][0], rng)
        y = _activations(kind, nblocks, ncols, rng)
        want = _one_column_results(kind, n, x, stride, nrows, y, row_bytes, ncols)
        got = np.full((ncols, nrows + 2), np.nan, dtype=np.float32)
        rows(n, got.ctypes.data, nrows + 2, x.ctypes.data, stride, nrows, y.ctypes.data, row_bytes, ncols)
        assert np.array_equal(got[:, :nrows].view(np.uint32), want.view(np.uint32)), (kind, nrows, ncols)
        assert np.isnan(got[:, nrows:]).all()


@pytest.mark.parametrize("kind, block", [("q8_0", 34), ("q8_1", 36)])
def test_activations_are_quantized_to_at_most_127_in_magnitude(kind, block):
    """The domain _activations draws from, and patch 0009 relies on: the CPU backend's own
    quantize_row_q8_0 / _q8_1 (the mat-mul's from_float) never writes -128, whatever the
    floats (ties at the block's maximum, signs, tiny and huge magnitudes, zeros)."""
    assert LIB is not None
    quantize = getattr(LIB, f"quantize_row_{kind}")
    quantize.argtypes = [PTR, PTR, ctypes.c_int64]
    rng = np.random.default_rng(7)
    rows = [rng.normal(0, 1, 4096), rng.uniform(-1, 1, 4096) * 1e30, rng.uniform(-1, 1, 4096) * 1e-30,
            -np.abs(rng.normal(0, 1, 4096)), np.repeat([-1.0, 1.0, -0.5, 0.0], 1024),
            np.where(rng.random(4096) < 0.5, -3.0, 3.0)]
    for x in rows:
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.zeros(x.size // 32 * block, dtype=np.uint8)
        quantize(x.ctypes.data, out.ctypes.data, x.size)
        qs = out.reshape(-1, block)[:, block - 32:].view(np.int8)
        assert qs.min() >= -127 and qs.max() <= 127
        assert (qs == -127).any() or not (x < 0).any()   # the scale reaches the negative extreme


@pytest.mark.parametrize("n", [17, 64, 100, 664])
def test_f16_column_kernels_equal_the_one_column_dot_bit_for_bit(n):
    """Attention's F16 products (K and V rows against the batch's columns): lengths with and
    without leftovers past the 64-element step; one row a call, and two where the build has it."""
    assert LIB is not None
    if not hasattr(LIB, "ggml_vec_dot_f16_cols"):
        pytest.skip("this build has no F16 column kernel")
    rng = np.random.default_rng(n)
    single = LIB.ggml_vec_dot_f16
    single.argtypes = [INT, PTR, SIZE, PTR, SIZE, PTR, SIZE, INT]
    cols = LIB.ggml_vec_dot_f16_cols
    cols.argtypes = [INT, PTR, SIZE, PTR, PTR, SIZE, INT]
    rows2 = getattr(LIB, "ggml_vec_dot_f16_cols_rows2", None)
    if rows2 is not None:
        rows2.argtypes = [INT, PTR, SIZE, PTR, SIZE, PTR, SIZE, INT]
    stride = n + 8                                            # elements from one row or column to the next
    for ncols in range(1, 66):
        x = rng.standard_normal(2 * stride).astype(np.float16)
        y = rng.standard_normal(ncols * stride).astype(np.float16)
        want = np.zeros((ncols, 2), dtype=np.float32)
        for c in range(ncols):
            for r in range(2):
                single(n, want[c, r:].ctypes.data, 0, x[r * stride:].ctypes.data, 0, y[c * stride:].ctypes.data, 0, 1)
        got = np.full((ncols, 3), np.nan, dtype=np.float32)
        cols(n, got.ctypes.data, 3, x.ctypes.data, y.ctypes.data, 2 * stride, ncols)
        assert np.array_equal(got[:, 0].view(np.uint32), want[:, 0].view(np.uint32)), (n, ncols)
        if rows2 is not None:
            got = np.full((ncols, 3), np.nan, dtype=np.float32)
            rows2(n, got.ctypes.data, 3, x.ctypes.data, 2 * stride, y.ctypes.data, 2 * stride, ncols)
            assert np.array_equal(got[:, :2].view(np.uint32), want.view(np.uint32)), (n, ncols)
            assert np.isnan(got[:, 2]).all()
        assert np.isfinite(want).all()


@pytest.mark.parametrize("nblocks", [1, 3, 6])
def test_repacked_q4_K_rows_kernel_equals_the_one_row_gemv_bit_for_bit(nblocks):
    """block_q4_Kx8: 8 fp16 d, 8 fp16 dmin, 96 bytes of scales, 1024 of quants."""
    assert LIB is not None
    rng = np.random.default_rng(nblocks)
    gemv, rows = LIB.ggml_gemv_q4_K_8x8_q8_K, LIB.ggml_gemv_q4_K_8x8_q8_K_rows
    gemv.argtypes = rows.argtypes = [INT, PTR, SIZE, PTR, PTR, INT, INT]
    n, ncols_out = nblocks * 256, 40                          # 5 groups of 8 output columns
    x = rng.integers(0, 256, (ncols_out // 8) * nblocks * 1152, dtype=np.uint8)
    groups = x.reshape(-1, 1152)
    groups[:, :32] = rng.uniform(0.0, 0.05, (groups.shape[0], 16)).astype(np.float16).view(np.uint8)
    for nrows in [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 16, 17, 65]:   # every tail of 4-row groups
        y = _activations("q6_K_q8_K", nblocks, nrows, rng)      # the same block_q8_K rows
        row_bytes = nblocks * 292
        want = np.zeros((nrows, ncols_out), dtype=np.float32)
        for r in range(nrows):
            gemv(n, want[r].ctypes.data, ncols_out, x.ctypes.data, y[r * row_bytes:].ctypes.data, 1, ncols_out)
        got = np.full((nrows, ncols_out + 3), np.nan, dtype=np.float32)
        rows(n, got.ctypes.data, ncols_out + 3, x.ctypes.data, y.ctypes.data, nrows, ncols_out)
        assert np.array_equal(got[:, :ncols_out].view(np.uint32), want.view(np.uint32)), nrows
        assert np.isfinite(want).all()


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", SIZE), ("mem_buffer", PTR), ("no_alloc", ctypes.c_bool)]


def _ggml_base() -> ctypes.CDLL:
    """libggml-base beside the kernels' library: the graph API (ggml_init, ggml_mul_mat, ...)."""
    assert LIB is not None
    lib = ctypes.CDLL(str(Path(LIB._name).parent / "libggml-base.so"))
    lib.ggml_init.argtypes, lib.ggml_init.restype = [_InitParams], PTR
    lib.ggml_new_tensor_2d.argtypes, lib.ggml_new_tensor_2d.restype = [PTR, INT, ctypes.c_int64, ctypes.c_int64], PTR
    lib.ggml_mul_mat.argtypes, lib.ggml_mul_mat.restype = [PTR, PTR, PTR], PTR
    lib.ggml_new_graph.argtypes, lib.ggml_new_graph.restype = [PTR], PTR
    lib.ggml_build_forward_expand.argtypes, lib.ggml_build_forward_expand.restype = [PTR, PTR], None
    lib.ggml_get_data.argtypes, lib.ggml_get_data.restype = [PTR], PTR
    lib.ggml_free.argtypes, lib.ggml_free.restype = [PTR], None
    return lib


GGML_TYPE_F32 = 0
#: K-quant weight types: ggml type number, block bytes, where the fp16 d (and dmin) sit.
K_QUANTS = {"q4_K": (12, 144, (0, 2)), "q5_K": (13, 176, (0, 2)), "q6_K": (14, 210, (208,))}


def _k_quant_weights(kind: str, nblocks: int, rng: np.random.Generator) -> np.ndarray:
    """Random blocks of a K-quant type: any bytes, with valid fp16 scales."""
    block = K_QUANTS[kind][1]
    buf = rng.integers(0, 256, nblocks * block, dtype=np.uint8)
    for offset in K_QUANTS[kind][2]:
        _fp16_field(buf, block, offset, rng)
    return buf


def _mul_mat(base: ctypes.CDLL, ggml_type: int, weights: np.ndarray, nrows: int, k: int,
             acts: np.ndarray) -> np.ndarray:
    """ggml_mul_mat of quantized weights (nrows x k) by F32 activations (columns x k), through
    the CPU backend's own graph compute (2 threads): whichever kernel it picks for the batch."""
    assert LIB is not None
    ncols = acts.shape[0]
    ctx = base.ggml_init(_InitParams(weights.nbytes + acts.nbytes + 4 * nrows * ncols + (16 << 20), None, False))
    try:
        w = base.ggml_new_tensor_2d(ctx, ggml_type, k, nrows)
        a = base.ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, ncols)
        ctypes.memmove(base.ggml_get_data(w), weights.ctypes.data, weights.nbytes)
        ctypes.memmove(base.ggml_get_data(a), acts.ctypes.data, acts.nbytes)
        out = base.ggml_mul_mat(ctx, w, a)
        graph = base.ggml_new_graph(ctx)
        base.ggml_build_forward_expand(graph, out)
        LIB.ggml_graph_compute_with_ctx.argtypes = [PTR, PTR, INT]
        assert LIB.ggml_graph_compute_with_ctx(ctx, graph, 2) == 0
        got = np.empty((ncols, nrows), dtype=np.float32)
        ctypes.memmove(got.ctypes.data, base.ggml_get_data(out), got.nbytes)
        return got
    finally:
        base.ggml_free(ctx)


def _assert_each_batch_equals_its_columns_alone(ggml_type: int, weights: np.ndarray, nrows: int, k: int,
                                                acts: np.ndarray, batch_sizes: list[int]) -> None:
    """The mul_mat of the first n columns of ``acts``, for each n in ``batch_sizes``, gives each
    column the bits the mul_mat of that column alone gives it."""
    base = _ggml_base()
    alone = np.stack([_mul_mat(base, ggml_type, weights, nrows, k, acts[c:c + 1])[0] for c in range(len(acts))])
    assert np.isfinite(alone).all()
    for ncols in batch_sizes:
        got = _mul_mat(base, ggml_type, weights, nrows, k, acts[:ncols])
        assert np.array_equal(got.view(np.uint32), alone[:ncols].view(np.uint32)), ncols


@pytest.mark.parametrize("kind", sorted(K_QUANTS))
@pytest.mark.parametrize("nblocks, nrows", [(3, 40), (6, 272)])
def test_k_quant_mul_mat_of_any_batch_equals_each_column_alone_bit_for_bit(kind, nblocks, nrows):
    """Patches 0013-0014: the Q4_K, Q5_K and Q6_K vec_dots (and Q6_K's column kernels) end
    each block as the tiled matmul does, which takes 8 or more columns, so a mat-mul of any
    batch, below the batch-invariant threshold and above it (prompt processing), gives each
    column the bits it gets alone. Before them the tiled matmul, which the exact build kept
    for batches over 65, summed another way: columns differed from 66 on. 272 weight rows
    cross the tiled matmul's 256-row window; 3 and 6 blocks give its narrow (up to 16
    columns) path different K chunks."""
    rng = np.random.default_rng(nblocks * 7 + nrows + len(kind))
    k = nblocks * 256
    weights = _k_quant_weights(kind, nblocks * nrows, rng)
    acts = rng.standard_normal((80, k)).astype(np.float32)
    _assert_each_batch_equals_its_columns_alone(K_QUANTS[kind][0], weights, nrows, k, acts,
                                                [*range(2, 18), 31, 32, 33, 64, 65, 66, 67, 80])


# ggml_type of the column kernels' weight types (ggml.h)
COLUMN_KERNEL_TYPES = {"q4_1_q8_1": 3, "q5_0_q8_0": 6, "q8_0_q8_0": 8}


@pytest.mark.parametrize("kind", sorted(COLUMN_KERNEL_TYPES))
@pytest.mark.parametrize("nblocks, nrows", [(3, 37), (18, 40)])
def test_column_kernel_mul_mat_of_any_verify_batch_equals_each_column_alone_bit_for_bit(kind, nblocks, nrows):
    """The mat-mul as the exact build runs it for 1-65 columns (each thread's rows in blocks
    of 16, taken two rows a call where a two-row kernel exists, then one; columns in groups
    of up to 8): each column's bits are the ones it gets alone. 37 rows leave a thread an odd
    row; 18 blocks are SmolLM2-135M's 576 values a row."""
    rng = np.random.default_rng(nblocks * 13 + nrows + len(kind))
    k = nblocks * 32
    weights = _weights(kind, nblocks * nrows, rng)
    acts = rng.standard_normal((65, k)).astype(np.float32)
    _assert_each_batch_equals_its_columns_alone(COLUMN_KERNEL_TYPES[kind], weights, nrows, k, acts,
                                                list(range(2, 66)))
