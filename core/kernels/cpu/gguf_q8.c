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
 * sequence of operations (outputs split over threads, rows taken RB at a time by the same loop whatever m is), so a
 * tree's verify rows equal 1-token passes bit for bit, at any thread count.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q6_K = 14 };  /* ggml's type ids */
#define RB 8   /* rows per pass over one output's blocks */
#define OB 8   /* outputs per scheduling unit */

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
#define T2 __attribute__((target("avx2,fma,f16c")))
#define T2I __attribute__((target("avx2,fma,f16c"), always_inline)) static inline

int q8_ok(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

T2I float f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

T2I float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

T2I __m256i nibbles32(const uint8_t *p) { /* 16 bytes -> 32 codes: low nibbles (inputs 0..15), then high ones */
    __m128i t = _mm_loadu_si128((const __m128i *)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
}

T2I __m256i bits32(const uint8_t *p) { /* 32 bits -> 32 bytes 0x10 where the bit is set (input i: bit i) */
    uint32_t v;
    memcpy(&v, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_and_si256(_mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

/* Σ_j s16_j · (q_j · x_j) over a superblock's 8 vectors of 32 codes q (u8) and inputs x (s8), per i32 lane */
T2I __m256i scaled_dot(const __m256i q[8], const __m256i s16[8], const int8_t *xq) {
    __m256i s = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++)
        s = _mm256_add_epi32(s, _mm256_madd_epi16(
                _mm256_maddubs_epi16(q[j], _mm256_loadu_si256((const __m256i *)(xq + 32 * j))), s16[j]));
    return s;
}

/* Q4_K: 144-byte superblocks (d, dmin fp16; 12 bytes of 6-bit sc, m; 128 bytes of nibbles) */
T2I __m128i scale_min_k4(const uint8_t *q) { /* 16 bytes: sc[0..7], m[0..7] (llama.cpp's unpacking of the 12 bytes) */
    uint32_t u[4];
    memcpy(u, q, 12);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
    uint32_t m_lo = u[1] & k1;
    u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
    u[2] = m_lo;
    u[0] &= k1;
    return _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]);
}

T2I __m256i lane_word(__m256i v, int j) { /* 16-bit element j of each 128-bit lane of v, in every element */
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)((2 * j + 1) << 8 | 2 * j)));
}

T2I void dot_q4k(const int R, const uint8_t *w, const Act *a, int r0, float *y, int n) {
    int k = a->k, nsb = k / 256;
    __m256 acc[RB];
    for (int i = 0; i < R; i++) acc[i] = _mm256_setzero_ps();
    for (int sb = 0; sb < nsb; sb++) {
        const uint8_t *b = w + 144 * sb;
        float d = f16(b), dmin = f16(b + 2);
        __m128i sm = scale_min_k4(b + 4);
        __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));              /* sc as i16, both lanes */
        __m256i mins = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));               /* m0 m0 m1 m1 .. m7 m7 */
        __m256i q[8], s16[8];
        for (int g = 0; g < 4; g++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * g));
            q[2 * g] = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
            q[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
        }
        for (int j = 0; j < 8; j++) s16[j] = lane_word(sc, j);
        for (int i = r0; i < r0 + R; i++) {
            const int8_t *xq = a->q256 + (size_t)i * k + 256 * sb;
            __m256i s = scaled_dot(q, s16, xq);
            __m256i mb = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)(a->bs16 + (size_t)i * (k / 16) + 16 * sb)));
            float dx = a->d256[(size_t)i * nsb + sb];
            acc[i - r0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * dx), acc[i - r0]);
            acc[i - r0] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mb), _mm256_set1_ps(dmin * dx), acc[i - r0]);
        }
    }
    for (int i = r0; i < r0 + R; i++) y[(size_t)i * n] = hsum(acc[i - r0]);
}

/* Q6_K: 210-byte superblocks (128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 int8 scales, d fp16) */
T2I void dot_q6k(const int R, const uint8_t *w, const Act *a, int r0, float *y, int n) {
    int k = a->k, nsb = k / 256;
    __m256 acc[RB];
    for (int i = 0; i < R; i++) acc[i] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
    for (int sb = 0; sb < nsb; sb++) {
        const uint8_t *b = w + 210 * sb;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = f16(b + 208);
        __m256i q[8], s16[8];
        for (int h = 0; h < 2; h++) {  /* inputs 128h + 32t + l: q_t (t = 0..3) */
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h)), l1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
            q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
            q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
            q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
            q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
            __m256i sch = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(sc + 8 * h))));
            for (int t = 0; t < 4; t++)  /* 16 inputs per scale: sc[8h + 2t] in the low lane, sc[8h + 2t + 1] in the high */
                s16[4 * h + t] = _mm256_shuffle_epi8(sch, _mm256_set_m128i(_mm_set1_epi16((short)((4 * t + 3) << 8 | (4 * t + 2))),
                                                                           _mm_set1_epi16((short)((4 * t + 1) << 8 | 4 * t))));
        }
        __m256i scs = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        for (int i = r0; i < r0 + R; i++) {
            const int8_t *xq = a->q256 + (size_t)i * k + 256 * sb;
            __m256i s = scaled_dot(q, s16, xq);
            __m256i off = _mm256_madd_epi16(scs, _mm256_loadu_si256((const __m256i *)(a->bs16 + (size_t)i * (k / 16) + 16 * sb)));
            s = _mm256_sub_epi32(s, _mm256_slli_epi32(off, 5));
            float dx = a->d256[(size_t)i * nsb + sb];
            acc[i - r0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * dx), acc[i - r0]);
        }
    }
    for (int i = r0; i < r0 + R; i++) y[(size_t)i * n] = hsum(acc[i - r0]);
}

/* the 32-input types: codes as u8 (signed: Q8_0), scale d, offset (w = d·q + off, off per block) */
T2I int block_size(int type) {
    return type == Q4_0 ? 18 : type == Q4_1 ? 20 : type == Q5_0 ? 22 : type == Q5_1 ? 24 : 34;
}

T2I __m256i codes32(int type, const uint8_t *b, float *d, float *off) {
    *d = f16(b);
    switch (type) {
    case Q4_0: *off = -8.f * *d; return nibbles32(b + 2);
    case Q4_1: *off = f16(b + 2); return nibbles32(b + 4);
    case Q5_0: *off = -16.f * *d; return _mm256_or_si256(nibbles32(b + 6), bits32(b + 2));
    case Q5_1: *off = f16(b + 2); return _mm256_or_si256(nibbles32(b + 8), bits32(b + 4));
    default: *off = 0.f; return _mm256_loadu_si256((const __m256i *)(b + 2));
    }
}

T2I void dot_b32(const int R, int type, const uint8_t *w, const Act *a, int r0, float *y, int n) {
    int k = a->k, nb = k / 32, bs = block_size(type);
    __m256 acc[RB][2];  /* even, odd blocks */
    float acc_off[RB];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps(), acc_off[i] = 0.f;
    for (int blk = 0; blk < nb; blk++) {
        float d, off;
        __m256i q = codes32(type, w + (size_t)bs * blk, &d, &off);
        __m256i aq = type == Q8_0 ? _mm256_sign_epi8(q, q) : q;
        for (int i = r0; i < r0 + R; i++) {
            size_t at = (size_t)i * (k / 32) + blk;
            __m256i xq = _mm256_loadu_si256((const __m256i *)(a->q32 + (size_t)i * k + 32 * blk));
            if (type == Q8_0) xq = _mm256_sign_epi8(xq, q);
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, xq), ones);
            float dx = a->d32[at];
            acc[i - r0][blk & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * dx), acc[i - r0][blk & 1]);
            if (type != Q8_0) acc_off[i - r0] = fmaf(off * dx, (float)a->s32[at], acc_off[i - r0]);
        }
    }
    for (int i = r0; i < r0 + R; i++) y[(size_t)i * n] = hsum(_mm256_add_ps(acc[i - r0][0], acc[i - r0][1])) + acc_off[i - r0];
}

/* one output's dot products with rows r0 .. r0 + R, R a constant in each case (accumulators in registers) */
T2 static void dot(int type, int R, const uint8_t *w, const Act *a, int r0, float *y, int n) {
    #define D(r) case r: { if (type == Q4_K) dot_q4k(r, w, a, r0, y, n); \
                           else if (type == Q6_K) dot_q6k(r, w, a, r0, y, n); \
                           else if (type == Q8_0) dot_b32(r, Q8_0, w, a, r0, y, n); \
                           else if (type == Q4_1) dot_b32(r, Q4_1, w, a, r0, y, n); \
                           else if (type == Q5_0) dot_b32(r, Q5_0, w, a, r0, y, n); \
                           else dot_b32(r, type, w, a, r0, y, n); } break;
    switch (R) { D(1) D(2) D(3) D(4) D(5) D(6) D(7) D(8) }
    #undef D
}

/* x [m, k] fp32; types [n] (ggml ids), off [n] byte offsets of each output row's blocks in raw; y [m, n] fp32 */
void q8_mm(const float *x, int m, int k, int n, const uint8_t *types, const int64_t *off, const uint8_t *raw,
           int kinds, float *y, int threads) {
    Act a = {k, NULL, NULL, NULL, NULL, NULL, NULL};
    if (kinds & 1) {
        a.q256 = malloc((size_t)m * k), a.d256 = malloc((size_t)m * (k / 256) * 4), a.bs16 = malloc((size_t)m * (k / 16) * 2);
    }
    if (kinds & 2) {
        a.q32 = malloc((size_t)m * k), a.d32 = malloc((size_t)m * (k / 32) * 4), a.s32 = malloc((size_t)m * (k / 32) * 4);
    }
    #pragma omp parallel num_threads(threads)
    {
        #pragma omp for schedule(static)
        for (int i = 0; i < m; i++) quant_row(x + (size_t)i * k, &a, i);
        #pragma omp for schedule(static)
        for (int o0 = 0; o0 < n; o0 += OB)
            for (int r0 = 0; r0 < m; r0 += RB)
                for (int o = o0; o < o0 + OB && o < n; o++)
                    dot(types[o], r0 + RB < m ? RB : m - r0, raw + off[o], &a, r0, y + o, n);
    }
    free(a.q256), free(a.d256), free(a.bs16), free(a.q32), free(a.d32), free(a.s32);
}

#else
int q8_ok(void) { return 0; }
void q8_mm(const float *x, int m, int k, int n, const uint8_t *types, const int64_t *off, const uint8_t *raw,
           int kinds, float *y, int threads) {
    (void)x; (void)m; (void)k; (void)n; (void)types; (void)off; (void)raw; (void)kinds; (void)y; (void)threads;
}
#endif
