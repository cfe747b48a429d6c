/*
 * gpu_testlib.c - what every test under tests/gpu needs around its kernels
 * (gpu_testlib.h).
 */
#include "gpu_testlib.h"

#include <stdio.h>

int gpu_device_count(void)
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

void gpu_print_device(int n_dev)
{
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        printf("# device 0: %s, sm_%d%d, %d devices\n", prop.name, prop.major, prop.minor,
               n_dev);
}

void *gpu_to_dev(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) return NULL;
    if (bytes && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

cudaError_t gpu_from_dev(cudaError_t e, void *h, const void *d, size_t bytes)
{
    if (e != cudaSuccess) return e;
    return cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
}

cudaError_t gpu_f16_from_dev(uint16_t *out, const void *d, int64_t n)
{
    return gpu_from_dev(cudaDeviceSynchronize(), out, d, (size_t)n * sizeof *out);
}

int64_t gpu_f16_bit_diffs(const char *what, const uint16_t *got, const uint16_t *want,
                          int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (got[i] == want[i]) continue;
        if (bad++ < 5)
            TEST_FAIL("%s[%lld] = %g (0x%04x), expected %g (0x%04x)", what, (long long)i,
                      f16_to_f32(got[i]), got[i], f16_to_f32(want[i]), want[i]);
    }
    return bad;
}

double gpu_time_us(cudaError_t (*launch)(const void *arg), const void *arg, int reps)
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

int64_t gpu_f16_misses(const char *what, const uint16_t *got, const float *want, int64_t n,
                       double *worst)
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
