/* codes_mm_avx: codes_mm (codes_mm.c) without AMX, on the same tile layout: x [m, k] bf16 @ Wᵀ -> y [m, n] bf16.
 *
 * Each tile (16 outputs × 32 inputs of one Q4_K / Q6_K matrix) is rebuilt as the model's bf16 weights
 * w = bf16(fl32(D·q − M)) (one fused multiply-add per value, as codes_mm.c), one tile row r (inputs 2r, 2r + 1 of
 * the 16 outputs, element e = 2n' + (k & 1)) at a time, and multiplied with every row of x while it is in a register.
 *   isa 2  AVX512-BF16: a row is one zmm of 32 bf16; y[n'] += w[2n']·x[2r] + w[2n'+1]·x[2r+1] is one `vdpbf16ps`
 *          with x's pair broadcast. Tile row r goes into accumulator r % 2; y = bf16(a0 + a1).
 *   isa 1  AVX2 + FMA: a row is four ymm of 8 fp32 (the bf16 weights widened); acc[e] += w[e]·x[2r + (e & 1)] by
 *          one FMA each, x converted to fp32 once; y[n'] = bf16(acc[2n'] + acc[2n' + 1]).
 * Every row of x takes the same sequence of operations on its accumulators whatever m is (rows are handled in groups
 * of up to GROUP, the weights either rebuilt in registers — up to GROUP rows — or read back from CHUNK tiles decoded
 * once into an L1 buffer, the accumulators kept in memory between chunks), so each output row is bit-stable: a tree's verify rows equal 1-token passes bit for bit.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#if KERNELS_X86
#include <immintrin.h>

#define T512 __attribute__((target(T_AVX512BF16), always_inline)) static inline
#define T512F __attribute__((target(T_AVX512BF16)))
#define T2 __attribute__((target(T_AVX2), always_inline)) static inline
#define T2F __attribute__((target(T_AVX2)))
#ifndef AHEAD
#define AHEAD 1024
#endif

static inline int tile_bytes(int type) { return type == 0 ? 256 : 512; }
static inline const float *tile_dd(int type, const float *dd, int t) { return dd + (type == 0 ? 32 : 16) * (t / 8); }

static inline void prefetch_tile(int type, const uint8_t *q, const uint8_t *s, int t) {
    const char *p = (const char *)q + tile_bytes(type) * t + AHEAD;  /* one core alone keeps too few misses in flight */
    for (int l = 0; l < tile_bytes(type); l += 64) __builtin_prefetch(p + l, 0, 3);
    __builtin_prefetch(s + 32 * t + AHEAD / 8, 0, 3);
}

/* ---------------------------------------------------------------- AVX512-BF16 */

T512 __m512 pairs512(__m512 v, int hi) { /* lane e = v[8·hi + e/2]: each output's scale twice */
    const __m512i idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return _mm512_permutexvar_ps(_mm512_add_epi32(idx, _mm512_set1_epi32(8 * hi)), v);
}

T512 __m512 u8_512(const uint8_t *p) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p))); }

/* sc: Q4_K D lo, D hi, M lo, M hi (per element of a row's halves); Q6_K D lo, D hi of rows 0..7, then of rows 8..15 */
T512 void scales512(int type, const uint8_t *s, const float *dd, __m512 sc[4]) {
    if (type == 0) {
        __m512 D = _mm512_mul_ps(_mm512_loadu_ps(dd), u8_512(s));
        __m512 M = _mm512_mul_ps(_mm512_loadu_ps(dd + 16), u8_512(s + 16));
        sc[0] = pairs512(D, 0), sc[1] = pairs512(D, 1), sc[2] = pairs512(M, 0), sc[3] = pairs512(M, 1);
    } else {
        __m512 d = _mm512_loadu_ps(dd);
        __m512 D0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)s))));
        __m512 D1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(s + 16)))));
        sc[0] = pairs512(D0, 0), sc[1] = pairs512(D0, 1), sc[2] = pairs512(D1, 0), sc[3] = pairs512(D1, 1);
    }
}

/* tile row r of one tile's codes q, as 32 bf16 */
T512 __m512bh row512(int type, const uint8_t *q, const __m512 sc[4], int r) {
    __m512 lo, hi;
    if (type == 0) {
        const uint8_t *p = q + 32 * (r & 7);
        __m512i a = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
        __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 16)));
        const __m512i nib = _mm512_set1_epi32(0x0f);
        a = r < 8 ? _mm512_and_si512(a, nib) : _mm512_srli_epi32(a, 4);
        b = r < 8 ? _mm512_and_si512(b, nib) : _mm512_srli_epi32(b, 4);
        lo = _mm512_fmsub_ps(sc[0], _mm512_cvtepi32_ps(a), sc[2]);
        hi = _mm512_fmsub_ps(sc[1], _mm512_cvtepi32_ps(b), sc[3]);
    } else {
        const int8_t *p = (const int8_t *)q + 32 * r;
        const __m512 *d = sc + 2 * (r >= 8);
        lo = _mm512_mul_ps(d[0], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p))));
        hi = _mm512_mul_ps(d[1], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 16)))));
    }
    return _mm512_cvtne2ps_pbh(hi, lo);
}

#define GROUP512 12  /* rows whose accumulators stay in registers (2 zmm each; a 9-row verify stays fused) */
#define CHUNK 8      /* tiles decoded at a time for more rows (8 KB bf16 / 16 KB fp32: L1) */

/* rows x[0..R) (stride k) · tiles [t0, t1) of one block, into acc [R][32] fp32 (zeroed first when `first`). Weights
 * rebuilt from the codes (B = 0) or read from wb, tiles t0.. decoded [16, 32] bf16 each (B = 1): the same operations on
 * each row's accumulators either way. Tile row r goes into accumulator r & 1 */
T512 void span512(const int R, const int type, const int B, const uint8_t *q, const uint8_t *s, const float *dd,
                  int t0, int t1, const uint16_t *wb, const uint16_t *x, int k, float *accm, int first) {
    __m512 acc[GROUP512][2];
    for (int i = 0; i < R; i++)
        for (int p = 0; p < 2; p++) acc[i][p] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(accm + 32 * i + 16 * p);
    for (int t = t0; t < t1; t++) {
        __m512 sc[4];
        if (!B) {
            prefetch_tile(type, q, s, t);
            scales512(type, s + 32 * t, tile_dd(type, dd, t), sc);
        }
        const uint8_t *qt = q + tile_bytes(type) * t;
        #pragma GCC unroll 16
        for (int r = 0; r < 16; r++) {
            __m512bh w = B ? (__m512bh)_mm512_load_si512(wb + 512 * (t - t0) + 32 * r) : row512(type, qt, sc, r);
            for (int i = 0; i < R; i++) {
                int32_t pair;
                memcpy(&pair, x + (size_t)i * k + 32 * t + 2 * r, 4);
                acc[i][r & 1] = _mm512_dpbf16_ps(acc[i][r & 1], (__m512bh)_mm512_set1_epi32(pair), w);
            }
        }
    }
    for (int i = 0; i < R; i++)
        for (int p = 0; p < 2; p++) _mm512_storeu_ps(accm + 32 * i + 16 * p, acc[i][p]);
}

T512F static void decode512(int type, const uint8_t *q, const uint8_t *s, const float *dd, int t0, int t1, uint16_t *wb) {
    for (int t = t0; t < t1; t++) {
        __m512 sc[4];
        prefetch_tile(type, q, s, t);
        scales512(type, s + 32 * t, tile_dd(type, dd, t), sc);
        for (int r = 0; r < 16; r++)
            _mm512_store_si512(wb + 512 * (t - t0) + 32 * r, (__m512i)row512(type, q + tile_bytes(type) * t, sc, r));
    }
}

/* span512 with R, type, B as constants */
T512F static void spans512(int R, int type, int B, const uint8_t *q, const uint8_t *s, const float *dd, int t0, int t1,
                           const uint16_t *wb, const uint16_t *x, int k, float *accm, int first) {
    #define S512(r) case r: { if (B) span512(r, 0, 1, q, s, dd, t0, t1, wb, x, k, accm, first); \
                            else if (type) span512(r, 1, 0, q, s, dd, t0, t1, wb, x, k, accm, first); \
                            else span512(r, 0, 0, q, s, dd, t0, t1, wb, x, k, accm, first); } break;
    switch (R) { S512(1) S512(2) S512(3) S512(4) S512(5) S512(6) S512(7) S512(8) S512(9) S512(10) S512(11) S512(12) }
    #undef S512
}

T512F static void store512(const float *accm, int m, uint16_t *y, int n, int j) {  /* y = bf16(acc0 + acc1) */
    for (int i = 0; i < m; i++) {
        __m512 v = _mm512_add_ps(_mm512_loadu_ps(accm + 32 * i), _mm512_loadu_ps(accm + 32 * i + 16));
        _mm256_storeu_si256((__m256i *)(y + (size_t)i * n + 16 * j), (__m256i)_mm512_cvtneps_pbh(v));
    }
}

/* ---------------------------------------------------------------- AVX2 + FMA */

T2 __m256 round_bf16(__m256 v) { /* v rounded to bf16 (RNE), as fp32 */
    __m256i b = _mm256_castps_si256(v);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    b = _mm256_add_epi32(b, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
    return _mm256_castsi256_ps(_mm256_and_si256(b, _mm256_set1_epi32((int)0xffff0000u)));
}

/* sc [8][8]: Q4_K D pairs of elements 8h.. (h < 4), then M pairs; Q6_K D pairs of rows 0..7, then of rows 8..15 */
T2 void scales2(int type, const uint8_t *s, const float *dd, float sc[8][8]) {
    for (int h = 0; h < 4; h++)
        for (int e = 0; e < 8; e++) {
            int o = 4 * h + e / 2;
            if (type == 0) {
                sc[h][e] = dd[o] * (float)s[o];
                sc[4 + h][e] = dd[16 + o] * (float)s[16 + o];
            } else {
                sc[h][e] = dd[o] * (float)(int8_t)s[o];
                sc[4 + h][e] = dd[o] * (float)(int8_t)s[16 + o];
            }
        }
}

/* tile row r as four ymm of 8 fp32 (elements 8h .. 8h + 7) */
T2 void row2(int type, const uint8_t *q, const float sc[8][8], int r, __m256 w[4]) {
    for (int h = 0; h < 4; h++) {
        __m256 v;
        if (type == 0) {
            __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + 32 * (r & 7) + 8 * h)));
            c = r < 8 ? _mm256_and_si256(c, _mm256_set1_epi32(0x0f)) : _mm256_srli_epi32(c, 4);
            v = _mm256_fmsub_ps(_mm256_loadu_ps(sc[h]), _mm256_cvtepi32_ps(c), _mm256_loadu_ps(sc[4 + h]));
        } else {
            __m256i c = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + 32 * r + 8 * h)));
            v = _mm256_mul_ps(_mm256_loadu_ps(sc[4 * (r >= 8) + h]), _mm256_cvtepi32_ps(c));
        }
        w[h] = round_bf16(v);
    }
}

#define GROUP2 2  /* rows whose accumulators stay in registers (4 ymm each) */

/* as span512 with fp32 x (xf, stride k) and wb tiles of [16, 32] fp32; acc [R][32]: lane e of tile rows' sums */
T2 void span2(const int R, const int type, const int B, const uint8_t *q, const uint8_t *s, const float *dd,
              int t0, int t1, const float *wb, const float *xf, int k, float *accm, int first) {
    __m256 acc[GROUP2][4];
    for (int i = 0; i < R; i++)
        for (int h = 0; h < 4; h++) acc[i][h] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(accm + 32 * i + 8 * h);
    for (int t = t0; t < t1; t++) {
        float sc[8][8] __attribute__((aligned(32)));
        if (!B) {
            prefetch_tile(type, q, s, t);
            scales2(type, s + 32 * t, tile_dd(type, dd, t), sc);
        }
        const uint8_t *qt = q + tile_bytes(type) * t;
        for (int r = 0; r < 16; r++) {
            __m256 w[4];
            if (B)
                for (int h = 0; h < 4; h++) w[h] = _mm256_load_ps(wb + 512 * (t - t0) + 32 * r + 8 * h);
            else
                row2(type, qt, sc, r, w);
            for (int i = 0; i < R; i++) {
                __m256 xp = _mm256_castpd_ps(_mm256_broadcast_sd((const double *)(xf + (size_t)i * k + 32 * t + 2 * r)));
                for (int h = 0; h < 4; h++) acc[i][h] = _mm256_fmadd_ps(w[h], xp, acc[i][h]);
            }
        }
    }
    for (int i = 0; i < R; i++)
        for (int h = 0; h < 4; h++) _mm256_storeu_ps(accm + 32 * i + 8 * h, acc[i][h]);
}

T2F static void decode2(int type, const uint8_t *q, const uint8_t *s, const float *dd, int t0, int t1, float *wb) {
    for (int t = t0; t < t1; t++) {
        float sc[8][8] __attribute__((aligned(32)));
        prefetch_tile(type, q, s, t);
        scales2(type, s + 32 * t, tile_dd(type, dd, t), sc);
        for (int r = 0; r < 16; r++) {
            __m256 w[4];
            row2(type, q + tile_bytes(type) * t, sc, r, w);
            for (int h = 0; h < 4; h++) _mm256_store_ps(wb + 512 * (t - t0) + 32 * r + 8 * h, w[h]);
        }
    }
}

T2F static void spans2(int R, int type, int B, const uint8_t *q, const uint8_t *s, const float *dd, int t0, int t1,
                       const float *wb, const float *xf, int k, float *accm, int first) {
    #define S2(r) case r: { if (B) span2(r, 0, 1, q, s, dd, t0, t1, wb, xf, k, accm, first); \
                          else if (type) span2(r, 1, 0, q, s, dd, t0, t1, wb, xf, k, accm, first); \
                          else span2(r, 0, 0, q, s, dd, t0, t1, wb, xf, k, accm, first); } break;
    switch (R) { S2(1) S2(2) }
    #undef S2
}

static inline uint16_t bf16_of(float f) { /* RNE; f is a sum of finite products */
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}

/* ---------------------------------------------------------------- dispatch */

static void store2(const float *accm, int m, uint16_t *y, int n, int j) {  /* y[o] = bf16(acc[2o] + acc[2o + 1]) */
    for (int i = 0; i < m; i++)
        for (int o = 0; o < 16; o++) y[(size_t)i * n + 16 * j + o] = bf16_of(accm[32 * i + 2 * o] + accm[32 * i + 2 * o + 1]);
}

/* block j of 16 outputs for all m rows, by isa 2 / 1: up to a group of rows rebuild the weights in registers, more
 * decode CHUNK tiles at a time into wb and run each group of rows over them; accm [m][32]: the rows' accumulators */
static void rows_block(int isa, int m, int k, int n, int j, int type, const uint8_t *q, const uint8_t *s, const float *dd,
                       const void *x, void *wb, float *accm, uint16_t *y) {
    int tiles = k / 32, group = isa == 2 ? GROUP512 : GROUP2;
    for (int t0 = 0; t0 < tiles; t0 += m > group ? CHUNK : tiles) {
        int t1 = m <= group || t0 + CHUNK > tiles ? tiles : t0 + CHUNK, B = m > group;
        if (B && isa == 2) decode512(type, q, s, dd, t0, t1, wb);
        if (B && isa != 2) decode2(type, q, s, dd, t0, t1, wb);
        for (int g = 0; g < m; g += group) {
            int R = m - g < group ? m - g : group;
            if (isa == 2) spans512(R, type, B, q, s, dd, t0, t1, wb, (const uint16_t *)x + (size_t)g * k, k, accm + 32 * g, t0 == 0);
            else spans2(R, type, B, q, s, dd, t0, t1, wb, (const float *)x + (size_t)g * k, k, accm + 32 * g, t0 == 0);
        }
    }
    if (isa == 2) store512(accm, m, y, n, j);
    else store2(accm, m, y, n, j);
}

/* isa 2 (AVX512-BF16) or 1 (AVX2 + FMA): codes_isa's bits 1, 0; the arguments of codes_mm (codes_mm.c) */
void codes_mm_avx(int isa, const uint16_t *x, int m, int k, int n, const uint8_t *types, const int64_t *code_off,
                  const int64_t *sm_off, const int64_t *dd_off, const uint8_t *codes, const uint8_t *sm, const float *dd,
                  uint16_t *y, int threads) {
    int blocks = n / 16;
    float *xf = NULL;
    if (isa != 2) {  /* bf16 -> fp32 is exact */
        xf = malloc((size_t)m * k * sizeof(float));
        for (size_t i = 0; i < (size_t)m * k; i++) xf[i] = bf16_to_f32(x[i]);
    }
    #pragma omp parallel num_threads(threads)
    {
        void *wb = aligned_alloc(64, (size_t)CHUNK * 512 * 4);
        float *accm = malloc((size_t)m * 32 * sizeof(float));
        #pragma omp for schedule(static)
        for (int j = 0; j < blocks; j++)
            rows_block(isa, m, k, n, j, types[j], codes + code_off[j], sm + sm_off[j], dd + dd_off[j],
                       isa == 2 ? (const void *)x : (const void *)xf, wb, accm, y);
        free(accm);
        free(wb);
    }
    free(xf);
}

/* the whole matrix decoded to bf16 [n, k] by variant isa (the load-time exactness check and the tests) */
void codes_decode_avx(int isa, int k, int n, const uint8_t *types, const int64_t *code_off, const int64_t *sm_off,
                      const int64_t *dd_off, const uint8_t *codes, const uint8_t *sm, const float *dd, uint16_t *w,
                      int threads) {
    int blocks = n / 16, tiles = k / 32;
    #pragma omp parallel num_threads(threads)
    {
        void *wb = aligned_alloc(64, (size_t)tiles * 512 * (isa == 2 ? 2 : 4));
        #pragma omp for schedule(static)
        for (int j = 0; j < blocks; j++) {
            const uint8_t *q = codes + code_off[j], *s = sm + sm_off[j];
            if (isa == 2) decode512(types[j], q, s, dd + dd_off[j], 0, tiles, wb);
            else decode2(types[j], q, s, dd + dd_off[j], 0, tiles, wb);
            for (int t = 0; t < tiles; t++)
                for (int r = 0; r < 16; r++)
                    for (int e = 0; e < 32; e++) {
                        size_t i = 512 * (size_t)t + 32 * r + e;
                        w[(size_t)(16 * j + e / 2) * k + 32 * t + 2 * r + (e & 1)] =
                            isa == 2 ? ((const uint16_t *)wb)[i] : bf16_of(((const float *)wb)[i]);
                    }
        }
        free(wb);
    }
}

#else
void codes_mm_avx(int isa, const uint16_t *x, int m, int k, int n, const uint8_t *types, const int64_t *code_off,
                  const int64_t *sm_off, const int64_t *dd_off, const uint8_t *codes, const uint8_t *sm, const float *dd,
                  uint16_t *y, int threads) {
    (void)isa; (void)x; (void)m; (void)k; (void)n; (void)types; (void)code_off; (void)sm_off; (void)dd_off;
    (void)codes; (void)sm; (void)dd; (void)y; (void)threads;
}
void codes_decode_avx(int isa, int k, int n, const uint8_t *types, const int64_t *code_off, const int64_t *sm_off,
                      const int64_t *dd_off, const uint8_t *codes, const uint8_t *sm, const float *dd, uint16_t *w,
                      int threads) {
    (void)isa; (void)k; (void)n; (void)types; (void)code_off; (void)sm_off; (void)dd_off; (void)codes; (void)sm;
    (void)dd; (void)w; (void)threads;
}
#endif
