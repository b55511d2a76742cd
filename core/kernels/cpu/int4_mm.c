/* int4_mm: int4 weights × dynamic-int8 activations, for a draft model's few rows (its threads: OpenMP).
 * Weights: per output row n, groups of 64 inputs, w ≈ q · scale[n, g] + lo[n, g], q in 0..15, two groups per 64
 * bytes: byte j of pair p holds q[128p + j] (low nibble) and q[128p + 64 + j] (high nibble).
 * Activations: each row x[m] is rounded to int8 with one scale xs[m] = max|x[m]| / 127, so
 *   y[m, n] = xs[m] · Σ_g scale[n, g] · Σ_{k∈g} q[n, k] xq[m, k]  +  Σ_g lo[n, g] · Σ_{k∈g} x[m, k]
 * with the integer sums on vpdpbusd (u8 × s8 → s32): one variant, AVX512-VNNI (int4_isa). Draft rows need not be
 * bit-stable: only the target verifies.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels.h"

#if KERNELS_X86
#include <immintrin.h>

#define T __attribute__((target(T_AVX512VNNI)))

int int4_isa(void) { return (cpu_avx512() && __builtin_cpu_supports("avx512vnni")) << 1; }

#define MAXM 8  /* rows per call (the runtime sends at most QUANT_ROWS) */
#ifndef INT4_AHEAD
#define INT4_AHEAD 1024
#endif

T static void quant_rows(const float *x, int m, int k, int8_t *xq, float *xs, float *xsum) {
    int groups = k / 64;
    for (int i = 0; i < m; i++) {
        const float *r = x + (size_t)i * k;
        float amax = 0.f;
        for (int j = 0; j < k; j++) amax = fmaxf(amax, fabsf(r[j]));
        float s = amax > 0.f ? amax / 127.f : 1.f, inv = 1.f / s;
        xs[i] = s;
        for (int j = 0; j < k; j++) xq[(size_t)i * k + j] = (int8_t)lrintf(r[j] * inv);
        for (int g = 0; g < groups; g++) {
            float t = 0.f;
            for (int j = 0; j < 64; j++) t += r[g * 64 + j];
            xsum[i * groups + g] = t;
        }
    }
}

T void int4_mm(const float *x, int m, int k, const uint8_t *q, const float *scale, const float *lo, int n, float *y,
               int threads) {
    int groups = k / 64, pairs = k / 128;
    int8_t *xq = malloc((size_t)m * k);
    float xs[MAXM], *xsum = malloc(sizeof(float) * m * groups);
    quant_rows(x, m, k, xq, xs, xsum);
    const __m512i nib = _mm512_set1_epi8(0x0f);
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int j = 0; j < n; j++) {
        const uint8_t *wr = q + (size_t)j * (k / 2);
        const float *sr = scale + (size_t)j * groups, *lr = lo + (size_t)j * groups;
        __m512 acc[MAXM];
        for (int i = 0; i < m; i++) acc[i] = _mm512_setzero_ps();
        for (int p = 0; p < pairs; p++) {
            __builtin_prefetch((const char *)(wr + p * 64) + INT4_AHEAD, 0, 3);  /* one thread keeps too few misses */
            __m512i v = _mm512_loadu_si512(wr + p * 64);
            __m512i a = _mm512_and_si512(v, nib), b = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
            __m512 sa = _mm512_set1_ps(sr[2 * p]), sb = _mm512_set1_ps(sr[2 * p + 1]);
            for (int i = 0; i < m; i++) {
                const int8_t *xr = xq + (size_t)i * k + p * 128;
                __m512i da = _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, _mm512_loadu_si512(xr));
                __m512i db = _mm512_dpbusd_epi32(_mm512_setzero_si512(), b, _mm512_loadu_si512(xr + 64));
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(da), sa, acc[i]);
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(db), sb, acc[i]);
            }
        }
        for (int i = 0; i < m; i++) {
            __m512 t = _mm512_setzero_ps();
            for (int g = 0; g < groups; g += 16) {
                __mmask16 mk = groups - g >= 16 ? 0xffff : (__mmask16)((1u << (groups - g)) - 1);
                t = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, lr + g), _mm512_maskz_loadu_ps(mk, xsum + i * groups + g), t);
            }
            acc[i] = _mm512_fmadd_ps(acc[i], _mm512_set1_ps(xs[i]), t);
            y[(size_t)i * n + j] = _mm512_reduce_add_ps(acc[i]);
        }
    }
    free(xq);
    free(xsum);
}

#else
int int4_isa(void) { return 0; }
void int4_mm(const float *x, int m, int k, const uint8_t *q, const float *scale, const float *lo, int n, float *y,
             int threads) { (void)x; (void)m; (void)k; (void)q; (void)scale; (void)lo; (void)n; (void)y; (void)threads; }
#endif
