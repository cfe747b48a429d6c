/*
 * test_cuda_bias_relu.c - the bias and ReLU epilogue (cuda/cuda_bias_relu.cu) against
 * a host reference written from the CPU backend's semantics (engine/cpu/cpu_ops.c),
 * on random fp16 data: after fc1 with ReLU, after q/k/v without.
 *
 * The host reference reads the same fp16 inputs widened to float and does one fp32
 * add of two fp16 values, then a max with 0, then one round-to-nearest-even to fp16,
 * as the kernel does: IEEE fp32 gives the same bits on host and device, so the
 * outputs must be bit-identical.
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
static uint64_t rng = 0x9ba395abe53ec8e5ull;

static void check_bias_relu(int32_t n, int32_t m, bool relu)
{
    const int64_t nm = (int64_t)n * m;
    uint16_t *x = gpu_rnd_f16(&rng, nm, -2.0f, 2.0f), *bias = gpu_rnd_f16(&rng, m, -1.0f, 1.0f);
    uint16_t *want = malloc((size_t)nm * sizeof *want), *got = malloc((size_t)nm * 2);
    for (int64_t i = 0; i < nm; i++) {
        float v = f16_to_f32(x[i]) + f16_to_f32(bias[i % m]);
        want[i] = f32_to_f16(relu && v < 0.0f ? 0.0f : v);
    }
    uint16_t *d_x = gpu_to_dev(x, (size_t)nm * 2), *d_b = gpu_to_dev(bias, (size_t)m * 2);
    EXPECT(d_x && d_b);
    EXPECT_EQ(cuda_bias_relu(d_x, d_b, n, m, relu, 0), cudaSuccess);
    EXPECT_EQ(gpu_f16_from_dev(got, d_x, nm), cudaSuccess);
    EXPECT_EQ(gpu_f16_bit_diffs(relu ? "bias_relu" : "bias", got, want, nm), 0);
    cudaFree(d_x), cudaFree(d_b);
    free(x), free(bias), free(want), free(got);
}

TEST(bias_relu_is_the_fc1_epilogue)
{
    check_bias_relu(6, 3072, true);  /* OPT-125m fc1 */
    check_bias_relu(1, 16384, true); /* one decode row of OPT-6.7B fc1 */
    check_bias_relu(333, 6, true);   /* many narrow rows: the bias index wraps */
}

TEST(bias_without_relu_keeps_negatives)
{
    check_bias_relu(5, 2304, false); /* q/k/v of OPT-125m */
}

TEST(bad_arguments_are_refused_before_launch)
{
    uint16_t *d = NULL;
    GPU_OK(cudaMalloc((void **)&d, 64));
    EXPECT_EQ(cuda_bias_relu(d, d, 2, 7, true, 0), cudaErrorInvalidValue);
    /* Empty work is not an error and launches nothing. */
    EXPECT_EQ(cuda_bias_relu(d, d, 0, 4, false, 0), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d);
}

int main(void)
{
    const int n_dev = gpu_device_count();
    if (n_dev == 0) return 77; /* meson's skip code */
    gpu_print_device(n_dev);

    RUN(bias_relu_is_the_fc1_epilogue);
    RUN(bias_without_relu_keeps_negatives);
    RUN(bad_arguments_are_refused_before_launch);
    return test_done();
}
