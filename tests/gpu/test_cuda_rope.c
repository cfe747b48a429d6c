/*
 * test_cuda_rope.c - rotary positions (cuda/cuda_rope.cu) against the host reference
 * cuda_ref_rope (cuda/cuda_ref.c, checked against the CPU backend's cpu_ops_rope by
 * tests/unit/test_cuda_ops_ref), on random q | k | v rows: whole-head rotary with GQA
 * (Llama, Qwen2), Llama 3's scaled frequencies at positions past 100k, and NeoX's
 * partial rotary.
 *
 * The angle is the same fp32 product on both sides; CUDA's cosf and sinf are within 2
 * fp32 ulp of glibc's, so the rotated values must be within half an fp16 ulp plus 1e-5
 * of the unrounded reference, and every element outside the rotary dims (v, and the
 * rest of a NeoX head) must keep its bits. Without a CUDA device it exits 77 (SKIP).
 */
#include "cuda_kernels.h"
#include "dtype.h"
#include "test.h"

#include "gpu_rnd.h"
#include "gpu_testlib.h"

#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t rng = 0x43a9e17f0c5b2d86ull;

/* inv_freq as arch_rope_inv_freq makes it without scaling: theta^(-2i / dims). */
static void check_rope(int32_t n, int32_t n_q, int32_t n_kv, int32_t D, int32_t dims,
                       float theta, int32_t max_pos)
{
    const int64_t stride = (int64_t)(n_q + 2 * n_kv) * D, total = n * stride;
    uint16_t *x = gpu_rnd_f16(&rng, total, -2.0f, 2.0f);
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    float *inv_freq = malloc((size_t)(dims / 2) * sizeof *inv_freq);
    for (int32_t i = 0; i < n; i++)
        pos[i] = i == 0 ? max_pos : (int32_t)gpu_rnd_uniform(&rng, 0.0f, (float)max_pos);
    for (int32_t i = 0; i < dims / 2; i++)
        inv_freq[i] = 1.0f / powf(theta, (float)(2 * i) / (float)dims);
    float *want = malloc((size_t)total * sizeof *want);
    uint16_t *got = malloc((size_t)total * sizeof *got);
    cuda_ref_rope(want, x, stride, pos, inv_freq, n, n_q + n_kv, D, dims);

    uint16_t *d_x = gpu_to_dev(x, (size_t)total * 2);
    int32_t *d_pos = gpu_to_dev(pos, (size_t)n * 4);
    float *d_f = gpu_to_dev(inv_freq, (size_t)(dims / 2) * 4);
    EXPECT(d_x && d_pos && d_f);
    EXPECT_EQ(cuda_rope(d_x, stride, d_pos, d_f, n, n_q + n_kv, D, dims, 0), cudaSuccess);
    EXPECT_EQ(gpu_f16_from_dev(got, d_x, total), cudaSuccess);
    double worst = 0.0;
    EXPECT_EQ(gpu_f16_misses("rope", got, want, total, &worst), 0);
    int64_t moved = 0;
    for (int32_t r = 0; r < n; r++)
        for (int64_t e = 0; e < stride; e++) {
            const int64_t h = e / D, d = e % D, i = r * stride + e;
            if ((h >= n_q + n_kv || d >= dims) && got[i] != x[i] && moved++ < 5)
                TEST_FAIL("row %d element %lld outside the rotary dims changed", r,
                          (long long)e);
        }
    EXPECT_EQ(moved, 0);
    printf("# rope n=%d heads=%d+%d D=%d dims=%d theta=%g: max |err| %.3g\n", n, n_q, n_kv,
           D, dims, (double)theta, worst);
    cudaFree(d_x), cudaFree(d_pos), cudaFree(d_f);
    free(x), free(pos), free(inv_freq), free(want), free(got);
}

TEST(rope_matches_reference)
{
    check_rope(16, 32, 8, 128, 128, 500000.0f, 131071); /* Llama 3 8B, long context */
    check_rope(9, 14, 2, 64, 64, 1000000.0f, 32767);    /* Qwen2 0.5B */
    check_rope(5, 32, 32, 80, 20, 10000.0f, 2047);      /* Pythia 2.8B: 25% rotary */
    check_rope(3, 1, 1, 2, 2, 10000.0f, 7);
}

TEST(bad_arguments_are_refused_before_launch)
{
    uint16_t *d = NULL;
    GPU_OK(cudaMalloc((void **)&d, 256));
    const int32_t *p = (const int32_t *)d;
    const float *f = (const float *)d;
    EXPECT_EQ(cuda_rope(d, 8, p, f, 1, 1, 8, 3, 0), cudaErrorInvalidValue);  /* odd dims */
    EXPECT_EQ(cuda_rope(d, 8, p, f, 1, 1, 8, 10, 0), cudaErrorInvalidValue); /* > head */
    EXPECT_EQ(cuda_rope(d, 8, p, f, 1, 2, 8, 8, 0), cudaErrorInvalidValue);  /* stride */
    EXPECT_EQ(cuda_rope(d, 8, p, f, 0, 1, 8, 8, 0), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d);
}

int main(void)
{
    const int n_dev = gpu_device_count();
    if (n_dev == 0) return 77; /* meson's skip code */
    gpu_print_device(n_dev);

    RUN(rope_matches_reference);
    RUN(bad_arguments_are_refused_before_launch);
    return test_done();
}
