/* lowrank_mm: y [n, V] fp32 = z [n, r] fp32 @ W_upᵀ — a low-rank head's logits over the whole vocabulary
 * (NanoSpec's preview, SlimSpec's rows), W_up [V, r] read once per call whatever n is.
 *
 * W_up is packed in blocks of 16 vocabulary rows, transposed: block b holds up[16b + j][k] at [b][k][j] (bf16, or
 * fp32 where the factors are not bf16 values), so one 16-lane vector is one k of 16 outputs and no horizontal sum is
 * needed. Every output is the same chain of fused multiply-adds from 0, k = 0 .. r − 1, on every variant, in every
 * row group and at every n: the variants agree bit for bit and each row is stable.
 *   isa 2  AVX-512: a block row is one zmm; tiles of 4 blocks × up to 4 rows of z in accumulators.
 *   isa 1  AVX2 + FMA: a block row is two ymm; tiles of 3 blocks × up to 2 rows, or 1 block × up to 6.
 *   isa 0  scalar fmaf.
 */
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#define LANES 16

static void block_scalar(const void *blk, int wide, const float *z, int n, int r, float *y, int64_t ldy, int lanes) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < lanes; j++) {
            float acc = 0.0f;
            for (int k = 0; k < r; k++) {
                float w = wide ? ((const float *)blk)[k * LANES + j]
                               : bf16_to_f32(((const uint16_t *)blk)[k * LANES + j]);
                acc = __builtin_fmaf(w, z[i * r + k], acc);
            }
            y[i * ldy + j] = acc;
        }
}

#if KERNELS_X86
#include <immintrin.h>

#define T512F __attribute__((target(T_AVX512)))
#define T2F __attribute__((target(T_AVX2)))

int lowrank_isa(void) { return cpu_avx2() | cpu_avx512() << 1; }

/* A tile: NB consecutive blocks × M rows of z, NB·M accumulators kept in registers (constant NB, M, WIDE: inlined
 * and unrolled). Several blocks at once keep independent chains in flight where few rows are asked for (one row
 * alone would wait on each FMA's latency); each output is still the one chain k = 0 .. r − 1 from 0. */
#define UNROLL _Pragma("GCC unroll 16")

T512F static inline __m512 load512(const void *blk, int wide, int k) {
    return wide ? _mm512_loadu_ps((const float *)blk + k * LANES)
                : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
                      _mm256_loadu_si256((const __m256i *)((const uint16_t *)blk + k * LANES))), 16));
}

T512F static inline __attribute__((always_inline)) void tile512(const char *blk, int64_t bytes, const int WIDE,
        const float *z, const int NB, const int M, int r, float *y, int64_t ldy, const int *lanes) {
    __m512 acc[16];
    UNROLL for (int a = 0; a < NB * M; a++) acc[a] = _mm512_setzero_ps();
    for (int k = 0; k < r; k++) {
        UNROLL for (int j = 0; j < NB; j++) {
            __m512 w = load512(blk + j * bytes, WIDE, k);
            UNROLL for (int i = 0; i < M; i++) acc[j * M + i] = _mm512_fmadd_ps(w, _mm512_set1_ps(z[i * r + k]), acc[j * M + i]);
        }
    }
    UNROLL for (int j = 0; j < NB; j++)
        UNROLL for (int i = 0; i < M; i++)
            _mm512_mask_storeu_ps(y + i * ldy + j * LANES, (__mmask16)((1u << lanes[j]) - 1), acc[j * M + i]);
}

/* NB blocks (4, or 1 for the last few) × every row of z, in tiles of up to 4 rows */
#define TILES512(NB, WIDE) \
    for (int i0 = 0; i0 < n; i0 += 4) { \
        const float *zi = z + (int64_t)i0 * r; float *yi = y + i0 * ldy; \
        switch (n - i0 < 4 ? n - i0 : 4) { \
        case 1: tile512(blk, bytes, WIDE, zi, NB, 1, r, yi, ldy, lanes); break; \
        case 2: tile512(blk, bytes, WIDE, zi, NB, 2, r, yi, ldy, lanes); break; \
        case 3: tile512(blk, bytes, WIDE, zi, NB, 3, r, yi, ldy, lanes); break; \
        default: tile512(blk, bytes, WIDE, zi, NB, 4, r, yi, ldy, lanes); } }

T512F static void blocks512(const char *blk, int64_t bytes, int nb, int wide, const float *z, int n, int r, float *y,
                            int64_t ldy, const int *lanes) {
    if (nb == 4 && wide) TILES512(4, 1)
    else if (nb == 4) TILES512(4, 0)
    else for (int j = 0; j < nb; j++, blk += bytes, y += LANES, lanes++) {
        if (wide) TILES512(1, 1)
        else TILES512(1, 0)
    }
}

T2F static inline __m256 widen2(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* AVX2: a block row is two ymm, so NB·M ≤ 6 (12 accumulators of 16) */
T2F static inline __attribute__((always_inline)) void tile2(const char *blk, int64_t bytes, const int WIDE,
        const float *z, const int NB, const int M, int r, float *y, int64_t ldy, const int *lanes) {
    __m256 lo[6], hi[6];
    UNROLL for (int a = 0; a < NB * M; a++) lo[a] = hi[a] = _mm256_setzero_ps();
    for (int k = 0; k < r; k++) {
        UNROLL for (int j = 0; j < NB; j++) {
            const float *wf = (const float *)(blk + j * bytes) + k * LANES;
            const uint16_t *wh = (const uint16_t *)(blk + j * bytes) + k * LANES;
            __m256 a = WIDE ? _mm256_loadu_ps(wf) : widen2(wh), b = WIDE ? _mm256_loadu_ps(wf + 8) : widen2(wh + 8);
            UNROLL for (int i = 0; i < M; i++) {
                __m256 s = _mm256_set1_ps(z[i * r + k]);
                lo[j * M + i] = _mm256_fmadd_ps(a, s, lo[j * M + i]);
                hi[j * M + i] = _mm256_fmadd_ps(b, s, hi[j * M + i]);
            }
        }
    }
    UNROLL for (int j = 0; j < NB; j++)
        UNROLL for (int i = 0; i < M; i++) {
            float out[LANES];
            _mm256_storeu_ps(out, lo[j * M + i]);
            _mm256_storeu_ps(out + 8, hi[j * M + i]);
            memcpy(y + i * ldy + j * LANES, out, sizeof(float) * lanes[j]);
        }
}

/* NB blocks (3, or 1 for the last few) × every row of z: 2 rows a tile with 3 blocks, 6 with one */
#define TILES2(NB, RMAX, WIDE) \
    for (int i0 = 0; i0 < n; i0 += RMAX) { \
        const float *zi = z + (int64_t)i0 * r; float *yi = y + i0 * ldy; int m = n - i0 < RMAX ? n - i0 : RMAX; \
        if (NB == 3) { if (m == 1) tile2(blk, bytes, WIDE, zi, 3, 1, r, yi, ldy, lanes); \
                       else tile2(blk, bytes, WIDE, zi, 3, 2, r, yi, ldy, lanes); } \
        else switch (m) { \
        case 1: tile2(blk, bytes, WIDE, zi, 1, 1, r, yi, ldy, lanes); break; \
        case 2: tile2(blk, bytes, WIDE, zi, 1, 2, r, yi, ldy, lanes); break; \
        case 3: tile2(blk, bytes, WIDE, zi, 1, 3, r, yi, ldy, lanes); break; \
        case 4: tile2(blk, bytes, WIDE, zi, 1, 4, r, yi, ldy, lanes); break; \
        case 5: tile2(blk, bytes, WIDE, zi, 1, 5, r, yi, ldy, lanes); break; \
        default: tile2(blk, bytes, WIDE, zi, 1, 6, r, yi, ldy, lanes); } }

T2F static void blocks2(const char *blk, int64_t bytes, int nb, int wide, const float *z, int n, int r, float *y,
                        int64_t ldy, const int *lanes) {
    if (nb == 3 && n <= 2 && wide) TILES2(3, 2, 1)
    else if (nb == 3 && n <= 2) TILES2(3, 2, 0)
    else for (int j = 0; j < nb; j++, blk += bytes, y += LANES, lanes++) {
        if (wide) TILES2(1, 6, 1)
        else TILES2(1, 6, 0)
    }
}
#else
int lowrank_isa(void) { return 0; }
static void blocks512(const char *blk, int64_t bytes, int nb, int wide, const float *z, int n, int r, float *y,
                      int64_t ldy, const int *lanes) {
    for (int j = 0; j < nb; j++) block_scalar(blk + j * bytes, wide, z, n, r, y + j * LANES, ldy, lanes[j]);
}
#define blocks2 blocks512
#endif

/* up: ceil(V / 16) packed blocks (zero rows past V); wide: fp32 blocks, else bf16; threads share groups of blocks */
void lowrank_mm(int isa, const float *z, int n, int r, const void *up, int wide, int64_t V, float *y, int threads) {
    int64_t blocks = (V + LANES - 1) / LANES, bytes = (int64_t)r * LANES * (wide ? 4 : 2);
    int group = isa == 2 ? 4 : isa == 1 ? 3 : 1;
    int64_t groups = (blocks + group - 1) / group;
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t g = 0; g < groups; g++) {
        int64_t b = g * group;
        int nb = blocks - b < group ? (int)(blocks - b) : group, lanes[4];
        const char *blk = (const char *)up + b * bytes;
        for (int64_t l = 0; l < nb * bytes; l += 64) __builtin_prefetch(blk + nb * bytes + l, 0, 0);
        for (int j = 0; j < nb; j++) lanes[j] = V - (b + j) * LANES < LANES ? (int)(V - (b + j) * LANES) : LANES;
        if (isa == 2) blocks512(blk, bytes, nb, wide, z, n, r, y + b * LANES, V, lanes);
        else if (isa == 1) blocks2(blk, bytes, nb, wide, z, n, r, y + b * LANES, V, lanes);
        else for (int j = 0; j < nb; j++) block_scalar(blk + j * bytes, wide, z, n, r, y + (b + j) * LANES, V, lanes[j]);
    }
}
