/*
 * gpu_testlib.h - what every test under tests/gpu needs around its kernels: the skip
 * without a device, host-to-device copies, chained copies back, the fixed random fp16
 * inputs (gpu_rnd.h, CUDA-free so that CPU tests can replay them), the bit-exact fp16
 * comparison of the elementwise kernels, and the fp16-output tolerance the attention
 * and LayerNorm checks share.
 *
 * Compiled by gcc against cuda_runtime_api.h (tests/lib's h2o_test_gpu, built with
 * CUDA only). Everything here reports through test.h.
 */
#ifndef H2O_GPU_TESTLIB_H
#define H2O_GPU_TESTLIB_H

#include "dtype.h"
#include "gpu_rnd.h"
#include "test.h"

#include <cuda_runtime_api.h>

#include <stdint.h>

/*
 * The number of CUDA devices, or 0 after printing why the test is skipped (no device,
 * or no driver: cudaGetDeviceCount fails). The caller then returns 77, meson's skip
 * code, so every build machine without a GPU passes the gpu suite as skipped.
 */
int gpu_device_count(void);

/* A TAP comment naming device 0, so a log says which GPU its timings come from. */
void gpu_print_device(int n_dev);

/*
 * A device copy of `bytes` bytes of host memory, or NULL (the caller counts that as
 * a failed allocation). Zero bytes still allocate one, so an empty array is not
 * mistaken for a failure. Caller cudaFrees.
 */
void *gpu_to_dev(const void *h, size_t bytes);

/*
 * Copies `bytes` from the device into h, unless `e` already holds an error: a chain
 * e = gpu_from_dev(e, ...) after a launch then stops at, and returns, the first one.
 */
cudaError_t gpu_from_dev(cudaError_t e, void *h, const void *d, size_t bytes);

/* Waits for the kernels, then copies n fp16 values back into out; 0 or the first CUDA
 * error. */
cudaError_t gpu_f16_from_dev(uint16_t *out, const void *d, int64_t n);

/* How many of got [n] differ from want [n] in their bits (the checks of kernels that
 * must be bit-identical to their reference); reports the first few as `what`[i]. */
int64_t gpu_f16_bit_diffs(const char *what, const uint16_t *got, const uint16_t *want,
                          int64_t n);

/* A failed CUDA call fails the test and leaves it (device memory is freed at exit). */
#define GPU_OK(call)                                                                       \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            TEST_FAIL("%s: %s", #call, cudaGetErrorString(e_));                            \
            return;                                                                        \
        }                                                                                  \
    } while (0)

/*
 * Microseconds per call of launch(arg) on the default stream: one warm-up call (its
 * error, if any, is returned as a negative value; nothing is timed), then `reps`
 * calls between two CUDA events. Negative too when the timed calls fail to finish.
 * The timing tests print rates from it and assert nothing; docs/cuda.md quotes the
 * expectations.
 */
double gpu_time_us(cudaError_t (*launch)(const void *arg), const void *arg, int reps);

/*
 * How many of the fp16 outputs got [n] miss the unrounded fp32 reference want [n] by
 * more than half an fp16 ulp (2^-11 relative) plus 1e-5 for the fp32 noise of a
 * different summation order; reports the first few as `what`[i]. The largest error
 * goes into *worst when it beats the value there.
 */
int64_t gpu_f16_misses(const char *what, const uint16_t *got, const float *want, int64_t n,
                       double *worst);

#endif
