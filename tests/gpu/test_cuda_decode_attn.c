/*
 * test_cuda_decode_attn.c - the decode attention with H2O (cuda/cuda_decode_attn.cu)
 * against its host reference cuda_ref_decode_attn (cuda/cuda_ref.c, itself checked
 * against the CPU engine by tests/unit/test_cuda_ref.c) on the same random paged
 * states (tests/lib/paged_case.h): K/V writes and positions bit-identical, scores
 * within 1e-5, outputs within half an fp16 ulp of the unrounded reference plus 1e-5,
 * victims identical (with ties on, where every probability is exactly 1/n on both
 * sides, and otherwise unless the two candidates' scores are within 1e-5, which is
 * reported). The int8 KV cache runs the same checks on the same kind of states made
 * int8 (paged_pool_to_int8), its new int8 K/V and scales bit-identical to the
 * reference's. Ends with the time of an OPT-6.7B-shaped step and its DRAM bandwidth,
 * fp16 and int8, as TAP comments.
 *
 * Without a CUDA device (cudaGetDeviceCount finds none, or no driver) it prints
 * "no CUDA device: skipping" and exits 77, meson's skip code. Run on a GPU machine
 * with tests/gpu/run.sh.
 */
#include "paged_case.h"
#include "cuda_kernels.h"
#include "dtype.h"
#include "test.h"

#include "gpu_testlib.h"

#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stdint.h>

/* The timing step's random q/k/v (gpu_rnd_*): the same data on every run, from where
 * the tests before it left the stream when every kernel was checked in one file
 * (test_cuda_kernels.c). The checked steps draw from their own seeds (dc_make). */
static uint64_t rng = 0x5320e6a90ff1332cull;

/* cudaMalloc + copy of n bytes, or NULL (counted as a failure by the caller). */
#define DEV(ptr, n) gpu_to_dev((ptr), (size_t)(n))

/* Bytes of n that differ between got and want, reported as `what` (the int8 K/V and
 * the scales, which must be bit-identical). */
static int64_t byte_diffs(const char *what, const void *got, const void *want, int64_t n)
{
    const uint8_t *g = got, *w = want;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (g[i] != w[i] && bad++ < 3)
            TEST_FAIL("%s byte %lld differs", what, (long long)i);
    return bad;
}

/* One decode attention step on the device and in the reference; compares all of it.
 * Returns the number of evictions, or -1 after a failure. */
static int64_t check_decode_case(struct decode_case *c)
{
    /* H: the pool's (KV) heads; Hq: query heads (more with GQA). */
    const int32_t H = c->pool.n_head, D = c->pool.head_dim, BS = c->pool.block_size;
    const int32_t Hq = c->n_q_head;
    const int64_t pool_el = (int64_t)c->pool.n_pool * H * BS,
                  n_out = (int64_t)c->n_seq * Hq * D;
    const int64_t n_sh = (int64_t)c->n_seq * H;

    /* The device copies first: the reference then updates c in place. */
    struct cuda_decode_attn_args d = dc_args(c);
    const bool i8 = c->pool.k8 != NULL;
    d.qkv = DEV(c->qkv, (int64_t)c->n_seq * (Hq + 2 * H) * D * 2);
    if (i8) {
        d.k8 = DEV(c->pool.k8, pool_el * D);
        d.v8 = DEV(c->pool.v8, pool_el * D);
        d.k_scale = DEV(c->pool.k_scale, pool_el * 4);
        d.v_scale = DEV(c->pool.v_scale, pool_el * 4);
    } else {
        d.k = DEV(c->pool.k, pool_el * D * 2);
        d.v = DEV(c->pool.v, pool_el * D * 2);
    }
    d.pos = DEV(c->pool.pos, pool_el * 4);
    d.score = DEV(c->pool.score, pool_el * 4);
    d.blocks = DEV(c->pool.blocks, (int64_t)c->n_seq * c->pool.max_blocks * 4);
    d.seqs = DEV(c->seqs, (int64_t)c->n_seq * (int64_t)sizeof *c->seqs);
    d.new_slot = DEV(c->new_slot, n_sh * 4);
    d.out = NULL;
    d.victim = NULL;
    cudaMalloc((void **)&d.out, (size_t)n_out * 2);
    cudaMalloc((void **)&d.victim, (size_t)n_sh * 4);
    int64_t ret = -1;
    float *want = malloc((size_t)n_out * sizeof *want);
    uint16_t *got = malloc((size_t)n_out * 2), *gk = malloc((size_t)(pool_el * D) * 2);
    uint16_t *gv = malloc((size_t)(pool_el * D) * 2);
    int32_t *gpos = malloc((size_t)pool_el * 4), *gvic = malloc((size_t)n_sh * 4);
    float *gscore = malloc((size_t)pool_el * 4);
    int8_t *gk8 = malloc((size_t)(pool_el * D)), *gv8 = malloc((size_t)(pool_el * D));
    float *gks = malloc((size_t)pool_el * 4), *gvs = malloc((size_t)pool_el * 4);
    if (!d.qkv || (i8 ? !d.k8 || !d.v8 || !d.k_scale || !d.v_scale : !d.k || !d.v) ||
        !d.pos || !d.score || !d.blocks || !d.seqs || !d.new_slot || !d.out || !d.victim) {
        TEST_FAIL("device allocation failed");
        goto out;
    }
    cudaError_t e = cuda_decode_attn(&d, 0);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    e = gpu_from_dev(e, got, d.out, (size_t)n_out * 2);
    if (i8) {
        e = gpu_from_dev(e, gk8, d.k8, (size_t)(pool_el * D));
        e = gpu_from_dev(e, gv8, d.v8, (size_t)(pool_el * D));
        e = gpu_from_dev(e, gks, d.k_scale, (size_t)pool_el * 4);
        e = gpu_from_dev(e, gvs, d.v_scale, (size_t)pool_el * 4);
    } else {
        e = gpu_from_dev(e, gk, d.k, (size_t)(pool_el * D) * 2);
        e = gpu_from_dev(e, gv, d.v, (size_t)(pool_el * D) * 2);
    }
    e = gpu_from_dev(e, gpos, d.pos, (size_t)pool_el * 4);
    e = gpu_from_dev(e, gscore, d.score, (size_t)pool_el * 4);
    e = gpu_from_dev(e, gvic, d.victim, (size_t)n_sh * 4);
    if (e != cudaSuccess) {
        TEST_FAIL("cuda_decode_attn: %s", cudaGetErrorString(e));
        goto out;
    }
    struct cuda_decode_attn_args h = dc_args(c);
    cuda_ref_decode_attn(&h, want);

    int64_t bad = 0, n_evict = 0, near_ties = 0;
    double worst = 0.0, worst_score = 0.0;
    if (i8) {
        bad += byte_diffs("k8", gk8, c->pool.k8, pool_el * D);
        bad += byte_diffs("v8", gv8, c->pool.v8, pool_el * D);
        bad += byte_diffs("k_scale", gks, c->pool.k_scale, pool_el * 4);
        bad += byte_diffs("v_scale", gvs, c->pool.v_scale, pool_el * 4);
    } else {
        bad += gpu_f16_bit_diffs("k", gk, c->pool.k, pool_el * D);
        bad += gpu_f16_bit_diffs("v", gv, c->pool.v, pool_el * D);
    }
    for (int64_t i = 0; i < pool_el; i++) {
        const double err = fabs((double)gscore[i] - c->pool.score[i]);
        if (err > worst_score) worst_score = err;
        if ((gpos[i] != c->pool.pos[i] || !(err <= 1e-5)) && bad++ < 5)
            TEST_FAIL("slot state %lld: pos %d score %.9g, expected pos %d score %.9g",
                      (long long)i, gpos[i], gscore[i], c->pool.pos[i], c->pool.score[i]);
    }
    bad += gpu_f16_misses("out", got, want, n_out, &worst);
    for (int64_t i = 0; i < n_sh; i++) {
        n_evict += c->victim[i] >= 0;
        if (gvic[i] == c->victim[i]) continue;
        /* Both must be candidates of a near tie: the device's choice scores within
         * 1e-5 of the reference's minimum (fp32 noise in p can reorder them). */
        const int32_t seq = (int32_t)(i / H), head = (int32_t)(i % H);
        bool near = gvic[i] >= 0 && c->victim[i] >= 0 && gvic[i] < c->seqs[seq].n_slots;
        if (near) {
            const float sg = c->pool.score[dc_index(c, seq, gvic[i], head)];
            const float sr = c->pool.score[dc_index(c, seq, c->victim[i], head)];
            near = fabsf(sg - sr) <= 1e-5f;
        }
        if (near) {
            near_ties++;
        } else if (bad++ < 5) {
            TEST_FAIL("victim (seq %d, head %d): slot %d, expected %d", seq, head, gvic[i],
                      c->victim[i]);
        }
    }
    printf(
        "# decode%s n_seq=%d heads=%d/%d head_dim=%d block=%d window=%d max_slots=%d: max "
        "|out err| %.3g, max |score err| %.3g, %lld evictions, %lld near ties\n",
        i8 ? " int8" : "", c->n_seq, Hq, H, D, BS, c->window, c->max_slots, worst,
        worst_score, (long long)n_evict, (long long)near_ties);
    EXPECT_EQ(bad, 0);
    ret = bad ? -1 : n_evict;
out:
    cudaFree((void *)d.qkv), cudaFree(d.k), cudaFree(d.v), cudaFree(d.pos);
    cudaFree(d.score), cudaFree((void *)d.blocks), cudaFree((void *)d.seqs);
    cudaFree((void *)d.new_slot), cudaFree(d.out), cudaFree(d.victim);
    cudaFree(d.k8), cudaFree(d.v8), cudaFree(d.k_scale), cudaFree(d.v_scale);
    free(want), free(got), free(gk), free(gv), free(gpos), free(gvic), free(gscore);
    free(gk8), free(gv8), free(gks), free(gvs);
    return ret;
}

/* n random steps over a spread of geometries (head_dim 64/80/128 as in OPT, plus
 * small and odd ones), checked one by one; the tie cases must match exactly. */
static void check_decode_random(bool ties, int n, uint64_t seed)
{
    static const int32_t dims[] = {2, 64, 80, 128, 256, 18}, bss[] = {16, 16, 8, 5, 32};
    uint64_t st = seed;
    int64_t n_evict = 0;
    for (int k = 0; k < n && !test_cur_failed; k++) {
        struct decode_case c;
        const int32_t n_seq = 1 + dc_int(&st, 8), H = 1 + dc_int(&st, 5);
        const int32_t D = dims[dc_int(&st, 6)], BS = bss[dc_int(&st, 5)];
        const int32_t max_b = 2 + dc_int(&st, k % 4 == 0 ? 700 : 60);
        dc_make(&c, &st, n_seq, H, D, BS, max_b, ties);
        const int64_t got = check_decode_case(&c);
        if (got > 0) n_evict += got;
        dc_free(&c);
    }
    EXPECT(n_evict > 0);
}

TEST(decode_attn_matches_reference_on_random_steps)
{
    check_decode_random(false, 60, 5);
}

TEST(decode_attn_ties_pick_the_same_victims)
{
    check_decode_random(true, 60, 9);
}

/* Grouped-query attention (1 to 8 query heads per KV head, Llama 3's and Qwen2's
 * ratios among them) and, in half of the steps, Mistral's sliding window: the group's
 * scores summed per KV head, slots outside the window unattended and evicted first. */
TEST(decode_attn_gqa_and_window_match_reference)
{
    static const int32_t dims[] = {64, 128, 80, 2}, reps[] = {1, 2, 4, 7, 8};
    uint64_t st = 21;
    int64_t n_evict = 0;
    for (int k = 0; k < 60 && !test_cur_failed; k++) {
        struct decode_case c;
        const int32_t n_seq = 1 + dc_int(&st, 6), KV = 1 + dc_int(&st, 4);
        const int32_t rep = reps[dc_int(&st, 5)], D = dims[dc_int(&st, 4)];
        const int32_t BS = k % 3 ? 16 : 5, max_b = 2 + dc_int(&st, k % 4 == 0 ? 500 : 60);
        const int32_t window = k % 2 ? 0 : 1 + dc_int(&st, 2 * max_b);
        dc_make_gqa(&c, &st, n_seq, KV * rep, KV, D, BS, max_b, k % 5 == 0, window);
        const int64_t got = check_decode_case(&c);
        if (got > 0) n_evict += got;
        dc_free(&c);
    }
    EXPECT(n_evict > 0);
}

/* The int8 KV cache: plain heads (odd head_dim 18 and 2 included), ties, GQA 1 to 8
 * query heads per KV head, and windows, over pools made int8 from the same kind of
 * random states; the new token's int8 K/V and scales bit-identical, the rest as for
 * fp16. */
TEST(decode_attn_int8_matches_reference)
{
    static const int32_t dims[] = {2, 64, 80, 128, 256, 18}, reps[] = {1, 2, 4, 7, 8};
    uint64_t st = 31;
    int64_t n_evict = 0;
    for (int k = 0; k < 80 && !test_cur_failed; k++) {
        struct decode_case c;
        const int32_t n_seq = 1 + dc_int(&st, 6), KV = 1 + dc_int(&st, 4);
        const int32_t rep = reps[dc_int(&st, 5)], D = dims[dc_int(&st, 6)];
        const int32_t BS = k % 3 ? 16 : 5, max_b = 2 + dc_int(&st, k % 4 == 0 ? 500 : 60);
        const int32_t window = k % 2 ? 0 : 1 + dc_int(&st, 2 * max_b);
        dc_make_gqa(&c, &st, n_seq, KV * rep, KV, D, BS, max_b, k % 5 == 0, window);
        paged_pool_to_int8(&c.pool);
        const int64_t got = check_decode_case(&c);
        if (got > 0) n_evict += got;
        dc_free(&c);
    }
    EXPECT(n_evict > 0);
}

TEST(decode_attn_long_sequences_use_large_shared_memory)
{
    /* Heads of up to 20000 slots: past the default 48 KiB of shared memory (12288
     * slots), so the launch opts in to more. */
    struct decode_case c;
    uint64_t st = 13;
    dc_make(&c, &st, 6, 2, 128, 16, 20000, false);
    EXPECT(c.max_slots > 12288);
    EXPECT(check_decode_case(&c) >= 0);
    dc_free(&c);
    uint64_t st8 = 14; /* the int8 cache at the same size */
    dc_make(&c, &st8, 3, 2, 128, 16, 20000, false);
    paged_pool_to_int8(&c.pool);
    EXPECT(check_decode_case(&c) >= 0);
    dc_free(&c);
}

/* cuda_decode_attn on the default stream, in the shape gpu_time_us calls. */
static cudaError_t launch_decode(const void *args)
{
    return cuda_decode_attn(args, 0);
}

/* Time one OPT-6.7B-shaped step (32 heads of 128, 64 sequences) with n_slots slots
 * each; prints the achieved DRAM bandwidth (K and V read once, the slot state read
 * and the scores written). Nothing is asserted: docs/cuda.md quotes the expectation. */
static void time_decode(int32_t n_slots, bool int8)
{
    const int32_t n_seq = 64, H = 32, D = 128, BS = 16;
    const int32_t nb = (n_slots + BS - 1) / BS, n_pool = n_seq * nb;
    const int64_t pool_el = (int64_t)n_pool * H * BS;
    int32_t *blocks = malloc((size_t)n_pool * 4), *new_slot = malloc((size_t)n_seq * H * 4);
    int32_t *pos = malloc((size_t)pool_el * 4);
    struct cuda_decode_seq *seqs = malloc((size_t)n_seq * sizeof *seqs);
    for (int32_t b = 0; b < n_pool; b++)
        blocks[b] = b;
    for (int64_t e = 0; e < pool_el; e++)
        pos[e] = (int32_t)(e % BS); /* all occupied */
    for (int32_t i = 0; i < n_seq; i++) {
        seqs[i] = (struct cuda_decode_seq){.n_slots = n_slots,
                                           .t = n_slots + 5,
                                           .budget = n_slots,
                                           .recent = n_slots / 2 + 1};
        for (int32_t h = 0; h < H; h++)
            new_slot[i * H + h] = n_slots - 1;
    }
    uint16_t *qkv = gpu_rnd_f16(&rng, (int64_t)n_seq * 3 * H * D, -1.0f, 1.0f);
    struct cuda_decode_attn_args d = {
        .max_blocks = nb,
        .n_seq = n_seq,
        .n_head = H,
        .head_dim = D,
        .block_size = BS,
        .max_slots = n_slots,
        .scale = 1.0f / sqrtf((float)D),
    };
    d.qkv = DEV(qkv, (int64_t)n_seq * 3 * H * D * 2);
    d.pos = DEV(pos, pool_el * 4);
    d.blocks = DEV(blocks, n_pool * 4);
    d.seqs = DEV(seqs, n_seq * (int64_t)sizeof *seqs);
    d.new_slot = DEV(new_slot, (int64_t)n_seq * H * 4);
    /* K/V bytes per element, and the int8 scales: a (slot, head) reads 2 D of K/V
     * elements plus pos, score (read and written) and, with int8, two scales. */
    const size_t el = int8 ? 1 : 2;
    if (int8) {
        cudaMalloc((void **)&d.k8, (size_t)(pool_el * D));
        cudaMalloc((void **)&d.v8, (size_t)(pool_el * D));
        cudaMalloc((void **)&d.k_scale, (size_t)pool_el * 4);
        cudaMalloc((void **)&d.v_scale, (size_t)pool_el * 4);
    } else {
        cudaMalloc((void **)&d.k, (size_t)(pool_el * D) * 2);
        cudaMalloc((void **)&d.v, (size_t)(pool_el * D) * 2);
    }
    void *kmem = int8 ? (void *)d.k8 : (void *)d.k,
         *vmem = int8 ? (void *)d.v8 : (void *)d.v;
    cudaMalloc((void **)&d.score, (size_t)pool_el * 4);
    cudaMalloc((void **)&d.out, (size_t)n_seq * H * D * 2);
    cudaMalloc((void **)&d.victim, (size_t)n_seq * H * 4);
    if (!d.qkv || !d.pos || !d.blocks || !d.seqs || !d.new_slot || !kmem || !vmem ||
        (int8 && (!d.k_scale || !d.v_scale)) || !d.score || !d.out || !d.victim) {
        TEST_FAIL("device allocation failed");
    } else {
        cudaMemset(kmem, 0, (size_t)(pool_el * D) * el);
        cudaMemset(vmem, 0, (size_t)(pool_el * D) * el);
        if (int8) {
            cudaMemset(d.k_scale, 0, (size_t)pool_el * 4);
            cudaMemset(d.v_scale, 0, (size_t)pool_el * 4);
        }
        cudaMemset(d.score, 0, (size_t)pool_el * 4);
        const double us = gpu_time_us(launch_decode, &d, 20);
        EXPECT(us >= 0.0);
        const double bytes =
            (double)n_seq * H * n_slots * (2.0 * D * (double)el + 4 + 8 + (int8 ? 8 : 0));
        printf("# decode timing%s: 64 seqs x 32 heads x %d slots, head_dim 128: %.1f us, "
               "%.1f MB, %.0f GB/s\n",
               int8 ? " (int8 KV)" : "", n_slots, us, bytes / 1e6, bytes / us / 1e3);
    }
    cudaFree((void *)d.qkv), cudaFree(d.pos), cudaFree((void *)d.blocks);
    cudaFree((void *)d.seqs), cudaFree((void *)d.new_slot), cudaFree(d.k), cudaFree(d.v);
    cudaFree(d.k8), cudaFree(d.v8), cudaFree(d.k_scale), cudaFree(d.v_scale);
    cudaFree(d.score), cudaFree(d.out), cudaFree(d.victim);
    free(blocks), free(new_slot), free(pos), free(seqs), free(qkv);
}

TEST(decode_attn_timing)
{
    time_decode(110, false); /* h2o 20% of 512 + 32 tokens */
    time_decode(544, false); /* full: 512 + 32 */
    time_decode(2048, false);
    time_decode(544, true); /* int8 K/V: half of fp16's K/V bytes */
    time_decode(2048, true);
}

TEST(bad_arguments_are_refused_before_launch)
{
    struct cuda_decode_attn_args a = {
        .n_seq = 1, .n_head = 1, .head_dim = 3, .block_size = 16};
    EXPECT_EQ(cuda_decode_attn(&a, 0), cudaErrorInvalidValue); /* odd head_dim */
    a.head_dim = 258;
    EXPECT_EQ(cuda_decode_attn(&a, 0), cudaErrorInvalidValue); /* above 256 */
    a.head_dim = 64;
    a.block_size = 0;
    EXPECT_EQ(cuda_decode_attn(&a, 0), cudaErrorInvalidValue);
    a.block_size = 16;
    int8_t byte = 0;
    a.k8 = &byte; /* int8 without v8 or scales */
    EXPECT_EQ(cuda_decode_attn(&a, 0), cudaErrorInvalidValue);
    a.k8 = NULL;
    a.n_seq = 0;
    EXPECT_EQ(cuda_decode_attn(&a, 0), cudaSuccess); /* nothing to do */
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

int main(void)
{
    const int n_dev = gpu_device_count();
    if (n_dev == 0) return 77; /* meson's skip code */
    gpu_print_device(n_dev);

    RUN(decode_attn_matches_reference_on_random_steps);
    RUN(decode_attn_ties_pick_the_same_victims);
    RUN(decode_attn_gqa_and_window_match_reference);
    RUN(decode_attn_int8_matches_reference);
    RUN(decode_attn_long_sequences_use_large_shared_memory);
    RUN(decode_attn_timing);
    RUN(bad_arguments_are_refused_before_launch);
    return test_done();
}
