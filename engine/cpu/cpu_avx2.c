/*
 * cpu_avx2.c - fp32 linear layers on AVX2 and FMA (see cpu_avx2.h).
 *
 * The micro-kernel holds up to 6 rows x 16 columns of output in 12 ymm registers and
 * per k loads the panel's 16 weights (two ymm) and broadcasts each row's src
 * element: 12 FMAs for 8 loads, the register blocking of BLIS's Haswell kernel. Rows
 * run in chunks of ROW_CHUNK and K in slices of K_SLICE: a slice of a panel (16 KiB)
 * stays in L1 while the chunk's row blocks pass over it, and the chunk's slice of
 * src (96 KiB) stays in L2 while the item's panels stream past. A slice ends by
 * storing the fp32 partial sums into dst and the next one starts from them: the FMA
 * chain of every output runs on unchanged, so the bits do not depend on the slices.
 * The rows left after the 6-row blocks (1 to 5: all of a decode step's, one per
 * sequence, when the batch is small) take 2 or 4 panels at a time instead, so that
 * enough FMA chains run side by side. Work items are (row chunk, group of panels),
 * dealt to the OpenMP threads in turn; no item splits K, so the sum order never
 * depends on M or the threads.
 * Compiled on every x86-64 build, the AVX2 code under function target attributes:
 * cpu_avx2_available decides at run time.
 */
#include "cpu_avx2.h"

#include "err.h"
#include "util.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define AVX2_TARGET __attribute__((target("avx2,fma")))
#define MR 6         /* rows of the micro-kernel */
#define ROW_CHUNK 96 /* rows of a work item: 16 micro-kernel blocks */
#define K_SLICE 256  /* K of a slice: a panel's slice is 16 KiB, L1's half */
#define MAX_GROUP 8  /* panels of a work item at most */
#define MAX_P 4      /* panels of the micro-kernel at most */

bool cpu_avx2_available(void)
{
    const char *env = getenv("H2O_CPU_AVX2");
    if (env && strcmp(env, "0") == 0) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/*
 * One block: R rows (src row stride lda) x P panels (stride ldb) over one K slice of
 * kc; c the block's dst (row stride ldc). Only a single panel may be partial (cols
 * < 16, P == 1). The first slice starts from zero, the others from what the last one
 * stored; the last adds the bias and applies ReLU. The first pf_lines k each
 * prefetch a line of pf (64 bytes) into L2. A block of few rows takes several panels
 * where there are, so that 8 or more independent FMA chains hide the FMA latency (4
 * cycles; two FMAs issue a cycle).
 */
AVX2_TARGET static inline __attribute__((always_inline)) void
micro(const float *a, int64_t lda, const float *b, int64_t ldb, int64_t kc, float *c,
      int64_t ldc, int64_t cols, bool first, bool last, const float *bias, bool relu,
      const float *pf, int64_t pf_lines, const int R, const int P)
{
    const bool full = cols == 16;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cols), lane);
    const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cols - 8), lane);
    __m256 acc[MR][2 * MAX_P];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int h = 0; h < 2 * P; h++) {
            float *o = c + r * ldc + h * 8;
            acc[r][h] = first  ? _mm256_setzero_ps()
                        : full ? _mm256_loadu_ps(o)
                               : _mm256_maskload_ps(o, h % 2 ? m1 : m0);
        }
    for (int64_t k = 0; k < kc; k++) {
        if (k < pf_lines) _mm_prefetch((const char *)(pf + k * 16), _MM_HINT_T1);
        __m256 bv[2 * MAX_P];
#pragma GCC unroll 8
        for (int h = 0; h < 2 * P; h++)
            bv[h] = _mm256_load_ps(b + h / 2 * ldb + k * 16 + h % 2 * 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m256 x = _mm256_broadcast_ss(a + r * lda + k);
#pragma GCC unroll 8
            for (int h = 0; h < 2 * P; h++)
                acc[r][h] = _mm256_fmadd_ps(x, bv[h], acc[r][h]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int h = 0; h < 2 * P; h++) {
            const __m256i mask = h % 2 ? m1 : m0;
            float *o = c + r * ldc + h * 8;
            if (last && bias)
                acc[r][h] =
                    _mm256_add_ps(acc[r][h], full ? _mm256_loadu_ps(bias + h * 8)
                                                  : _mm256_maskload_ps(bias + h * 8, mask));
            if (last && relu) acc[r][h] = _mm256_max_ps(acc[r][h], _mm256_setzero_ps());
            if (full)
                _mm256_storeu_ps(o, acc[r][h]);
            else
                _mm256_maskstore_ps(o, mask, acc[r][h]);
        }
}

/* What one item does with one K slice, in the order that keeps a panel's slice in L1
 * while the chunk's 6-row blocks pass over it. Meanwhile the blocks prefetch the
 * panel slice needed next (the next panel's; after the last panel the first one's
 * next K slice, `next`, or none), a share each: the first block of that panel would
 * otherwise wait on memory for every line (a decode step of 16 rows, K 3072, ran
 * 1.3x longer; the LM head at 64 rows 1.2x oneDNN's time with the whole slice
 * prefetched by the first block). The last rows (fewer than 6) then run across the
 * panels, several at a time. */
struct slice {
    const float *a, *b; /* the chunk's src and the item's first panel, at the slice */
    float *c;           /* the chunk's dst at the item's first column */
    const float *bias;  /* at the item's first column, or NULL */
    int64_t lda, ldb, ldc, rows, kc, panels, cols; /* cols: of the item's last panel */
    bool first, last, relu;
};

/* Each shape its own function: inlined into run_slice, the ten shapes' loops shared
 * its registers and some kept their loop counter on the stack. */
#define MICRO_FN(R, P)                                                                     \
    AVX2_TARGET __attribute__((noinline)) static void micro_##R##x##P(                     \
        const float *a, int64_t lda, const float *b, int64_t ldb, int64_t kc, float *c,    \
        int64_t ldc, int64_t cols, bool first, bool last, const float *bias, bool relu,    \
        const float *pf, int64_t pf_lines)                                                 \
    {                                                                                      \
        micro(a, lda, b, ldb, kc, c, ldc, cols, first, last, bias, relu, pf, pf_lines, R,  \
              P);                                                                          \
    }
MICRO_FN(6, 1)
MICRO_FN(5, 1)
MICRO_FN(4, 1)
MICRO_FN(3, 2)
MICRO_FN(3, 1)
MICRO_FN(2, 2)
MICRO_FN(2, 1)
MICRO_FN(1, 4)
MICRO_FN(1, 2)
MICRO_FN(1, 1)

#define MICRO(R, P)                                                                        \
    micro_##R##x##P(a, s->lda, b, s->ldb, s->kc, c, s->ldc, cols, s->first, s->last, bias, \
                    s->relu, pf, pf_lines)

AVX2_TARGET static void run_slice(const struct slice *s, const float *next)
{
    const int64_t full_rows = s->rows / MR * MR;
    for (int64_t p = 0; p < s->panels; p++) {
        const float *b = s->b + p * s->ldb, *bias = s->bias ? s->bias + p * 16 : NULL;
        const int64_t cols = p + 1 < s->panels ? 16 : s->cols;
        const float *later = p + 1 < s->panels ? b + s->ldb : next;
        for (int64_t i = 0; i < full_rows; i += MR) {
            const int64_t blk = i / MR, share = CEIL_DIV(s->kc, full_rows / MR);
            const float *a = s->a + i * s->lda, *pf = later ? later + blk * share * 16 : b;
            const int64_t pf_lines = later ? MAX(0, MIN(share, s->kc - blk * share)) : 0;
            float *c = s->c + i * s->ldc + p * 16;
            MICRO(6, 1);
        }
    }
    const int64_t tail = s->rows - full_rows;
    const float *a = s->a + full_rows * s->lda, *pf = NULL;
    const int64_t pf_lines = 0;
    for (int64_t p = 0; p < s->panels;) {
        const float *b = s->b + p * s->ldb, *bias = s->bias ? s->bias + p * 16 : NULL;
        float *c = s->c + full_rows * s->ldc + p * 16;
        /* Whole panels left, the last one (maybe partial) excluded. */
        const int64_t whole = s->panels - 1 - p, cols = whole ? 16 : s->cols;
        int step = 1;
        if (tail == 1 && whole >= 4)
            step = 4, MICRO(1, 4);
        else if (tail == 1 && whole >= 2)
            step = 2, MICRO(1, 2);
        else if (tail == 1)
            MICRO(1, 1);
        else if (tail == 2 && whole >= 2)
            step = 2, MICRO(2, 2);
        else if (tail == 2)
            MICRO(2, 1);
        else if (tail == 3 && whole >= 2)
            step = 2, MICRO(3, 2);
        else if (tail == 3)
            MICRO(3, 1);
        else if (tail == 4)
            MICRO(4, 1);
        else if (tail == 5)
            MICRO(5, 1);
        else
            break; /* no tail */
        p += step;
    }
}

void cpu_avx2_gemm(const struct cpu_avx2_weights *w, const float *src, int64_t m,
                   const float *bias, bool relu, float *dst)
{
    if (m <= 0) return;
    const int64_t K = w->k, n = w->n, chunks = CEIL_DIV(m, ROW_CHUNK);
    /* Enough items for the threads; how many changes no bit. */
    int64_t group = MAX_GROUP;
    while (group > 1 && chunks * CEIL_DIV(w->n_panels, group) < 4 * omp_get_max_threads())
        group /= 2;
    const int64_t groups = CEIL_DIV(w->n_panels, group);
    /* Items in turn, so that every thread takes its share of each chunk: in blocks,
     * the thread that got the short last chunk (M = 97: 96 rows and 1) idled while
     * the other ran all the full ones (2x oneDNN's time at M = 97, 1.7x at 300). */
#pragma omp parallel for schedule(static, 1)
    for (int64_t item = 0; item < chunks * groups; item++) {
        const int64_t r0 = item / groups * ROW_CHUNK, p0 = item % groups * group;
        struct slice s = {.lda = K, .ldb = K * 16, .ldc = n, .relu = relu};
        s.rows = MIN(ROW_CHUNK, m - r0);
        s.panels = MIN(group, w->n_panels - p0);
        s.cols = n - (p0 + s.panels - 1) * 16;
        s.c = dst + r0 * n + p0 * 16;
        s.bias = bias ? bias + p0 * 16 : NULL;
        /* Rows that make no 6-row block (a decode step's) do not reuse a panel's
         * slice: they run K whole, in one pass of longer streams. */
        for (int64_t k0 = 0; k0 < K; k0 += s.kc) {
            s.kc = m < MR ? K : MIN(K_SLICE, K - k0);
            s.first = k0 == 0;
            s.last = k0 + s.kc == K;
            s.a = src + r0 * K + k0;
            s.b = w->packed + (p0 * K + k0) * 16;
            run_slice(&s, s.last ? NULL : s.b + s.kc * 16);
        }
    }
}

#else /* not x86-64: no AVX2 */

bool cpu_avx2_available(void)
{
    return false;
}

void cpu_avx2_gemm(const struct cpu_avx2_weights *w, const float *src, int64_t m,
                   const float *bias, bool relu, float *dst)
{
    (void)w, (void)src, (void)m, (void)bias, (void)relu, (void)dst;
    CHECK(false);
}

#endif

int cpu_avx2_pack(struct cpu_avx2_weights *w, const float *src, int64_t n, int64_t k)
{
    CHECK(n > 0 && k > 0);
    memset(w, 0, sizeof *w);
    w->n = n;
    w->k = k;
    w->n_panels = CEIL_DIV(n, 16);
    w->packed = aligned_alloc(64, cpu_avx2_bytes(w));
    if (!w->packed)
        return err_set(ENG_ENOMEM, "out of memory for a %lldx%lld AVX2 weight",
                       (long long)n, (long long)k);
        /* Panel p, row kk, column c = W[p * 16 + c][kk]. */
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < w->n_panels; p++)
        for (int64_t kk = 0; kk < k; kk++)
            for (int64_t c = 0; c < 16; c++) {
                const int64_t col = p * 16 + c;
                w->packed[(p * k + kk) * 16 + c] = col < n ? src[col * k + kk] : 0.0f;
            }
    return 0;
}

void cpu_avx2_free(struct cpu_avx2_weights *w)
{
    free(w->packed);
    memset(w, 0, sizeof *w);
}

size_t cpu_avx2_bytes(const struct cpu_avx2_weights *w)
{
    return (size_t)(w->n_panels * w->k) * 16 * sizeof(float);
}
