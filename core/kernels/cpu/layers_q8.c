/* layers_q8: every decoder layer of one forward pass in one C call, for a model whose matrices are all int8 blocks
 * (q8_mm). The same kernels, in the same order and dtypes, as the runtime's fused_layers (core/runtime/fast.py), so
 * its floats equal that path's bit for bit; what it saves is the ~120 ctypes calls, tensor allocations and dtype casts
 * per token around them (a third of SmolLM2's step).
 *   per layer:  att = attend(q8(h, wqkv))   h = add_rms(x, q8(att, wo))   h = add_rms(x, q8(act_mul(q8(h, wgu)), wd))
 * GEMM inputs and outputs are kept as `ob` says (bf16: 1, as the model's weights; fp32: 0), activations x fp32.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static float *to_f32(const void *src, int ib, int64_t len, float *buf) {
    if (!ib) return (float *)src;
    const uint16_t *s = src;
    for (int64_t i = 0; i < len; i++) buf[i] = bf16_to_f32(s[i]);
    return buf;
}

static void from_f32(const float *src, int ob, int64_t len, void *dst) {
    if (!ob) { memcpy(dst, src, len * 4); return; }
    uint16_t *d = dst;
    for (int64_t i = 0; i < len; i++) d[i] = f32_to_bf16(src[i]);
}

/* y (as ob) = x (as ob) @ Wᵀ through q8_mm's fp32 interface, as weights.mm's cast(q8_mm(x.float()), x.dtype) */
static void q8(int variant, const Q8Mat *w, const void *x, int64_t n, int ob, float *xf, float *yf, void *y, int threads) {
    const float *in = to_f32(x, ob, n * w->k, xf);
    q8_mm(variant, in, (int)n, (int)w->k, (int)w->n, w->types, w->off, w->raw, (int)w->kinds, w->x8, w->x8_off, yf,
          threads);
    from_f32(yf, ob, n * w->n, y);
}

/* x [n, d] fp32 in place; out [n, d] (as ob): rms(x) · final norm after the last layer */
void layers_q8(int variant, float *x, int64_t n, int64_t d, const Q8Layer *layers, int64_t L, const float *ln1,
               float eps, const float *const *cos, const float *const *sin, const float *const *bias, float *kt,
               float *v, int64_t max_len, int64_t start, int64_t H, int64_t K, int64_t hd, float scale,
               int64_t ffn, int act, void *out, int ob, int threads) {
    int64_t es = ob ? 2 : 4, width = (H + 2 * K) * hd, widest = 2 * ffn > width ? 2 * ffn : width;
    if (H * hd > widest) widest = H * hd;
    if (d > widest) widest = d;
    void *h = malloc(n * d * es), *a = malloc(n * widest * es), *b = malloc(n * widest * es);
    float *xf = malloc(n * widest * 4), *yf = malloc(n * widest * 4);
    int64_t per_layer = K * hd * max_len;
    rms_cast(x, ln1, eps, n, d, h, ob);
    for (int64_t i = 0; i < L; i++) {
        const Q8Layer *w = layers + i;
        q8(variant, &w->qkv, h, n, ob, xf, yf, a, threads);
        attend(a, ob, w->bqkv, w->qn, w->kn, eps, cos[w->rope], sin[w->rope], kt + i * per_layer, v + i * per_layer,
               max_len, start, bias[w->window], n, H, K, hd, scale, b, ob, threads);
        q8(variant, &w->o, b, n, ob, xf, yf, a, threads);
        add_rms(x, a, ob, w->ln_att, w->ln2, eps, n, d, h, ob);
        q8(variant, &w->gu, h, n, ob, xf, yf, a, threads);
        act_mul(a, ob, n, ffn, act, b, ob);
        q8(variant, &w->d, b, n, ob, xf, yf, a, threads);
        add_rms(x, a, ob, w->ln_mlp, w->ln_next, eps, n, d, i + 1 < L ? h : out, ob);
    }
    free(h), free(a), free(b), free(xf), free(yf);
}
