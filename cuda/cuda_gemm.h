/*
 * cuda_gemm.h - the CUDA backend's projections through cuBLAS:
 * y [m, n] = x [m, k] . W^T (+ bias, then ReLU if asked), fp16 in and out, fp32
 * accumulation; and the LM head's variant with fp32 out (cuda_gemm_linear_f32).
 *
 * W is the checkpoint's (PyTorch's) [n, k] = [out, in] matrix, row-major, as the CPU
 * backend loads it (engine/cpu/cpu_gemm.c reads "<prefix>.weight" [n, k] and gives
 * oneDNN its transpose): no repacking on load. m is the step's token count, known
 * only at the call. In cuBLAS's column-major terms the call is
 * y^T [n, m] = op_T(W) [n, k] . x^T [k, m], one cublasGemmEx(OP_T, OP_N, n, m, k)
 * with CUDA_R_16F A/B/C, CUBLAS_COMPUTE_32F and reduced-precision reductions
 * disallowed, so every product and sum is fp32 and y is rounded to fp16 once.
 * cublasGemmEx adds no bias: with a bias the output gets cuda_bias_relu
 * (cuda_kernels.h) on the same stream, a second fp16 rounding (y = round(round(acc) +
 * bias)); folding it into a cuBLASLt epilogue is a later step (docs/cuda.md).
 *
 * Owns: struct cuda_gemm owns one cuBLAS handle, created for the device current when
 * cuda_gemm_create is called (it selects `device` first) and bound to one stream.
 * Every tensor pointer is device memory owned by the caller; calls only enqueue work
 * on the stream and return without waiting.
 * Thread: one host thread at a time per struct cuda_gemm (a cuBLAS handle must not be
 * used concurrently): the rank thread that owns the device and the stream. Create one
 * per device and stream (per tensor-parallel rank).
 * Errors: engine codes (err.h) with the message set by err_set: ENG_EINVAL for
 * arguments cuBLAS or the bias kernel cannot take, ENG_ENOMEM when cuBLAS cannot
 * allocate, ENG_EUNSUPPORTED for a GPU or mode cuBLAS does not support,
 * ENG_EUNAVAILABLE for a missing device or driver and any other failure.
 */
#ifndef H2O_CUDA_GEMM_H
#define H2O_CUDA_GEMM_H

#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cuda_gemm;

/*
 * Select `device`, create a cuBLAS handle on it and bind it to `stream` (0 is the
 * legacy default stream). Returns 0 and *out, or an engine error (no device: 
 * ENG_EUNAVAILABLE). Owns: *out (cuda_gemm_destroy).
 */
int cuda_gemm_create(struct cuda_gemm **out, int device, cudaStream_t stream);

/* Destroy the handle. Safe on NULL. Work already enqueued still runs. */
void cuda_gemm_destroy(struct cuda_gemm *g);

/*
 * y [m, n] = x [m, k] . w [n, k]^T, then y += bias [n] and y = max(y, 0) if relu
 * (relu needs a bias, as OPT's fc1 has). Row-major, dense rows; y must not overlap x
 * or w. m == 0 enqueues nothing. m, n, k > 0 otherwise; n even when there is a bias
 * (the epilogue moves half2 pairs) and the pointers 4-byte aligned for it (16-byte
 * aligned pointers and n, k multiples of 8 let cuBLAS use its fastest tensor-core
 * kernels; every OPT projection has that).
 * fp16 tensors are uint16_t (IEEE binary16 bits) as in cuda_kernels.h.
 */
int cuda_gemm_linear(struct cuda_gemm *g, uint16_t *y, const uint16_t *x, const uint16_t *w,
                     const uint16_t *bias, int32_t m, int32_t n, int32_t k, bool relu);

/*
 * y [m, n] fp32 = x [m, k] . w [n, k]^T: fp16 in, fp32 accumulation and output (the LM
 * head: logits leave the device in fp32, unrounded, for cuda_sample or the host). No
 * bias. The same cublasGemmEx as cuda_gemm_linear with an fp32 C (CUDA_R_32F): y is
 * the fp32 accumulator as cuBLAS leaves it, never rounded to fp16. Row-major, dense
 * rows; y must not overlap x or w. m == 0 enqueues nothing; m, n, k > 0 otherwise.
 * y is 4-byte aligned as any float array (16-byte aligned, n a multiple of 4 and k
 * of 8 for the tensor-core kernels: OPT's vocabulary 50272 and hidden sizes have it).
 */
int cuda_gemm_linear_f32(struct cuda_gemm *g, float *y, const uint16_t *x,
                         const uint16_t *w, int32_t m, int32_t n, int32_t k);

#ifdef __cplusplus
}
#endif

#endif
