/*
 * test_cuda_act.c - bias + GELU (exact and tanh) and SwiGLU (cuda/cuda_act.cu) against
 * their host references cuda_ref_act and cuda_ref_act_swiglu (cuda/cuda_ref.c, checked
 * against the CPU backend's cpu_ops_act and cpu_ops_swiglu by tests/unit/
 * test_cuda_ops_ref), on random fp16 rows.
 *
 * CUDA's erff, tanhf and expf are within a few fp32 ulp of glibc's, so the outputs
 * must be within half an fp16 ulp plus 1e-5 of the unrounded reference
 * (gpu_f16_misses). Without a CUDA device it exits 77 (SKIP).
 */
#include "cuda_kernels.h"
#include "dtype.h"
#include "test.h"

#include "gpu_rnd.h"
#include "gpu_testlib.h"

#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t rng = 0x7e0c5d93b16a24f8ull;

static void check_act(int32_t n, int32_t m, enum cuda_act act, bool bias)
{
    const int64_t nm = (int64_t)n * m;
    uint16_t *x = gpu_rnd_f16(&rng, nm, -8.0f, 8.0f),
             *b = gpu_rnd_f16(&rng, m, -1.0f, 1.0f);
    float *want = malloc((size_t)nm * sizeof *want);
    uint16_t *got = malloc((size_t)nm * sizeof *got);
    cuda_ref_act(want, x, bias ? b : NULL, n, m, act);

    uint16_t *d_x = gpu_to_dev(x, (size_t)nm * 2), *d_b = gpu_to_dev(b, (size_t)m * 2);
    EXPECT(d_x && d_b);
    EXPECT_EQ(cuda_act(d_x, bias ? d_b : NULL, n, m, act, 0), cudaSuccess);
    EXPECT_EQ(gpu_f16_from_dev(got, d_x, nm), cudaSuccess);
    double worst = 0.0;
    EXPECT_EQ(gpu_f16_misses("act", got, want, nm, &worst), 0);
    printf("# act %d n=%d m=%d%s: max |err| %.3g\n", (int)act, n, m, bias ? " + bias" : "",
           worst);
    cudaFree(d_x), cudaFree(d_b);
    free(x), free(b), free(want), free(got);
}

TEST(gelu_matches_reference)
{
    check_act(4, 10240, CUDA_ACT_GELU, true); /* Pythia 2.8B's fc1 */
    check_act(3, 2048, CUDA_ACT_GELU_TANH, true);
    check_act(2, 6, CUDA_ACT_GELU, false);
    check_act(2, 512, CUDA_ACT_RELU, true);
}

static void check_swiglu(int32_t n, int32_t f)
{
    const int64_t nf = (int64_t)n * f;
    uint16_t *src = gpu_rnd_f16(&rng, 2 * nf, -6.0f, 6.0f);
    float *want = malloc((size_t)nf * sizeof *want);
    uint16_t *got = malloc((size_t)nf * sizeof *got);
    cuda_ref_act_swiglu(want, src, n, f);

    uint16_t *d_src = gpu_to_dev(src, (size_t)nf * 4), *d_dst = NULL;
    cudaMalloc((void **)&d_dst, (size_t)nf * 2);
    EXPECT(d_src && d_dst);
    EXPECT_EQ(cuda_act_swiglu(d_dst, d_src, n, f, 0), cudaSuccess);
    EXPECT_EQ(gpu_f16_from_dev(got, d_dst, nf), cudaSuccess);
    double worst = 0.0;
    EXPECT_EQ(gpu_f16_misses("swiglu", got, want, nf, &worst), 0);
    printf("# swiglu n=%d f=%d: max |err| %.3g\n", n, f, worst);
    cudaFree(d_src), cudaFree(d_dst);
    free(src), free(want), free(got);
}

TEST(swiglu_matches_reference)
{
    check_swiglu(4, 11008); /* Llama 2 7B */
    check_swiglu(3, 4864);  /* Qwen2 0.5B */
    check_swiglu(2, 2);
}

TEST(bad_arguments_are_refused_before_launch)
{
    uint16_t *d = NULL;
    GPU_OK(cudaMalloc((void **)&d, 64));
    EXPECT_EQ(cuda_act(d, NULL, 1, 5, CUDA_ACT_GELU, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_act(d, NULL, 1, 4, (enum cuda_act)7, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_act_swiglu(d, d + 8, 1, 3, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_act_swiglu(d, d + 8, 0, 4, 0), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d);
}

int main(void)
{
    const int n_dev = gpu_device_count();
    if (n_dev == 0) return 77; /* meson's skip code */
    gpu_print_device(n_dev);

    RUN(gelu_matches_reference);
    RUN(swiglu_matches_reference);
    RUN(bad_arguments_are_refused_before_launch);
    return test_done();
}
