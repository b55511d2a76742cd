/* q8_mm: y [m, n] fp32 = x [m, k] fp32 @ Wᵀ, W a GGUF matrix kept as its raw blocks (one output row after another,
 * each row in its own type), in llama.cpp's arithmetic: each row of x is quantized to int8 (per 256 inputs with the
 * sums of every 16 for the K types, Q8_K; per 32 with their sum for the 32-input types, Q8_0 / Q8_1), and every block
 * is an integer dot product (`vpmaddubsw` u8 × s8 -> i16 pairs, `vpmaddwd` -> i32) scaled once in fp32.
 *   Q4_K  w = d·sc_j·q − dmin·m_j           Σ = d·dx·Σ_j sc_j·(q·qx)_j − dmin·dx·Σ_j m_j·bsum_j
 *   Q6_K  w = d·sc_j·(q − 32)               Σ = d·dx·(Σ_j sc_j·(q·qx)_j − 32·Σ_j sc_j·bsum_j)
 *   Q8_0  w = d·q                           Σ = d·dx·Σ |q|·sign(qx, q)
 *   Q4_0 / Q5_0  w = d·(q − 8 | 16)         Σ = d·dx·(q·qx − (8 | 16)·Σqx)
 *   Q4_1 / Q5_1  w = d·q + m                Σ = d·dx·q·qx + m·dx·Σqx
 * Row-stable: a row's quantization depends on that row alone, each (row, output) dot product is one thread's fixed
 * sequence of operations (outputs split over threads, rows taken up to RB at a time, each row's operations the same in
 * any pass), so a tree's verify rows equal 1-token passes bit for bit, at any thread count.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q6_K = 14 };  /* ggml's type ids */
#define RB 16  /* most rows per pass over one output's blocks (a verify's tree + 1 fits one pass) */
#define OB 8   /* outputs per scheduling unit, and per interleaved group (X8) */
/* an interleaved group's bytes per 32 inputs (Q4_K / Q6_K: an eighth of a superblock's) */
#define X8_BYTES(type) ((type) == Q8_0 ? 272 : (type) == Q4_1 ? 160 : (type) == Q4_K ? 148 : (type) == Q6_K ? 210 : 144)

typedef struct {
    int k;
    int8_t *q256; float *d256; int16_t *bs16;  /* Q8_K: [m][k], [m][k/256], [m][k/16] */
    int8_t *q32; float *d32; int32_t *s32;     /* Q8_0 / Q8_1: [m][k], [m][k/32], [m][k/32] */
} Act;

/* one row's int8 codes per block of `bs` inputs: d = max|x| / 127, q = rint(x · 127 / max|x|) */
static void quant_blocks(const float *x, int k, int bs, int8_t *q, float *d) {
    for (int b = 0; b < k / bs; b++) {
        const float *v = x + bs * b;
        float amax = 0.f;
        for (int l = 0; l < bs; l++) amax = fmaxf(amax, fabsf(v[l]));
        float id = amax > 0.f ? 127.f / amax : 0.f;
        d[b] = amax / 127.f;
        for (int l = 0; l < bs; l++) q[bs * b + l] = (int8_t)lrintf(v[l] * id);
    }
}

static void quant_row(const float *x, const Act *a, int i) {
    int k = a->k;
    if (a->q256) {
        quant_blocks(x, k, 256, a->q256 + (size_t)i * k, a->d256 + (size_t)i * (k / 256));
        for (int g = 0; g < k / 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += a->q256[(size_t)i * k + 16 * g + l];
            a->bs16[(size_t)i * (k / 16) + g] = (int16_t)s;
        }
    }
    if (a->q32) {
        quant_blocks(x, k, 32, a->q32 + (size_t)i * k, a->d32 + (size_t)i * (k / 32));
        for (int g = 0; g < k / 32; g++) {
            int s = 0;
            for (int l = 0; l < 32; l++) s += a->q32[(size_t)i * k + 32 * g + l];
            a->s32[(size_t)i * (k / 32) + g] = s;
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 10)
#include <immintrin.h>
#define FN __attribute__((target(TARGET)))
#define INL __attribute__((target(TARGET), always_inline)) static inline

#define TARGET "avx2,fma,f16c"
#define N(f) f##_avx2
#define DPWSSD(a, p, s) _mm256_add_epi32(a, _mm256_madd_epi16(p, s))
#define DPBUSD(q, x) _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), _mm256_set1_epi16(1))
#define DPBUSDA(a, q, x) _mm256_add_epi32(a, DPBUSD(q, x))
#include "gguf_q8_dot.h"
#undef TARGET
#undef N
#undef DPWSSD
#undef DPBUSD
#undef DPBUSDA

#if defined(__clang__) || __GNUC__ >= 11  /* AVX-VNNI: gcc 11, clang 12 */
#define AVXVNNI_HERE() __builtin_cpu_supports("avxvnni")
#define TARGET "avx2,fma,f16c,avxvnni"
#define N(f) f##_avxvnni
#define DPWSSD(a, p, s) _mm256_dpwssd_avx_epi32(a, p, s)
#define DPBUSD(q, x) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q, x)
#define DPBUSDA(a, q, x) _mm256_dpbusd_avx_epi32(a, q, x)
#define U8_SAFE
#include "gguf_q8_dot.h"
#undef TARGET
#undef N
#undef DPWSSD
#undef DPBUSD
#undef DPBUSDA
#undef U8_SAFE
#else
#define AVXVNNI_HERE() 0
#define dot_avxvnni dot_avx2
#define dot8_avxvnni dot8_avx2
#endif

#define TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define N(f) f##_avx512
#define DPWSSD(a, p, s) _mm256_dpwssd_epi32(a, p, s)
#define DPBUSD(q, x) _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, x)
#define DPBUSDA(a, q, x) _mm256_dpbusd_epi32(a, q, x)
#define WIDE
#define U8_SAFE
#include "gguf_q8_dot.h"

/* AMX-INT8 (variant V_AMX: V_AVX512's kernels otherwise): a pass of at least AMX_ROWS rows takes the K types' per-sub-block sums from tiles instead of vpdpbusd:
 * A = the rows' int8 inputs of one sub-block (R × 32, or × 16 for Q6_K's), B = the interleaved groups as they unpack
 * (row t: 16 outputs × inputs 4t .. 4t+3, the VNNI layout), C = `tdpbsud` A · B. The same exact integers go through
 * the same scales, so every output equals the zmm path's bit for bit, at any row count. */
#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__linux__)
#define AMX_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")))
#define AMX_HERE() codes_ok()
#define AMX_ROWS 8
int codes_ok(void);

typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } Tiles;

/* two sets (tmm0-2, tmm3-5) of A [R × inputs], B [inputs / 4 × 64], C [R × 64] */
AMX_FN static void tiles_for(int R, int inputs) {
    Tiles c = {0};
    c.palette = 1;
    for (int s = 0; s < 2; s++) {
        c.rows[3 * s] = (uint8_t)R, c.colsb[3 * s] = (uint16_t)inputs;
        c.rows[3 * s + 1] = (uint8_t)(inputs / 4), c.colsb[3 * s + 1] = 64;
        c.rows[3 * s + 2] = (uint8_t)R, c.colsb[3 * s + 2] = 64;
    }
    _tile_loadconfig(&c);
}

/* tile C = tile A (x rows, stride k) · tile B (the groups as unpacked in b), stored to c [R][16]; tile numbers are
 * literals (gcc pastes them into the instruction) */
#define AMX_SUMS(A, B, C, b, xa, k, c) do { \
    _tile_loadd(B, b, 64); _tile_loadd(A, xa, k); _tile_zero(C); _tile_dpbsud(C, A, B); _tile_stored(C, c, 64); } while (0)

AMX_FN static void amx_q4k(int R, const uint8_t *g0, const uint8_t *g1, const Act *a, int r0, float *y, int n) {
    int k = a->k, nsb = k / 256;
    _Alignas(64) uint8_t b[8][512];
    _Alignas(64) int32_t c[8][RB * 16];
    __m512 acc[RB];
    __m512i is[RB];
    tiles_for(R, 32);
    for (int i = 0; i < R; i++) acc[i] = _mm512_setzero_ps();
    for (int sb = 0; sb < nsb; sb++) {
        int p = 8 * X8_BYTES(Q4_K) * sb;
        for (int j = 0; j < 8; j++) {  /* unpack the superblock's 8 B tiles, then their products, then the scales */
            __m512i w[8];
            nibble_groups16_avx512(g0, g1, p + 128 * j, w);
            for (int t = 0; t < 8; t++) _mm512_store_si512(b[j] + 64 * t, w[t]);
        }
        const int8_t *xa = a->q256 + (size_t)r0 * k + 256 * sb;
        for (int j = 0; j < 8; j += 2) {
            AMX_SUMS(0, 1, 2, b[j], xa + 32 * j, k, c[j]);
            AMX_SUMS(3, 4, 5, b[j + 1], xa + 32 * j + 32, k, c[j + 1]);
        }
        for (int i = 0; i < R; i++) is[i] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i sc = _mm512_cvtepu8_epi32(pair8_avx512(g0, g1, p + 1024 + 8 * j));
            for (int i = 0; i < R; i++)
                is[i] = _mm512_add_epi32(is[i], _mm512_mullo_epi32(_mm512_load_si512(c[j] + 16 * i), sc));
        }
        q4k_end16_avx512(R, g0, g1, p, a, r0, sb, is, acc);
    }
    for (int i = 0; i < R; i++) _mm512_storeu_ps(y + (size_t)(r0 + i) * n, acc[i]);
}

AMX_FN static void amx_q6k(int R, const uint8_t *g0, const uint8_t *g1, const Act *a, int r0, float *y, int n) {
    int k = a->k, nsb = k / 256;
    _Alignas(64) uint8_t b[16][256];  /* per sub-block of 16 inputs: 4 groups × 16 outputs */
    _Alignas(64) int32_t c[16][RB * 16];
    __m512 acc[RB];
    __m512i is[RB];
    tiles_for(R, 16);
    for (int i = 0; i < R; i++) acc[i] = _mm512_setzero_ps();
    for (int sb = 0; sb < nsb; sb++) {
        int p = 8 * X8_BYTES(Q6_K) * sb;
        for (int ch = 0; ch < 8; ch++) {
            __m512i w[8];
            q6k_groups16_avx512(g0, g1, p + 192 * ch, w);
            for (int t = 0; t < 8; t++) _mm512_store_si512(b[2 * ch + t / 4] + 64 * (t % 4), w[t]);
        }
        const int8_t *xa = a->q256 + (size_t)r0 * k + 256 * sb;
        for (int j = 0; j < 16; j += 2) {
            AMX_SUMS(0, 1, 2, b[j], xa + 16 * j, k, c[j]);
            AMX_SUMS(3, 4, 5, b[j + 1], xa + 16 * j + 16, k, c[j + 1]);
        }
        for (int i = 0; i < R; i++) is[i] = _mm512_setzero_si512();
        for (int ch = 0; ch < 8; ch++) {
            __m512i sc0 = _mm512_cvtepi8_epi32(pair8_avx512(g0, g1, p + 1536 + 16 * ch));
            __m512i sc1 = _mm512_cvtepi8_epi32(pair8_avx512(g0, g1, p + 1536 + 16 * ch + 8));
            for (int i = 0; i < R; i++)
                is[i] = _mm512_add_epi32(is[i], q6k_scaled16_avx512(_mm512_load_si512(c[2 * ch] + 16 * i), _mm512_load_si512(c[2 * ch + 1] + 16 * i),
                                                                    sc0, sc1, a->bs16 + (size_t)(r0 + i) * (k / 16) + 16 * sb + 2 * ch));
        }
        q6k_end16_avx512(R, g0, g1, p, a, r0, sb, is, acc);
    }
    for (int i = 0; i < R; i++) _mm512_storeu_ps(y + (size_t)(r0 + i) * n, acc[i]);
}

/* whether a pass of R rows over a K-type pair of groups runs on AMX (and did: 1 -> its tiles are released after) */
static int amx_dot16(int type, int R, const uint8_t *g0, const uint8_t *g1, const Act *a, int r0, float *y, int n) {
    if (R < AMX_ROWS || (type != Q4_K && type != Q6_K))
        return 0;
    if (type == Q4_K) amx_q4k(R, g0, g1, a, r0, y, n); else amx_q6k(R, g0, g1, a, r0, y, n);
    return 1;
}

AMX_FN static void amx_release(void) { _tile_release(); }
#else
#define AMX_HERE() 0
static int amx_dot16(int type, int R, const uint8_t *g0, const uint8_t *g1, const Act *a, int r0, float *y, int n) {
    (void)type; (void)R; (void)g0; (void)g1; (void)a; (void)r0; (void)y; (void)n;
    return 0;
}
static void amx_release(void) {}
#endif

enum { V_AVX2 = 0, V_AVXVNNI = 1, V_AVX512 = 2, V_AMX = 3 };  /* q8_mm's variants; q8_isa's bit (1 << v): runs here */

int q8_isa(void) {
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
        return 0;
    int avx512 = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512bw");
    return 1 | (AVXVNNI_HERE() ? 2 : 0) | (avx512 ? 4 : 0) | (avx512 && AMX_HERE() ? 8 : 0);
}

/* the blocks PF bytes past an output row's, as many as the row holds: one core alone keeps too few misses in flight
 * to stream them at the memory's rate (as codes_mm) */
#define PF 2048
static inline void ahead(const uint8_t *row, int64_t len) {
    for (int64_t at = 0; at < len; at += 64) _mm_prefetch((const char *)row + PF + at, _MM_HINT_T0);
}

static void dot(int variant, int type, int R, const uint8_t *w, const Act *a, int r0, float *y, int n) {
    if (variant >= V_AVX512) dot_avx512(type, R, w, a, r0, y, n);
    else if (variant == V_AVXVNNI) dot_avxvnni(type, R, w, a, r0, y, n);
    else dot_avx2(type, R, w, a, r0, y, n);
}

static void dot8(int variant, int type, int R, const uint8_t *g, const Act *a, int r0, float *y, int n) {
    if (variant >= V_AVX512) dot8_avx512(type, R, g, a, r0, y, n);
    else if (variant == V_AVXVNNI) dot8_avxvnni(type, R, g, a, r0, y, n);
    else dot8_avx2(type, R, g, a, r0, y, n);
}

/* whether interleaved groups g (even) and g + 1 of an n-output matrix go through zmm together (AVX512-VNNI, both
 * whole and interleaved, one type) */
static int paired(int variant, const int64_t *x8_off, const uint8_t *types, int g, int n) {
    return variant >= V_AVX512 && x8_off && (g + 2) * OB <= n && x8_off[g] >= 0 && x8_off[g + 1] >= 0 &&
           types[g * OB] == types[(g + 1) * OB];
}

/* x [m, k] fp32; types [n] (ggml ids), off [n] byte offsets of each output row's blocks in raw; y [m, n] fp32;
 * x8_off [n / OB] (or NULL): where output group g's interleaved blocks start in x8, -1 for a group that has none */
void q8_mm(int variant, const float *x, int m, int k, int n, const uint8_t *types, const int64_t *off,
           const uint8_t *raw, int kinds, const uint8_t *x8, const int64_t *x8_off, float *y, int threads) {
    Act a = {k, NULL, NULL, NULL, NULL, NULL, NULL};
    int passes = (m + RB - 1) / RB, per_pass = (m + passes - 1) / passes;  /* even passes: 17 rows = 9 + 8 */
    if (kinds & 1) {
        a.q256 = malloc((size_t)m * k), a.d256 = malloc((size_t)m * (k / 256) * 4), a.bs16 = malloc((size_t)m * (k / 16) * 2);
    }
    if (kinds & 2) {
        a.q32 = malloc((size_t)m * k), a.d32 = malloc((size_t)m * (k / 32) * 4), a.s32 = malloc((size_t)m * (k / 32) * 4);
    }
    #pragma omp parallel num_threads(threads)
    {
        int used_amx = 0;
        #pragma omp for schedule(static)
        for (int i = 0; i < m; i++) quant_row(x + (size_t)i * k, &a, i);
        #pragma omp for schedule(static)
        for (int o0 = 0; o0 < n; o0 += OB) {
            int g = o0 / OB;
            int64_t gx = x8_off && o0 + OB <= n ? x8_off[g] : -1, gbytes = (int64_t)(k / 32) * X8_BYTES(types[o0]);
            if (g % 2 == 1 && paired(variant, x8_off, types, g - 1, n))
                continue;  /* done with the group before it */
            if (g % 2 == 0 && paired(variant, x8_off, types, g, n)) {  /* this group and the next in zmm */
                int64_t g1 = x8_off[g + 1];
                ahead(x8 + gx, gbytes);
                ahead(x8 + g1, gbytes);
                for (int r0 = 0; r0 < m; r0 += per_pass) {
                    int R = r0 + per_pass < m ? per_pass : m - r0;
                    if (variant == V_AMX && amx_dot16(types[o0], R, x8 + gx, x8 + g1, &a, r0, y + o0, n)) used_amx = 1;
                    else dot16_avx512(types[o0], R, x8 + gx, x8 + g1, &a, r0, y + o0, n);
                }
                continue;
            }
            if (gx >= 0) {
                ahead(x8 + gx, gbytes);
                for (int r0 = 0; r0 < m; r0 += per_pass)
                    dot8(variant, types[o0], r0 + per_pass < m ? per_pass : m - r0, x8 + gx, &a, r0, y + o0, n);
                continue;
            }
            for (int r0 = 0; r0 < m; r0 += per_pass)
                for (int o = o0; o < o0 + OB && o < n; o++) {
                    if (r0 == 0) ahead(raw + off[o], o + 1 < n ? off[o + 1] - off[o] : 0);
                    dot(variant, types[o], r0 + per_pass < m ? per_pass : m - r0, raw + off[o], &a, r0, y + o, n);
                }
        }
        if (used_amx) amx_release();
    }
    free(a.q256), free(a.d256), free(a.bs16), free(a.q32), free(a.d32), free(a.s32);
}

#else
int q8_isa(void) { return 0; }
void q8_mm(int variant, const float *x, int m, int k, int n, const uint8_t *types, const int64_t *off,
           const uint8_t *raw, int kinds, const uint8_t *x8, const int64_t *x8_off, float *y, int threads) {
    (void)variant; (void)x; (void)m; (void)k; (void)n; (void)types; (void)off; (void)raw; (void)kinds; (void)y; (void)threads;
    (void)x8; (void)x8_off;
}
#endif
