/*
 * test_cuda_kv_compact.c - the prefill compaction (cuda/cuda_kv_compact.cu) against
 * its host reference cuda_ref_kv_compact (cuda/cuda_ref.c), which
 * tests/unit/test_cuda_ref.c checks against the CPU backend's own compaction. The
 * kernel only moves values, so on the random states of tests/lib/paged_case.h the
 * whole pool (K, V, pos, score, blocks outside the table included) must equal the
 * reference's bit for bit; with the int8 cache (paged_pool_to_int8) the int8 K/V and
 * both scales too.
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

/* One random compaction (tests/lib/paged_case.h) on the device and with
 * cuda_ref_kv_compact on the host: the whole pool (K, V, pos, score) bit-identical.
 * Returns the differing elements. */
static int64_t check_compact(uint64_t *st, int32_t H, int32_t D, int32_t BS, int32_t n_slots,
                             int32_t n_keep)
{
    struct compact_case c;
    cc_make(&c, st, H, D, BS, n_slots, n_keep);
    const int64_t ns = cc_slots(&c);
    const int32_t nb = (n_slots + BS - 1) / BS;
    struct cuda_kv_compact_args d = cc_args(&c);
    d.k = gpu_to_dev(c.pool.k, (size_t)ns * D * 2);
    d.v = gpu_to_dev(c.pool.v, (size_t)ns * D * 2);
    d.pos = gpu_to_dev(c.pool.pos, (size_t)ns * 4);
    d.score = gpu_to_dev(c.pool.score, (size_t)ns * 4);
    d.blocks = gpu_to_dev(c.pool.blocks, (size_t)(nb ? nb : 1) * 4);
    d.keep = gpu_to_dev(c.keep, (size_t)H * (n_keep ? n_keep : 1) * 4);
    uint16_t *k = malloc((size_t)ns * D * 2), *v = malloc((size_t)ns * D * 2);
    int32_t *pos = malloc((size_t)ns * 4);
    float *score = malloc((size_t)ns * 4);
    int64_t bad = 1;
    cudaError_t e = cudaErrorMemoryAllocation;
    if (d.k && d.v && d.pos && d.score && d.blocks && d.keep) e = cuda_kv_compact(&d, 0);
    if (e == cudaSuccess) e = gpu_f16_from_dev(k, d.k, ns * D);
    if (e == cudaSuccess) e = gpu_f16_from_dev(v, d.v, ns * D);
    e = gpu_from_dev(e, pos, d.pos, (size_t)ns * 4);
    e = gpu_from_dev(e, score, d.score, (size_t)ns * 4);
    if (e != cudaSuccess) {
        TEST_FAIL("cuda_kv_compact H=%d D=%d BS=%d n=%d keep=%d: %s", H, D, BS, n_slots,
                  n_keep, cudaGetErrorString(e));
    } else {
        struct cuda_kv_compact_args r = cc_args(&c);
        cuda_ref_kv_compact(&r);
        bad = gpu_f16_bit_diffs("K", k, c.pool.k, ns * D) +
              gpu_f16_bit_diffs("V", v, c.pool.v, ns * D);
        for (int64_t i = 0; i < ns; i++) {
            if (pos[i] == c.pool.pos[i] && memcmp(&score[i], &c.pool.score[i], 4) == 0)
                continue;
            if (bad++ < 5)
                TEST_FAIL("slot state %lld: pos %d score %g, expected %d %g", (long long)i,
                          pos[i], score[i], c.pool.pos[i], c.pool.score[i]);
        }
        if (bad)
            TEST_FAIL("H=%d D=%d BS=%d n=%d keep=%d: %lld differences", H, D, BS, n_slots,
                      n_keep, (long long)bad);
    }
    cudaFree(d.k), cudaFree(d.v), cudaFree(d.pos), cudaFree(d.score);
    cudaFree((void *)d.blocks), cudaFree((void *)d.keep);
    free(k), free(v), free(pos), free(score);
    cc_free(&c);
    return bad;
}

/* The same on an int8 case: int8 K/V, both scales, pos and score bit for bit. */
static int64_t check_compact_i8(uint64_t *st, int32_t H, int32_t D, int32_t BS,
                                int32_t n_slots, int32_t n_keep)
{
    struct compact_case c;
    cc_make(&c, st, H, D, BS, n_slots, n_keep);
    paged_pool_to_int8(&c.pool);
    const int64_t ns = cc_slots(&c);
    const int32_t nb = (n_slots + BS - 1) / BS;
    struct cuda_kv_compact_args d = cc_args(&c);
    d.k8 = gpu_to_dev(c.pool.k8, (size_t)(ns * D));
    d.v8 = gpu_to_dev(c.pool.v8, (size_t)(ns * D));
    d.k_scale = gpu_to_dev(c.pool.k_scale, (size_t)ns * 4);
    d.v_scale = gpu_to_dev(c.pool.v_scale, (size_t)ns * 4);
    d.pos = gpu_to_dev(c.pool.pos, (size_t)ns * 4);
    d.score = gpu_to_dev(c.pool.score, (size_t)ns * 4);
    d.blocks = gpu_to_dev(c.pool.blocks, (size_t)(nb ? nb : 1) * 4);
    d.keep = gpu_to_dev(c.keep, (size_t)H * (n_keep ? n_keep : 1) * 4);
    int8_t *k8 = malloc((size_t)(ns * D)), *v8 = malloc((size_t)(ns * D));
    float *ks = malloc((size_t)ns * 4), *vs = malloc((size_t)ns * 4);
    int32_t *pos = malloc((size_t)ns * 4);
    float *score = malloc((size_t)ns * 4);
    int64_t bad = 1;
    cudaError_t e = cudaErrorMemoryAllocation;
    if (d.k8 && d.v8 && d.k_scale && d.v_scale && d.pos && d.score && d.blocks && d.keep)
        e = cuda_kv_compact(&d, 0);
    e = gpu_from_dev(e, k8, d.k8, (size_t)(ns * D));
    e = gpu_from_dev(e, v8, d.v8, (size_t)(ns * D));
    e = gpu_from_dev(e, ks, d.k_scale, (size_t)ns * 4);
    e = gpu_from_dev(e, vs, d.v_scale, (size_t)ns * 4);
    e = gpu_from_dev(e, pos, d.pos, (size_t)ns * 4);
    e = gpu_from_dev(e, score, d.score, (size_t)ns * 4);
    if (e != cudaSuccess) {
        TEST_FAIL("cuda_kv_compact int8 H=%d D=%d BS=%d n=%d keep=%d: %s", H, D, BS,
                  n_slots, n_keep, cudaGetErrorString(e));
    } else {
        struct cuda_kv_compact_args r = cc_args(&c);
        cuda_ref_kv_compact(&r);
        bad = (memcmp(k8, c.pool.k8, (size_t)(ns * D)) != 0) +
              (memcmp(v8, c.pool.v8, (size_t)(ns * D)) != 0) +
              (memcmp(ks, c.pool.k_scale, (size_t)ns * 4) != 0) +
              (memcmp(vs, c.pool.v_scale, (size_t)ns * 4) != 0) +
              (memcmp(pos, c.pool.pos, (size_t)ns * 4) != 0) +
              (memcmp(score, c.pool.score, (size_t)ns * 4) != 0);
        if (bad)
            TEST_FAIL("int8 H=%d D=%d BS=%d n=%d keep=%d: %lld of K8, V8, the scales, pos "
                      "and score differ",
                      H, D, BS, n_slots, n_keep, (long long)bad);
    }
    cudaFree(d.k8), cudaFree(d.v8), cudaFree(d.k_scale), cudaFree(d.v_scale);
    cudaFree(d.pos), cudaFree(d.score), cudaFree((void *)d.blocks),
        cudaFree((void *)d.keep);
    free(k8), free(v8), free(ks), free(vs), free(pos), free(score);
    cc_free(&c);
    return bad;
}

TEST(kv_compact_int8_matches_reference_bit_for_bit)
{
    uint64_t st = 79;
    const int32_t bss[] = {16, 8, 5, 1};
    for (int r = 0; r < 120; r++) {
        const int32_t BS = bss[r % 4], H = 1 + dc_int(&st, 6),
                      D = 2 * (1 + dc_int(&st, 128));
        const int32_t n = 1 + dc_int(&st, 300);
        const int32_t keep = r % 10 == 0 ? n : r % 10 == 1 ? 0 : 1 + dc_int(&st, n);
        EXPECT_EQ(check_compact_i8(&st, H, D, BS, n, keep), 0);
    }
    EXPECT_EQ(check_compact_i8(&st, 4, 64, 16, 65, 33), 0);
    EXPECT_EQ(check_compact_i8(&st, 2, 256, 16, 400, 200), 0);
    EXPECT_EQ(check_compact_i8(&st, 32, 128, 16, 544, 110), 0);
}

TEST(kv_compact_matches_reference_bit_for_bit)
{
    uint64_t st = 77;
    const int32_t bss[] = {16, 8, 5, 1};
    for (int r = 0; r < 200; r++) {
        const int32_t BS = bss[r % 4], H = 1 + dc_int(&st, 6), D = 2 * (1 + dc_int(&st, 128));
        const int32_t n = 1 + dc_int(&st, 300);
        const int32_t keep = r % 10 == 0 ? n : r % 10 == 1 ? 0 : 1 + dc_int(&st, n);
        EXPECT_EQ(check_compact(&st, H, D, BS, n, keep), 0);
    }
    /* Chunk edges (32 slots per chunk), the largest head, OPT-6.7B's h2o 20%. */
    EXPECT_EQ(check_compact(&st, 4, 64, 16, 64, 32), 0);
    EXPECT_EQ(check_compact(&st, 4, 64, 16, 65, 33), 0);
    EXPECT_EQ(check_compact(&st, 2, 256, 16, 400, 200), 0);
    EXPECT_EQ(check_compact(&st, 32, 128, 16, 544, 110), 0);
    EXPECT_EQ(check_compact(&st, 32, 128, 16, 2048, 2048), 0);
}

TEST(bad_arguments_are_refused_before_launch)
{
    struct cuda_kv_compact_args ca = {
        .n_slots = 4, .n_keep = 2, .n_head = 1, .head_dim = 3, .block_size = 16};
    EXPECT_EQ(cuda_kv_compact(&ca, 0), cudaErrorInvalidValue); /* odd head_dim */
    ca.head_dim = 258;
    EXPECT_EQ(cuda_kv_compact(&ca, 0), cudaErrorInvalidValue); /* above 256 */
    ca.head_dim = 64;
    ca.n_keep = 5;
    EXPECT_EQ(cuda_kv_compact(&ca, 0), cudaErrorInvalidValue); /* more kept than slots */
    ca.n_keep = 2;
    int8_t byte = 0;
    ca.k8 = &byte; /* int8 without v8 or scales */
    EXPECT_EQ(cuda_kv_compact(&ca, 0), cudaErrorInvalidValue);
    ca.k8 = NULL;
    ca.n_slots = 0;
    ca.n_keep = 0;
    EXPECT_EQ(cuda_kv_compact(&ca, 0), cudaSuccess); /* nothing to do */
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

int main(void)
{
    const int n_dev = gpu_device_count();
    if (n_dev == 0) return 77; /* meson's skip code */
    gpu_print_device(n_dev);

    RUN(kv_compact_matches_reference_bit_for_bit);
    RUN(kv_compact_int8_matches_reference_bit_for_bit);
    RUN(bad_arguments_are_refused_before_launch);
    return test_done();
}
