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
 * Variants (q8_isa): q8_dot.h's dot products compiled once per target (AVX2, AVX-VNNI, AVX512-VNNI: the same integer
 * sums by other instructions, scaled in the same order, so the same floats), and q8_amx.h's on AMX-INT8 tiles.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

enum { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q6_K = 14 };  /* ggml's type ids */
#define RB 16  /* most rows per pass over one output's blocks (a verify's tree + 1 fits one pass) */
#define OB 8   /* outputs per scheduling unit, and per interleaved group (X8) */
/* an interleaved group's bytes per 32 inputs (Q4_K / Q6_K: an eighth of a superblock's) */
#define X8_BYTES(type) ((type) == Q8_0 ? 272 : (type) == Q5_0 ? 176 : (type) == Q4_1 ? 160 : (type) == Q4_K ? 148 : (type) == Q6_K ? 210 : 144)

typedef struct {
    int k;
    int8_t *q256; float *d256; int16_t *bs16;  /* Q8_K: [m][k], [m][k/256], [m][k/16] */
    int8_t *q32; float *d32; int32_t *s32;     /* Q8_0 / Q8_1: [m][k], [m][k/32], [m][k/32] */
    int stream;  /* bytes ahead of the blocks in use that the dot products prefetch (0: none): q8_stream_of() */
} Act;

#if KERNELS_X86
#include <immintrin.h>
#define FN __attribute__((target(TARGET)))
#define INL __attribute__((target(TARGET), always_inline)) static inline

#define TARGET T_AVX2
/* one row's int8 codes per block of `bs` (32 | 256) inputs: d = max|x| / 127, q = rint(x · 127 / max|x|), in
 * vectors: vmaxps keeps the non-NaN operand as fmaxf, vcvtps2dq rounds to nearest even as lrintf (the same codes) */
FN static void quant_blocks(const float *x, int k, int bs, int8_t *q, float *d) {
    const __m256 sign = _mm256_set1_ps(-0.f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int b = 0; b < k / bs; b++) {
        const float *v = x + bs * b;
        __m256 m = _mm256_setzero_ps();
        for (int l = 0; l < bs; l += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(v + l)), m);
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
        __m256 id = _mm256_set1_ps(amax > 0.f ? 127.f / amax : 0.f);
        d[b] = amax / 127.f;
        for (int l = 0; l < bs; l += 32) {
            __m256i c[4];
            for (int u = 0; u < 4; u++) c[u] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + l + 8 * u), id));
            __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
            _mm256_storeu_si256((__m256i *)(q + bs * b + l), _mm256_permutevar8x32_epi32(w, order));
        }
    }
}

FN static void quant_row(const float *x, const Act *a, int i) {
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

/* the cache lines of len bytes of blocks pf bytes past p (none where pf is 0): q8_mm's burst before a group's dot
 * products, and the dot products' stream ahead of the blocks they read (a->stream) */
static inline void ahead(const uint8_t *p, int64_t len, int pf) {  /* the builtin: gcc 12 drops an inlined _mm_prefetch */
    for (int64_t at = 0; pf && at < len; at += 64) __builtin_prefetch(p + pf + at, 0, 3);
}

/* ahead() of the same len bytes at `at` in two interleaved groups, first g0's: a zmm pair's blocks (dot_x16) */
static inline void ahead2(const uint8_t *g0, const uint8_t *g1, int64_t at, int64_t len, int pf) {
    ahead(g0 + at, len, pf), ahead(g1 + at, len, pf);
}

#define N(f) f##_avx2
#define DPWSSD(a, p, s) _mm256_add_epi32(a, _mm256_madd_epi16(p, s))
#define DPBUSD(q, x) _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), _mm256_set1_epi16(1))
#define DPBUSDA(a, q, x) _mm256_add_epi32(a, DPBUSD(q, x))
#include "q8_dot.h"
#undef TARGET
#undef N
#undef DPWSSD
#undef DPBUSD
#undef DPBUSDA

#if KERNELS_AVXVNNI
#define AVXVNNI_HERE() CPU_AVXVNNI()
#define TARGET T_AVXVNNI
#define N(f) f##_avxvnni
#define DPWSSD(a, p, s) _mm256_dpwssd_avx_epi32(a, p, s)
#define DPBUSD(q, x) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q, x)
#define DPBUSDA(a, q, x) _mm256_dpbusd_avx_epi32(a, q, x)
#define U8_SAFE
#include "q8_dot.h"
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

#define TARGET T_AVX512VNNI
#define N(f) f##_avx512
#define DPWSSD(a, p, s) _mm256_dpwssd_epi32(a, p, s)
#define DPBUSD(q, x) _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, x)
#define DPBUSDA(a, q, x) _mm256_dpbusd_epi32(a, q, x)
#define WIDE
#define U8_SAFE
#include "q8_dot.h"

#if KERNELS_AMX
#include "q8_amx.h"
#else
#define AMX_HERE() 0
#define AMX_ROWS (RB + 1)
static void dot16_amx(int type, int R, const uint8_t *g0, const uint8_t *g1, const Act *a, int r0, float *y, int n,
                      int *tiles) {
    (void)tiles;
    dot16_avx512(type, R, g0, g1, a, r0, y, n);
}
static void amx_release(int tiles) { (void)tiles; }
#endif

enum { V_AVX2 = 0, V_AVXVNNI = 1, V_AVX512 = 2, V_AMX = 3 };  /* q8_mm's variants; q8_isa's bit (1 << v): runs here */

int q8_isa(void) {
    if (!cpu_avx2())
        return 0;
    int avx512 = cpu_avx512() && __builtin_cpu_supports("avx512vnni");
    return 1 | (AVXVNNI_HERE() ? 2 : 0) | (avx512 ? 4 : 0) | (avx512 && AMX_HERE() ? 8 : 0);
}

/* the blocks PF bytes past an output group's, as many as the group holds, in one burst before its dot products: off by
 * default (q8_prefetch_bytes()), since the burst stalls the core on its own misses instead of computing while they
 * arrive, and a small L1 evicts it before use; the stream below fetches the same blocks without stalling.
 * q8_set_prefetch (tuning.py: Q8Tuning.prefetch) sets it. */
#define PF 0
static int pf_bytes = -1;  /* -1: the default; set by q8_set_prefetch */

void q8_set_prefetch(int bytes) { pf_bytes = bytes; }

int q8_prefetch_bytes(void) { return pf_bytes < 0 ? PF : pf_bytes; }

/* the dot products prefetch their blocks STREAM bytes ahead as they go (the next group's where a group ends), on every
 * CPU: the hardware prefetcher alone keeps too few misses in flight for one core's stream of blocks. STREAM_WIDE for
 * the AVX-512 and AMX variants, which get through a group's blocks faster and so must fetch further ahead to hide the
 * same latency. q8_set_stream (Q8Tuning.stream) sets one distance for all; q8_stream_of() */
#define STREAM 2048
#define STREAM_WIDE 16384
static int stream_bytes = -1;  /* -1: the variant's default; set by q8_set_stream */

void q8_set_stream(int bytes) { stream_bytes = bytes; }

int q8_stream_bytes(void) { return stream_bytes; }

static int q8_stream_of(int variant) {
    return stream_bytes >= 0 ? stream_bytes : variant >= V_AVX512 ? STREAM_WIDE : STREAM;
}

/* *setting where set (>= 0), else on_amd on AMD CPUs and elsewhere otherwise */
static int by_vendor(int *setting, int on_amd, int elsewhere) {
    if (*setting < 0) {
        __builtin_cpu_init();
        *setting = __builtin_cpu_is("amd") ? on_amd : elsewhere;
    }
    return *setting;
}

/* AVX512-VNNI pairs two interleaved groups in zmm in calls of at least q8_pair_rows() rows: on AMD, whose cores run
 * 512-bit operations in two halves, the pairing's inserts cost more than they save below 6 rows. Either way the same
 * floats. */
static int pair_rows = -1;  /* -1: by this CPU's vendor; set by q8_set_pair_rows */

void q8_set_pair_rows(int rows) { pair_rows = rows; }

int q8_pair_rows(void) { return by_vendor(&pair_rows, 6, 1); }

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
static int paired(int variant, const int64_t *x8_off, const uint8_t *types, int g, int n, int wide) {
    return variant >= V_AVX512 && wide && x8_off && (g + 2) * OB <= n && x8_off[g] >= 0 && x8_off[g + 1] >= 0 &&
           types[g * OB] == types[(g + 1) * OB];
}

/* two groups' dot products with R rows: AMX-INT8 tiles for the K types from AMX_ROWS rows on, else zmm VNNI (the same
 * integer sums, scaled in the same order: the same floats) */
static void dot16(int variant, int type, int R, const uint8_t *g0, const uint8_t *g1, const Act *a, int r0, float *y,
                  int n, int *tiles) {
    if (variant == V_AMX && R >= AMX_ROWS && (type == Q4_K || type == Q6_K)) dot16_amx(type, R, g0, g1, a, r0, y, n, tiles);
    else dot16_avx512(type, R, g0, g1, a, r0, y, n);
}

/* x [m, k] fp32; types [n] (ggml ids), off [n] byte offsets of each output row's blocks in raw; y [m, n] fp32;
 * x8_off [n / OB] (or NULL): where output group g's interleaved blocks start in x8, -1 for a group that has none */
void q8_mm(int variant, const float *x, int m, int k, int n, const uint8_t *types, const int64_t *off,
           const uint8_t *raw, int kinds, const uint8_t *x8, const int64_t *x8_off, float *y, int threads) {
    Act a = {k, NULL, NULL, NULL, NULL, NULL, NULL, q8_stream_of(variant)};
    int passes = (m + RB - 1) / RB, per_pass = (m + passes - 1) / passes;  /* even passes: 17 rows = 9 + 8 */
    int pf = q8_prefetch_bytes(), wide = m >= q8_pair_rows();  /* read once, before the threads start */
    if (kinds & 1) {
        a.q256 = malloc((size_t)m * k), a.d256 = malloc((size_t)m * (k / 256) * 4), a.bs16 = malloc((size_t)m * (k / 16) * 2);
    }
    if (kinds & 2) {
        a.q32 = malloc((size_t)m * k), a.d32 = malloc((size_t)m * (k / 32) * 4), a.s32 = malloc((size_t)m * (k / 32) * 4);
    }
    #pragma omp parallel num_threads(threads)
    {
        int tiles = 0;  /* the AMX tile rows this thread configured (dot16_amx) */
        #pragma omp for schedule(static)
        for (int i = 0; i < m; i++) quant_row(x + (size_t)i * k, &a, i);
        #pragma omp for schedule(static)
        for (int o0 = 0; o0 < n; o0 += OB) {
            int g = o0 / OB;
            int64_t gx = x8_off && o0 + OB <= n ? x8_off[g] : -1, gbytes = (int64_t)(k / 32) * X8_BYTES(types[o0]);
            if (g % 2 == 1 && paired(variant, x8_off, types, g - 1, n, wide))
                continue;  /* done with the group before it */
            if (g % 2 == 0 && paired(variant, x8_off, types, g, n, wide)) {  /* this group and the next in zmm */
                int64_t g1 = x8_off[g + 1];
                ahead(x8 + gx, gbytes, pf);
                ahead(x8 + g1, gbytes, pf);
                for (int r0 = 0; r0 < m; r0 += per_pass)
                    dot16(variant, types[o0], r0 + per_pass < m ? per_pass : m - r0, x8 + gx, x8 + g1, &a, r0, y + o0, n,
                          &tiles);
                continue;
            }
            if (gx >= 0) {
                ahead(x8 + gx, gbytes, pf);
                for (int r0 = 0; r0 < m; r0 += per_pass)
                    dot8(variant, types[o0], r0 + per_pass < m ? per_pass : m - r0, x8 + gx, &a, r0, y + o0, n);
                continue;
            }
            for (int r0 = 0; r0 < m; r0 += per_pass)
                for (int o = o0; o < o0 + OB && o < n; o++) {
                    if (r0 == 0) ahead(raw + off[o], o + 1 < n ? off[o + 1] - off[o] : 0, pf);
                    dot(variant, types[o], r0 + per_pass < m ? per_pass : m - r0, raw + off[o], &a, r0, y + o, n);
                }
        }
        amx_release(tiles);
    }
    free(a.q256), free(a.d256), free(a.bs16), free(a.q32), free(a.d32), free(a.s32);
}

#else
int q8_isa(void) { return 0; }
void q8_set_prefetch(int bytes) { (void)bytes; }
void q8_set_pair_rows(int rows) { (void)rows; }
void q8_set_stream(int bytes) { (void)bytes; }
int q8_pair_rows(void) { return 0; }
int q8_stream_bytes(void) { return 0; }
int q8_prefetch_bytes(void) { return 0; }
void q8_mm(int variant, const float *x, int m, int k, int n, const uint8_t *types, const int64_t *off,
           const uint8_t *raw, int kinds, const uint8_t *x8, const int64_t *x8_off, float *y, int threads) {
    (void)variant; (void)x; (void)m; (void)k; (void)n; (void)types; (void)off; (void)raw; (void)kinds; (void)y; (void)threads;
    (void)x8; (void)x8_off;
}
#endif
