/*
 * test_cuda_sample.c - the CUDA sampler (cuda_sample) against its host reference
 * cuda_ref_sample (cuda/cuda_ref_sample.c, itself checked against the engine's
 * sampler_sample by tests/unit/test_cuda_sample_ref.c) on the same rows.
 *
 * Rows mix greedy, temperatures, top-k, top-p, both, logprobs -1..5, on random,
 * tied (coarse grid), special (NaN, +-inf) and all -inf logits, at small vocabularies
 * and OPT's 50272; u is a fixed random number per row. Tokens, n_top and top ids must
 * be identical, logprobs within 1e-5. A timing pass prints the time of one call for
 * 64 OPT rows (greedy, top-k 40 / top-p 0.9, and plain temperature 0.8).
 *
 * Without a CUDA device it prints "no CUDA device: skipping" and exits 77, meson's
 * skip code. Run on a GPU machine with tests/gpu/run.sh.
 */
#include "cuda_kernels.h"
#include "test.h"

#include "gpu_testlib.h"
#include "util.h"

#include <cuda_runtime_api.h>

#include <stdint.h>
#include <time.h>

static uint64_t st = 0x9e3779b97f4a7c15ull;
static double urand(void)
{
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return (double)(st >> 11) * (1.0 / 9007199254740992.0);
}
static float nrand(void)
{
    return (float)(sqrt(-2.0 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()));
}

/* The per-row arrays of one call on the host. */
struct rows {
    int32_t n, vocab;
    float *logits, *temperature, *top_p, *logprob, *top_lps;
    int32_t *top_k, *nlp, *token, *n_top, *top_ids;
    double *u;
};

static void rows_alloc(struct rows *r, int32_t n, int32_t vocab)
{
    r->n = n, r->vocab = vocab;
    r->logits = malloc((size_t)n * vocab * sizeof(float));
    r->temperature = malloc((size_t)n * sizeof(float));
    r->top_p = malloc((size_t)n * sizeof(float));
    r->logprob = malloc((size_t)n * sizeof(float));
    r->top_lps = malloc((size_t)n * CUDA_SAMPLE_MAX_TOP * sizeof(float));
    r->top_k = malloc((size_t)n * sizeof(int32_t));
    r->nlp = malloc((size_t)n * sizeof(int32_t));
    r->token = malloc((size_t)n * sizeof(int32_t));
    r->n_top = malloc((size_t)n * sizeof(int32_t));
    r->top_ids = malloc((size_t)n * CUDA_SAMPLE_MAX_TOP * sizeof(int32_t));
    r->u = malloc((size_t)n * sizeof(double));
}

static void rows_free(struct rows *r)
{
    free(r->logits), free(r->temperature), free(r->top_p), free(r->logprob);
    free(r->top_lps), free(r->top_k), free(r->nlp), free(r->token), free(r->n_top);
    free(r->top_ids), free(r->u);
}

static const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.5f, 100.0f};
static const int32_t ks[] = {0, 1, 5, 40, 1000};
static const float ps[] = {1.0f, 0.95f, 0.5f, 0.0f};

static void fill_rows(struct rows *r, int kind)
{
    for (int32_t i = 0; i < r->n; i++) {
        r->temperature[i] = temps[i % 6];
        r->top_k[i] = ks[(i / 6) % 5];
        r->top_p[i] = ps[(i / 30) % 4];
        r->nlp[i] = (int32_t)(i % 7) - 1 > 5 ? 5 : (int32_t)(i % 7) - 1;
        r->u[i] = urand();
        for (int32_t j = 0; j < r->vocab; j++) {
            float v = nrand() * 2.5f;
            if (kind == 1) v = floorf(v);
            if (kind == 2) {
                double q = urand();
                v = q < 0.01 ? NAN : q < 0.02 ? -INFINITY : q < 0.021 ? INFINITY : v;
            }
            if (kind == 3) v = urand() < 0.5 ? -INFINITY : NAN;
            r->logits[(int64_t)i * r->vocab + j] = v;
        }
    }
}

/* Run the kernel on r (results into r), or return -1 on a CUDA error. `reps` > 1
 * times the call and prints microseconds per call. */
static int run_dev(struct rows *r, int reps, const char *label)
{
    const size_t n = (size_t)r->n, V = (size_t)r->vocab, NT = CUDA_SAMPLE_MAX_TOP;
    struct cuda_sample_args a = {
        .logits = gpu_to_dev(r->logits, n * V * sizeof(float)),
        .temperature = gpu_to_dev(r->temperature, n * sizeof(float)),
        .top_k = gpu_to_dev(r->top_k, n * sizeof(int32_t)),
        .top_p = gpu_to_dev(r->top_p, n * sizeof(float)),
        .u = gpu_to_dev(r->u, n * sizeof(double)),
        .n_logprobs = gpu_to_dev(r->nlp, n * sizeof(int32_t)),
        .n = r->n,
        .vocab = r->vocab,
    };
    int rc = -1;
    if (cudaMalloc((void **)&a.token, n * sizeof(int32_t)) != cudaSuccess ||
        cudaMalloc((void **)&a.logprob, n * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&a.n_top, n * sizeof(int32_t)) != cudaSuccess ||
        cudaMalloc((void **)&a.top_ids, n * NT * sizeof(int32_t)) != cudaSuccess ||
        cudaMalloc((void **)&a.top_logprobs, n * NT * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&a.scratch, CUDA_SAMPLE_SCRATCH_BYTES(n, V)) != cudaSuccess)
        goto out;
    if (cuda_sample(&a, 0) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) goto out;
    if (reps > 1) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < reps; i++)
            cuda_sample(&a, 0);
        if (cudaDeviceSynchronize() != cudaSuccess) goto out;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) /
                    1e3 / reps;
        printf("# %s: %d rows x %d: %.1f us per call, %.0f GB/s of logits\n", label, r->n,
               r->vocab, us, (double)(n * V * 4) / us / 1e3);
    }
    if (cudaMemcpy(r->token, a.token, n * sizeof(int32_t), cudaMemcpyDeviceToHost) ||
        cudaMemcpy(r->logprob, a.logprob, n * sizeof(float), cudaMemcpyDeviceToHost) ||
        cudaMemcpy(r->n_top, a.n_top, n * sizeof(int32_t), cudaMemcpyDeviceToHost) ||
        cudaMemcpy(r->top_ids, a.top_ids, n * NT * sizeof(int32_t), cudaMemcpyDeviceToHost) ||
        cudaMemcpy(r->top_lps, a.top_logprobs, n * NT * sizeof(float), cudaMemcpyDeviceToHost))
        goto out;
    rc = 0;
out:
    cudaFree((void *)a.logits), cudaFree((void *)a.temperature), cudaFree((void *)a.top_k);
    cudaFree((void *)a.top_p), cudaFree((void *)a.u), cudaFree((void *)a.n_logprobs);
    cudaFree(a.token), cudaFree(a.logprob), cudaFree(a.n_top), cudaFree(a.top_ids);
    cudaFree(a.top_logprobs), cudaFree(a.scratch);
    return rc;
}

static void check_case(int32_t n, int32_t vocab, int kind)
{
    struct rows r;
    rows_alloc(&r, n, vocab);
    fill_rows(&r, kind);
    struct rows want = r;
    want.token = malloc((size_t)n * sizeof(int32_t));
    want.logprob = malloc((size_t)n * sizeof(float));
    want.n_top = malloc((size_t)n * sizeof(int32_t));
    want.top_ids = malloc((size_t)n * CUDA_SAMPLE_MAX_TOP * sizeof(int32_t));
    want.top_lps = malloc((size_t)n * CUDA_SAMPLE_MAX_TOP * sizeof(float));
    struct cuda_sample_args h = {
        .logits = r.logits, .temperature = r.temperature, .top_k = r.top_k, .top_p = r.top_p,
        .u = r.u, .n_logprobs = r.nlp, .token = want.token, .logprob = want.logprob,
        .n_top = want.n_top, .top_ids = want.top_ids, .top_logprobs = want.top_lps,
        .n = n, .vocab = vocab,
    };
    cuda_ref_sample(&h);
    EXPECT(run_dev(&r, 1, NULL) == 0);
    int bad_rows = 0;
    for (int32_t i = 0; i < n; i++) {
        int bad = r.token[i] != want.token[i] || r.n_top[i] != want.n_top[i] ||
                  !(fabsf(r.logprob[i] - want.logprob[i]) <= 1e-5f);
        for (int32_t k = 0; k < want.n_top[i]; k++) {
            int64_t e = (int64_t)i * CUDA_SAMPLE_MAX_TOP + k;
            bad |= r.top_ids[e] != want.top_ids[e] ||
                   !(fabsf(r.top_lps[e] - want.top_lps[e]) <= 1e-5f);
        }
        if (bad && bad_rows++ < 5)
            printf("# vocab %d kind %d row %d (T %g k %d p %g nlp %d): token %d want %d, "
                   "logprob %g want %g, n_top %d want %d\n",
                   vocab, kind, i, (double)r.temperature[i], r.top_k[i], (double)r.top_p[i],
                   r.nlp[i], r.token[i], want.token[i], (double)r.logprob[i],
                   (double)want.logprob[i], r.n_top[i], want.n_top[i]);
    }
    EXPECT_EQ(bad_rows, 0);
    free(want.token), free(want.logprob), free(want.n_top), free(want.top_ids);
    free(want.top_lps);
    rows_free(&r);
}

TEST(small_vocab)
{
    for (int kind = 0; kind < 4; kind++) {
        check_case(120, 37, kind);
        check_case(120, 1000, kind);
        check_case(120, 4099, kind);
    }
}

TEST(opt_vocab)
{
    check_case(120, 50272, 0);
    check_case(120, 50272, 1);
    check_case(60, 50272, 2);
}

/* cuda_logits_rows against its reference, bit for bit: rows copied (several output
 * rows from one source row), additions applied in order (a token twice, -100 bans). */
TEST(logits_rows)
{
    for (int rep = 0; rep < 20; rep++) {
        const int32_t n_src = 1 + (int32_t)(urand() * 9), n = 1 + (int32_t)(urand() * 12);
        const int32_t vocab = rep % 2 ? 50272 : 1 + (int32_t)(urand() * 3000);
        float *src = xmalloc((size_t)n_src * (size_t)vocab * sizeof *src);
        for (int64_t i = 0; i < (int64_t)n_src * vocab; i++) src[i] = nrand() * 4.0f;
        int32_t *rows = xmalloc((size_t)n * sizeof *rows), *off = xmalloc((size_t)(n + 1) * 4);
        int32_t *ids = xmalloc((size_t)n * 6 * 4);
        float *vals = xmalloc((size_t)n * 6 * 4);
        off[0] = 0;
        for (int32_t i = 0; i < n; i++) {
            rows[i] = (int32_t)(urand() * n_src);
            const int32_t k = (int32_t)(urand() * 7); /* 0..6 additions */
            for (int32_t j = 0; j < k; j++) {
                ids[off[i] + j] = j > 0 && urand() < 0.3 ? ids[off[i] + j - 1]
                                                          : (int32_t)(urand() * vocab);
                vals[off[i] + j] = urand() < 0.2 ? -100.0f : nrand();
            }
            off[i + 1] = off[i] + k;
        }
        float *want = xmalloc((size_t)n * (size_t)vocab * sizeof *want);
        float *got = xmalloc((size_t)n * (size_t)vocab * sizeof *got);
        cuda_ref_logits_rows(want, src, rows, n, vocab, off, ids, vals);
        float *d_src = gpu_to_dev(src, (size_t)n_src * (size_t)vocab * 4), *d_dst = NULL;
        int32_t *d_rows = gpu_to_dev(rows, (size_t)n * 4), *d_off = gpu_to_dev(off, (size_t)(n + 1) * 4);
        int32_t *d_ids = gpu_to_dev(ids, (size_t)MAX(off[n], 1) * 4);
        float *d_vals = gpu_to_dev(vals, (size_t)MAX(off[n], 1) * 4);
        EXPECT_EQ(cudaMalloc((void **)&d_dst, (size_t)n * (size_t)vocab * 4), cudaSuccess);
        EXPECT_EQ(cuda_logits_rows(d_dst, d_src, d_rows, n, vocab, d_off, d_ids, d_vals, 0),
                  cudaSuccess);
        EXPECT_EQ(gpu_from_dev(cudaSuccess, got, d_dst, (size_t)n * (size_t)vocab * 4),
                  cudaSuccess);
        if (memcmp(got, want, (size_t)n * (size_t)vocab * 4))
            TEST_FAIL("rep %d (n %d, vocab %d): rows differ from the reference", rep, n, vocab);
        cudaFree(d_src);
        cudaFree(d_dst);
        cudaFree(d_rows);
        cudaFree(d_off);
        cudaFree(d_ids);
        cudaFree(d_vals);
        free(src);
        free(rows);
        free(off);
        free(ids);
        free(vals);
        free(want);
        free(got);
    }
    EXPECT_EQ(cuda_logits_rows(NULL, NULL, NULL, -1, 10, NULL, NULL, NULL, 0),
              cudaErrorInvalidValue);
    EXPECT_EQ(cuda_logits_rows(NULL, NULL, NULL, 0, 10, NULL, NULL, NULL, 0), cudaSuccess);
}

TEST(timing)
{
    struct rows r;
    rows_alloc(&r, 64, 50272);
    fill_rows(&r, 0);
    for (int32_t i = 0; i < 64; i++)
        r.temperature[i] = 0.0f, r.top_k[i] = 0, r.top_p[i] = 1.0f, r.nlp[i] = -1;
    EXPECT(run_dev(&r, 20, "greedy") == 0);
    for (int32_t i = 0; i < 64; i++)
        r.temperature[i] = 0.8f, r.top_k[i] = 40, r.top_p[i] = 0.9f, r.nlp[i] = 1;
    EXPECT(run_dev(&r, 20, "top-k 40, top-p 0.9, logprobs 1") == 0);
    for (int32_t i = 0; i < 64; i++)
        r.temperature[i] = 0.8f, r.top_k[i] = 0, r.top_p[i] = 1.0f, r.nlp[i] = 5;
    EXPECT(run_dev(&r, 20, "temperature 0.8, logprobs 5") == 0);
    rows_free(&r);
}

int main(void)
{
    if (gpu_device_count() == 0) return 77; /* meson's skip code */
    RUN(small_vocab);
    RUN(opt_vocab);
    RUN(logits_rows);
    RUN(timing);
    return test_done();
}
