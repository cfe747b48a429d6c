/*
 * fakecuda_gemm.c - cuda/cuda_gemm.h on the host: the cuBLAS projections as an fp32
 * GEMM over fp16 inputs, rounded to fp16 once on the store, then the bias epilogue
 * (cuda_bias_relu, a second rounding) exactly as the real cuda_gemm_linear does.
 *
 * Owns: struct cuda_gemm (its device and stream). Thread: the handle's rank thread.
 */
#include "fakecuda_impl.h"

#include "cuda_gemm.h"
#include "cuda_kernels.h"
#include "dtype.h"
#include "err.h"

#include <stdlib.h>

struct cuda_gemm {
    int device;
    cudaStream_t stream;
};

int cuda_gemm_create(struct cuda_gemm **out, int device, cudaStream_t stream)
{
    *out = NULL;
    if (cudaSetDevice(device) != cudaSuccess)
        return err_set(ENG_EUNAVAILABLE, "cuBLAS (fake): no device %d", device);
    if (!fakecuda_stream_ok(stream, "cuda_gemm_create"))
        return err_set(ENG_EINVAL, "cuBLAS (fake): stream of another device");
    struct cuda_gemm *g = calloc(1, sizeof *g);
    if (!g) return err_set(ENG_ENOMEM, "cuBLAS (fake): out of memory");
    *g = (struct cuda_gemm){device, stream};
    *out = g;
    return 0;
}

void cuda_gemm_destroy(struct cuda_gemm *g)
{
    free(g);
}

/* The checks cuBLAS and the GPU would make; returns 0 or ENG_EINVAL. */
static int check(const struct cuda_gemm *g, const void *y, size_t y_elem, const uint16_t *x,
                 const uint16_t *w, int32_t m, int32_t n, int32_t k, const char *what)
{
    if (m < 0 || n <= 0 || k <= 0) return err_set(ENG_EINVAL, "%s: m %d n %d k %d", what, m, n, k);
    if (fakecuda_current_device() != g->device)
        fakecuda_violation("%s: handle of device %d used with device %d current", what,
                           g->device, fakecuda_current_device());
    if (fakecuda_current_device() != g->device || !fakecuda_stream_ok(g->stream, what) ||
        !fakecuda_dev_ok(y, (size_t)m * (size_t)n * y_elem, what) ||
        !fakecuda_dev_ok(x, (size_t)m * (size_t)k * 2, what) ||
        !fakecuda_dev_ok(w, (size_t)n * (size_t)k * 2, what))
        return err_set(ENG_EINVAL, "%s: bad device pointers (fakecuda)", what);
    const char *yc = y;
    if ((yc < (const char *)x + (size_t)m * (size_t)k * 2 && (const char *)x < yc + (size_t)m * (size_t)n * y_elem) ||
        (yc < (const char *)w + (size_t)n * (size_t)k * 2 && (const char *)w < yc + (size_t)m * (size_t)n * y_elem)) {
        fakecuda_violation("%s: y overlaps x or w", what);
        return err_set(ENG_EINVAL, "%s: y overlaps x or w", what);
    }
    return 0;
}

/* acc [m, n] = x [m, k] . w [n, k]^T in fp32, the caller's buffer. */
static void gemm_f32(float *acc, const uint16_t *x, const uint16_t *w, int32_t m, int32_t n,
                     int32_t k)
{
    float *xf = malloc((size_t)m * (size_t)k * sizeof *xf);
    float *wf = malloc((size_t)n * (size_t)k * sizeof *wf);
    if (!xf || !wf) abort();
    for (int64_t i = 0; i < (int64_t)m * k; i++) xf[i] = f16_to_f32(x[i]);
    for (int64_t i = 0; i < (int64_t)n * k; i++) wf[i] = f16_to_f32(w[i]);
#pragma omp parallel for schedule(static) if ((int64_t)m * n * k > (1 << 20))
    for (int32_t j = 0; j < n; j++)
        for (int32_t i = 0; i < m; i++) {
            const float *a = xf + (int64_t)i * k, *b = wf + (int64_t)j * k;
            float s = 0.0f;
            for (int32_t t = 0; t < k; t++) s += a[t] * b[t];
            acc[(int64_t)i * n + j] = s;
        }
    free(xf);
    free(wf);
}

int cuda_gemm_linear(struct cuda_gemm *g, uint16_t *y, const uint16_t *x, const uint16_t *w,
                     const uint16_t *bias, int32_t m, int32_t n, int32_t k, bool relu)
{
    if (m == 0) return 0;
    int err = check(g, y, 2, x, w, m, n, k, "cuda_gemm_linear");
    if (err) return err;
    if (relu && !bias) return err_set(ENG_EINVAL, "cuda_gemm_linear: relu without a bias");
    float *acc = malloc((size_t)m * (size_t)n * sizeof *acc);
    if (!acc) abort();
    gemm_f32(acc, x, w, m, n, k);
    for (int64_t i = 0; i < (int64_t)m * n; i++) y[i] = f32_to_f16(acc[i]);
    free(acc);
    if (bias && cuda_bias_relu(y, bias, m, n, relu, g->stream) != cudaSuccess)
        return err_set(ENG_EINVAL, "cuda_gemm_linear: bias epilogue failed");
    return 0;
}

int cuda_gemm_linear_f32(struct cuda_gemm *g, float *y, const uint16_t *x, const uint16_t *w,
                         int32_t m, int32_t n, int32_t k)
{
    if (m == 0) return 0;
    int err = check(g, y, 4, x, w, m, n, k, "cuda_gemm_linear_f32");
    if (err) return err;
    gemm_f32(y, x, w, m, n, k);
    return 0;
}
