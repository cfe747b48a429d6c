/*
 * test_cuda_prefill.c - the CUDA prefill attention (cuda_prefill_attn) against its
 * host reference cuda_ref_prefill_attn (cuda/cuda_ref.c, itself checked against the
 * CPU engine's chunked prefill by tests/unit/test_cuda_prefill_ref.c) on the same
 * random chunked prefills (tests/lib/paged_case.h).
 *
 * Each case runs step by step on a device copy of the pool and on the host copy: K/V
 * writes and positions must be bit-identical, scores (the accumulated column sums)
 * within 1e-5 relative (absolute below 1), each row's log-sum-exp within 1e-5
 * relative, outputs within half an fp16 ulp of the unrounded reference plus 1e-5. The
 * int8 KV cache runs the same on pools made int8 (paged_pool_to_int8), its int8 K/V
 * and scales bit-identical. A timing pass prints the achieved FLOP rate of
 * OPT-6.7B-shaped prefills.
 *
 * Without a CUDA device it prints "no CUDA device: skipping" and exits 77, meson's
 * skip code. Run on a GPU machine with tests/gpu/run.sh.
 */
#include "cuda_kernels.h"
#include "dtype.h"
#include "paged_case.h"
#include "test.h"

#include "gpu_testlib.h"

#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stdint.h>

static bool close5(double got, double want)
{
    return fabs(got - want) <= 1e-5 * (fabs(want) > 1.0 ? fabs(want) : 1.0);
}

/* The device pool of a case, advanced step by step next to the host one: fp16 K/V,
 * or the int8 K/V and scales when the case is int8. */
struct dev_pool {
    uint16_t *k, *v;
    int8_t *k8, *v8;
    float *k_scale, *v_scale;
    int32_t *pos;
    float *score;
};

/* Bytes of n that differ between the device's copy (fetched) and the reference's. */
static int64_t byte_diffs(const char *what, int32_t step, const void *got, const void *want,
                          int64_t n)
{
    const uint8_t *g = got, *w = want;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (g[i] != w[i] && bad++ < 3)
            TEST_FAIL("step %d: %s byte %lld differs", step, what, (long long)i);
    return bad;
}

/* One step on the device and in the reference; compares everything. 0 or -1. */
static int check_step(struct prefill_case *c, struct dev_pool *dp, int32_t step,
                      double *worst_out, double *worst_score)
{
    /* KV: the pool's heads; H: query heads (out and lse), more with GQA. */
    const int32_t KV = c->pool.n_head, H = c->n_q_head, D = c->pool.head_dim;
    const int64_t pool_el = (int64_t)c->pool.n_pool * KV * c->pool.block_size;
    struct prefill_batch b;
    pc_batch(c, step, &b);
    const int64_t n_out = (int64_t)b.n_tok * H * D;

    struct cuda_prefill_attn_args d = pc_args(c, &b);
    d.k = dp->k, d.v = dp->v, d.pos = dp->pos, d.score = dp->score;
    d.k8 = dp->k8, d.v8 = dp->v8, d.k_scale = dp->k_scale, d.v_scale = dp->v_scale;
    const bool i8 = dp->k8 != NULL;
    d.qkv = gpu_to_dev(b.qkv, (int64_t)b.n_tok * (H + 2 * KV) * D * 2);
    d.tok_pos = gpu_to_dev(b.tok_pos, (int64_t)b.n_tok * 4);
    d.seqs = gpu_to_dev(b.seqs, (int64_t)b.n_seq * (int64_t)sizeof *b.seqs);
    d.blocks = gpu_to_dev(b.blocks, (int64_t)b.n_seq * c->pool.max_blocks * 4);
    d.out = NULL, d.lse = NULL;
    cudaMalloc((void **)&d.out, (size_t)n_out * 2);
    cudaMalloc((void **)&d.lse, (size_t)b.n_tok * H * 4);

    int ret = -1;
    float *want = malloc((size_t)n_out * sizeof *want);
    uint16_t *got = malloc((size_t)n_out * 2), *gk = malloc((size_t)(pool_el * D) * 2);
    uint16_t *gv = malloc((size_t)(pool_el * D) * 2);
    int32_t *gpos = malloc((size_t)pool_el * 4);
    float *gscore = malloc((size_t)pool_el * 4), *glse = malloc((size_t)b.n_tok * H * 4);
    int8_t *gk8 = malloc((size_t)(pool_el * D)), *gv8 = malloc((size_t)(pool_el * D));
    float *gks = malloc((size_t)pool_el * 4), *gvs = malloc((size_t)pool_el * 4);
    cudaError_t e = cudaSuccess;
    if (!d.qkv || !d.tok_pos || !d.seqs || !d.blocks || !d.out || !d.lse) {
        TEST_FAIL("device allocation failed");
        goto out;
    }
    e = cuda_prefill_attn(&d, 0);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    e = gpu_from_dev(e, got, d.out, (size_t)n_out * 2);
    e = gpu_from_dev(e, glse, d.lse, (size_t)b.n_tok * H * 4);
    if (i8) {
        e = gpu_from_dev(e, gk8, dp->k8, (size_t)(pool_el * D));
        e = gpu_from_dev(e, gv8, dp->v8, (size_t)(pool_el * D));
        e = gpu_from_dev(e, gks, dp->k_scale, (size_t)pool_el * 4);
        e = gpu_from_dev(e, gvs, dp->v_scale, (size_t)pool_el * 4);
    } else {
        e = gpu_from_dev(e, gk, dp->k, (size_t)(pool_el * D) * 2);
        e = gpu_from_dev(e, gv, dp->v, (size_t)(pool_el * D) * 2);
    }
    e = gpu_from_dev(e, gpos, dp->pos, (size_t)pool_el * 4);
    e = gpu_from_dev(e, gscore, dp->score, (size_t)pool_el * 4);
    if (e != cudaSuccess) {
        TEST_FAIL("cuda_prefill_attn: %s", cudaGetErrorString(e));
        goto out;
    }
    struct cuda_prefill_attn_args h = pc_args(c, &b);
    cuda_ref_prefill_attn(&h, want);

    int64_t bad = 0;
    if (i8) {
        bad += byte_diffs("k8", step, gk8, c->pool.k8, pool_el * D);
        bad += byte_diffs("v8", step, gv8, c->pool.v8, pool_el * D);
        bad += byte_diffs("k_scale", step, gks, c->pool.k_scale, pool_el * 4);
        bad += byte_diffs("v_scale", step, gvs, c->pool.v_scale, pool_el * 4);
    } else {
        for (int64_t i = 0; i < pool_el * D; i++)
            if ((gk[i] != c->pool.k[i] || gv[i] != c->pool.v[i]) && bad++ < 5)
                TEST_FAIL("step %d: K/V element %lld differs", step, (long long)i);
    }
    for (int64_t i = 0; i < pool_el; i++) {
        const double err = fabs((double)gscore[i] - c->pool.score[i]);
        if (err > *worst_score) *worst_score = err;
        if ((gpos[i] != c->pool.pos[i] || !close5(gscore[i], c->pool.score[i])) &&
            bad++ < 5)
            TEST_FAIL(
                "step %d slot state %lld: pos %d score %.9g, expected pos %d score %.9g",
                step, (long long)i, gpos[i], gscore[i], c->pool.pos[i], c->pool.score[i]);
    }
    for (int64_t i = 0; i < (int64_t)b.n_tok * H; i++)
        if (!close5(glse[i], b.lse[i]) && bad++ < 5)
            TEST_FAIL("step %d lse[%lld] = %.9g, expected %.9g", step, (long long)i,
                      glse[i], b.lse[i]);
    char what[32];
    snprintf(what, sizeof what, "step %d out", step);
    bad += gpu_f16_misses(what, got, want, n_out, worst_out);
    ret = bad ? -1 : 0;
out:
    cudaFree((void *)d.qkv), cudaFree((void *)d.tok_pos), cudaFree((void *)d.seqs);
    cudaFree((void *)d.blocks), cudaFree(d.out), cudaFree(d.lse);
    free(want), free(got), free(gk), free(gv), free(gpos), free(gscore), free(glse);
    free(gk8), free(gv8), free(gks), free(gvs);
    pc_batch_free(&b);
    return ret;
}

/* A whole case: the pool to the device, then every step compared. */
static void check_case(struct prefill_case *c)
{
    const int32_t H = c->pool.n_head, D = c->pool.head_dim;
    const int64_t pool_el = (int64_t)c->pool.n_pool * H * c->pool.block_size;
    const bool i8 = c->pool.k8 != NULL;
    struct dev_pool dp = {
        .pos = gpu_to_dev(c->pool.pos, pool_el * 4),
        .score = gpu_to_dev(c->pool.score, pool_el * 4),
    };
    if (i8) {
        dp.k8 = gpu_to_dev(c->pool.k8, pool_el * D);
        dp.v8 = gpu_to_dev(c->pool.v8, pool_el * D);
        dp.k_scale = gpu_to_dev(c->pool.k_scale, pool_el * 4);
        dp.v_scale = gpu_to_dev(c->pool.v_scale, pool_el * 4);
    } else {
        dp.k = gpu_to_dev(c->pool.k, pool_el * D * 2);
        dp.v = gpu_to_dev(c->pool.v, pool_el * D * 2);
    }
    double worst_out = 0.0, worst_score = 0.0;
    if ((i8 ? !dp.k8 || !dp.v8 || !dp.k_scale || !dp.v_scale : !dp.k || !dp.v) || !dp.pos ||
        !dp.score) {
        TEST_FAIL("device allocation failed");
    } else {
        for (int32_t s = 0; s < c->n_steps; s++)
            if (check_step(c, &dp, s, &worst_out, &worst_score) != 0) break;
    }
    printf("# prefill%s n_seq=%d heads=%d/%d head_dim=%d block=%d window=%d max_p=%d "
           "steps=%d: max |out err| %.3g, max |score err| %.3g\n",
           i8 ? " int8" : "", c->n_seq, c->n_q_head, H, D, c->pool.block_size, c->window,
           c->max_p, c->n_steps, worst_out, worst_score);
    cudaFree(dp.k), cudaFree(dp.v), cudaFree(dp.pos), cudaFree(dp.score);
    cudaFree(dp.k8), cudaFree(dp.v8), cudaFree(dp.k_scale), cudaFree(dp.v_scale);
}

/* n random cases over a spread of geometries (OPT's head_dim 64/80/128, the 256
 * bound that opts in to more shared memory, small and odd ones; block sizes 16, 5, 1,
 * 32). */
static void check_random(int n, int32_t max_chunks, uint64_t seed)
{
    static const int32_t dims[] = {64, 80, 128, 256, 2, 18, 16, 3},
                         bss[] = {16, 16, 5, 1, 32};
    uint64_t st = seed;
    for (int k = 0; k < n && !test_cur_failed; k++) {
        struct prefill_case c;
        const int32_t n_seq = 1 + dc_int(&st, 5), H = 1 + dc_int(&st, 4);
        const int32_t D = dims[k % 8], BS = bss[dc_int(&st, 5)];
        const int32_t max_p = 1 + dc_int(&st, k % 5 == 0 ? 700 : 80);
        pc_make(&c, &st, n_seq, H, D, BS, max_p, max_chunks);
        check_case(&c);
        pc_free(&c);
    }
}

TEST(prefill_attn_matches_reference_on_one_chunk)
{
    check_random(40, 1, 3);
}

TEST(prefill_attn_matches_reference_on_chunked_prefills)
{
    check_random(60, PC_MAX_CHUNKS, 5);
}

/* Grouped-query attention (1 to 8 query heads per KV head) and, in half of the cases,
 * Mistral's sliding window, chunked: the column sums of a KV head summed over its
 * query heads, slots outside a query's window unseen in both passes. */
TEST(prefill_attn_gqa_and_window_match_reference)
{
    static const int32_t dims[] = {64, 128, 80, 2}, reps[] = {1, 2, 4, 7, 8};
    uint64_t st = 23;
    for (int k = 0; k < 50 && !test_cur_failed; k++) {
        struct prefill_case c;
        const int32_t n_seq = 1 + dc_int(&st, 4), KV = 1 + dc_int(&st, 3);
        const int32_t rep = reps[dc_int(&st, 5)], D = dims[k % 4];
        const int32_t BS = k % 3 ? 16 : 5, max_p = 1 + dc_int(&st, k % 5 == 0 ? 500 : 80);
        const int32_t window = k % 2 ? 0 : 1 + dc_int(&st, max_p);
        pc_make_gqa(&c, &st, n_seq, KV * rep, KV, D, BS, max_p,
                    1 + dc_int(&st, PC_MAX_CHUNKS), window);
        check_case(&c);
        pc_free(&c);
    }
}

/* The int8 KV cache: chunked prefills over the geometries above (odd head_dim 3 and
 * 18, the 256 bound), GQA and windows, on pools made int8. */
TEST(prefill_attn_int8_matches_reference)
{
    static const int32_t dims[] = {64, 80, 128, 256, 2, 18, 16, 3},
                         reps[] = {1, 2, 4, 7, 8};
    uint64_t st = 37;
    for (int k = 0; k < 60 && !test_cur_failed; k++) {
        struct prefill_case c;
        const int32_t n_seq = 1 + dc_int(&st, 4), KV = 1 + dc_int(&st, 3);
        const int32_t rep = reps[dc_int(&st, 5)], D = dims[k % 8];
        const int32_t BS = k % 3 ? 16 : 5, max_p = 1 + dc_int(&st, k % 5 == 0 ? 500 : 80);
        const int32_t window = k % 2 ? 0 : 1 + dc_int(&st, max_p);
        pc_make_gqa(&c, &st, n_seq, KV * rep, KV, D, BS, max_p,
                    1 + dc_int(&st, PC_MAX_CHUNKS), window);
        paged_pool_to_int8(&c.pool);
        check_case(&c);
        pc_free(&c);
    }
}

/* cuda_prefill_attn on the default stream, in the shape gpu_time_us calls. */
static cudaError_t launch_prefill(const void *args)
{
    return cuda_prefill_attn(args, 0);
}

/* Time one OPT-6.7B-shaped layer (32 heads of 128, block size 16): n_seq prompts of p
 * tokens in one chunk. Prints the achieved rate counting the useful FLOPs of the causal
 * triangle (2 D per logit twice, 2 D per value): 6 D p (p + 1) / 2 per (sequence,
 * head). Nothing is asserted: docs/cuda.md quotes the expectation. */
static void time_prefill(int32_t n_seq, int32_t p)
{
    const int32_t H = 32, D = 128, BS = 16, nb = (p + BS - 1) / BS, n_pool = n_seq * nb;
    const int64_t pool_el = (int64_t)n_pool * H * BS, n_tok = (int64_t)n_seq * p;
    int32_t *blocks = malloc((size_t)n_pool * 4), *tok_pos = malloc((size_t)n_tok * 4);
    struct cuda_prefill_seq *seqs = malloc((size_t)n_seq * sizeof *seqs);
    uint16_t *qkv = malloc((size_t)n_tok * 3 * H * D * 2);
    uint64_t st = 21;
    for (int64_t e = 0; e < n_tok * 3 * H * D; e++)
        qkv[e] = f32_to_f16(dc_float(&st, -1.0f, 1.0f));
    for (int32_t b = 0; b < n_pool; b++)
        blocks[b] = b;
    for (int32_t i = 0; i < n_seq; i++) {
        seqs[i] = (struct cuda_prefill_seq){
            .tok_start = i * p, .n_tok = p, .slot_start = 0, .n_slots = p};
        for (int32_t r = 0; r < p; r++)
            tok_pos[i * p + r] = r;
    }
    struct cuda_prefill_attn_args d = {
        .max_blocks = nb,
        .n_tok = (int32_t)n_tok,
        .n_seq = n_seq,
        .n_head = H,
        .head_dim = D,
        .block_size = BS,
        .max_chunk = p,
        .max_slots = p,
        .scale = 1.0f / sqrtf((float)D),
    };
    d.qkv = gpu_to_dev(qkv, n_tok * 3 * H * D * 2);
    d.tok_pos = gpu_to_dev(tok_pos, n_tok * 4);
    d.seqs = gpu_to_dev(seqs, n_seq * (int64_t)sizeof *seqs);
    d.blocks = gpu_to_dev(blocks, n_pool * 4);
    cudaMalloc((void **)&d.k, (size_t)(pool_el * D) * 2);
    cudaMalloc((void **)&d.v, (size_t)(pool_el * D) * 2);
    cudaMalloc((void **)&d.pos, (size_t)pool_el * 4);
    cudaMalloc((void **)&d.score, (size_t)pool_el * 4);
    cudaMalloc((void **)&d.out, (size_t)n_tok * H * D * 2);
    cudaMalloc((void **)&d.lse, (size_t)n_tok * H * 4);
    if (!d.qkv || !d.tok_pos || !d.seqs || !d.blocks || !d.k || !d.v || !d.pos ||
        !d.score || !d.out || !d.lse) {
        TEST_FAIL("device allocation failed");
    } else {
        const double us = gpu_time_us(launch_prefill, &d, 10);
        EXPECT(us >= 0.0);
        const double flop = (double)n_seq * H * 6.0 * D * p * (p + 1) / 2.0;
        printf("# prefill timing: %d seqs x 32 heads x %d tokens, head_dim 128: %.1f us, "
               "%.2f GFLOP, %.1f TFLOP/s\n",
               n_seq, p, us, flop / 1e9, flop / us / 1e6);
    }
    cudaFree((void *)d.qkv), cudaFree((void *)d.tok_pos), cudaFree((void *)d.seqs);
    cudaFree((void *)d.blocks), cudaFree(d.k), cudaFree(d.v), cudaFree(d.pos);
    cudaFree(d.score), cudaFree(d.out), cudaFree(d.lse);
    free(blocks), free(tok_pos), free(seqs), free(qkv);
}

TEST(prefill_attn_timing)
{
    time_prefill(1, 512);
    time_prefill(8, 512);
    time_prefill(1, 2048);
}

TEST(bad_arguments_are_refused_before_launch)
{
    struct cuda_prefill_attn_args a = {.n_tok = 1,
                                       .n_seq = 1,
                                       .n_head = 1,
                                       .head_dim = 0,
                                       .block_size = 16,
                                       .max_chunk = 1};
    EXPECT_EQ(cuda_prefill_attn(&a, 0), cudaErrorInvalidValue); /* head_dim 0 */
    a.head_dim = 257;
    EXPECT_EQ(cuda_prefill_attn(&a, 0), cudaErrorInvalidValue); /* above 256 */
    a.head_dim = 64;
    a.block_size = 0;
    EXPECT_EQ(cuda_prefill_attn(&a, 0), cudaErrorInvalidValue);
    a.block_size = 16;
    a.n_seq = 65536;
    EXPECT_EQ(cuda_prefill_attn(&a, 0), cudaErrorInvalidValue);
    a.n_seq = 1;
    int8_t byte = 0;
    a.k8 = &byte; /* int8 without v8 or scales */
    EXPECT_EQ(cuda_prefill_attn(&a, 0), cudaErrorInvalidValue);
    a.k8 = NULL;
    a.n_seq = 0;
    EXPECT_EQ(cuda_prefill_attn(&a, 0), cudaSuccess); /* nothing to do */
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

int main(void)
{
    const int n_dev = gpu_device_count();
    if (n_dev == 0) return 77; /* meson's skip code */
    gpu_print_device(n_dev);

    RUN(prefill_attn_matches_reference_on_one_chunk);
    RUN(prefill_attn_matches_reference_on_chunked_prefills);
    RUN(prefill_attn_gqa_and_window_match_reference);
    RUN(prefill_attn_int8_matches_reference);
    RUN(prefill_attn_timing);
    RUN(bad_arguments_are_refused_before_launch);
    return test_done();
}
