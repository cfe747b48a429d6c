/*
 * test_cuda_layernorm.c - LayerNorm (cuda/cuda_layernorm.cu) against a host reference
 * written from the CPU backend's semantics (engine/cpu/cpu_ops.c: eps 1e-5 with
 * two-pass fp32 statistics), on random fp16 data.
 *
 * The host reference reads the same fp16 inputs widened to float and computes in
 * fp32, as the kernel does. The kernel sums in a different order and uses rsqrtf (2
 * ulp in fp32), so its output is checked against the unrounded fp32 reference within
 * fp16's rounding (2^-11 relative) plus 1e-5 for the fp32 noise.
 *
 * Without a CUDA device (cudaGetDeviceCount finds none, or no driver) it prints
 * "no CUDA device: skipping" and exits 77, meson's skip code. Run on a GPU machine
 * with tests/gpu/run.sh.
 */
#include "cuda_kernels.h"
#include "dtype.h"
#include "test.h"

#include "gpu_testlib.h"

#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stdint.h>

/* The random inputs (gpu_rnd_*): the same data on every run. The stream starts where
 * the tests before these left it when every kernel was checked in one file
 * (test_cuda_kernels.c), so these tests still check the inputs they always checked. */
static uint64_t rng = 0x6714367b44e30acfull;

/* cpu_ops_layernorm on fp16 data, result left in fp32: out [n, d]. */
static void ref_layernorm(float *out, const uint16_t *x, const uint16_t *w,
                          const uint16_t *b, int32_t n, int32_t d)
{
    for (int32_t i = 0; i < n; i++) {
        const uint16_t *row = x + (int64_t)i * d;
        float mean = 0.0f, var = 0.0f;
        for (int32_t j = 0; j < d; j++)
            mean += f16_to_f32(row[j]);
        mean /= (float)d;
        for (int32_t j = 0; j < d; j++) {
            float c = f16_to_f32(row[j]) - mean;
            var += c * c;
        }
        var /= (float)d;
        float rstd = 1.0f / sqrtf(var + 1e-5f);
        for (int32_t j = 0; j < d; j++)
            out[(int64_t)i * d + j] =
                (f16_to_f32(row[j]) - mean) * rstd * f16_to_f32(w[j]) + f16_to_f32(b[j]);
    }
}

/* One LayerNorm check on rows centred at `centre` (a large centre tests that the
 * variance is taken around the mean, as the two-pass formula does). */
static void check_layernorm(int32_t n, int32_t d, float centre, bool in_place)
{
    const int64_t nd = (int64_t)n * d;
    uint16_t *x = gpu_rnd_f16(&rng, nd, centre - 2.0f, centre + 2.0f);
    uint16_t *w = gpu_rnd_f16(&rng, d, 0.5f, 1.5f), *b = gpu_rnd_f16(&rng, d, -0.2f, 0.2f);
    float *want = malloc((size_t)nd * sizeof *want);
    uint16_t *got = malloc((size_t)nd * sizeof *got);
    ref_layernorm(want, x, w, b, n, d);

    uint16_t *d_x = gpu_to_dev(x, (size_t)nd * 2), *d_w = gpu_to_dev(w, (size_t)d * 2);
    uint16_t *d_b = gpu_to_dev(b, (size_t)d * 2), *d_out = in_place ? d_x : NULL;
    if (!in_place) cudaMalloc((void **)&d_out, (size_t)nd * 2);
    EXPECT(d_x && d_w && d_b && d_out);
    EXPECT_EQ(cuda_layernorm(d_out, d_x, d_w, d_b, n, d, 0), cudaSuccess);
    EXPECT_EQ(gpu_f16_from_dev(got, d_out, nd), cudaSuccess);

    int64_t bad = 0;
    double worst = 0.0;
    for (int64_t i = 0; i < nd; i++) {
        double g = f16_to_f32(got[i]), r = want[i], err = fabs(g - r);
        double tol = fabs(r) / 2048.0 + 1e-5; /* half an fp16 ulp, plus fp32 noise */
        if (err > worst) worst = err;
        if (!(err <= tol) && bad++ < 5) /* a NaN output fails too */
            TEST_FAIL("layernorm[%lld] = %g, expected %g (tol %g)", (long long)i, g, r,
                      tol);
    }
    printf("# layernorm n=%d d=%d centre=%g%s: max |err| %.3g\n", n, d, (double)centre,
           in_place ? " in place" : "", worst);
    EXPECT_EQ(bad, 0);

    if (!in_place) cudaFree(d_out);
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_b);
    free(x), free(w), free(b), free(want), free(got);
}

TEST(layernorm_matches_cpu_two_pass)
{
    check_layernorm(4, 768, 0.0f, false);
    check_layernorm(3, 4096, 0.0f, false);
    check_layernorm(2, 7168, 0.0f, false); /* OPT-30B width: 14 pairs per thread */
    check_layernorm(5, 18, 0.0f, false);   /* most threads of the block idle */
}

TEST(layernorm_large_mean_and_in_place)
{
    check_layernorm(4, 2048, 60.0f, false);
    check_layernorm(4, 2048, 0.0f, true); /* post-LN models normalise x in place */
}

TEST(bad_arguments_are_refused_before_launch)
{
    uint16_t *d = NULL;
    GPU_OK(cudaMalloc((void **)&d, 64));
    EXPECT_EQ(cuda_layernorm(d, d, d, d, 1, 5, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_layernorm(d, d, d, d, -1, 4, 0), cudaErrorInvalidValue);
    /* Empty work is not an error and launches nothing. */
    EXPECT_EQ(cuda_layernorm(d, d, d, d, 0, 4, 0), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d);
}

int main(void)
{
    const int n_dev = gpu_device_count();
    if (n_dev == 0) return 77; /* meson's skip code */
    gpu_print_device(n_dev);

    RUN(layernorm_matches_cpu_two_pass);
    RUN(layernorm_large_mean_and_in_place);
    RUN(bad_arguments_are_refused_before_launch);
    return test_done();
}
