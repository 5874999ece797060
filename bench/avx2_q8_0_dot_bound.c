// Where the AVX2 Q8_0 column kernel's time goes, on one core: the kernel of patches
// 0004/0010 (vec_dot_q8_0_q8_0 for 4 columns at once, the weight block loaded once) timed
// whole and with parts of vec_dot's per-block arithmetic taken out or done another way,
// and patch 0011's form of it (the columns' scales as f32, d for 4 columns in one multiply,
// block ib's float work issued beside block ib+1's integer products).
// Only variant "kernel" and the variants marked exact compute vec_dot's result; the rest
// time a part. Build and run (AVX2 CPUs):
//
//     gcc -O3 -mavx2 -mfma -mf16c bench/avx2_q8_0_dot_bound.c -o /tmp/dot_bound && /tmp/dot_bound
//
// It prints ns and cycles per (weight block, column) pair, the clock estimated from a
// chain of dependent adds, and the throughput of vpmaddubsw and vpmaddwd alone and
// interleaved. Results: bench/results/exact-kernels-0010-tail-zen2-avx2.md.
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { uint16_t d; int8_t qs[32]; } block_q8_0;
static float fp16_table[65536];   // ggml's x86 build converts fp16 scales through such a table
enum { K = 896, NB = K / 32, ROWS = 64, COLS = 16, R = 4, REPS = 3000 };

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

static inline float hsum_float_8(const __m256 x) {
    __m128 res = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    return _mm_cvtss_f32(res);
}

enum { KERNEL, INT_ONLY, CONVERT_ADD, F32_SCALES, PATCH_0011, NVARIANTS };
static const char * NAMES[NVARIANTS] = {
    "kernel (vec_dot's arithmetic)",
    "integer part only (sign, maddubs, madd; not a result)",
    "+ convert and add, no scale (not a result)",
    "kernel, activation scales as f32 (exact)",
    "patch 0011: d for 4 columns at once, pipelined (exact)",
};

// Patch 0011's kernel (vec_dot_q8_0_family_cols_scaled); dys4: the 4 columns' scales, [4 * ib + r]
static inline void cols_0011(float * s, const block_q8_0 * x, const block_q8_0 * y, const float * dys4) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[R];
    __m256i sums[R];
    float d4[4] __attribute__((aligned(16)));
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    {
        const __m256i qx = _mm256_loadu_si256((const __m256i *) x[0].qs);
        const __m256i ax = _mm256_sign_epi8(qx, qx);
        for (int r = 0; r < R; ++r) {
            const __m256i qy = _mm256_loadu_si256((const __m256i *) y[r * NB].qs);
            sums[r] = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(ax, _mm256_sign_epi8(qy, qx)));
        }
        _mm_store_ps(d4, _mm_mul_ps(_mm_set1_ps(fp16_table[x[0].d]), _mm_loadu_ps(dys4)));
    }
    for (int ib = 1; ib < NB; ++ib) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *) x[ib].qs);
        const __m256i ax = _mm256_sign_epi8(qx, qx);
        __m256i prod[R];
        for (int r = 0; r < R; ++r) {
            const __m256i qy = _mm256_loadu_si256((const __m256i *) y[r * NB + ib].qs);
            prod[r] = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(qy, qx));
            acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&d4[r]), _mm256_cvtepi32_ps(sums[r]), acc[r]);
        }
        for (int r = 0; r < R; ++r) sums[r] = _mm256_madd_epi16(ones, prod[r]);
        _mm_store_ps(d4, _mm_mul_ps(_mm_set1_ps(fp16_table[x[ib].d]), _mm_loadu_ps(dys4 + 4 * ib)));
    }
    for (int r = 0; r < R; ++r) {
        acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&d4[r]), _mm256_cvtepi32_ps(sums[r]), acc[r]);
        s[r] = hsum_float_8(acc[r]);
    }
}

// R columns of one weight row; dys: the columns' block scales as f32 (F32_SCALES)
static inline __attribute__((always_inline)) void cols(const int variant, float * s, const block_q8_0 * x,
        const block_q8_0 * y, const float * dys) {
    __m256 acc[R];
    __m256i iacc[R];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < R; ++r) { acc[r] = _mm256_setzero_ps(); iacc[r] = _mm256_setzero_si256(); }
    for (int ib = 0; ib < NB; ++ib) {
        const float dx = fp16_table[x[ib].d];
        const __m256i qx = _mm256_loadu_si256((const __m256i *) x[ib].qs);
        const __m256i ax = _mm256_sign_epi8(qx, qx);
        for (int r = 0; r < R; ++r) {
            const block_q8_0 * yr = y + r * NB + ib;
            const __m256i qy = _mm256_loadu_si256((const __m256i *) yr->qs);
            const __m256i p = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(ax, _mm256_sign_epi8(qy, qx)));
            if (variant == KERNEL) {
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dx * fp16_table[yr->d]), _mm256_cvtepi32_ps(p), acc[r]);
            } else if (variant == INT_ONLY) {
                iacc[r] = _mm256_add_epi32(iacc[r], p);
            } else if (variant == CONVERT_ADD) {
                acc[r] = _mm256_add_ps(_mm256_cvtepi32_ps(p), acc[r]);
            } else {
                acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dx), _mm256_broadcast_ss(&dys[r * NB + ib])),
                                         _mm256_cvtepi32_ps(p), acc[r]);
            }
        }
    }
    for (int r = 0; r < R; ++r) s[r] = hsum_float_8(_mm256_add_ps(acc[r], _mm256_cvtepi32_ps(iacc[r])));
}

#define MADD_LOOP(insn, insn2) \
    for (long i = 0; i < n; ++i) \
        __asm__ volatile(insn " %8, %0, %0\n\t" insn2 " %8, %1, %1\n\t" insn " %8, %2, %2\n\t" insn2 " %8, %3, %3\n\t" \
                         insn " %8, %4, %4\n\t" insn2 " %8, %5, %5\n\t" insn " %8, %6, %6\n\t" insn2 " %8, %7, %7" \
                         : "+x"(a[0]), "+x"(a[1]), "+x"(a[2]), "+x"(a[3]), "+x"(a[4]), "+x"(a[5]), "+x"(a[6]), \
                           "+x"(a[7]) : "x"(b))

int main(void) {
    for (int i = 0; i < 65536; ++i) { _Float16 h; uint16_t u = (uint16_t) i; memcpy(&h, &u, 2); fp16_table[i] = (float) h; }
    block_q8_0 * w = malloc(sizeof(block_q8_0) * NB * ROWS), * y = malloc(sizeof(block_q8_0) * NB * COLS);
    float * dys = malloc(sizeof(float) * NB * COLS), * dys4 = malloc(sizeof(float) * NB * COLS);
    srand(1);
    for (int i = 0; i < NB * ROWS; ++i) {
        _Float16 h = (_Float16) (0.001f + rand() / (float) RAND_MAX * 0.01f); memcpy(&w[i].d, &h, 2);
        for (int j = 0; j < 32; ++j) w[i].qs[j] = (int8_t) (rand() % 255 - 127);
    }
    for (int i = 0; i < NB * COLS; ++i) {
        _Float16 h = (_Float16) (0.01f + rand() / (float) RAND_MAX); memcpy(&y[i].d, &h, 2);
        for (int j = 0; j < 32; ++j) y[i].qs[j] = (int8_t) (rand() % 255 - 127);   // quantize_row_q8_0's range
        dys[i] = fp16_table[y[i].d];
    }
    for (int c0 = 0; c0 < COLS; c0 += R)   // patch 0011's layout: each group of 4 columns' scales, block by block
        for (int ib = 0; ib < NB; ++ib)
            for (int r = 0; r < R; ++r) dys4[c0 * NB + 4 * ib + r] = dys[(c0 + r) * NB + ib];
    // the clock: 4 dependent adds per iteration, one cycle each
    long n = 200000000, x = 0;
    double t0 = now();
    for (long i = 0; i < n; ++i) __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
    const double ghz = 4.0 * n / (now() - t0) / 1e9;
    printf("clock about %.2f GHz (%ld)\n", ghz, x & 1);
    static float out[NVARIANTS][ROWS * COLS];
    for (int v = 0; v < NVARIANTS; ++v) {
        double best = 1e9;
        for (int t = 0; t < 5; ++t) {
            t0 = now();
            for (int it = 0; it < REPS; ++it)
                for (int r = 0; r < ROWS; ++r)
                    for (int c = 0; c < COLS; c += R)
                        if (v == PATCH_0011) cols_0011(&out[v][r * COLS + c], w + r * NB, y + c * NB, dys4 + c * NB);
                        else cols(v, &out[v][r * COLS + c], w + r * NB, y + c * NB, dys + c * NB);
            const double d = now() - t0;
            if (d < best) best = d;
        }
        const double ns = best / ((double) REPS * ROWS * COLS * NB) * 1e9;
        const int same = v == KERNEL || v >= F32_SCALES ? !memcmp(out[v], out[KERNEL], sizeof out[v]) : -1;
        printf("%-55s %.3f ns, %.2f cycles a (block, column)%s\n", NAMES[v], ns, ns * ghz,
               same < 0 ? "" : same ? ", bit-identical to the kernel" : ", DIFFERS from the kernel");
    }
    __m256i a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm256_set1_epi8((char) (i + 1));
    const __m256i b = _mm256_set1_epi8(3);
    n = 50000000;
    t0 = now(); MADD_LOOP("vpmaddubsw", "vpmaddubsw"); const double t_ubs = (now() - t0) / n / 8 * 1e9;
    t0 = now(); MADD_LOOP("vpmaddwd", "vpmaddwd"); const double t_wd = (now() - t0) / n / 8 * 1e9;
    t0 = now(); MADD_LOOP("vpmaddubsw", "vpmaddwd"); const double t_mix = (now() - t0) / n / 8 * 1e9;
    // 1 cycle each mixed as well as alone: the two share one pipe
    printf("vpmaddubsw alone %.2f cycles each, vpmaddwd alone %.2f, the two interleaved %.2f "
           "(independent chains: throughput)\n", t_ubs * ghz, t_wd * ghz, t_mix * ghz);
    return _mm256_extract_epi32(a[0], 0) == 12345;
}
