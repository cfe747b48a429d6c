/*
 * cpu_avx2.h - fp32 linear layers on AVX2 and FMA (CPUs without AVX-512), with a
 * kernel whose every output row is computed the same way whatever the row count or
 * the thread count.
 *
 * Why not oneDNN there: oneDNN 2.6's fp32 matmul on an AVX2 CPU (gemm:jit, the
 * AVX2 sgemm) computes the rows of a last partial row block of 1 to 3 rows with
 * another K order than the full blocks, and one row (its gemv) with K split across
 * the threads when N is small, so a row's result depends on how many rows share the
 * call and on the thread count (docs/benchmarks.md, "On Zen 3"). Its AVX-512 kernels
 * do not, and keep running where the CPU has them (cpu_gemm.c decides). Here one
 * kernel runs every M: each output element is one chain of FMAs over k = 0, 1, ...,
 * K - 1 started from zero, then + bias, then ReLU, computed by one thread; blocking
 * only stores the chain's fp32 partial sum and loads it back, which changes no bit.
 * So row r of a call is the same bits as row r computed alone, on any thread count.
 *
 * Weights are packed once into panels of 16 output columns: panel p holds
 * W[p * 16 + c][k] at [k][c], one 64-byte line per k (n padded with zero columns).
 * Thread: pack and free on the layer's owner; cpu_avx2_gemm fans out to OpenMP.
 */
#ifndef H2O_CPU_AVX2_H
#define H2O_CPU_AVX2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether this CPU runs AVX2 and FMA (cpuid, and the OS saves the YMM state).
 * H2O_CPU_AVX2=0 in the environment says no. Thread: any. */
bool cpu_avx2_available(void);

/* Weights [n, k] in panels of 16 columns. */
struct cpu_avx2_weights {
    int64_t n, k, n_panels; /* n_panels = ceil(n / 16) */
    float *packed;          /* [n_panels, k, 16], 64-byte aligned */
};

/* Pack PyTorch-layout w [n, k] (fp32). Returns 0 or ENG_ENOMEM. Owns: the packed
 * copy; the caller keeps src. Thread: any. */
int cpu_avx2_pack(struct cpu_avx2_weights *w, const float *src, int64_t n, int64_t k);
void cpu_avx2_free(struct cpu_avx2_weights *w);

/* Bytes the packed weights hold. */
size_t cpu_avx2_bytes(const struct cpu_avx2_weights *w);

/*
 * dst [m, n] = src [m, k] W^T + bias (fp32 [n] or NULL), ReLU if relu; src and dst
 * fp32, row-major. m == 0 is a no-op. Thread: the caller's; runs on its OpenMP
 * threads.
 */
void cpu_avx2_gemm(const struct cpu_avx2_weights *w, const float *src, int64_t m,
                   const float *bias, bool relu, float *dst);

#endif
