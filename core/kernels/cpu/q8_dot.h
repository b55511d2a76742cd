/* q8_mm's per-block dot products, included once per instruction set by q8_mm.c with
 *   FN / INL     the function attributes (target ISA), N(f) the function's name in this variant,
 *   DPWSSD(a, p, s)  a + pairs of i16 p · s summed into i32 (vpmaddwd + vpaddd, or VNNI's vpdpwssd),
 *   DPBUSD(q, x)     sums of 4 u8 q · s8 x into i32 (vpmaddubsw + vpmaddwd by 1, or VNNI's vpdpbusd),
 *   DPBUSDA(a, q, x) a + DPBUSD(q, x) (VNNI: one accumulating vpdpbusd),
 *   WIDE         (defined or not) a superblock's K-type dots in zmm registers, two vectors of 32 codes at a time.
 * The integer sums are exact either way (vpmaddubsw cannot saturate on these codes: |q| ≤ 63, |x| ≤ 127), and every
 * variant scales and adds them in fp32 in the same order, so the variants give the same floats bit for bit.
 */
INL float N(f16)(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

INL float N(hsum)(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

INL __m256i N(nibbles32)(const uint8_t *p) { /* 16 bytes -> 32 codes: low nibbles (inputs 0..15), then high ones */
    __m128i t = _mm_loadu_si128((const __m128i *)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
}

INL __m256i N(bits32)(const uint8_t *p) { /* 32 bits -> 32 bytes 0x10 where the bit is set (input i: bit i) */
    uint32_t v;
    memcpy(&v, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_and_si256(_mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

/* Σ_j s16_j · (q_j · x_j) over a superblock's 8 vectors of 32 codes q (u8) and inputs x (s8), per i32 lane of 8;
 * with WIDE (AVX-512) two vectors j, j + 1 per zmm, whose halves are added at the end: the same exact integers */
#ifdef WIDE
typedef struct { __m512i q[4], s[4]; } N(Wq);

INL void N(widen)(const __m256i q[8], const __m256i s16[8], N(Wq) *w) {
    for (int j = 0; j < 4; j++) {
        w->q[j] = _mm512_inserti64x4(_mm512_castsi256_si512(q[2 * j]), q[2 * j + 1], 1);
        w->s[j] = _mm512_inserti64x4(_mm512_castsi256_si512(s16[2 * j]), s16[2 * j + 1], 1);
    }
}

INL __m256i N(scaled_dot)(const N(Wq) *w, const int8_t *xq) {
    __m512i s = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++)
        s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(w->q[j], _mm512_loadu_si512(xq + 64 * j)), w->s[j]);
    return _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
}
#else
typedef struct { __m256i q[8], s[8]; } N(Wq);

INL void N(widen)(const __m256i q[8], const __m256i s16[8], N(Wq) *w) {
    for (int j = 0; j < 8; j++) w->q[j] = q[j], w->s[j] = s16[j];
}

INL __m256i N(scaled_dot)(const N(Wq) *w, const int8_t *xq) {
    __m256i s = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++)
        s = DPWSSD(s, _mm256_maddubs_epi16(w->q[j], _mm256_loadu_si256((const __m256i *)(xq + 32 * j))), w->s[j]);
    return s;
}
#endif

/* Q4_K: 144-byte superblocks (d, dmin fp16; 12 bytes of 6-bit sc, m; 128 bytes of nibbles) */
INL __m128i N(scale_min_k4)(const uint8_t *q) { /* 16 bytes: sc[0..7], m[0..7] (llama.cpp's unpacking of the 12 bytes) */
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

INL __m256i N(lane_word)(__m256i v, int j) { /* 16-bit element j of each 128-bit lane of v, in every element */
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)((2 * j + 1) << 8 | 2 * j)));
}

INL void N(dot_q4k)(const int R, const uint8_t *w, const Act *a, int r0, float *y, int n) {
    int k = a->k, nsb = k / 256;
    __m256 acc[RB];
    for (int i = 0; i < R; i++) acc[i] = _mm256_setzero_ps();
    for (int sb = 0; sb < nsb; sb++) {
        const uint8_t *b = w + 144 * sb;
        float d = N(f16)(b), dmin = N(f16)(b + 2);
        __m128i sm = N(scale_min_k4)(b + 4);
        __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));              /* sc as i16, both lanes */
        __m256i mins = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));               /* m0 m0 m1 m1 .. m7 m7 */
        __m256i q[8], s16[8];
        N(Wq) wq;
        for (int g = 0; g < 4; g++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * g));
            q[2 * g] = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
            q[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
        }
        for (int j = 0; j < 8; j++) s16[j] = N(lane_word)(sc, j);
        N(widen)(q, s16, &wq);
        for (int i = r0; i < r0 + R; i++) {
            const int8_t *xq = a->q256 + (size_t)i * k + 256 * sb;
            __m256i s = N(scaled_dot)(&wq, xq);
            __m256i mb = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)(a->bs16 + (size_t)i * (k / 16) + 16 * sb)));
            float dx = a->d256[(size_t)i * nsb + sb];
            acc[i - r0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * dx), acc[i - r0]);
            acc[i - r0] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mb), _mm256_set1_ps(dmin * dx), acc[i - r0]);
        }
    }
    for (int i = r0; i < r0 + R; i++) y[(size_t)i * n] = N(hsum)(acc[i - r0]);
}

/* Q6_K: 210-byte superblocks (128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 int8 scales, d fp16) */
INL void N(dot_q6k)(const int R, const uint8_t *w, const Act *a, int r0, float *y, int n) {
    int k = a->k, nsb = k / 256;
    __m256 acc[RB];
    for (int i = 0; i < R; i++) acc[i] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
    for (int sb = 0; sb < nsb; sb++) {
        const uint8_t *b = w + 210 * sb;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = N(f16)(b + 208);
        __m256i q[8], s16[8];
        N(Wq) wq;
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
        N(widen)(q, s16, &wq);
        for (int i = r0; i < r0 + R; i++) {
            const int8_t *xq = a->q256 + (size_t)i * k + 256 * sb;
            __m256i s = N(scaled_dot)(&wq, xq);
            __m256i off = _mm256_madd_epi16(scs, _mm256_loadu_si256((const __m256i *)(a->bs16 + (size_t)i * (k / 16) + 16 * sb)));
            s = _mm256_sub_epi32(s, _mm256_slli_epi32(off, 5));
            float dx = a->d256[(size_t)i * nsb + sb];
            acc[i - r0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * dx), acc[i - r0]);
        }
    }
    for (int i = r0; i < r0 + R; i++) y[(size_t)i * n] = N(hsum)(acc[i - r0]);
}

/* the 32-input types: codes as u8 (signed: Q8_0), scale d, offset (w = d·q + off, off per block) */
INL int N(block_size)(int type) {
    return type == Q4_0 ? 18 : type == Q4_1 ? 20 : type == Q5_0 ? 22 : type == Q5_1 ? 24 : 34;
}

INL __m256i N(codes32)(int type, const uint8_t *b, float *d, float *off) {
    *d = N(f16)(b);
    switch (type) {
    case Q4_0: *off = -8.f * *d; return N(nibbles32)(b + 2);
    case Q4_1: *off = N(f16)(b + 2); return N(nibbles32)(b + 4);
    case Q5_0: *off = -16.f * *d; return _mm256_or_si256(N(nibbles32)(b + 6), N(bits32)(b + 2));
    case Q5_1: *off = N(f16)(b + 2); return _mm256_or_si256(N(nibbles32)(b + 8), N(bits32)(b + 4));
    default: *off = 0.f; return _mm256_loadu_si256((const __m256i *)(b + 2));
    }
}

INL void N(dot_b32)(const int R, int type, const uint8_t *w, const Act *a, int r0, float *y, int n) {
    int k = a->k, nb = k / 32, bs = N(block_size)(type);
    __m256 acc[RB][2];  /* even, odd blocks */
    float acc_off[RB];
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps(), acc_off[i] = 0.f;
    for (int blk = 0; blk < nb; blk++) {
        float d, off;
        __m256i q = N(codes32)(type, w + (size_t)bs * blk, &d, &off);
        __m256i aq = type == Q8_0 ? _mm256_sign_epi8(q, q) : q;
        for (int i = r0; i < r0 + R; i++) {
            size_t at = (size_t)i * (k / 32) + blk;
            __m256i xq = _mm256_loadu_si256((const __m256i *)(a->q32 + (size_t)i * k + 32 * blk));
            if (type == Q8_0) xq = _mm256_sign_epi8(xq, q);
            __m256i p = DPBUSD(aq, xq);
            float dx = a->d32[at];
            acc[i - r0][blk & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * dx), acc[i - r0][blk & 1]);
            if (type != Q8_0) acc_off[i - r0] = fmaf(off * dx, (float)a->s32[at], acc_off[i - r0]);
        }
    }
    for (int i = r0; i < r0 + R; i++) y[(size_t)i * n] = N(hsum)(_mm256_add_ps(acc[i - r0][0], acc[i - r0][1])) + acc_off[i - r0];
}

/* X8: 8 outputs of a Q4_0 / Q4_1 / Q5_0 / Q8_0 matrix interleaved per block (gguf_q8.py: pack_x8), lane j = output j.
 * Per block: codes u (Q4, Q5_0's low 4 bits: two per byte, vector j's low nibbles the 4-code group t = j, high ones
 * t = j + 4; Q5_0: then one vector of the fifth bits, bit t of byte b that of group t's code b; Q8_0: u = q + 128, one
 * vector per t), then the 8 outputs' d (fp16), then Q4_1's 8 m (fp16). Per row and block:
 *   s = Σ_t u_t · x[4t .. 4t+3] (one broadcast input group, 8 outputs at once) − off · Σx      (exact integers)
 *   acc += s · (d · dx)       Q4_1: accm += m · (dx · Σx)      y = acc + accm
 * so the scales cost one vector per 8 outputs. Q8_0's u reach 255, past what vpmaddubsw's pairs hold: without VNNI
 * they are split into nibbles (16 · hi + lo), the same integers. */
#ifdef U8_SAFE
#define DPU8(w, x) DPBUSD(w, x)
#else
INL __m256i N(dpu8)(__m256i w, __m256i x) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i hi = DPBUSD(_mm256_and_si256(_mm256_srli_epi16(w, 4), m4), x), lo = DPBUSD(_mm256_and_si256(w, m4), x);
    return _mm256_add_epi32(_mm256_slli_epi32(hi, 4), lo);
}
#define DPU8(w, x) N(dpu8)(w, x)
#endif

#ifndef CHAINS
/* vpdpbusd chains per row for R rows at once: one row needs four (vpdpbusd's latency, not its throughput, bounds fewer
 * on Zen 4); with more rows the rows' chains run beside each other, and fewer chains save the adds that sum them */
#define CHAINS(R) ((R) >= 6 ? 1 : (R) >= 3 ? 2 : 4)
#endif

/* Σ_t u_t · x[4t .. 4t+3] over T broadcast 4-input groups, per i32 lane (output) of 8: VNNI in C chains of vpdpbusd
 * (the same exact integers whatever C); AVX2 adds `run` groups' vpmaddubsw pairs in i16 before one vpmaddwd (callers
 * keep run · 2 · max u · 127 < 2^15) */
INL __m256i N(dot4s)(const __m256i *w, const int8_t *xq, const int T, const int run, const int C) {
    __m256i s = _mm256_setzero_si256();
#ifdef U8_SAFE
    (void)run;
    __m256i c[4] = {s, s, s, s};
    for (int t = 0; t < T; t++) {
        int32_t x4;
        memcpy(&x4, xq + 4 * t, 4);
        c[t % C] = DPBUSDA(c[t % C], w[t], _mm256_set1_epi32(x4));
    }
    s = c[0];
    for (int j = 1; j < C; j++) s = _mm256_add_epi32(s, c[j]);
#else
    (void)C;
    for (int t0 = 0; t0 < T; t0 += run) {
        __m256i h = _mm256_setzero_si256();
        for (int t = t0; t < t0 + run; t++) {
            int32_t x4;
            memcpy(&x4, xq + 4 * t, 4);
            h = _mm256_add_epi16(h, _mm256_maddubs_epi16(w[t], _mm256_set1_epi32(x4)));
        }
        s = _mm256_add_epi32(s, _mm256_madd_epi16(h, _mm256_set1_epi16(1)));
    }
#endif
    return s;
}

INL void N(nibble_groups)(const uint8_t *p, __m256i w[8]) { /* 4 vectors -> 8 groups: t = v low nibbles, v + 4 high */
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int v = 0; v < 4; v++) {
        __m256i b = _mm256_loadu_si256((const __m256i *)(p + 32 * v));
        w[v] = _mm256_and_si256(b, m4), w[v + 4] = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
    }
}

INL void N(fifth_bits)(const uint8_t *p, __m256i w[8]) { /* Q5_0: bit t of each byte of p -> 0x10 of w[t]'s byte */
    const __m256i b4 = _mm256_set1_epi8(0x10), h = _mm256_loadu_si256((const __m256i *)p);
    for (int t = 0; t < 4; t++) w[t] = _mm256_or_si256(w[t], _mm256_and_si256(_mm256_slli_epi16(h, 4 - t), b4));
    for (int t = 4; t < 8; t++) w[t] = _mm256_or_si256(w[t], _mm256_and_si256(_mm256_srli_epi16(h, t - 4), b4));
}

INL void N(store_rows)(const int R, const __m256 *acc, int r0, float *y, int n) {
    for (int i = r0; i < r0 + R; i++) {
        float out[8];
        _mm256_storeu_ps(out, acc[i - r0]);
        memcpy(y + (size_t)i * n, out, sizeof out);
    }
}

/* two i16 lo, hi as one i32 lane (lo in the low half): a vpmaddwd / vpdpwssd pair broadcast to every lane */
INL int N(i16_pair)(int lo, int hi) {
    return (int)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
}

/* Q6_K's scales of sub-blocks 2c, 2c + 1 of an interleaved group (sc [2c][8], sc [2c + 1][8] at q) as the byte pairs
 * (sc_2c, sc_2c+1) of each output */
INL __m128i N(scale_pairs)(const uint8_t *q) {
    __m128i v = _mm_loadu_si128((const __m128i *)q);
    return _mm_unpacklo_epi8(v, _mm_srli_si128(v, 8));
}

/* X8 Q4_K (gguf_q8.py: pack_x8_k), per superblock of 1184 bytes: 8 chunks of 32 inputs (sub-blocks j) of 4 code
 * vectors, sc [8 j][8] u8, m [4][8][2] u8 (pairs j = 2p, 2p + 1), d [8], dmin [8] fp16. Per row:
 *   s = Σ_j sc_j · Σ_t u_t · x_t      mb = Σ_j m_j · bsum_j      (exact integers)
 *   acc += s · (d · dx) − mb · (dmin · dx) */
INL void N(dot_x8_q4k)(const int R, const uint8_t *g, const Act *a, int r0, float *y, int n) {
    int k = a->k, nsb = k / 256;
    __m256 acc[RB];
    __m256i is[RB];
    for (int i = 0; i < R; i++) acc[i] = _mm256_setzero_ps();
    for (int sb = 0; sb < nsb; sb++) {
        const uint8_t *p = g + (size_t)8 * X8_BYTES(Q4_K) * sb;
        for (int i = 0; i < R; i++) is[i] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            __m256i w[8];
            ahead(p + X8_BYTES(Q4_K) * j, X8_BYTES(Q4_K), a->stream);
            N(nibble_groups)(p + 128 * j, w);
            __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 1024 + 8 * j)));
            for (int i = r0; i < r0 + R; i++)
                is[i - r0] = _mm256_add_epi32(is[i - r0], _mm256_mullo_epi32(
                    N(dot4s)(w, a->q256 + (size_t)i * k + 256 * sb + 32 * j, 8, 8, CHAINS(R)), sc));
        }
        __m256i mp[4];
        for (int q = 0; q < 4; q++) mp[q] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(p + 1088 + 16 * q)));
        __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 1152)));
        __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 1168)));
        for (int i = r0; i < r0 + R; i++) {
            const int16_t *bs = a->bs16 + (size_t)i * (k / 16) + 16 * sb;
            __m256i mb = _mm256_setzero_si256();
            for (int q = 0; q < 4; q++) {
                int b0 = bs[4 * q] + bs[4 * q + 1], b1 = bs[4 * q + 2] + bs[4 * q + 3];  /* bsum of sub-blocks 2q, 2q + 1 */
                mb = _mm256_add_epi32(mb, _mm256_madd_epi16(mp[q], _mm256_set1_epi32(N(i16_pair)(b0, b1))));
            }
            __m256 dx = _mm256_set1_ps(a->d256[(size_t)i * nsb + sb]);
            acc[i - r0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[i - r0]), _mm256_mul_ps(d, dx), acc[i - r0]);
            acc[i - r0] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mb), _mm256_mul_ps(dmin, dx), acc[i - r0]);
        }
    }
    N(store_rows)(R, acc, r0, y, n);
}

/* Q6_K's −32 of an interleaved superblock sb (at p), per row: is −= 32 · Σ_j sc_j · bsum_j, from the 16 scales as i16
 * pairs (sc_2c, sc_2c+1) per output: the integers that subtracting 32 · bsum_j per sub-block gives */
INL void N(q6k_offset8)(const int R, const uint8_t *p, const Act *a, int r0, int sb, __m256i *is) {
    int k = a->k;
    __m256i sp[8];
    for (int c = 0; c < 8; c++) sp[c] = _mm256_cvtepi8_epi16(N(scale_pairs)(p + 1536 + 16 * c));
    for (int i = r0; i < r0 + R; i++) {
        const int16_t *bs = a->bs16 + (size_t)i * (k / 16) + 16 * sb;
        __m256i o = _mm256_setzero_si256();
        for (int c = 0; c < 8; c++)
            o = DPWSSD(o, sp[c], _mm256_set1_epi32(N(i16_pair)(bs[2 * c], bs[2 * c + 1])));
        is[i - r0] = _mm256_sub_epi32(is[i - r0], _mm256_slli_epi32(o, 5));
    }
}

/* X8 Q6_K, per superblock of 1680 bytes: 8 chunks of 32 inputs, each 4 vectors of low nibbles (as Q4_K's) and 2 of
 * high 2-bit pairs (vector h: group 4h + s in bits 2s, 2s + 1), then sc [16 j][8] s8 (16 inputs each), d [8] fp16:
 *   s = Σ_j sc_j · (Σ_t u_t · x_t − 32 · bsum_j)      acc += s · (d · dx) */
INL void N(dot_x8_q6k)(const int R, const uint8_t *g, const Act *a, int r0, float *y, int n) {
    int k = a->k, nsb = k / 256;
    __m256 acc[RB];
    __m256i is[RB];
    const __m256i m2 = _mm256_set1_epi8(0x30);
    for (int i = 0; i < R; i++) acc[i] = _mm256_setzero_ps();
    for (int sb = 0; sb < nsb; sb++) {
        const uint8_t *p = g + (size_t)8 * X8_BYTES(Q6_K) * sb;
        for (int i = 0; i < R; i++) is[i] = _mm256_setzero_si256();
        for (int c = 0; c < 8; c++) {
            const uint8_t *pc = p + 192 * c;
            __m256i w[8];
            ahead(p + X8_BYTES(Q6_K) * c, X8_BYTES(Q6_K), a->stream);
            N(nibble_groups)(pc, w);
            for (int h = 0; h < 2; h++) {
                __m256i hv = _mm256_loadu_si256((const __m256i *)(pc + 128 + 32 * h));
                w[4 * h + 0] = _mm256_or_si256(w[4 * h + 0], _mm256_and_si256(_mm256_slli_epi16(hv, 4), m2));
                w[4 * h + 1] = _mm256_or_si256(w[4 * h + 1], _mm256_and_si256(_mm256_slli_epi16(hv, 2), m2));
                w[4 * h + 2] = _mm256_or_si256(w[4 * h + 2], _mm256_and_si256(hv, m2));
                w[4 * h + 3] = _mm256_or_si256(w[4 * h + 3], _mm256_and_si256(_mm256_srli_epi16(hv, 2), m2));
            }
            __m256i sc0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 1536 + 16 * c)));
            __m256i sc1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 1536 + 16 * c + 8)));
            for (int i = r0; i < r0 + R; i++) {
                const int8_t *xq = a->q256 + (size_t)i * k + 256 * sb + 32 * c;
                __m256i s0 = N(dot4s)(w, xq, 4, 2, CHAINS(R)), s1 = N(dot4s)(w + 4, xq + 16, 4, 2, CHAINS(R));
                is[i - r0] = _mm256_add_epi32(is[i - r0], _mm256_add_epi32(_mm256_mullo_epi32(s0, sc0), _mm256_mullo_epi32(s1, sc1)));
            }
        }
        N(q6k_offset8)(R, p, a, r0, sb, is);
        __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 1664)));
        for (int i = r0; i < r0 + R; i++)
            acc[i - r0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[i - r0]), _mm256_mul_ps(d, _mm256_set1_ps(a->d256[(size_t)i * nsb + sb])), acc[i - r0]);
    }
    N(store_rows)(R, acc, r0, y, n);
}

INL void N(dot_x8)(const int R, int type, const uint8_t *g, const Act *a, int r0, float *y, int n) {
    int k = a->k, nb = k / 32, gb = X8_BYTES(type), off = type == Q8_0 ? 128 : type == Q4_0 ? 8 : type == Q5_0 ? 16 : 0;
    __m256 acc[RB], accm[RB];
    for (int i = 0; i < R; i++) acc[i] = accm[i] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *p = g + (size_t)gb * b;
        __m256i w[8];
        ahead(p, gb, a->stream);
        if (type == Q8_0) {
            for (int t = 0; t < 8; t++) w[t] = _mm256_loadu_si256((const __m256i *)(p + 32 * t));
        } else {
            N(nibble_groups)(p, w);
            if (type == Q5_0) N(fifth_bits)(p + 128, w);
        }
        const uint8_t *sc = p + (type == Q8_0 ? 256 : type == Q5_0 ? 160 : 128);
        __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sc));
        __m256 m = type == Q4_1 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sc + 16))) : _mm256_setzero_ps();
        for (int i = r0; i < r0 + R; i++) {
            size_t at = (size_t)i * nb + b;
            const int8_t *xq = a->q32 + (size_t)i * k + 32 * b;
            __m256i s = _mm256_setzero_si256();
            if (type == Q8_0) {
                for (int t = 0; t < 8; t++) {
                    int32_t x4;
                    memcpy(&x4, xq + 4 * t, 4);
                    s = _mm256_add_epi32(s, DPU8(w[t], _mm256_set1_epi32(x4)));
                }
            } else {
                s = type == Q5_0 ? N(dot4s)(w, xq, 8, 4, CHAINS(R))   /* u ≤ 31: 4 groups' pairs ≤ 31496 in i16 */
                                 : N(dot4s)(w, xq, 8, 8, CHAINS(R));  /* u ≤ 15: 8 groups' pairs ≤ 30480 in i16 */
            }
            if (off) s = _mm256_sub_epi32(s, _mm256_set1_epi32(off * a->s32[at]));
            float dx = a->d32[at];
            acc[i - r0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(dx)), acc[i - r0]);
            if (type == Q4_1) accm[i - r0] = _mm256_fmadd_ps(m, _mm256_set1_ps(dx * (float)a->s32[at]), accm[i - r0]);
        }
    }
    for (int i = 0; i < R; i++) acc[i] = _mm256_add_ps(acc[i], accm[i]);
    N(store_rows)(R, acc, r0, y, n);
}
#ifdef WIDE
/* two groups at once in zmm (outputs o0 .. o0 + 15 when both are interleaved in one type): the same lanes' arithmetic */
INL __m512i N(pair)(const uint8_t *g0, const uint8_t *g1, int at) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(g0 + at))),
                              _mm256_loadu_si256((const __m256i *)(g1 + at)), 1);
}

INL __m512 N(pair_ph)(const uint8_t *g0, const uint8_t *g1, int at) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g0 + at)))),
                              _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g1 + at))), 1);
}

/* dot4s over two groups in zmm, 16 outputs per vpdpbusd (every zmm kernel's integer sums), in C chains: exact
 * integers, the same whatever C */
INL __m512i N(dot4s16)(const __m512i *w, const int8_t *xq, const int T, const int C) {
    __m512i s[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int t = 0; t < T; t++) {
        int32_t x4;
        memcpy(&x4, xq + 4 * t, 4);
        s[t % C] = _mm512_dpbusd_epi32(s[t % C], w[t], _mm512_set1_epi32(x4));
    }
    for (int c = 1; c < C; c++) s[0] = _mm512_add_epi32(s[0], s[c]);
    return s[0];
}

INL void N(nibble_groups16)(const uint8_t *g0, const uint8_t *g1, int at, __m512i w[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int v = 0; v < 4; v++) {
        __m512i b = N(pair)(g0, g1, at + 32 * v);
        w[v] = _mm512_and_si512(b, m4), w[v + 4] = _mm512_and_si512(_mm512_srli_epi16(b, 4), m4);
    }
}

INL void N(fifth_bits16)(const uint8_t *g0, const uint8_t *g1, int at, __m512i w[8]) {  /* fifth_bits, two groups */
    const __m512i b4 = _mm512_set1_epi8(0x10), h = N(pair)(g0, g1, at);
    for (int t = 0; t < 4; t++) w[t] = _mm512_or_si512(w[t], _mm512_and_si512(_mm512_slli_epi16(h, 4 - t), b4));
    for (int t = 4; t < 8; t++) w[t] = _mm512_or_si512(w[t], _mm512_and_si512(_mm512_srli_epi16(h, t - 4), b4));
}

INL void N(dot_x16)(const int R, int type, const uint8_t *g0, const uint8_t *g1, const Act *a, int r0, float *y, int n) {
    int k = a->k, nb = k / 32, gb = X8_BYTES(type), off = type == Q8_0 ? 128 : type == Q4_0 ? 8 : type == Q5_0 ? 16 : 0;
    __m512 acc[RB], accm[RB];
    for (int i = 0; i < R; i++) acc[i] = accm[i] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        int at = gb * b;
        __m512i w[8];
        ahead2(g0, g1, at, gb, a->stream);
        if (type == Q8_0) {
            for (int t = 0; t < 8; t++) w[t] = N(pair)(g0, g1, at + 32 * t);
        } else {
            N(nibble_groups16)(g0, g1, at, w);
            if (type == Q5_0) N(fifth_bits16)(g0, g1, at + 128, w);
        }
        int sc = at + (type == Q8_0 ? 256 : type == Q5_0 ? 160 : 128);
        __m512 d = N(pair_ph)(g0, g1, sc);
        __m512 m = type == Q4_1 ? N(pair_ph)(g0, g1, sc + 16) : _mm512_setzero_ps();
        for (int i = r0; i < r0 + R; i++) {
            size_t ai = (size_t)i * nb + b;
            const int8_t *xq = a->q32 + (size_t)i * k + 32 * b;
            __m512i s = N(dot4s16)(w, xq, 8, CHAINS(R));
            if (off) s = _mm512_sub_epi32(s, _mm512_set1_epi32(off * a->s32[ai]));
            float dx = a->d32[ai];
            acc[i - r0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc[i - r0]);
            if (type == Q4_1) accm[i - r0] = _mm512_fmadd_ps(m, _mm512_set1_ps(dx * (float)a->s32[ai]), accm[i - r0]);
        }
    }
    for (int i = r0; i < r0 + R; i++) _mm512_storeu_ps(y + (size_t)i * n, _mm512_add_ps(acc[i - r0], accm[i - r0]));
}

INL __m128i N(pair8)(const uint8_t *g0, const uint8_t *g1, int at) {  /* 8 bytes of each group */
    return _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(g0 + at)), _mm_loadl_epi64((const __m128i *)(g1 + at)));
}

/* the end of a Q4_K superblock sb of two groups (offset p): per row, with is the Σ_j sc_j · (q·qx)_j of dot_x16_q4k,
 *   mb = Σ_j m_j · bsum_j      acc += is · (d · dx) − mb · (dmin · dx) */
INL void N(q4k_scale16)(const int R, const uint8_t *g0, const uint8_t *g1, int p, const Act *a, int r0, int sb,
                        const __m512i *is, __m512 *acc) {
    int k = a->k, nsb = k / 256;
    __m512i mp[4];
    for (int q = 0; q < 4; q++)  /* 16 bytes of each group -> 32 i16 */
        mp[q] = _mm512_cvtepu8_epi16(_mm256_set_m128i(_mm_loadu_si128((const __m128i *)(g1 + p + 1088 + 16 * q)),
                                                      _mm_loadu_si128((const __m128i *)(g0 + p + 1088 + 16 * q))));
    __m512 d = N(pair_ph)(g0, g1, p + 1152), dmin = N(pair_ph)(g0, g1, p + 1168);
    for (int i = r0; i < r0 + R; i++) {
        const int16_t *bs = a->bs16 + (size_t)i * (k / 16) + 16 * sb;
        __m512i mb = _mm512_setzero_si512();
        for (int q = 0; q < 4; q++) {
            int b0 = bs[4 * q] + bs[4 * q + 1], b1 = bs[4 * q + 2] + bs[4 * q + 3];
            mb = _mm512_add_epi32(mb, _mm512_madd_epi16(mp[q], _mm512_set1_epi32(N(i16_pair)(b0, b1))));
        }
        __m512 dx = _mm512_set1_ps(a->d256[(size_t)i * nsb + sb]);
        acc[i - r0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[i - r0]), _mm512_mul_ps(d, dx), acc[i - r0]);
        acc[i - r0] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mb), _mm512_mul_ps(dmin, dx), acc[i - r0]);
    }
}

/* Q6_K's codes of chunk pc of two groups, 0..63: the low nibbles and, from vector h, their high 2 bits */
INL void N(q6k_codes16)(const uint8_t *g0, const uint8_t *g1, int pc, __m512i w[8]) {
    const __m512i m2 = _mm512_set1_epi8(0x30);
    N(nibble_groups16)(g0, g1, pc, w);
    for (int h = 0; h < 2; h++) {
        __m512i hv = N(pair)(g0, g1, pc + 128 + 32 * h);
        w[4 * h + 0] = _mm512_or_si512(w[4 * h + 0], _mm512_and_si512(_mm512_slli_epi16(hv, 4), m2));
        w[4 * h + 1] = _mm512_or_si512(w[4 * h + 1], _mm512_and_si512(_mm512_slli_epi16(hv, 2), m2));
        w[4 * h + 2] = _mm512_or_si512(w[4 * h + 2], _mm512_and_si512(hv, m2));
        w[4 * h + 3] = _mm512_or_si512(w[4 * h + 3], _mm512_and_si512(_mm512_srli_epi16(hv, 2), m2));
    }
}

/* Q6_K's −32 of a superblock sb of two groups (offset p), per row: is −= 32 · Σ_j sc_j · bsum_j, from the 16 scales as
 * i16 pairs (sc_2c, sc_2c+1) per output (vpdpwssd): the integers that subtracting 32 · bsum_j per sub-block gives */
INL void N(q6k_offset16)(const int R, const uint8_t *g0, const uint8_t *g1, int p, const Act *a, int r0, int sb,
                         __m512i *is) {
    int k = a->k;
    __m512i sp[8];
    for (int c = 0; c < 8; c++)
        sp[c] = _mm512_cvtepi8_epi16(_mm256_set_m128i(N(scale_pairs)(g1 + p + 1536 + 16 * c), N(scale_pairs)(g0 + p + 1536 + 16 * c)));
    for (int i = r0; i < r0 + R; i++) {
        const int16_t *bs = a->bs16 + (size_t)i * (k / 16) + 16 * sb;
        __m512i o = _mm512_setzero_si512();
        for (int c = 0; c < 8; c++)
            o = _mm512_dpwssd_epi32(o, sp[c], _mm512_set1_epi32(N(i16_pair)(bs[2 * c], bs[2 * c + 1])));
        is[i - r0] = _mm512_sub_epi32(is[i - r0], _mm512_slli_epi32(o, 5));
    }
}

/* the end of a Q6_K superblock sb of two groups (offset p): acc += is · (d · dx) per row */
INL void N(q6k_scale16)(const int R, const uint8_t *g0, const uint8_t *g1, int p, const Act *a, int r0, int sb,
                        const __m512i *is, __m512 *acc) {
    int nsb = a->k / 256;
    __m512 d = N(pair_ph)(g0, g1, p + 1664);
    for (int i = r0; i < r0 + R; i++)
        acc[i - r0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[i - r0]), _mm512_mul_ps(d, _mm512_set1_ps(a->d256[(size_t)i * nsb + sb])), acc[i - r0]);
}

INL void N(dot_x16_q4k)(const int R, const uint8_t *g0, const uint8_t *g1, const Act *a, int r0, float *y, int n) {
    int k = a->k, nsb = k / 256;
    __m512 acc[RB];
    __m512i is[RB];
    for (int i = 0; i < R; i++) acc[i] = _mm512_setzero_ps();
    for (int sb = 0; sb < nsb; sb++) {
        int p = 8 * X8_BYTES(Q4_K) * sb;
        for (int i = 0; i < R; i++) is[i] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i w[8];
            ahead2(g0, g1, p + X8_BYTES(Q4_K) * j, X8_BYTES(Q4_K), a->stream);
            N(nibble_groups16)(g0, g1, p + 128 * j, w);
            __m512i sc = _mm512_cvtepu8_epi32(N(pair8)(g0, g1, p + 1024 + 8 * j));
            for (int i = r0; i < r0 + R; i++)
                is[i - r0] = _mm512_add_epi32(is[i - r0], _mm512_mullo_epi32(
                    N(dot4s16)(w, a->q256 + (size_t)i * k + 256 * sb + 32 * j, 8, CHAINS(R)), sc));
        }
        N(q4k_scale16)(R, g0, g1, p, a, r0, sb, is, acc);
    }
    for (int i = r0; i < r0 + R; i++) _mm512_storeu_ps(y + (size_t)i * n, acc[i - r0]);
}

INL void N(dot_x16_q6k)(const int R, const uint8_t *g0, const uint8_t *g1, const Act *a, int r0, float *y, int n) {
    int k = a->k, nsb = k / 256;
    __m512 acc[RB];
    __m512i is[RB];
    for (int i = 0; i < R; i++) acc[i] = _mm512_setzero_ps();
    for (int sb = 0; sb < nsb; sb++) {
        int p = 8 * X8_BYTES(Q6_K) * sb;
        for (int i = 0; i < R; i++) is[i] = _mm512_setzero_si512();
        for (int c = 0; c < 8; c++) {
            int pc = p + 192 * c;
            __m512i w[8];
            ahead2(g0, g1, p + X8_BYTES(Q6_K) * c, X8_BYTES(Q6_K), a->stream);
            N(q6k_codes16)(g0, g1, pc, w);
            __m512i sc0 = _mm512_cvtepi8_epi32(N(pair8)(g0, g1, p + 1536 + 16 * c));
            __m512i sc1 = _mm512_cvtepi8_epi32(N(pair8)(g0, g1, p + 1536 + 16 * c + 8));
            for (int i = r0; i < r0 + R; i++) {
                const int8_t *xq = a->q256 + (size_t)i * k + 256 * sb + 32 * c;
                __m512i s0 = N(dot4s16)(w, xq, 4, CHAINS(R)), s1 = N(dot4s16)(w + 4, xq + 16, 4, CHAINS(R));
                is[i - r0] = _mm512_add_epi32(is[i - r0], _mm512_add_epi32(_mm512_mullo_epi32(s0, sc0), _mm512_mullo_epi32(s1, sc1)));
            }
        }
        N(q6k_offset16)(R, g0, g1, p, a, r0, sb, is);
        N(q6k_scale16)(R, g0, g1, p, a, r0, sb, is, acc);
    }
    for (int i = r0; i < r0 + R; i++) _mm512_storeu_ps(y + (size_t)i * n, acc[i - r0]);
}

FN static void N(dot16)(int type, int R, const uint8_t *g0, const uint8_t *g1, const Act *a, int r0, float *y, int n) {
    #define D16(r) case r: { if (type == Q8_0) N(dot_x16)(r, Q8_0, g0, g1, a, r0, y, n); \
                             else if (type == Q4_K) N(dot_x16_q4k)(r, g0, g1, a, r0, y, n); \
                             else if (type == Q6_K) N(dot_x16_q6k)(r, g0, g1, a, r0, y, n); \
                             else if (type == Q4_1) N(dot_x16)(r, Q4_1, g0, g1, a, r0, y, n); \
                             else if (type == Q5_0) N(dot_x16)(r, Q5_0, g0, g1, a, r0, y, n); \
                             else N(dot_x16)(r, Q4_0, g0, g1, a, r0, y, n); } break;
    switch (R) { D16(1) D16(2) D16(3) D16(4) D16(5) D16(6) D16(7) D16(8) D16(9) D16(10) D16(11) D16(12) D16(13) D16(14) D16(15) D16(16) }
    #undef D16
}
#endif
#undef DPU8

FN static void N(dot8)(int type, int R, const uint8_t *g, const Act *a, int r0, float *y, int n) {
    #define D8(r) case r: { if (type == Q8_0) N(dot_x8)(r, Q8_0, g, a, r0, y, n); \
                            else if (type == Q4_K) N(dot_x8_q4k)(r, g, a, r0, y, n); \
                            else if (type == Q6_K) N(dot_x8_q6k)(r, g, a, r0, y, n); \
                            else if (type == Q4_1) N(dot_x8)(r, Q4_1, g, a, r0, y, n); \
                            else if (type == Q5_0) N(dot_x8)(r, Q5_0, g, a, r0, y, n); \
                            else N(dot_x8)(r, Q4_0, g, a, r0, y, n); } break;
    switch (R) { D8(1) D8(2) D8(3) D8(4) D8(5) D8(6) D8(7) D8(8) D8(9) D8(10) D8(11) D8(12) D8(13) D8(14) D8(15) D8(16) }
    #undef D8
}

/* one output's dot products with rows r0 .. r0 + R, R a constant in each case (accumulators in registers) */
FN static void N(dot)(int type, int R, const uint8_t *w, const Act *a, int r0, float *y, int n) {
    #define D(r) case r: { if (type == Q4_K) N(dot_q4k)(r, w, a, r0, y, n); \
                           else if (type == Q6_K) N(dot_q6k)(r, w, a, r0, y, n); \
                           else if (type == Q8_0) N(dot_b32)(r, Q8_0, w, a, r0, y, n); \
                           else if (type == Q4_1) N(dot_b32)(r, Q4_1, w, a, r0, y, n); \
                           else if (type == Q5_0) N(dot_b32)(r, Q5_0, w, a, r0, y, n); \
                           else N(dot_b32)(r, type, w, a, r0, y, n); } break;
    switch (R) { D(1) D(2) D(3) D(4) D(5) D(6) D(7) D(8) D(9) D(10) D(11) D(12) D(13) D(14) D(15) D(16) }
    #undef D
}

