/*
 * test_cuda_norm.c - RMSNorm and LayerNorm with eps (cuda/cuda_norm.cu) against their
 * host reference cuda_ref_norm (cuda/cuda_ref.c, itself checked against the CPU
 * backend's cpu_ops_norm by tests/unit/test_cuda_ops_ref), on random fp16 rows.
 *
 * The kernel sums in a tree where the reference sums in order, so its output is
 * checked against the unrounded fp32 reference within half an fp16 ulp plus 1e-5
 * (gpu_f16_misses). Without a CUDA device it exits 77 (SKIP); tests/gpu/run.sh runs it
 * on a GPU machine.
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

static uint64_t rng = 0x2c1b8f04a7d3e695ull;

static void check_norm(int32_t n, int32_t d, bool rms, float eps, float centre,
                       bool in_place)
{
    const int64_t nd = (int64_t)n * d;
    uint16_t *x = gpu_rnd_f16(&rng, nd, centre - 2.0f, centre + 2.0f);
    uint16_t *w = gpu_rnd_f16(&rng, d, 0.5f, 1.5f), *b = gpu_rnd_f16(&rng, d, -0.2f, 0.2f);
    float *want = malloc((size_t)nd * sizeof *want);
    uint16_t *got = malloc((size_t)nd * sizeof *got);
    cuda_ref_norm(want, x, w, rms ? NULL : b, rms, eps, n, d);

    uint16_t *d_x = gpu_to_dev(x, (size_t)nd * 2), *d_w = gpu_to_dev(w, (size_t)d * 2);
    uint16_t *d_b = rms ? NULL : gpu_to_dev(b, (size_t)d * 2),
             *d_out = in_place ? d_x : NULL;
    if (!in_place) cudaMalloc((void **)&d_out, (size_t)nd * 2);
    EXPECT(d_x && d_w && (rms || d_b) && d_out);
    EXPECT_EQ(cuda_norm(d_out, d_x, d_w, d_b, rms, eps, n, d, 0), cudaSuccess);
    EXPECT_EQ(gpu_f16_from_dev(got, d_out, nd), cudaSuccess);
    double worst = 0.0;
    EXPECT_EQ(gpu_f16_misses(rms ? "rmsnorm" : "layernorm", got, want, nd, &worst), 0);
    printf("# %s n=%d d=%d eps=%g centre=%g%s: max |err| %.3g\n",
           rms ? "rmsnorm" : "layernorm", n, d, (double)eps, (double)centre,
           in_place ? " in place" : "", worst);

    if (!in_place) cudaFree(d_out);
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_b);
    free(x), free(w), free(b), free(want), free(got);
}

TEST(rmsnorm_matches_reference)
{
    check_norm(4, 4096, true, 1e-5f, 0.0f, false); /* Llama 2 7B */
    check_norm(3, 896, true, 1e-6f, 0.0f, false);  /* Qwen2 0.5B */
    check_norm(2, 8192, true, 1e-5f, 2.0f, false);
    check_norm(5, 18, true, 1e-6f, 0.0f, true); /* most threads idle; in place */
}

TEST(layernorm_with_eps_matches_reference)
{
    check_norm(4, 2560, false, 1e-5f, 0.0f, false); /* Pythia 2.8B */
    check_norm(4, 512, false, 1e-3f, 50.0f, true);
}

TEST(bad_arguments_are_refused_before_launch)
{
    uint16_t *d = NULL;
    GPU_OK(cudaMalloc((void **)&d, 64));
    EXPECT_EQ(cuda_norm(d, d, d, NULL, true, 1e-6f, 1, 5, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_norm(d, d, d, NULL, false, 1e-6f, 1, 4, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_norm(d, d, d, NULL, true, -1.0f, 1, 4, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_norm(d, d, d, NULL, true, 1e-6f, 0, 4, 0), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d);
}

int main(void)
{
    const int n_dev = gpu_device_count();
    if (n_dev == 0) return 77; /* meson's skip code */
    gpu_print_device(n_dev);

    RUN(rmsnorm_matches_reference);
    RUN(layernorm_with_eps_matches_reference);
    RUN(bad_arguments_are_refused_before_launch);
    return test_done();
}
