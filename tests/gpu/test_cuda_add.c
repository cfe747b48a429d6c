/*
 * test_cuda_add.c - the residual add (cuda/cuda_add.cu) against a host reference
 * written from the CPU backend's semantics (engine/cpu/cpu_ops.c), on random fp16
 * data of any length.
 *
 * The host reference reads the same fp16 inputs widened to float and does one fp32
 * add of two fp16 values, then one round-to-nearest-even to fp16, as the kernel does:
 * IEEE fp32 gives the same bits on host and device, so the outputs must be
 * bit-identical.
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
static uint64_t rng = 0xc71f4d5d9a934a6aull;

static void check_add(int64_t n)
{
    uint16_t *x = gpu_rnd_f16(&rng, n, -4.0f, 4.0f), *y = gpu_rnd_f16(&rng, n, -4.0f, 4.0f);
    uint16_t *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        want[i] = f32_to_f16(f16_to_f32(x[i]) + f16_to_f32(y[i]));
    uint16_t *d_x = gpu_to_dev(x, (size_t)n * 2), *d_y = gpu_to_dev(y, (size_t)n * 2);
    EXPECT(d_x && d_y);
    EXPECT_EQ(cuda_add(d_x, d_y, n, 0), cudaSuccess);
    EXPECT_EQ(gpu_f16_from_dev(got, d_x, n), cudaSuccess);
    EXPECT_EQ(gpu_f16_bit_diffs("add", got, want, n), 0);
    cudaFree(d_x), cudaFree(d_y);
    free(x), free(y), free(want), free(got);
}

TEST(residual_add_any_length)
{
    check_add(7 * 768);
    check_add(1001); /* odd: the last thread adds one element */
    check_add(1);
    check_add(1 << 22); /* many blocks */
}

TEST(bad_arguments_are_refused_before_launch)
{
    uint16_t *d = NULL;
    GPU_OK(cudaMalloc((void **)&d, 64));
    EXPECT_EQ(cuda_add(d, d, -1, 0), cudaErrorInvalidValue);
    /* Empty work is not an error and launches nothing. */
    EXPECT_EQ(cuda_add(d, d, 0, 0), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d);
}

int main(void)
{
    const int n_dev = gpu_device_count();
    if (n_dev == 0) return 77; /* meson's skip code */
    gpu_print_device(n_dev);

    RUN(residual_add_any_length);
    RUN(bad_arguments_are_refused_before_launch);
    return test_done();
}
