/*
 * cpu_gemm.h - a linear layer (y = x W^T + b, optional ReLU) as one oneDNN matmul.
 *
 * Owns: the weights in oneDNN's preferred blocked layout (reordered once at load),
 * or, for bf16 where the CPU has AMX, packed for cpu_amx.c's batch-invariant kernel,
 * or, for fp32 where oneDNN has no AVX-512 but the CPU has AVX2, packed for
 * cpu_avx2.c's batch-invariant kernel; the bias, and the matmul primitives: fp32
 * has one with a runtime M dimension; bf16/fp16 have one per row count
 * 1..CPU_LINEAR_CHUNK, each built on first use and kept, since oneDNN's fast
 * half-precision kernel needs a fixed M and building primitives every step would
 * cost more than the small GEMMs of a decode step.
 * Thread: the thread that owns the layer (engine or rank thread); the GEMM itself
 * runs on oneDNN's OpenMP threads.
 */
#ifndef H2O_CPU_GEMM_H
#define H2O_CPU_GEMM_H

#include "cpu_amx.h"
#include "cpu_avx2.h"
#include "dtype.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdbool.h>
#include <stdint.h>

struct cpu_dnnl {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
};

/* Create the CPU engine and stream. Returns 0 or ENG_EUNSUPPORTED. Thread: engine. */
int cpu_gemm_init(struct cpu_dnnl *d);
void cpu_gemm_deinit(struct cpu_dnnl *d);

/* The instruction set oneDNN's kernels may use, for the start-up log: capped below
 * AMX unless ONEDNN_MAX_CPU_ISA says otherwise (cpu_gemm.c says why), and which
 * layers run on our own kernels instead. Applies the cap if no layer has yet.
 * Thread: any. */
const char *cpu_gemm_isa(void);

/* Whether bf16 layers can run here: oneDNN may use its AVX-512 kernels (and our AMX
 * kernel takes them where the CPU has AMX). Where not, cpu_gemm_linear_init refuses
 * them: oneDNN 2.6 would build the primitive and fail to run it. Thread: any. */
bool cpu_gemm_has_bf16(void);

/* Rows per half-precision GEMM call: large enough to run near the 2048-row rate. */
#define CPU_LINEAR_CHUNK 256

struct cpu_linear {
    int64_t k, n;         /* in and out features */
    enum dtype src_dtype; /* weights have this dtype too */
    enum dtype dst_dtype;
    dnnl_primitive_attr_t attr;    /* post-ops (ReLU) */
    dnnl_memory_desc_t weights_md; /* the layout oneDNN chose (3.x: a handle, owned) */
    dnnl_primitive_t prim;         /* fp32: runtime M */
    dnnl_primitive_t *by_rows;     /* half precision: [CPU_LINEAR_CHUNK + 1], by M */
    dnnl_memory_t weights;         /* [k, n] in oneDNN's chosen layout */
    dnnl_memory_t bias;            /* [1, n] fp32, or NULL */
    void *weights_buf;
    float *bias_buf;
    size_t weights_bytes;
    /* bf16 on a CPU with AMX: the weights packed for cpu_amx.c's kernel, which runs
     * every call instead of oneDNN (none of the oneDNN fields above is set). */
    bool amx, relu;
    struct cpu_amx_weights amx_w;
    /* fp32 where oneDNN has no AVX-512 kernels and the CPU has AVX2: the same, for
     * cpu_avx2.c's kernel. */
    bool avx2;
    struct cpu_avx2_weights avx2_w;
};

/*
 * Build the layer from PyTorch-layout weights w [n, k] (fp32) and bias [n] (or
 * NULL). `relu` fuses the activation as a post-op. Returns 0, ENG_EUNSUPPORTED
 * (oneDNN refused the configuration, or bf16 on a CPU where neither oneDNN's AVX-512
 * kernels nor AMX can run it; the message says to use fp32) or ENG_ENOMEM.
 * Owns: copies of w and b in its own layout; the caller may free them.
 * Thread: engine.
 */
int cpu_gemm_linear_init(struct cpu_linear *l, struct cpu_dnnl *d, const float *w,
                         const float *b, int64_t n, int64_t k, enum dtype src_dtype,
                         enum dtype dst_dtype, bool relu);
void cpu_gemm_linear_deinit(struct cpu_linear *l);

/*
 * dst [m, n] = src [m, k] W^T (+ b) (ReLU). src has src_dtype, dst dst_dtype, both
 * row-major with rows of exactly k and n elements. m == 0 is a no-op. Builds the
 * primitive for a new chunk row count on first use (about 0.2 ms).
 * Thread: the layer's owner thread only (the primitive table is filled here).
 */
void cpu_gemm_linear_run(const struct cpu_linear *l, struct cpu_dnnl *d, const void *src,
                         int64_t m, void *dst);

#endif
