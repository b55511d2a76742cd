/* q8_mm's K-type dot products of two interleaved groups (16 outputs) on AMX-INT8 tiles, included by q8_mm.c after
 * the AVX-512 variant (N(f) = f_avx512, whose helpers it shares; FN_AMX: that variant's target and the tiles').
 * Per chunk of 32 inputs, one `tdpbsud` per scale:
 *   A  [R rows, 32 s8]              the rows' int8 inputs, read in place (stride k)
 *   B  [8 rows, 16 outputs × 4 u8]  the chunk's codes: row t = dot_x16's vector w[t] (inputs 4t .. 4t + 3); Q6_K's
 *                                   two sub-blocks of 16 inputs: rows 0..3 with 4..7 zero, then the other way round
 *   C  [R, 16 i32] = A · B          = dot4s16(w, x) of every row, the same integers
 * then each row goes on exactly as in dot_x16_q4k / dot_x16_q6k (sub-block scales in i32, one fp32 scaling per
 * superblock in the same order), so the floats are the AVX-512 variant's bit for bit at any row count. */
/* rows from which the tiles replace zmm's vpdpbusd: below, decoding each chunk's codes into a B tile costs more than
 * the dots it saves */
#define AMX_ROWS 6

#define FN_AMX __attribute__((target(T_AMX_INT8)))
#define AMX_HERE() (CPU_AMX_TILE() && CPU_AMX_INT8() && amx_granted())

/* two sets of tiles, so that two chunks' products overlap: tmm0 / tmm3 A [R, 32 inputs], tmm1 / tmm4 B [8, 64],
 * tmm2 / tmm5 C [R, 16 i32]. *tiles: the rows this thread configured in this q8_mm call (0: none yet; other code on the
 * same threads, oneDNN's AMX kernels and codes_mm, configures and releases the tiles between calls) */
FN_AMX static void amx_rows(int R, int *tiles) {
    if (*tiles == R) return;
    amx_tilecfg c = {0};
    c.palette = 1;
    for (int t = 0; t < 6; t++) {
        c.rows[t] = t % 3 == 1 ? 8 : (uint8_t)R;
        c.colsb[t] = t % 3 == 0 ? 32 : 64;
    }
    _tile_loadconfig(&c);
    *tiles = R;
}

/* C0 = A0 · B0 and C1 = A1 · B1 (bt0, bt1: [8][64] codes; x0, x1: the rows' inputs, stride k), stored to c0, c1 */
#define AMX_PAIR(x0, bt0, x1, bt1, k, c0, c1) do {                                              \
        __asm__ volatile("" ::: "memory");  /* the tile loads read bt and the inputs through asm */ \
        _tile_loadd(0, x0, k); _tile_loadd(1, bt0, 64); _tile_zero(2);                        \
        _tile_loadd(3, x1, k); _tile_loadd(4, bt1, 64); _tile_zero(5);                        \
        _tile_dpbsud(2, 0, 1); _tile_dpbsud(5, 3, 4);                                          \
        _tile_stored(2, c0, 64); _tile_stored(5, c1, 64);                                      \
    } while (0)

FN_AMX static void dot16_amx_q4k(int R, const uint8_t *g0, const uint8_t *g1, const Act *a, int r0, float *y, int n) {
    int k = a->k, nsb = k / 256;
    __m512 acc[RB];
    __m512i is[RB];
    int32_t c[8][RB][16] __attribute__((aligned(64)));  /* [sub-block j]: the products of the superblock's rows */
    uint8_t bt[8][8][64] __attribute__((aligned(64)));  /* [sub-block j][t][16 outputs × 4] */
    for (int i = 0; i < R; i++) acc[i] = _mm512_setzero_ps();
    for (int sb = 0; sb < nsb; sb++) {
        int p = 8 * X8_BYTES(Q4_K) * sb;
        const int8_t *xq = a->q256 + (size_t)r0 * k + 256 * sb;
        for (int i = 0; i < R; i++) is[i] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i b[8];
            ahead2(g0, g1, p + X8_BYTES(Q4_K) * j, X8_BYTES(Q4_K), a->stream);
            N(nibble_groups16)(g0, g1, p + 128 * j, b);
            for (int t = 0; t < 8; t++) _mm512_store_si512(bt[j][t], b[t]);
        }
        for (int j = 0; j < 8; j += 2)  /* every product first: the tiles run on while the vectors below wait */
            AMX_PAIR(xq + 32 * j, bt[j], xq + 32 * j + 32, bt[j + 1], k, c[j], c[j + 1]);
        for (int j = 0; j < 8; j++) {
            __m512i sc = _mm512_cvtepu8_epi32(N(pair8)(g0, g1, p + 1024 + 8 * j));
            for (int i = 0; i < R; i++)
                is[i] = _mm512_add_epi32(is[i], _mm512_mullo_epi32(_mm512_load_si512(c[j][i]), sc));
        }
        N(q4k_scale16)(R, g0, g1, p, a, r0, sb, is, acc);
    }
    for (int i = r0; i < r0 + R; i++) _mm512_storeu_ps(y + (size_t)i * n, acc[i - r0]);
}

/* Q6_K's sub-blocks are 16 inputs: per chunk of 32, B0 holds the first 16 inputs' codes (rows 4..7 zero) and B1 the
 * last 16's (rows 0..3 zero), both against the chunk's 32 inputs */
FN_AMX static void dot16_amx_q6k(int R, const uint8_t *g0, const uint8_t *g1, const Act *a, int r0, float *y, int n) {
    int k = a->k, nsb = k / 256;
    __m512 acc[RB];
    __m512i is[RB];
    int32_t c[8][2][RB][16] __attribute__((aligned(64)));  /* [chunk][half]: the products of the superblock's rows */
    uint8_t bt[8][2][8][64] __attribute__((aligned(64)));  /* [chunk][half][t][16 outputs × 4] */
    const __m512i zero = _mm512_setzero_si512();
    for (int i = 0; i < R; i++) acc[i] = _mm512_setzero_ps();
    for (int sb = 0; sb < nsb; sb++) {
        int p = 8 * X8_BYTES(Q6_K) * sb;
        const int8_t *xq = a->q256 + (size_t)r0 * k + 256 * sb;
        for (int i = 0; i < R; i++) is[i] = _mm512_setzero_si512();
        for (int ch = 0; ch < 8; ch++) {
            int pc = p + 192 * ch;
            __m512i b[8];
            ahead2(g0, g1, p + X8_BYTES(Q6_K) * ch, X8_BYTES(Q6_K), a->stream);
            N(q6k_codes16)(g0, g1, pc, b);
            for (int t = 0; t < 8; t++) {
                _mm512_store_si512(bt[ch][0][t], t < 4 ? b[t] : zero);
                _mm512_store_si512(bt[ch][1][t], t < 4 ? zero : b[t]);
            }
        }
        for (int ch = 0; ch < 8; ch++)
            AMX_PAIR(xq + 32 * ch, bt[ch][0], xq + 32 * ch, bt[ch][1], k, c[ch][0], c[ch][1]);
        for (int ch = 0; ch < 8; ch++) {
            __m512i sc0 = _mm512_cvtepi8_epi32(N(pair8)(g0, g1, p + 1536 + 16 * ch));
            __m512i sc1 = _mm512_cvtepi8_epi32(N(pair8)(g0, g1, p + 1536 + 16 * ch + 8));
            for (int i = 0; i < R; i++) {
                const int16_t *bs = a->bs16 + (size_t)(r0 + i) * (k / 16) + 16 * sb + 2 * ch;
                __m512i s0 = _mm512_sub_epi32(_mm512_load_si512(c[ch][0][i]), _mm512_set1_epi32(32 * bs[0]));
                __m512i s1 = _mm512_sub_epi32(_mm512_load_si512(c[ch][1][i]), _mm512_set1_epi32(32 * bs[1]));
                is[i] = _mm512_add_epi32(is[i], _mm512_add_epi32(_mm512_mullo_epi32(s0, sc0), _mm512_mullo_epi32(s1, sc1)));
            }
        }
        N(q6k_scale16)(R, g0, g1, p, a, r0, sb, is, acc);
    }
    for (int i = r0; i < r0 + R; i++) _mm512_storeu_ps(y + (size_t)i * n, acc[i - r0]);
}

FN_AMX static void dot16_amx(int type, int R, const uint8_t *g0, const uint8_t *g1, const Act *a, int r0, float *y,
                             int n, int *tiles) {
    amx_rows(R, tiles);
    if (type == Q4_K) dot16_amx_q4k(R, g0, g1, a, r0, y, n);
    else dot16_amx_q6k(R, g0, g1, a, r0, y, n);
}

FN_AMX static void amx_release(int tiles) {
    if (tiles) _tile_release();
}
