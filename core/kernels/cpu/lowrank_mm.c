/* lowrank_mm: y [n, V] fp32 = z [n, r] fp32 @ W_upᵀ — a low-rank head's logits over the whole vocabulary
 * (NanoSpec's preview, SlimSpec's rows), W_up [V, r] read once per call whatever n is.
 *
 * W_up is packed in blocks of 16 vocabulary rows, transposed: block b holds up[16b + j][k] at [b][k][j] (bf16, or
 * fp32 where the factors are not bf16 values), so one 16-lane vector is one k of 16 outputs and no horizontal sum is
 * needed. Every output is the same chain of fused multiply-adds from 0, k = 0 .. r − 1, on every variant, in every
 * row group and at every n: the variants agree bit for bit and each row is stable.
 *   isa 2  AVX-512F: a block row is one zmm; up to 8 rows of z in accumulators.
 *   isa 1  AVX2 + FMA: a block row is two ymm; up to 6 rows.
 *   isa 0  scalar fmaf.
 */
#include <stdint.h>
#include <string.h>

#define LANES 16
#define AHEAD 2048  /* bytes: the next block's lines, requested as this one is read */

static inline float bf16f(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void block_scalar(const void *blk, int wide, const float *z, int n, int r, float *y, int64_t ldy, int lanes) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < lanes; j++) {
            float acc = 0.0f;
            for (int k = 0; k < r; k++) {
                float w = wide ? ((const float *)blk)[k * LANES + j] : bf16f(((const uint16_t *)blk)[k * LANES + j]);
                acc = __builtin_fmaf(w, z[i * r + k], acc);
            }
            y[i * ldy + j] = acc;
        }
}

#if defined(__x86_64__) && defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 10)
#include <immintrin.h>

#define T512F __attribute__((target("avx512f,fma")))
#define T2F __attribute__((target("avx2,fma")))

int lowrank_isa(void) { /* bit 0: the AVX2 + FMA variant runs here, bit 1: the AVX-512F one */
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return avx2 | (avx2 && __builtin_cpu_supports("avx512f")) << 1;
}

T512F static void block512(const void *blk, int wide, const float *z, int n, int r, float *y, int64_t ldy, int lanes) {
    __mmask16 keep = (__mmask16)((1u << lanes) - 1);
    for (int i0 = 0; i0 < n; i0 += 8) {
        int m = n - i0 < 8 ? n - i0 : 8;
        __m512 acc[8];
        for (int i = 0; i < 8; i++) acc[i] = _mm512_setzero_ps();
        for (int k = 0; k < r; k++) {
            __m512 w = wide ? _mm512_loadu_ps((const float *)blk + k * LANES)
                            : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
                                  _mm256_loadu_si256((const __m256i *)((const uint16_t *)blk + k * LANES))), 16));
            for (int i = 0; i < m; i++)
                acc[i] = _mm512_fmadd_ps(w, _mm512_set1_ps(z[(i0 + i) * r + k]), acc[i]);
        }
        for (int i = 0; i < m; i++) _mm512_mask_storeu_ps(y + (i0 + i) * ldy, keep, acc[i]);
    }
}

T2F static inline __m256 widen2(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

T2F static void block2(const void *blk, int wide, const float *z, int n, int r, float *y, int64_t ldy, int lanes) {
    for (int i0 = 0; i0 < n; i0 += 6) {
        int m = n - i0 < 6 ? n - i0 : 6;
        __m256 lo[6], hi[6];
        for (int i = 0; i < 6; i++) lo[i] = hi[i] = _mm256_setzero_ps();
        for (int k = 0; k < r; k++) {
            const float *wf = (const float *)blk + k * LANES;
            const uint16_t *wh = (const uint16_t *)blk + k * LANES;
            __m256 a = wide ? _mm256_loadu_ps(wf) : widen2(wh), b = wide ? _mm256_loadu_ps(wf + 8) : widen2(wh + 8);
            for (int i = 0; i < m; i++) {
                __m256 s = _mm256_set1_ps(z[(i0 + i) * r + k]);
                lo[i] = _mm256_fmadd_ps(a, s, lo[i]);
                hi[i] = _mm256_fmadd_ps(b, s, hi[i]);
            }
        }
        for (int i = 0; i < m; i++) {
            float out[LANES];
            _mm256_storeu_ps(out, lo[i]);
            _mm256_storeu_ps(out + 8, hi[i]);
            memcpy(y + (i0 + i) * ldy, out, sizeof(float) * lanes);
        }
    }
}
#else
int lowrank_isa(void) { return 0; }
#define block512 block_scalar
#define block2 block_scalar
#endif

/* up: ceil(V / 16) packed blocks (zero rows past V); wide: fp32 blocks, else bf16; threads share the blocks */
void lowrank_mm(int isa, const float *z, int n, int r, const void *up, int wide, int64_t V, float *y, int threads) {
    int64_t blocks = (V + LANES - 1) / LANES, bytes = (int64_t)r * LANES * (wide ? 4 : 2);
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t b = 0; b < blocks; b++) {
        const char *blk = (const char *)up + b * bytes;
        for (int64_t l = 0; l < bytes; l += 64) __builtin_prefetch(blk + AHEAD + l, 0, 0);
        int lanes = V - b * LANES < LANES ? (int)(V - b * LANES) : LANES;
        if (isa == 2) block512(blk, wide, z, n, r, y + b * LANES, V, lanes);
        else if (isa == 1) block2(blk, wide, z, n, r, y + b * LANES, V, lanes);
        else block_scalar(blk, wide, z, n, r, y + b * LANES, V, lanes);
    }
}
