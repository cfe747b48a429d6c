/*
 * cuda_gemm.c - the projections through cublasGemmEx (see cuda_gemm.h).
 */
#include "cuda_gemm.h"

#include "cuda_kernels.h"
#include "err.h"

#include <cublas_v2.h>

#include <stdlib.h>

struct cuda_gemm {
    cublasHandle_t h;
    cudaStream_t stream;
    int device;
};

/* The engine code for a cuBLAS status. */
static int blas_code(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_INVALID_VALUE: return ENG_EINVAL;
    case CUBLAS_STATUS_ALLOC_FAILED: return ENG_ENOMEM;
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED: return ENG_EUNSUPPORTED;
    default: return ENG_EUNAVAILABLE; /* not initialised, execution or internal error */
    }
}

static int blas_fail(cublasStatus_t s, const char *what)
{
    return err_set(blas_code(s), "%s: %s (%s)", what, cublasGetStatusName(s),
                   cublasGetStatusString(s));
}

static int cuda_fail(cudaError_t e, const char *what)
{
    int code = e == cudaErrorInvalidValue ? ENG_EINVAL
               : e == cudaErrorMemoryAllocation ? ENG_ENOMEM
                                                : ENG_EUNAVAILABLE;
    return err_set(code, "%s: %s", what, cudaGetErrorString(e));
}

int cuda_gemm_create(struct cuda_gemm **out, int device, cudaStream_t stream)
{
    *out = NULL;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return cuda_fail(e, "cuda_gemm_create: cudaSetDevice");
    struct cuda_gemm *g = calloc(1, sizeof *g);
    if (!g) return err_set(ENG_ENOMEM, "cuda_gemm_create: out of memory");
    g->device = device;
    g->stream = stream;
    cublasStatus_t s = cublasCreate(&g->h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return blas_fail(s, "cuda_gemm_create: cublasCreate");
    }
    /* Every reduction in the accumulator type (fp32), also inside split-K. */
    s = cublasSetMathMode(g->h, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(g->h, stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cublasDestroy(g->h);
        free(g);
        return blas_fail(s, "cuda_gemm_create: cublasSetMathMode/SetStream");
    }
    *out = g;
    return 0;
}

void cuda_gemm_destroy(struct cuda_gemm *g)
{
    if (!g) return;
    cublasDestroy(g->h);
    free(g);
}

/*
 * The one cublasGemmEx of both entry points: y = x . w^T with fp16 A and B, fp32
 * compute, C of type ytype (CUDA_R_16F: rounded once on the store; CUDA_R_32F: the
 * accumulator itself). Arguments already checked, m > 0. `what` names the caller in
 * the error message.
 */
static int gemm_ex(struct cuda_gemm *g, void *y, cudaDataType_t ytype, const uint16_t *x,
                   const uint16_t *w, int32_t m, int32_t n, int32_t k, const char *what)
{
    const float one = 1.0f, zero = 0.0f;
    /* Row-major y [m, n] is column-major y^T [n, m] (ld n); w [n, k] row-major is
     * column-major [k, n] (ld k), transposed by OP_T; x [m, k] is column-major
     * [k, m] (ld k). */
    cublasStatus_t s = cublasGemmEx(g->h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w,
                                    CUDA_R_16F, k, x, CUDA_R_16F, k, &zero, y, ytype, n,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return err_set(blas_code(s), "%s: cublasGemmEx m=%d n=%d k=%d: %s (%s)", what, m, n,
                       k, cublasGetStatusName(s), cublasGetStatusString(s));
    return 0;
}

int cuda_gemm_linear(struct cuda_gemm *g, uint16_t *y, const uint16_t *x, const uint16_t *w,
                     const uint16_t *bias, int32_t m, int32_t n, int32_t k, bool relu)
{
    if (m < 0 || n <= 0 || k <= 0 || (relu && !bias) || (bias && n % 2 != 0) || !y || !x ||
        !w)
        return err_set(ENG_EINVAL, "cuda_gemm_linear: m=%d n=%d k=%d bias=%s relu=%d", m, n,
                       k, bias ? "yes" : "no", (int)relu);
    if (m == 0) return 0;
    int err = gemm_ex(g, y, CUDA_R_16F, x, w, m, n, k, "cuda_gemm_linear");
    if (err) return err;
    if (bias) {
        cudaError_t e = cuda_bias_relu(y, bias, m, n, relu, g->stream);
        if (e != cudaSuccess) return cuda_fail(e, "cuda_gemm_linear: cuda_bias_relu");
    }
    return 0;
}

int cuda_gemm_linear_f32(struct cuda_gemm *g, float *y, const uint16_t *x,
                         const uint16_t *w, int32_t m, int32_t n, int32_t k)
{
    if (m < 0 || n <= 0 || k <= 0 || !y || !x || !w)
        return err_set(ENG_EINVAL, "cuda_gemm_linear_f32: m=%d n=%d k=%d", m, n, k);
    if (m == 0) return 0;
    return gemm_ex(g, y, CUDA_R_32F, x, w, m, n, k, "cuda_gemm_linear_f32");
}
