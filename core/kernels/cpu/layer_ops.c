/* The fast runtime's per-layer elementwise work, fused: one C call where the torch path makes ~10 ops.
 *
 * Portable C (no intrinsics): the compiler vectorises it for the library's level (build.py). The GEMMs stay in torch
 * or in this library's products; these kernels do everything between them:
 *   rms_cast   h = rms(x) * w                                  -> the next GEMM's input
 *   add_rms    x += o (gemma: x += rms(o) * ws); h = rms(x) * w
 *   act_mul    a = act(g) * u, [g | u] = gu                     (silu or gelu-tanh)
 *   attend     bias, q/k norms, rope, k/v -> cache, attention  [n, (H+2K)*hd] -> [n, H*hd]
 *   top2_rows, topk_rows   each row's argmax and two largest values, its k largest: the verify's and NanoSpec's picks
 * Activations are fp32; GEMM inputs and outputs are bf16 (ob / ib = 1) or fp32.
 * Every row is computed on its own, and attention sums over the *visible* keys only (bias > -inf), in
 * key order: a token's result does not depend on how many rows share the pass nor on masked gaps in the
 * cache, so tree verification reproduces one-token decoding bit for bit (given row-stable GEMMs).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#define LANES 16

int omp_built(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

static void load_row(const void *src, int ib, int64_t off, int64_t m, float *dst) {
    if (ib) {
        const uint16_t *s = (const uint16_t *)src + off;
        for (int64_t i = 0; i < m; i++) dst[i] = bf16_to_f32(s[i]);
    } else {
        memcpy(dst, (const float *)src + off, m * sizeof(float));
    }
}

static void store_row(void *dst, int ob, int64_t off, int64_t m, const float *src) {
    if (ob) {
        uint16_t *d = (uint16_t *)dst + off;
        for (int64_t i = 0; i < m; i++) d[i] = f32_to_bf16(src[i]);
    } else {
        memcpy((float *)dst + off, src, m * sizeof(float));
    }
}

/* the total of LANES partial sums, halved pairwise (a fixed order); acc is consumed */
static inline float lanes_total(float *acc) {
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

/* sum of a[i] * b[i] in LANES partial sums (vectorised, fixed order) */
static inline float dot(const float *a, const float *b, int64_t m) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= m; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < m; i++, l++) acc[l] += a[i] * b[i];
    return lanes_total(acc);
}

/* y = x * rsqrt(mean(x^2) + eps) * w, in place allowed */
static void rms_row(const float *x, const float *w, float eps, int64_t m, float *y) {
    float r = 1.0f / sqrtf(dot(x, x, m) / (float)m + eps);
    for (int64_t i = 0; i < m; i++) y[i] = x[i] * r * w[i];
}

/* x <- e^x in place: 2^k * p(r), |r| <= ln2/2, ~1 ulp, x clamped to [-87, 88]; vectorisable */
static void exp_inplace(float *x, int64_t m) {
    for (int64_t i = 0; i < m; i++) {
        float v = x[i] < -87.0f ? -87.0f : (x[i] > 88.0f ? 88.0f : x[i]);
        float k = (v * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  /* round(v / ln2): 1.5 * 2^23 trick */
        float r = v - k * 0.693145751953125f - k * 1.428606765330187e-06f;
        float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.6666667163e-1f + r * (4.1666645557e-2f +
                  r * (8.3333337680e-3f + r * (1.3888889225e-3f + r * 1.9841270114e-4f))))));
        int32_t e = ((int32_t)k + 127) << 23;
        float s;
        memcpy(&s, &e, 4);
        x[i] = p * s;
    }
}

void rms_cast(const float *x, const float *w, float eps, int64_t n, int64_t d, void *out, int ob) {
    float *h = malloc(d * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        rms_row(x + i * d, w, eps, d, h);
        store_row(out, ob, i * d, d, h);
    }
    free(h);
}

void add_rms(float *x, const void *o, int ib, const float *ws, const float *w, float eps,
             int64_t n, int64_t d, void *out, int ob) {
    float *t = malloc(d * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        float *xi = x + i * d;
        load_row(o, ib, i * d, d, t);
        if (ws) rms_row(t, ws, eps, d, t);
        for (int64_t j = 0; j < d; j++) xi[j] += t[j];
        if (w) {
            rms_row(xi, w, eps, d, t);
            store_row(out, ob, i * d, d, t);
        }
    }
    free(t);
}

void act_mul(const void *gu, int ib, int64_t n, int64_t f, int act, void *out, int ob) {
    float *g = malloc(3 * f * sizeof(float)), *e = g + 2 * f;
    for (int64_t i = 0; i < n; i++) {
        load_row(gu, ib, i * 2 * f, 2 * f, g);
        if (act == 0) {  /* silu(a) = a / (1 + e^-a) */
            for (int64_t j = 0; j < f; j++) e[j] = -g[j];
            exp_inplace(e, f);
            for (int64_t j = 0; j < f; j++) g[j] = g[j] / (1.0f + e[j]) * g[f + j];
        } else {  /* gelu-tanh(a) = a / 2 (1 + tanh(y)) = a (1 - 1 / (e^2y + 1)), y = sqrt(2/pi) (a + 0.044715 a^3) */
            for (int64_t j = 0; j < f; j++) e[j] = 1.5957691216057308f * (g[j] + 0.044715f * g[j] * g[j] * g[j]);
            exp_inplace(e, f);
            for (int64_t j = 0; j < f; j++) g[j] = g[j] * (1.0f - 1.0f / (e[j] + 1.0f)) * g[f + j];
        }
        store_row(out, ob, i * f, f, g);
    }
    free(g);
}

/* y = x * cos + roll(x, hd/2) * sin_s  (sin_s sign-folded: rotate_half) */
static void rope_row(float *x, const float *cos, const float *sin, int64_t hd, float *tmp) {
    int64_t half = hd / 2;
    for (int64_t j = 0; j < hd; j++) tmp[j] = x[j] * cos[j] + x[j < half ? j + half : j - half] * sin[j];
    memcpy(x, tmp, hd * sizeof(float));
}

#define ROWS 16  /* query rows per attention block: scores [ROWS * G, S] */
#define KB 64  /* keys per block: a [hd, KB] slice of K^T or a [KB, hd] slice of V stays in L1 for every query */

typedef float v16 __attribute__((vector_size(64)));  /* gcc/clang vector extension: 16 floats, in registers */

static inline v16 ld16(const float *p) {
    v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void st16(float *p, v16 v) { memcpy(p, &v, sizeof v); }

#define QB 4  /* queries per micro-kernel call: 4 x 4 accumulators of 16 floats */
#define FMA4(a, s, k) a##0 += (s) * k##0, a##1 += (s) * k##1, a##2 += (s) * k##2, a##3 += (s) * k##3
#define LD4(k, p, st) v16 k##0 = ld16(p), k##1 = ld16((p) + (st)), k##2 = ld16((p) + 2 * (st)), k##3 = ld16((p) + 3 * (st))
#define ST4(p, a) st16(p, a##0), st16((p) + 16, a##1), st16((p) + 32, a##2), st16((p) + 48, a##3)

/* out[r * KB + l] = sum_d x_r[d] k[d * ld + l], l < KB, r < QB: one multiply-add chain over d in order per
 * score, the same code for every key and query */
static inline void block_scores(const float *const *x, const float *k, int64_t ld, int64_t hd, float *out) {
    v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
    v16 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, e0 = {0}, e1 = {0}, e2 = {0}, e3 = {0};
    const float *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3];
    for (int64_t d = 0; d < hd; d++) {
        LD4(k, k + d * ld, 16);
        FMA4(a, x0[d], k), FMA4(b, x1[d], k), FMA4(c, x2[d], k), FMA4(e, x3[d], k);
    }
    ST4(out, a), ST4(out + KB, b), ST4(out + 2 * KB, c), ST4(out + 3 * KB, e);
}

/* p_r[j] = sum_d q_r[d] kt[d][j], j < S, for the queries q_r (nq a multiple of QB; kt: one kv head's keys
 * transposed, [hd, ld]). A last partial block of keys is zero-padded into pad [hd, KB], so every score comes
 * from the same code whatever block its key falls in. */
static void scores(const float *const *q, float *const *p, int64_t nq, const float *kt, int64_t ld, int64_t S,
                   int64_t hd, float *pad) {
    float acc[QB * KB];
    for (int64_t j0 = 0; j0 < S; j0 += KB) {
        int64_t nb = S - j0 < KB ? S - j0 : KB;
        const float *k = kt + j0;
        int64_t kld = ld;
        if (nb < KB) {
            memset(pad, 0, hd * KB * sizeof(float));
            for (int64_t d = 0; d < hd; d++) memcpy(pad + d * KB, kt + d * ld + j0, nb * sizeof(float));
            k = pad, kld = KB;
        }
        for (int64_t r = 0; r < nq; r += QB) {
            block_scores(q + r, k, kld, hd, acc);
            for (int64_t u = 0; u < QB; u++) memcpy(p[r + u] + j0, acc + u * KB, nb * sizeof(float));
        }
    }
}

/* vis <- the keys j < S with b[j] > -inf, in order; returns how many */
static int64_t visible(const float *b, int64_t S, int32_t *vis) {
    int64_t m = 0;
    for (int64_t j = 0; j < S; j++)
        if (b[j] > -INFINITY) vis[m++] = (int32_t)j;
    return m;
}

/* p <- softmax(scale * p + b) over the m visible keys vis (the others get exactly 0). The sum runs over the
 * visible keys in LANES lanes by their rank among them: the same for a key set wherever its keys sit in the cache. */
static void softmax_visible(float *p, const float *b, const int32_t *vis, int64_t m, float scale, int64_t S) {
    float m8[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int64_t j = 0; j < S; j++) p[j] = b[j] > -INFINITY ? scale * p[j] + b[j] : -INFINITY;
    int64_t j = 0;
    for (; j + 8 <= S; j += 8)
        for (int l = 0; l < 8; l++) m8[l] = p[j + l] > m8[l] ? p[j + l] : m8[l];
    for (; j < S; j++) m8[0] = p[j] > m8[0] ? p[j] : m8[0];
    float mx = m8[0];
    for (int l = 1; l < 8; l++) mx = m8[l] > mx ? m8[l] : mx;
    for (j = 0; j < S; j++) p[j] -= mx;
    exp_inplace(p, S);
    for (j = 0; j < S; j++) p[j] = b[j] > -INFINITY ? p[j] : 0.0f;
    float acc[LANES] = {0};
    int64_t t = 0;
    for (; t + LANES <= m; t += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += p[vis[t + l]];
    for (int l = 0; t < m; t++, l++) acc[l] += p[vis[t]];
    float sum = lanes_total(acc);
    for (j = 0; j < S; j++) p[j] /= sum;
}

/* o_r[d] += sum_{j < nb} p_r[j] v[j * hd + d], r < QB (hd a multiple of 16): one multiply-add chain over j in
 * order per output */
static inline void block_weighted(const float *const *p, const float *v, int64_t nb, int64_t hd, float *const *o) {
    const float *p0 = p[0], *p1 = p[1], *p2 = p[2], *p3 = p[3];
    float *o0 = o[0], *o1 = o[1], *o2 = o[2], *o3 = o[3];
    int64_t d = 0;
    for (; d + 64 <= hd; d += 64) {
        LD4(a, o0 + d, 16);
        LD4(b, o1 + d, 16);
        LD4(c, o2 + d, 16);
        LD4(e, o3 + d, 16);
        for (int64_t j = 0; j < nb; j++) {
            LD4(w, v + j * hd + d, 16);
            FMA4(a, p0[j], w), FMA4(b, p1[j], w), FMA4(c, p2[j], w), FMA4(e, p3[j], w);
        }
        ST4(o0 + d, a), ST4(o1 + d, b), ST4(o2 + d, c), ST4(o3 + d, e);
    }
    for (; d < hd; d += 16) {
        v16 a = ld16(o0 + d), b = ld16(o1 + d), c = ld16(o2 + d), e = ld16(o3 + d);
        for (int64_t j = 0; j < nb; j++) {
            v16 w = ld16(v + j * hd + d);
            a += p0[j] * w, b += p1[j] * w, c += p2[j] * w, e += p3[j] * w;
        }
        st16(o0 + d, a), st16(o1 + d, b), st16(o2 + d, c), st16(o3 + d, e);
    }
}

/* o_r += p_r v for the rows r < nq (a multiple of QB; v: one kv head's values, [S, hd]), KB keys at a time;
 * masked keys add p = 0 exactly. */
static void weighted_sum(const float *const *p, float *const *o, int64_t nq, const float *v, int64_t S, int64_t hd) {
    for (int64_t j0 = 0; j0 < S; j0 += KB) {
        int64_t nb = S - j0 < KB ? S - j0 : KB;
        for (int64_t r = 0; r < nq; r += QB) {
            const float *pj[QB];
            for (int u = 0; u < QB; u++) pj[u] = p[r + u] + j0;
            block_weighted(pj, v + j0 * hd, nb, hd, o + r);
        }
    }
}

/* the nq = nr · G query heads of kv head c over rows i0 .. i0 + nr (padded to QB: [nq, hd] @ [hd, Sb], softmax,
 * [nq, Sb] @ [Sb, hd]) into o; p [ROWS · G + QB, S], pad [hd, KB], spare_o [hd]: this head's own scratch */
static void attend_head(int64_t c, const float *q, int64_t i0, int64_t nr, int64_t width, int64_t H, int64_t G,
                        int64_t hd, const float *kt, const float *v, int64_t max_len, const float *bias, int64_t S,
                        int64_t Sb, const int32_t *vis, const int64_t *nvis, float scale, float *p, float *pad,
                        float *spare_o, float *o) {
    const float *qs[ROWS * G + QB];
    float *ps[ROWS * G + QB], *os[ROWS * G + QB];
    int64_t nq = nr * G, nqp = (nq + QB - 1) / QB * QB;
    for (int64_t r = 0; r < nqp; r++) {
        int64_t u = r < nq ? r : nq - 1, h = c * G + u % G;
        qs[r] = q + (i0 + u / G) * width + h * hd;
        ps[r] = p + r * S;  /* the padding rows' scores land past the real ones, unread */
        os[r] = r < nq ? o + (u / G) * H * hd + h * hd : spare_o;
    }
    scores(qs, ps, nqp, kt + c * hd * max_len, max_len, Sb, hd, pad);  /* [nq, hd] @ [hd, Sb] */
    for (int64_t r = 0; r < nq; r++)
        softmax_visible(ps[r], bias + (i0 + r / G) * S, vis + (r / G) * S, nvis[r / G], scale, Sb);
    weighted_sum((const float *const *)ps, os, nqp, v + c * max_len * hd, Sb, hd);  /* [nq, Sb] @ [Sb, hd] */
}

/* multiply-adds of one block's attention from which its kv heads go to the threads: a 1-token step's heads share them
 * from ~8 keys on, where the second thread's half outweighs waking it */
#define ATT_SPLIT (1 << 13)

/* qkv [n, (H+2K)*hd] (+ bqkv), per-head q/k norms (qn, kn or NULL), rope with cos/sin [n, hd];
 * k, v of row i -> kt[c][:, start + i], v[c][start + i] (this layer's caches: kt [K, hd, max_len], v [K, max_len, hd]);
 * out[i] = softmax(scale * q k^T + bias[i]) v over cache rows [0, start + n) with bias > -inf. */
void attend(const void *qkv, int ib, const float *bqkv, const float *qn, const float *kn, float eps,
            const float *cos, const float *sin, float *kt, float *v, int64_t max_len, int64_t start,
            const float *bias, int64_t n, int64_t H, int64_t K, int64_t hd, float scale, void *out, int ob,
            int threads) {
    int64_t width = (H + 2 * K) * hd, S = start + n, G = H / K, per = (ROWS * G + QB) * S + hd * KB + hd;
    float *q = malloc((n * width + hd + ROWS * H * hd + K * per) * sizeof(float));
    float *tmp = q + n * width, *o = tmp + hd, *scratch = o + ROWS * H * hd;
    int32_t *vis = malloc(ROWS * S * sizeof(int32_t));
    int64_t nvis[ROWS];
    for (int64_t i = 0; i < n; i++) {  /* every new row's q, k, v; k, v into the caches */
        float *r = q + i * width;
        load_row(qkv, ib, i * width, width, r);
        if (bqkv) for (int64_t j = 0; j < width; j++) r[j] += bqkv[j];
        for (int64_t h = 0; h < H + K; h++) {
            float *x = r + h * hd;
            if (h < H && qn) rms_row(x, qn, eps, hd, x);
            if (h >= H && kn) rms_row(x, kn, eps, hd, x);
            rope_row(x, cos + i * hd, sin + i * hd, hd, tmp);
        }
        for (int64_t c = 0; c < K; c++) {
            for (int64_t d = 0; d < hd; d++) kt[(c * hd + d) * max_len + start + i] = r[(H + c) * hd + d];
            memcpy(v + (c * max_len + start + i) * hd, r + (H + K + c) * hd, hd * sizeof(float));
        }
    }
    for (int64_t i0 = 0; i0 < n; i0 += ROWS) {  /* ROWS rows at a time: per kv head, their G query heads each */
        int64_t nr = n - i0 < ROWS ? n - i0 : ROWS;
        memset(o, 0, nr * H * hd * sizeof(float));
        int64_t Sb = 0;  /* keys [Sb, S) are masked for every row of the block (a causal prefill's future) */
        for (int64_t i = 0; i < nr; i++) {
            nvis[i] = visible(bias + (i0 + i) * S, S, vis + i * S);
            if (nvis[i] > 0 && vis[i * S + nvis[i] - 1] + 1 > Sb) Sb = vis[i * S + nvis[i] - 1] + 1;
        }
        /* each kv head's queries on one thread, in the same operations whatever the thread: the same floats */
        #pragma omp parallel for num_threads(threads) schedule(static) if (2 * nr * H * Sb * hd >= ATT_SPLIT)
        for (int64_t c = 0; c < K; c++) {
            float *p = scratch + c * per;
            attend_head(c, q, i0, nr, width, H, G, hd, kt, v, max_len, bias, S, Sb, vis, nvis, scale, p,
                        p + (ROWS * G + QB) * S, p + (ROWS * G + QB) * S + hd * KB, o);
        }
        for (int64_t i = 0; i < nr; i++) store_row(out, ob, (i0 + i) * H * hd, H * hd, o + i * H * hd);
    }
    free(q);
    free(vis);
}


/* top2_rows: for each row of x [n, V] fp32, idx[i] = the first index of its largest value (torch.argmax's pick) and
 * top[2i], top[2i + 1] = its two largest values counting repeats (torch.topk(2)'s), in one pass: per lane the lane's
 * first maximum and runner-up, then the lanes merged by (value, then lowest index). Returns 1 where a row holds a
 * NaN or no value above -inf (torch ranks NaN first and picks index 0 of an all -inf row: the caller asks torch). */
static inline void merge2(float a1, int64_t ai, float a2, float *b1, int64_t *bi, float *b2) {
    if (a1 > *b1 || (a1 == *b1 && ai < *bi)) {
        *b2 = *b1 > a2 ? *b1 : a2;
        *b1 = a1, *bi = ai;
    } else if (a1 > *b2) {
        *b2 = a1;
    }
}

static int top2_row(const float *x, int64_t V, int64_t *idx, float *top) {
    float m1[LANES], m2[LANES];
    int32_t i1[LANES], bad = 0;
    for (int l = 0; l < LANES; l++) m1[l] = m2[l] = -INFINITY, i1[l] = INT32_MAX;
    int64_t j = 0;
    for (; j + LANES <= V; j += LANES)
        for (int l = 0; l < LANES; l++) {
            float v = x[j + l];
            int gt = v > m1[l];
            bad |= v != v;
            m2[l] = gt ? m1[l] : (v > m2[l] ? v : m2[l]);
            i1[l] = gt ? (int32_t)(j + l) : i1[l];
            m1[l] = gt ? v : m1[l];
        }
    float b1 = -INFINITY, b2 = -INFINITY;
    int64_t bi = INT64_MAX;
    for (int l = 0; l < LANES; l++) merge2(m1[l], i1[l], m2[l], &b1, &bi, &b2);
    for (; j < V; j++) {
        bad |= x[j] != x[j];
        merge2(x[j], j, -INFINITY, &b1, &bi, &b2);
    }
    *idx = bi, top[0] = b1, top[1] = b2;
    return bad || !(b1 > -INFINITY);
}

int top2_rows(const float *x, int64_t n, int64_t V, int64_t *idx, float *top) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= top2_row(x + i * V, V, idx + i, top + 2 * i);
    return bad;
}

/* topk_rows: for each row of x [n, V] fp32, its k largest values and their indices [n, k], best first, equal values
 * in index order (torch.topk's set; its order among equal values is unspecified). One pass: 16 values at a time are
 * compared with the k-th best so far, and only a group holding a larger one is merged into the sorted k. Returns 1
 * where a row holds a NaN or fewer than k values above -inf (the caller asks torch). k ≤ 256. */
static int topk_row(const float *x, int64_t V, int k, int64_t *idx, float *val) {
    float thr = -INFINITY;
    int have = 0, bad = 0;
    for (int64_t j = 0; j < V; j += LANES) {
        int m = V - j < LANES ? (int)(V - j) : LANES, any = 0;
        for (int l = 0; l < m; l++) any |= x[j + l] > thr, bad |= x[j + l] != x[j + l];
        if (!any) continue;
        for (int l = 0; l < m; l++) {
            float v = x[j + l];
            if (!(v > thr)) continue;
            int p = have < k ? have++ : k - 1;  /* the slot freed at the end, then moved up past smaller values */
            while (p > 0 && val[p - 1] < v) val[p] = val[p - 1], idx[p] = idx[p - 1], p--;
            val[p] = v, idx[p] = j + l;
            if (have == k) thr = val[k - 1];
        }
    }
    return bad || have < k;
}

int topk_rows(const float *x, int64_t n, int64_t V, int k, int64_t *idx, float *val) {
    int bad = k > 256 || k > V;
    for (int64_t i = 0; i < n && !bad; i++) bad |= topk_row(x + i * V, V, k, idx + i * k, val + i * k);
    return bad;
}
