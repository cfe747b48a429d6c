/*
 * gpu_testlib.h - what every test under tests/gpu needs around its kernels: the skip
 * without a device, host-to-device copies, chained copies back, the fixed random fp16
 * inputs (gpu_rnd.h, CUDA-free so that CPU tests can replay them), and the fp16-output
 * tolerance the attention and LayerNorm checks share.
 *
 * Header-only (static inline) like tests/test.h, so each test stays one source file
 * that gcc compiles against cuda_runtime_api.h. Everything here reports through
 * test.h: include that first.
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
static inline int gpu_device_count(void)
{
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev == 0) {
        printf("no CUDA device: skipping (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    return n_dev;
}

/* A TAP comment naming device 0, so a log says which GPU its timings come from. */
static inline void gpu_print_device(int n_dev)
{
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        printf("# device 0: %s, sm_%d%d, %d devices\n", prop.name, prop.major, prop.minor,
               n_dev);
}

/*
 * A device copy of `bytes` bytes of host memory, or NULL (the caller counts that as
 * a failed allocation). Zero bytes still allocate one, so an empty array is not
 * mistaken for a failure. Caller cudaFrees.
 */
static inline void *gpu_to_dev(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) return NULL;
    if (bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

/*
 * Copies `bytes` from the device into h, unless `e` already holds an error: a chain
 * e = gpu_from_dev(e, ...) after a launch then stops at, and returns, the first one.
 */
static inline cudaError_t gpu_from_dev(cudaError_t e, void *h, const void *d, size_t bytes)
{
    if (e != cudaSuccess) return e;
    return cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
}

/*
 * Microseconds per call of launch(arg) on the default stream: one warm-up call (its
 * error, if any, is returned as a negative value; nothing is timed), then `reps`
 * calls between two CUDA events. Negative too when the timed calls fail to finish.
 * The timing tests print rates from it and assert nothing; docs/cuda.md quotes the
 * expectations.
 */
static inline double gpu_time_us(cudaError_t (*launch)(const void *arg), const void *arg,
                                 int reps)
{
    if (launch(arg) != cudaSuccess) return -1.0;
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    cudaEventRecord(t0, 0);
    for (int r = 0; r < reps; r++)
        launch(arg);
    cudaEventRecord(t1, 0);
    float ms = -1.0f;
    if (cudaEventSynchronize(t1) == cudaSuccess) cudaEventElapsedTime(&ms, t0, t1);
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    return ms < 0.0f ? -1.0 : 1e3 * ms / reps;
}

/*
 * How many of the fp16 outputs got [n] miss the unrounded fp32 reference want [n] by
 * more than half an fp16 ulp (2^-11 relative) plus 1e-5 for the fp32 noise of a
 * different summation order; reports the first few as `what`[i]. The largest error
 * goes into *worst when it beats the value there.
 */
static inline int64_t gpu_f16_misses(const char *what, const uint16_t *got,
                                     const float *want, int64_t n, double *worst)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double g = f16_to_f32(got[i]), r = want[i], err = fabs(g - r);
        const double tol = fabs(r) / 2048.0 + 1e-5;
        if (err > *worst) *worst = err;
        if (!(err <= tol) && bad++ < 5)
            TEST_FAIL("%s[%lld] = %g, expected %g (tol %g)", what, (long long)i, g, r, tol);
    }
    return bad;
}

#endif
