/* The kernels' library: every function it exports, declared once (build.py compiles the .c files of this folder into
 * one shared library, cpu_layer.py loads it with ctypes and mirrors each signature in SIGNATURES and the two
 * structures below). Each .c file includes this header and defines its own functions; none declares another's.
 *
 * One scheme for instruction sets: an ISA variant is a set of functions compiled with __attribute__((target(T_...)))
 * and chosen at run time from CPUID by the product's *_isa() bitmask (Python picks a variant allowed by
 * SPECLENS_CPU_ISA and passes its id), never by the -march the library is built for; the level decides only what
 * the compiler may assume for the portable code around them (the layer ops, the packing loops). Prefetches are
 * __builtin_prefetch: gcc 12 drops an _mm_prefetch inlined into a target function.
 * Build-time gates that remain, each for what no run-time check can give:
 *   KERNELS_X86      x86 intrinsics exist on x86-64 only (elsewhere: the portable layer ops, every *_isa() 0)
 *   KERNELS_AVXVNNI  AVX-VNNI intrinsics need gcc 11 / clang 12
 *   KERNELS_AMX      AMX intrinsics need gcc 11 / clang 12, and the tile state is granted by a Linux syscall
 *   _OPENMP          whether the compiler links OpenMP (omp_built): without it every kernel runs on one thread
 */
#ifndef SPECLENS_KERNELS_H
#define SPECLENS_KERNELS_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 10)
#define KERNELS_X86 1
#else
#define KERNELS_X86 0
#endif
#if KERNELS_X86 && ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define KERNELS_AVXVNNI 1
#else
#define KERNELS_AVXVNNI 0
#endif
#if KERNELS_AVXVNNI && defined(__linux__)
#define KERNELS_AMX 1
#else
#define KERNELS_AMX 0
#endif

/* the targets of the variants (the floats of every variant of one product are the same: its tests) */
#define T_AVX2 "avx2,fma,f16c"
#define T_AVXVNNI T_AVX2 ",avxvnni"
#define T_AVX512 T_AVX2 ",avx512f,avx512bw,avx512dq,avx512vl"
#define T_AVX512VNNI T_AVX512 ",avx512vnni"
#define T_AVX512BF16 T_AVX512 ",avx512bf16"
#define T_AMX_INT8 T_AVX512VNNI ",amx-tile,amx-int8"
#define T_AMX_BF16 T_AVX512BF16 ",amx-tile,amx-bf16"

/* ---------------------------------------------------------------- layer_ops.c: fused layer ops, attention, top-k */
int omp_built(void);  /* 1: built with OpenMP (the kernels share out threads); 0: one thread */
void rms_cast(const float *x, const float *w, float eps, int64_t n, int64_t d, void *out, int ob);
void add_rms(float *x, const void *o, int ib, const float *ws, const float *w, float eps, int64_t n, int64_t d,
             void *out, int ob);
void act_mul(const void *gu, int ib, int64_t n, int64_t f, int act, void *out, int ob);
void attend(const void *qkv, int ib, const float *bqkv, const float *qn, const float *kn, float eps,
            const float *cos, const float *sin, float *kt, float *v, int64_t max_len, int64_t start,
            const float *bias, int64_t n, int64_t H, int64_t K, int64_t hd, float scale, void *out, int ob,
            int threads);
int top2_rows(const float *x, int64_t n, int64_t V, int64_t *idx, float *top);
int topk_rows(const float *x, int64_t n, int64_t V, int k, int64_t *idx, float *val);

/* ---------------------------------------------------------------- int4_mm.c: a draft model's int4 weights */
int int4_isa(void);  /* bit 1: the AVX512-VNNI variant runs here (the only one) */
void int4_mm(const float *x, int m, int k, const uint8_t *q, const float *scale, const float *lo, int n, float *y,
             int threads);

/* ---------------------------------------------------------------- codes_mm.c, codes_mm_avx.c: bf16 from GGUF codes */
int codes_isa(void);  /* bit 0: codes_mm_avx isa 1 (AVX2 + FMA), bit 1: isa 2 (AVX512-BF16), bit 2: codes_mm (AMX) */
void codes_mm(const uint16_t *x, int m, int k, int n, const uint8_t *types, const int64_t *code_off,
              const int64_t *sm_off, const int64_t *dd_off, const uint8_t *codes, const uint8_t *sm, const float *dd,
              uint16_t *y, int threads);
void codes_decode(int k, int n, const uint8_t *types, const int64_t *code_off, const int64_t *sm_off,
                  const int64_t *dd_off, const uint8_t *codes, const uint8_t *sm, const float *dd, uint16_t *w,
                  int threads);
void codes_mm_avx(int isa, const uint16_t *x, int m, int k, int n, const uint8_t *types, const int64_t *code_off,
                  const int64_t *sm_off, const int64_t *dd_off, const uint8_t *codes, const uint8_t *sm,
                  const float *dd, uint16_t *y, int threads);
void codes_decode_avx(int isa, int k, int n, const uint8_t *types, const int64_t *code_off, const int64_t *sm_off,
                      const int64_t *dd_off, const uint8_t *codes, const uint8_t *sm, const float *dd, uint16_t *w,
                      int threads);
int amx_granted(void);  /* Linux granted this process the AMX tile state (asked once); codes_mm.c, read by q8_mm.c */

/* ---------------------------------------------------------------- q8_mm.c: int8 activations on GGUF blocks */
int q8_isa(void);  /* bit v: variant v runs here (0 AVX2, 1 AVX-VNNI, 2 AVX512-VNNI, 3 AMX-INT8) */
void q8_mm(int variant, const float *x, int m, int k, int n, const uint8_t *types, const int64_t *off,
           const uint8_t *raw, int kinds, const uint8_t *x8, const int64_t *x8_off, float *y, int threads);
void q8_set_prefetch(int bytes);  /* timing only, never a float: tuning.py's Q8Tuning sets them */
int q8_prefetch_bytes(void);
void q8_set_stream(int bytes);
int q8_stream_bytes(void);
void q8_set_pair_rows(int rows);
int q8_pair_rows(void);

/* ---------------------------------------------------------------- layers_q8.c: every layer of a pass in one call */
typedef struct {
    const uint8_t *types; const int64_t *off; const uint8_t *raw; int64_t kinds, k, n;
    const uint8_t *x8; const int64_t *x8_off;  /* interleaved groups (NULL: none) */
} Q8Mat;

typedef struct {
    Q8Mat qkv, o, gu, d;
    const float *bqkv, *qn, *kn, *ln_att, *ln2, *ln_mlp, *ln_next;  /* ln_next: the next layer's ln1 (last: final) */
    int64_t rope, window;  /* indices into the call's cos / sin and bias arrays */
} Q8Layer;

void layers_q8(int variant, float *x, int64_t n, int64_t d, const Q8Layer *layers, int64_t L, const float *ln1,
               float eps, const float *const *cos, const float *const *sin, const float *const *bias, float *kt,
               float *v, int64_t max_len, int64_t start, int64_t H, int64_t K, int64_t hd, float scale,
               int64_t ffn, int act, void *out, int ob, int threads);

/* ---------------------------------------------------------------- lowrank_mm.c: a low-rank head over the vocabulary */
int lowrank_isa(void);  /* bit 0: isa 1 (AVX2 + FMA), bit 1: isa 2 (AVX-512F); isa 0, the scalar loop, runs anywhere */
void lowrank_mm(int isa, const float *z, int n, int r, const void *up, int wide, int64_t V, float *y, int threads);

/* ---------------------------------------------------------------- helpers every source may use */
static inline float bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even, as torch; a NaN stays a quiet NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#if KERNELS_X86
#include <cpuid.h>
/* bit `bit` of register reg (0 eax, 1 ebx, 2 ecx, 3 edx) of CPUID (leaf, sub): the features __builtin_cpu_supports
 * does not name in every compiler the build takes (clang 14: f16c, avxvnni; gcc 12: amx-*) */
static inline int cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
    unsigned r[4];
    return __get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3]) && (r[reg] >> bit & 1);
}
#define CPU_F16C() cpuid_bit(1, 0, 2, 29)
#define CPU_AVXVNNI() cpuid_bit(7, 1, 0, 4)
#define CPU_AMX_BF16() cpuid_bit(7, 0, 3, 22)
#define CPU_AMX_TILE() cpuid_bit(7, 0, 3, 24)
#define CPU_AMX_INT8() cpuid_bit(7, 0, 3, 25)

static inline int cpu_avx2(void) { /* this CPU (and its OS) runs T_AVX2 code */
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CPU_F16C();
}

static inline int cpu_avx512(void) { /* ... and T_AVX512 code */
    return cpu_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}
#endif

#if KERNELS_AMX
typedef struct {  /* ldtilecfg's 64 bytes (palette 1): each tile's rows and bytes per row */
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tilecfg;
#endif

#endif
