/*
 * test_cuda_kv_blocks.c - the KV state kernels of cuda/cuda_kv_blocks.cu against their
 * host references (cuda/cuda_ref.c, checked against the CPU backend's semantics by
 * tests/unit/test_cuda_kv_blocks_ref.c), on random pools and block tables.
 *
 * Both kernels only store constants or copy values, so the results must be identical
 * bit for bit: after cuda_kv_blocks_init the whole pool (V, pos, score; the blocks not
 * listed included) equals cuda_ref_kv_init_blocks's on the same pool, which starts as
 * garbage with NaN V values; after cuda_kv_blocks_gather_state the [n_head, n_slots]
 * outputs equal cuda_ref_kv_gather_state's, and a guard word after each is untouched.
 * Shapes: block sizes 1, 16, 64 (and 5), n = 0 and n_slots = 0 (nothing launched),
 * head_dim 2 up to 256 (even: the kernel clears V in 4-byte pairs; odd is refused),
 * OPT-6.7B's 32 heads of 128, and a block so large that hundreds of CTAs share it.
 * cuda_kv_blocks_init_i8 (the int8 cache: V8 bytes and value scales cleared too)
 * against cuda_ref_kv_init_blocks_i8 the same way, over random bytes and NaN scales.
 *
 * Without a CUDA device it prints "no CUDA device: skipping" and exits 77 (SKIP).
 */
#include "cuda_kernels.h"
#include "paged_case.h"
#include "dtype.h"
#include "test.h"

#include "gpu_testlib.h"

#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stdint.h>

/* How many of n 4-byte words differ; reports the first few as `what`[i]. */
static int64_t count_word_diffs(const char *what, const void *got, const void *want,
                                int64_t n)
{
    const uint32_t *g = got, *w = want;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (g[i] != w[i] && bad++ < 5)
            TEST_FAIL("%s[%lld] = 0x%08x, expected 0x%08x", what, (long long)i, g[i], w[i]);
    return bad;
}

/* One random init of n of the n_pool blocks on the device and with the reference;
 * returns the differing words of the whole pool. */
static int64_t check_init(uint64_t *st, int32_t H, int32_t D, int32_t BS, int32_t n_pool,
                          int32_t n)
{
    const int64_t ns = (int64_t)n_pool * H * BS, nv = ns * D;
    uint16_t *v = malloc((size_t)nv * 2), *v_got = malloc((size_t)nv * 2);
    int32_t *pos = malloc((size_t)ns * 4), *pos_got = malloc((size_t)ns * 4);
    float *score = malloc((size_t)ns * 4), *score_got = malloc((size_t)ns * 4);
    int32_t *blocks = malloc((size_t)(n ? n : 1) * 4);
    kb_fill_pool(st, v, pos, score, ns, D);
    dc_shuffle_blocks(st, blocks, n_pool, n);
    uint16_t *d_v = gpu_to_dev(v, (size_t)nv * 2);
    int32_t *d_pos = gpu_to_dev(pos, (size_t)ns * 4);
    float *d_score = gpu_to_dev(score, (size_t)ns * 4);
    int32_t *d_blocks = gpu_to_dev(blocks, (size_t)n * 4);

    int64_t bad = 1;
    cudaError_t e = cudaErrorMemoryAllocation;
    if (d_v && d_pos && d_score && d_blocks)
        e = cuda_kv_blocks_init(d_v, d_pos, d_score, d_blocks, n, H, D, BS, 0);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    e = gpu_from_dev(e, v_got, d_v, (size_t)nv * 2);
    e = gpu_from_dev(e, pos_got, d_pos, (size_t)ns * 4);
    e = gpu_from_dev(e, score_got, d_score, (size_t)ns * 4);
    if (e != cudaSuccess) {
        TEST_FAIL("cuda_kv_blocks_init H=%d D=%d BS=%d pool=%d n=%d: %s", H, D, BS, n_pool,
                  n, cudaGetErrorString(e));
    } else {
        cuda_ref_kv_init_blocks(v, pos, score, blocks, n, H, D, BS);
        bad = count_word_diffs("V pairs", v_got, v, nv / 2) +
              count_word_diffs("pos", pos_got, pos, ns) +
              count_word_diffs("score", score_got, score, ns);
        if (bad)
            TEST_FAIL("init H=%d D=%d BS=%d pool=%d n=%d: %lld differences", H, D, BS,
                      n_pool, n, (long long)bad);
    }
    cudaFree(d_v), cudaFree(d_pos), cudaFree(d_score), cudaFree(d_blocks);
    free(v), free(v_got), free(pos), free(pos_got), free(score), free(score_got);
    free(blocks);
    return bad;
}

TEST(init_blocks_matches_reference_bit_for_bit)
{
    uint64_t st = 101;
    for (int r = 0; r < 150; r++) {
        const int32_t BS = kb_block_sizes[r % 4], H = 1 + dc_int(&st, 7);
        const int32_t D = r % 5 == 0 ? 2 : 2 * (1 + dc_int(&st, 128));
        const int32_t n_pool = 1 + dc_int(&st, 12);
        const int32_t n = r % 7 == 0 ? 0 : r % 7 == 1 ? n_pool : dc_int(&st, n_pool + 1);
        EXPECT_EQ(check_init(&st, H, D, BS, n_pool, n), 0);
    }
    /* OPT-6.7B: a 544-token prompt's 34 blocks of 16, one new block, block size 64. */
    EXPECT_EQ(check_init(&st, 32, 128, 16, 40, 34), 0);
    EXPECT_EQ(check_init(&st, 32, 128, 16, 40, 1), 0);
    EXPECT_EQ(check_init(&st, 32, 128, 64, 12, 10), 0);
    EXPECT_EQ(check_init(&st, 1, 2, 1, 3, 3), 0); /* the smallest block: 1 word */
}

/* One random int8 init (V8 random bytes, v_scale NaN or random, pos and score as
 * kb_fill_pool makes them); returns the differing words of the whole pool. */
static int64_t check_init_i8(uint64_t *st, int32_t H, int32_t D, int32_t BS, int32_t n_pool,
                             int32_t n)
{
    const int64_t ns = (int64_t)n_pool * H * BS, nv = ns * D; /* nv bytes, even */
    uint16_t *v16 = malloc((size_t)nv * 2);
    int8_t *v8 = malloc((size_t)nv), *v8_got = malloc((size_t)nv);
    float *vs = malloc((size_t)ns * 4), *vs_got = malloc((size_t)ns * 4);
    int32_t *pos = malloc((size_t)ns * 4), *pos_got = malloc((size_t)ns * 4);
    float *score = malloc((size_t)ns * 4), *score_got = malloc((size_t)ns * 4);
    int32_t *blocks = malloc((size_t)(n ? n : 1) * 4);
    kb_fill_pool(st, v16, pos, score, ns, D);
    for (int64_t i = 0; i < nv; i++)
        v8[i] = (int8_t)(dc_int(st, 255) - 127);
    for (int64_t i = 0; i < ns; i++)
        vs[i] = dc_int(st, 4) == 0 ? NAN : dc_float(st, 0.0f, 1.0f);
    dc_shuffle_blocks(st, blocks, n_pool, n);
    int8_t *d_v8 = gpu_to_dev(v8, (size_t)nv);
    float *d_vs = gpu_to_dev(vs, (size_t)ns * 4);
    int32_t *d_pos = gpu_to_dev(pos, (size_t)ns * 4);
    float *d_score = gpu_to_dev(score, (size_t)ns * 4);
    int32_t *d_blocks = gpu_to_dev(blocks, (size_t)n * 4);
    int64_t bad = 1;
    cudaError_t e = cudaErrorMemoryAllocation;
    if (d_v8 && d_vs && d_pos && d_score && d_blocks)
        e = cuda_kv_blocks_init_i8(d_v8, d_vs, d_pos, d_score, d_blocks, n, H, D, BS, 0);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    e = gpu_from_dev(e, v8_got, d_v8, (size_t)nv);
    e = gpu_from_dev(e, vs_got, d_vs, (size_t)ns * 4);
    e = gpu_from_dev(e, pos_got, d_pos, (size_t)ns * 4);
    e = gpu_from_dev(e, score_got, d_score, (size_t)ns * 4);
    if (e != cudaSuccess) {
        TEST_FAIL("cuda_kv_blocks_init_i8 H=%d D=%d BS=%d pool=%d n=%d: %s", H, D, BS,
                  n_pool, n, cudaGetErrorString(e));
    } else {
        cuda_ref_kv_init_blocks_i8(v8, vs, pos, score, blocks, n, H, D, BS);
        bad = count_word_diffs("V8 quads", v8_got, v8, nv / 4) +
              (nv % 4 ? memcmp(v8_got + nv - 2, v8 + nv - 2, 2) != 0 : 0) +
              count_word_diffs("v_scale", vs_got, vs, ns) +
              count_word_diffs("pos", pos_got, pos, ns) +
              count_word_diffs("score", score_got, score, ns);
        if (bad)
            TEST_FAIL("init int8 H=%d D=%d BS=%d pool=%d n=%d: %lld differences", H, D, BS,
                      n_pool, n, (long long)bad);
    }
    cudaFree(d_v8), cudaFree(d_vs), cudaFree(d_pos), cudaFree(d_score), cudaFree(d_blocks);
    free(v16), free(v8), free(v8_got), free(vs), free(vs_got), free(pos), free(pos_got);
    free(score), free(score_got), free(blocks);
    return bad;
}

TEST(init_blocks_int8_matches_reference_bit_for_bit)
{
    uint64_t st = 103;
    for (int r = 0; r < 100; r++) {
        const int32_t BS = kb_block_sizes[r % 4], H = 1 + dc_int(&st, 7);
        const int32_t D = r % 5 == 0 ? 2 : 2 * (1 + dc_int(&st, 128));
        const int32_t n_pool = 1 + dc_int(&st, 12);
        const int32_t n = r % 7 == 0 ? 0 : r % 7 == 1 ? n_pool : dc_int(&st, n_pool + 1);
        EXPECT_EQ(check_init_i8(&st, H, D, BS, n_pool, n), 0);
    }
    EXPECT_EQ(check_init_i8(&st, 32, 128, 16, 40, 34), 0); /* OPT-6.7B's prompt blocks */
    EXPECT_EQ(check_init_i8(&st, 1, 2, 1, 3, 3), 0);       /* one 2-byte word per slot */
}

/* One random gather of n_slots slots on the device and with the reference; returns
 * the differing outputs (guard words included). */
static int64_t check_gather(uint64_t *st, int32_t H, int32_t BS, int32_t n_slots)
{
    const int32_t nb = (n_slots + BS - 1) / BS, n_pool = nb + 3;
    const int64_t ns = (int64_t)n_pool * H * BS, n_out = (int64_t)H * n_slots + 1;
    uint16_t *v = malloc((size_t)ns * 2 * 2);
    int32_t *pos = malloc((size_t)ns * 4), *blocks = malloc((size_t)(nb ? nb : 1) * 4);
    float *score = malloc((size_t)ns * 4);
    int32_t *pos_out = malloc((size_t)n_out * 4), *pos_got = malloc((size_t)n_out * 4);
    float *score_out = malloc((size_t)n_out * 4), *score_got = malloc((size_t)n_out * 4);
    kb_fill_pool(st, v, pos, score, ns, 2);
    dc_shuffle_blocks(st, blocks, n_pool, nb);
    /* Recognisable garbage in the outputs, the guard word (last) included. */
    memset(pos_out, 0xa5, (size_t)n_out * 4);
    memset(score_out, 0xa5, (size_t)n_out * 4);
    int32_t *d_pos = gpu_to_dev(pos, (size_t)ns * 4),
            *d_blocks = gpu_to_dev(blocks, nb * 4u);
    float *d_score = gpu_to_dev(score, (size_t)ns * 4);
    int32_t *d_pos_out = gpu_to_dev(pos_out, (size_t)n_out * 4);
    float *d_score_out = gpu_to_dev(score_out, (size_t)n_out * 4);

    int64_t bad = 1;
    cudaError_t e = cudaErrorMemoryAllocation;
    if (d_pos && d_blocks && d_score && d_pos_out && d_score_out)
        e = cuda_kv_blocks_gather_state(d_pos_out, d_score_out, d_pos, d_score, d_blocks,
                                        n_slots, H, BS, 0);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    e = gpu_from_dev(e, pos_got, d_pos_out, (size_t)n_out * 4);
    e = gpu_from_dev(e, score_got, d_score_out, (size_t)n_out * 4);
    if (e != cudaSuccess) {
        TEST_FAIL("cuda_kv_blocks_gather_state H=%d BS=%d n=%d: %s", H, BS, n_slots,
                  cudaGetErrorString(e));
    } else {
        cuda_ref_kv_gather_state(pos_out, score_out, pos, score, blocks, n_slots, H, BS);
        bad = count_word_diffs("pos_out", pos_got, pos_out, n_out) +
              count_word_diffs("score_out", score_got, score_out, n_out);
        if (bad)
            TEST_FAIL("gather H=%d BS=%d n=%d: %lld differences", H, BS, n_slots,
                      (long long)bad);
    }
    cudaFree(d_pos), cudaFree(d_blocks), cudaFree(d_score);
    cudaFree(d_pos_out), cudaFree(d_score_out);
    free(v), free(pos), free(blocks), free(score);
    free(pos_out), free(pos_got), free(score_out), free(score_got);
    return bad;
}

TEST(gather_state_matches_reference_bit_for_bit)
{
    uint64_t st = 202;
    for (int r = 0; r < 200; r++) {
        const int32_t BS = kb_block_sizes[r % 4], H = 1 + dc_int(&st, 9);
        const int32_t n = r % 11 == 0   ? 0
                          : r % 11 == 1 ? BS * (1 + dc_int(&st, 4))
                                        : 1 + dc_int(&st, 1200);
        EXPECT_EQ(check_gather(&st, H, BS, n), 0);
    }
    /* OPT-6.7B: a 544-token prompt (block sizes 16 and 64), a 2048-slot sequence. */
    EXPECT_EQ(check_gather(&st, 32, 16, 544), 0);
    EXPECT_EQ(check_gather(&st, 32, 64, 544), 0);
    EXPECT_EQ(check_gather(&st, 32, 1, 2048), 0);
}

TEST(init_blocks_with_many_ctas_per_block)
{
    /* A block of 2 heads x 64 slots x head_dim 16384 (past any model, allowed by the
     * kernel) is 1 Mi V words: 512 CTAs striding over one block, each thread storing
     * 8 words and the slot state only in the first CTA's range. One of 3 cleared. */
    uint64_t st = 303;
    EXPECT_EQ(check_init(&st, 2, 16384, 64, 3, 1), 0);
    EXPECT_EQ(check_init(&st, 2, 16384, 64, 3, 3), 0);
}

TEST(bad_arguments_are_refused_before_launch)
{
    int32_t *d = NULL;
    if (cudaMalloc((void **)&d, 64) != cudaSuccess) {
        TEST_FAIL("cudaMalloc");
        return;
    }
    uint16_t *v = (uint16_t *)d;
    float *f = (float *)d;
    EXPECT_EQ(cuda_kv_blocks_init(v, d, f, d, 1, 1, 3, 16, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_kv_blocks_init(v, d, f, d, 1, 1, 0, 16, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_kv_blocks_init(v, d, f, d, -1, 1, 64, 16, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_kv_blocks_init(v, d, f, d, 1, -1, 64, 16, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_kv_blocks_init(v, d, f, d, 1, 1, 64, 0, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_kv_blocks_gather_state(d, f, d, f, d, -1, 1, 16, 0),
              cudaErrorInvalidValue);
    EXPECT_EQ(cuda_kv_blocks_gather_state(d, f, d, f, d, 4, 65536, 16, 0),
              cudaErrorInvalidValue);
    EXPECT_EQ(cuda_kv_blocks_gather_state(d, f, d, f, d, 4, 1, 0, 0),
              cudaErrorInvalidValue);
    /* Empty work is not an error and launches nothing (NULL pointers are not read). */
    EXPECT_EQ(cuda_kv_blocks_init(NULL, NULL, NULL, NULL, 0, 32, 128, 16, 0), cudaSuccess);
    EXPECT_EQ(cuda_kv_blocks_init(NULL, NULL, NULL, NULL, 4, 0, 128, 16, 0), cudaSuccess);
    EXPECT_EQ(cuda_kv_blocks_gather_state(NULL, NULL, NULL, NULL, NULL, 0, 32, 16, 0),
              cudaSuccess);
    EXPECT_EQ(cuda_kv_blocks_gather_state(NULL, NULL, NULL, NULL, NULL, 9, 0, 16, 0),
              cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d);
}

int main(void)
{
    const int n_dev = gpu_device_count();
    if (n_dev == 0) return 77; /* meson's skip code */
    gpu_print_device(n_dev);

    RUN(init_blocks_matches_reference_bit_for_bit);
    RUN(init_blocks_int8_matches_reference_bit_for_bit);
    RUN(gather_state_matches_reference_bit_for_bit);
    RUN(init_blocks_with_many_ctas_per_block);
    RUN(bad_arguments_are_refused_before_launch);
    return test_done();
}
