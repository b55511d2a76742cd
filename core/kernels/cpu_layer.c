/* The fast runtime's per-layer elementwise work, fused: one C call where the torch path makes ~10 ops.
 *
 * Built by core/kernels/cpu_layer.py (gcc -O3 -march=native), called through ctypes on raw pointers.
 * The GEMMs stay in torch (oneDNN / BLAS); these kernels do everything between them:
 *   rms_cast   h = rms(x) * w                                  -> the next GEMM's input
 *   add_rms    x += o (gemma: x += rms(o) * ws); h = rms(x) * w
 *   act_mul    a = act(g) * u, [g | u] = gu                     (silu or gelu-tanh)
 *   attend     bias, q/k norms, rope, k/v -> cache, attention  [n, (H+2K)*hd] -> [n, H*hd]
 * Activations are fp32; GEMM inputs and outputs are bf16 (ob / ib = 1) or fp32.
 * Every row is computed on its own, and attention sums over the *visible* keys only (bias > -inf), in
 * key order: a token's result does not depend on how many rows share the pass nor on masked gaps in the
 * cache, so tree verification reproduces one-token decoding bit for bit (given row-stable GEMMs).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LANES 16

static inline float bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f2bf(float f) { /* round to nearest even, as torch */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static void load_row(const void *src, int ib, int64_t off, int64_t m, float *dst) {
    if (ib) {
        const uint16_t *s = (const uint16_t *)src + off;
        for (int64_t i = 0; i < m; i++) dst[i] = bf2f(s[i]);
    } else {
        memcpy(dst, (const float *)src + off, m * sizeof(float));
    }
}

static void store_row(void *dst, int ob, int64_t off, int64_t m, const float *src) {
    if (ob) {
        uint16_t *d = (uint16_t *)dst + off;
        for (int64_t i = 0; i < m; i++) d[i] = f2bf(src[i]);
    } else {
        memcpy((float *)dst + off, src, m * sizeof(float));
    }
}

/* sum of a[i] * b[i] in LANES partial sums, then halved pairwise (vectorised, fixed order) */
static inline float dot(const float *a, const float *b, int64_t m) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= m; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < m; i++, l++) acc[l] += a[i] * b[i];
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
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

/* s[j] = sum_d q[d] kt[d][j] for j < S (kt: one kv head's keys transposed, [hd, ld]); the d-sum runs in
 * order for every j, four d per pass over s (the same FMA sequence, a quarter of the stores) */
static void scores(const float *q, const float *kt, int64_t ld, int64_t S, int64_t hd, float *s) {
    memset(s, 0, S * sizeof(float));
    int64_t d = 0;
    for (; d + 4 <= hd; d += 4) {
        const float *k0 = kt + d * ld, *k1 = k0 + ld, *k2 = k1 + ld, *k3 = k2 + ld;
        float q0 = q[d], q1 = q[d + 1], q2 = q[d + 2], q3 = q[d + 3];
        for (int64_t j = 0; j < S; j++) {
            float t = s[j];
            t += q0 * k0[j];
            t += q1 * k1[j];
            t += q2 * k2[j];
            t += q3 * k3[j];
            s[j] = t;
        }
    }
    for (; d < hd; d++)
        for (int64_t j = 0; j < S; j++) s[j] += q[d] * kt[d * ld + j];
}

/* p <- softmax(scale * p + b) over the keys with b > -inf (the others get exactly 0); summed in key order */
static void softmax_visible(float *p, const float *b, float scale, int64_t S) {
    float m8[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int64_t j = 0; j < S; j++) p[j] = b[j] > -INFINITY ? scale * p[j] + b[j] : -INFINITY;
    int64_t j = 0;
    for (; j + 8 <= S; j += 8)
        for (int l = 0; l < 8; l++) m8[l] = p[j + l] > m8[l] ? p[j + l] : m8[l];
    for (; j < S; j++) m8[0] = p[j] > m8[0] ? p[j] : m8[0];
    float mx = m8[0], sum = 0.0f;
    for (int l = 1; l < 8; l++) mx = m8[l] > mx ? m8[l] : mx;
    for (j = 0; j < S; j++) p[j] -= mx;
    exp_inplace(p, S);
    for (j = 0; j < S; j++) p[j] = b[j] > -INFINITY ? p[j] : 0.0f;
    for (j = 0; j < S; j++) sum += p[j];
    for (j = 0; j < S; j++) p[j] /= sum;
}

/* o[d] += sum_j p[j] v[j][d] (v: one kv head's values, [S, hd]); the j-sum runs in order, four j per pass;
 * masked keys add p = 0 exactly */
static void weighted_sum(const float *p, const float *v, int64_t S, int64_t hd, float *o) {
    int64_t j = 0;
    for (; j + 4 <= S; j += 4) {
        const float *v0 = v + j * hd, *v1 = v0 + hd, *v2 = v1 + hd, *v3 = v2 + hd;
        float p0 = p[j], p1 = p[j + 1], p2 = p[j + 2], p3 = p[j + 3];
        for (int64_t d = 0; d < hd; d++) {
            float t = o[d];
            t += p0 * v0[d];
            t += p1 * v1[d];
            t += p2 * v2[d];
            t += p3 * v3[d];
            o[d] = t;
        }
    }
    for (; j < S; j++)
        for (int64_t d = 0; d < hd; d++) o[d] += p[j] * v[j * hd + d];
}

/* qkv [n, (H+2K)*hd] (+ bqkv), per-head q/k norms (qn, kn or NULL), rope with cos/sin [n, hd];
 * k, v of row i -> kt[c][:, start + i], v[c][start + i] (this layer's caches: kt [K, hd, max_len], v [K, max_len, hd]);
 * out[i] = softmax(scale * q k^T + bias[i]) v over cache rows [0, start + n) with bias > -inf. */
void attend(const void *qkv, int ib, const float *bqkv, const float *qn, const float *kn, float eps,
            const float *cos, const float *sin, float *kt, float *v, int64_t max_len, int64_t start,
            const float *bias, int64_t n, int64_t H, int64_t K, int64_t hd, float scale, void *out, int ob) {
    int64_t width = (H + 2 * K) * hd, S = start + n, G = H / K;
    float *q = malloc((n * width + hd + H * hd + S) * sizeof(float));
    float *tmp = q + n * width, *o = tmp + hd, *p = o + H * hd;
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
    for (int64_t i = 0; i < n; i++) {
        memset(o, 0, H * hd * sizeof(float));
        for (int64_t h = 0; h < H; h++) {
            int64_t c = h / G;
            scores(q + i * width + h * hd, kt + c * hd * max_len, max_len, S, hd, p);
            softmax_visible(p, bias + i * S, scale, S);
            weighted_sum(p, v + c * max_len * hd, S, hd, o + h * hd);
        }
        store_row(out, ob, i * H * hd, H * hd, o);
    }
    free(q);
}
