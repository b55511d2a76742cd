/* codes_mm: x [m, k] bf16 @ Wᵀ -> y [m, n] bf16, where W is a GGUF model's Q4_K / Q6_K matrix held as its codes.
 *
 * A model converted from a Q4_K_M GGUF has bf16 weights w = bf16(fl32(D·q − M)), with q the 4- or 6-bit code and
 * D, M its sub-block's scale and offset (gguf-py's dequantizer; D·q is exact in fp32, so one fused multiply-add gives
 * the same fp32 value). Rebuilding w from the codes inside the product reads 4.75 (Q4_K) or 8.6 (Q6_K) bits per weight
 * instead of 16 and multiplies by the *same* bf16 values: the model is unchanged, only its storage is smaller.
 *
 * One AMX B tile per (block of 16 outputs j, block of 32 inputs t): 16 rows of 32 bf16, row r holding inputs 2r and
 * 2r + 1 of each output n' at element e = 2n' + (k & 1). Its codes:
 *   Q4_K  256 bytes, byte 32r + e = q[r][e] | q[r + 8][e] << 4 (r < 8); 32 bytes sc[16] | m[16] (6-bit);
 *         per superblock of 256 inputs, 32 floats d[16] | dmin[16]:  D = d·sc, M = dmin·m  (sub-block = 32 inputs)
 *   Q6_K  512 bytes, int8 q − 32 at 32r + e; 32 int8 sc[2][16] (sub-blocks of 16 inputs: rows r < 8, r ≥ 8);
 *         per superblock, 16 floats d[16]:  D = d·sc, M = 0
 * Every row of x takes the same instruction sequence whatever m is, so each output row is bit-stable.
 * Without AMX the same tiles run on codes_mm_avx (codes_mm_avx.c); codes_isa says which variants run here.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

int codes_isa(void) {
#if KERNELS_X86
    int avx2 = cpu_avx2(), avx512 = cpu_avx512() && __builtin_cpu_supports("avx512bf16");
    int amx = KERNELS_AMX && avx512 && CPU_AMX_TILE() && CPU_AMX_BF16() && amx_granted();
    return avx2 | avx512 << 1 | amx << 2;
#else
    return 0;
#endif
}

#if KERNELS_AMX
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

int amx_granted(void) { /* Linux hands out AMX tile state only on request */
    static int granted = -1;
    if (granted < 0) granted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    return granted;
}

#define T __attribute__((target(T_AMX_BF16)))
/* gcc's tile loads and stores are asm that names no memory: a compiler barrier keeps the stores of what they read
 * before them, and the reads of what they wrote after */
#define TILE_FENCE() __asm__ volatile("" ::: "memory")

/* tmm0 / tmm1: x rows 0..15 / 16..31 (32 inputs each); tmm2, tmm5: decoded B tiles; tmm3 / tmm4 (and tmm6 / tmm7 for a
 * second block of outputs): the outputs */
T static void configure(int m) {
    amx_tilecfg c = {0};
    int m0 = m < 16 ? m : 16, m1 = m - m0;
    c.palette = 1;
    c.rows[0] = c.rows[3] = c.rows[6] = (uint8_t)m0;
    c.colsb[0] = c.colsb[3] = c.colsb[6] = 64;
    c.rows[2] = c.rows[5] = 16;
    c.colsb[2] = c.colsb[5] = 64;
    if (m1) {
        c.rows[1] = c.rows[4] = c.rows[7] = (uint8_t)m1;
        c.colsb[1] = c.colsb[4] = c.colsb[7] = 64;
    }
    _tile_loadconfig(&c);
}

T static inline __m512 pairs(__m512 v, int hi) { /* lane e of the result = v[8·hi + e/2]: each output twice */
    const __m512i lo_idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return _mm512_permutexvar_ps(_mm512_add_epi32(lo_idx, _mm512_set1_epi32(8 * hi)), v);
}

T static inline __m512 u8_ps(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)); }
T static inline __m512 i8_ps(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }

/* one B row from 32 codes (as bytes): w = D·q − M, rounded to bf16 (RNE) */
T static inline void q4_row(uint16_t *dst, __m256i q, __m512 d0, __m512 d1, __m512 m0, __m512 m1) {
    __m512 lo = _mm512_fmsub_ps(d0, u8_ps(_mm256_castsi256_si128(q)), m0);
    __m512 hi = _mm512_fmsub_ps(d1, u8_ps(_mm256_extracti128_si256(q, 1)), m1);
    _mm512_store_si512(dst, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

T static void decode_q4(const uint8_t *q, const uint8_t *sm, const float *dd, uint16_t *b) {
    __m512 D = _mm512_mul_ps(_mm512_loadu_ps(dd), u8_ps(_mm_loadu_si128((const __m128i *)sm)));
    __m512 M = _mm512_mul_ps(_mm512_loadu_ps(dd + 16), u8_ps(_mm_loadu_si128((const __m128i *)(sm + 16))));
    __m512 d0 = pairs(D, 0), d1 = pairs(D, 1), m0 = pairs(M, 0), m1 = pairs(M, 1);
    const __m256i nib = _mm256_set1_epi8(0x0f);
    for (int r = 0; r < 8; r++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * r));
        q4_row(b + 32 * r, _mm256_and_si256(v, nib), d0, d1, m0, m1);
        q4_row(b + 32 * (r + 8), _mm256_and_si256(_mm256_srli_epi16(v, 4), nib), d0, d1, m0, m1);
    }
}

T static void decode_q6(const int8_t *q, const int8_t *sc, const float *dd, uint16_t *b) {
    __m512 d = _mm512_loadu_ps(dd);
    for (int h = 0; h < 2; h++) {
        __m512 D = _mm512_mul_ps(d, i8_ps(_mm_loadu_si128((const __m128i *)(sc + 16 * h))));
        __m512 d0 = pairs(D, 0), d1 = pairs(D, 1);
        for (int r = 8 * h; r < 8 * h + 8; r++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * r));
            __m512 lo = _mm512_mul_ps(d0, i8_ps(_mm256_castsi256_si128(v)));
            __m512 hi = _mm512_mul_ps(d1, i8_ps(_mm256_extracti128_si256(v, 1)));
            _mm512_store_si512(b + 32 * r, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

#ifndef AHEAD
#define AHEAD 1024
#endif

/* tile t of output block j, decoded into b [16 x 32] bf16 */
T static inline void decode_tile(int type, const uint8_t *q, const uint8_t *s, const float *dd, int t, uint16_t *b) {
    int bytes = type == 0 ? 256 : 512;  /* prefetch the codes AHEAD bytes on: one thread streams too few misses alone */
    for (int l = 0; l < bytes; l += 64) __builtin_prefetch((const char *)q + bytes * t + AHEAD + l, 0, 3);
    __builtin_prefetch((const char *)s + 32 * t + AHEAD / 8, 0, 3);
    if (type == 0)
        decode_q4(q + 256 * t, s + 32 * t, dd + 32 * (t / 8), b);
    else
        decode_q6((const int8_t *)q + 512 * t, (const int8_t *)s + 32 * t, dd + 16 * (t / 8), b);
}

#define CHUNK 8  /* tiles decoded ahead of their products when x fits one group (8 KB: stays in L1) */

/* C += x[rows] · B over tiles t0 .. t0 + count (decoded in b, tile t at b + 512 (t - t0)). B alternates between tmm2
 * and tmm5 (tiles are not renamed); rows 16.. of the group go through tmm1 / tmm4. Same sums in the same order
 * however the tiles are chunked */
T static void products(const uint16_t *x, int rows, int k, int t0, int count, const uint16_t *b) {
    TILE_FENCE();
    for (int i = 0; i < count; i++) {
        int t = t0 + i;
        if (t & 1) _tile_loadd(5, b + 512 * i, 64); else _tile_loadd(2, b + 512 * i, 64);
        _tile_loadd(0, x + 32 * t, 2 * k);
        if (t & 1) _tile_dpbf16ps(3, 0, 5); else _tile_dpbf16ps(3, 0, 2);
        if (rows > 16) {
            _tile_loadd(1, x + (size_t)16 * k + 32 * t, 2 * k);
            if (t & 1) _tile_dpbf16ps(4, 1, 5); else _tile_dpbf16ps(4, 1, 2);
        }
    }
    TILE_FENCE();
}

T static void zero_c(int rows) {
    _tile_zero(3);
    if (rows > 16) _tile_zero(4);
}

/* 16 fp32 columns of `rows` rows (stride 16) -> y rows [g, g + rows), columns of block j, rounded to bf16 */
T static void store_rows(const float *c, int rows, uint16_t *y, int n, int g, int j) {
    for (int i = 0; i < rows; i++)
        _mm256_storeu_si256((__m256i *)(y + (size_t)(g + i) * n + 16 * j),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(c + 16 * i)));
}

T static void store_c(int rows, float *c, uint16_t *y, int n, int g, int j) {
    TILE_FENCE();
    _tile_stored(3, c, 64);
    if (rows > 16) _tile_stored(4, c + 16 * 16, 64);
    TILE_FENCE();
    store_rows(c, rows, y, n, g, j);
}

/* x [m, k] -> per group of 32 rows, per tile, its rows' 32 inputs side by side (one contiguous A tile) */
static void pack_rows(const uint16_t *x, int m, int k, uint16_t *xp) {
    int tiles = k / 32;
    for (int g = 0; g < m; g += 32) {
        int rows = m - g < 32 ? m - g : 32;
        for (int t = 0; t < tiles; t++)
            for (int r = 0; r < rows; r++)
                memcpy(xp + (size_t)g * k + ((size_t)t * rows + r) * 32, x + (size_t)(g + r) * k + 32 * t, 64);
    }
}

/* C (tmm3/4: block j0, tmm6/7: block j1) = packed x[rows] · B over all tiles: each A tile serves two B tiles and each
 * B tile two A tiles; every output element sums the same products in the same order as `products` */
T static void products_pair(const uint16_t *xp, int rows, int tiles, const uint16_t *b0, const uint16_t *b1) {
    TILE_FENCE();
    _tile_zero(3);
    _tile_zero(6);
    if (rows > 16) {
        _tile_zero(4);
        _tile_zero(7);
    }
    for (int t = 0; t < tiles; t++) {
        const uint16_t *a = xp + (size_t)t * rows * 32;
        _tile_loadd(0, a, 64);
        _tile_loadd(2, b0 + 512 * t, 64);
        _tile_loadd(5, b1 + 512 * t, 64);
        _tile_dpbf16ps(3, 0, 2);
        _tile_dpbf16ps(6, 0, 5);
        if (rows > 16) {
            _tile_loadd(1, a + 16 * 32, 64);
            _tile_dpbf16ps(4, 1, 2);
            _tile_dpbf16ps(7, 1, 5);
        }
    }
    TILE_FENCE();
}

T static void store_pair(int rows, float *c, uint16_t *y, int n, int g, int j0, int j1) {
    store_c(rows, c, y, n, g, j0);
    TILE_FENCE();
    _tile_stored(6, c, 64);
    if (rows > 16) _tile_stored(7, c + 16 * 16, 64);
    TILE_FENCE();
    if (j1 != j0) store_rows(c, rows, y, n, g, j1);
}

T static void decode_block(const uint8_t *types, const int64_t *code_off, const int64_t *sm_off, const int64_t *dd_off,
                         const uint8_t *codes, const uint8_t *sm, const float *dd, int j, int tiles, uint16_t *b) {
    for (int t = 0; t < tiles; t++)
        decode_tile(types[j], codes + code_off[j], sm + sm_off[j], dd + dd_off[j], t, b + 512 * t);
}

/* per output block j: types[j] (0 Q4_K, 1 Q6_K) and its offsets into codes, sm (bytes) and dd (floats).
 * Up to 32 rows: the tiles are decoded CHUNK at a time between the products. More rows: two blocks' tiles are decoded
 * whole (2 · k/32 KB, L2) and multiplied with each group of 32 rows of x, packed tile by tile */
T void codes_mm(const uint16_t *x, int m, int k, int n, const uint8_t *types, const int64_t *code_off,
              const int64_t *sm_off, const int64_t *dd_off, const uint8_t *codes, const uint8_t *sm, const float *dd,
              uint16_t *y, int threads) {
    int blocks = n / 16, tiles = k / 32, whole = m > 32;
    uint16_t *xp = whole ? aligned_alloc(64, (size_t)m * k * 2) : NULL;
    if (whole) pack_rows(x, m, k, xp);
    #pragma omp parallel num_threads(threads)
    {
        uint16_t *b = aligned_alloc(64, (size_t)(whole ? 2 * tiles : CHUNK) * 1024);
        float c[32 * 16] __attribute__((aligned(64)));
        int configured = -1;
        if (!whole) {
            configure(configured = m);
            #pragma omp for schedule(static)
            for (int j = 0; j < blocks; j++) {
                const uint8_t *q = codes + code_off[j], *s = sm + sm_off[j];
                const float *d = dd + dd_off[j];
                zero_c(m);
                for (int t0 = 0; t0 < tiles; t0 += CHUNK) {
                    int count = tiles - t0 < CHUNK ? tiles - t0 : CHUNK;
                    for (int i = 0; i < count; i++) decode_tile(types[j], q, s, d, t0 + i, b + 512 * i);
                    products(x, m, k, t0, count, b);
                }
                store_c(m, c, y, n, 0, j);
            }
        } else {
            #pragma omp for schedule(static)
            for (int j0 = 0; j0 < blocks; j0 += 2) {
                int j1 = j0 + 1 < blocks ? j0 + 1 : j0;
                decode_block(types, code_off, sm_off, dd_off, codes, sm, dd, j0, tiles, b);
                decode_block(types, code_off, sm_off, dd_off, codes, sm, dd, j1, tiles, b + 512 * tiles);
                for (int g = 0; g < m; g += 32) {
                    int rows = m - g < 32 ? m - g : 32;
                    if (rows != configured) configure(configured = rows);
                    products_pair(xp + (size_t)g * k, rows, tiles, b, b + 512 * tiles);
                    store_pair(rows, c, y, n, g, j0, j1);
                }
            }
        }
        if (configured >= 0) _tile_release();
        free(b);
    }
    free(xp);
}

/* the whole matrix decoded to bf16 [n, k] (the load-time exactness check and the tests) */
T void codes_decode(int k, int n, const uint8_t *types, const int64_t *code_off, const int64_t *sm_off,
                  const int64_t *dd_off, const uint8_t *codes, const uint8_t *sm, const float *dd, uint16_t *w,
                  int threads) {
    int blocks = n / 16, tiles = k / 32;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int j = 0; j < blocks; j++) {
        uint16_t b[16 * 32] __attribute__((aligned(64)));
        for (int t = 0; t < tiles; t++) {
            decode_tile(types[j], codes + code_off[j], sm + sm_off[j], dd + dd_off[j], t, b);
            for (int r = 0; r < 16; r++)
                for (int e = 0; e < 32; e++)
                    w[(size_t)(16 * j + e / 2) * k + 32 * t + 2 * r + (e & 1)] = b[32 * r + e];
        }
    }
}

#else
int amx_granted(void) { return 0; }
void codes_mm(const uint16_t *x, int m, int k, int n, const uint8_t *types, const int64_t *code_off,
              const int64_t *sm_off, const int64_t *dd_off, const uint8_t *codes, const uint8_t *sm, const float *dd,
              uint16_t *y, int threads) {
    (void)x; (void)m; (void)k; (void)n; (void)types; (void)code_off; (void)sm_off; (void)dd_off; (void)codes;
    (void)sm; (void)dd; (void)y; (void)threads;
}
void codes_decode(int k, int n, const uint8_t *types, const int64_t *code_off, const int64_t *sm_off,
                  const int64_t *dd_off, const uint8_t *codes, const uint8_t *sm, const float *dd, uint16_t *w,
                  int threads) {
    (void)k; (void)n; (void)types; (void)code_off; (void)sm_off; (void)dd_off; (void)codes; (void)sm; (void)dd;
    (void)w; (void)threads;
}
#endif
