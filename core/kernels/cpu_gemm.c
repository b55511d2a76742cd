/* Small-M fp32 GEMM for the fast runtime: y [M, N] = x [M, K] @ W, W stored as [N/64, K, 64] column blocks.
 *
 * Each 64-column block streams once from memory for all M rows (BLAS's small-M GEMM re-reads or packs it), the
 * rows in tiles of up to 6 (24 register accumulators of 16 floats). Every output is one multiply-add chain
 * over k in order whatever M is, so a row's result does not depend on the rows beside it.
 * Two threads: the caller and one persistent worker that spins briefly between jobs, then sleeps; the blocks
 * are split between them. A second caller while a job runs computes alone (trylock), so it is thread-safe.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

typedef float v16 __attribute__((vector_size(64)));
static inline v16 ld16(const float *p) { v16 v; memcpy(&v, p, sizeof v); return v; }
static inline void st16(float *p, v16 v) { memcpy(p, &v, sizeof v); }

#define MR 6
#define SPINS 200000

/* rows [0, mr) x 64 columns; pf: the next block, fetched into L2 meanwhile (NULL: none), so that memory
 * keeps streaming while the block's other row tiles compute from cache */
static inline __attribute__((always_inline)) void tile(const float *x, int64_t K, const float *w, float *y,
                                                       int64_t N, const int mr, const float *pf) {
    v16 a[MR][4];
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < 4; c++) a[r][c] = (v16){0};
    for (int64_t k = 0; k < K; k++) {
        const float *wk = w + k * 64;
        if (pf) {
            __builtin_prefetch(pf + k * 64, 0, 2), __builtin_prefetch(pf + k * 64 + 16, 0, 2);
            __builtin_prefetch(pf + k * 64 + 32, 0, 2), __builtin_prefetch(pf + k * 64 + 48, 0, 2);
        }
        v16 w0 = ld16(wk), w1 = ld16(wk + 16), w2 = ld16(wk + 32), w3 = ld16(wk + 48);
        for (int r = 0; r < mr; r++) {
            float s = x[r * K + k];
            a[r][0] += s * w0, a[r][1] += s * w1, a[r][2] += s * w2, a[r][3] += s * w3;
        }
    }
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < 4; c++) st16(y + r * N + c * 16, a[r][c]);
}

typedef struct {
    const float *x, *w;
    float *y;
    int64_t M, K, N, b0, b1;
} job_t;

static void run(const job_t *j) {
    for (int64_t b = j->b0; b < j->b1; b++) {
        const float *w = j->w + b * j->K * 64;
        for (int64_t m0 = 0; m0 < j->M; m0 += MR) {
            const float *x = j->x + m0 * j->K, *pf = m0 == 0 && j->M > 1 && b + 1 < j->b1 ? w + j->K * 64 : NULL;
            float *y = j->y + m0 * j->N + b * 64;
            switch (j->M - m0 < MR ? j->M - m0 : MR) {
            case 1: tile(x, j->K, w, y, j->N, 1, pf); break;
            case 2: tile(x, j->K, w, y, j->N, 2, pf); break;
            case 3: tile(x, j->K, w, y, j->N, 3, pf); break;
            case 4: tile(x, j->K, w, y, j->N, 4, pf); break;
            case 5: tile(x, j->K, w, y, j->N, 5, pf); break;
            default: tile(x, j->K, w, y, j->N, 6, pf); break;
            }
        }
    }
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    sched_yield();
#endif
}

static job_t g_job;
static atomic_uint g_seq, g_done;
static atomic_int g_sleeping;
static pid_t g_pid;  /* the process whose worker exists (a forked child starts its own) */
static pthread_mutex_t g_busy = PTHREAD_MUTEX_INITIALIZER, g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;

static void *worker(void *arg) {
    unsigned seen = (unsigned)(uintptr_t)arg;  /* g_seq when it was created: its first job is the next one */
    for (;;) {
        for (int spins = 0; atomic_load(&g_seq) == seen; spins++) {
            if (spins < SPINS) {
                relax();
                continue;
            }
            pthread_mutex_lock(&g_mu);
            atomic_store(&g_sleeping, 1);
            while (atomic_load(&g_seq) == seen) pthread_cond_wait(&g_cv, &g_mu);
            atomic_store(&g_sleeping, 0);
            pthread_mutex_unlock(&g_mu);
        }
        seen = atomic_load(&g_seq);
        run(&g_job);
        atomic_store(&g_done, seen);
    }
    return NULL;
}

static int worker_ready(void) {
    if (g_pid == getpid()) return 1;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int ok = pthread_create(&t, &attr, worker, (void *)(uintptr_t)atomic_load(&g_seq)) == 0;
    pthread_attr_destroy(&attr);
    if (ok) g_pid = getpid();
    return ok;
}

/* y = x @ W for W [N/64, K, 64]; threads > 1: the worker takes the second half of the blocks */
void gemm_f32(const float *x, int64_t M, int64_t K, const float *w, int64_t N, float *y, int threads) {
    int64_t nb = N / 64;
    job_t mine = {x, w, y, M, K, N, 0, nb};
    if (threads < 2 || nb < 2 || pthread_mutex_trylock(&g_busy) != 0) {
        run(&mine);
        return;
    }
    if (!worker_ready()) {
        pthread_mutex_unlock(&g_busy);
        run(&mine);
        return;
    }
    g_job = mine;
    g_job.b0 = mine.b1 = nb / 2;
    unsigned seq = atomic_fetch_add(&g_seq, 1) + 1;
    if (atomic_load(&g_sleeping)) {
        pthread_mutex_lock(&g_mu);
        pthread_cond_signal(&g_cv);
        pthread_mutex_unlock(&g_mu);
    }
    run(&mine);
    while (atomic_load(&g_done) != seq) relax();
    pthread_mutex_unlock(&g_busy);
}
