/*
 * cpu_ops.h - the small CPU kernels of the OPT forward besides GEMMs and attention:
 * embedding lookup, LayerNorm, residual add, dtype conversion, row gather.
 *
 * Every loop runs on OpenMP threads (the same pool oneDNN uses, so the cores are
 * never oversubscribed). All functions are pure over their arguments.
 * Thread: engine (the caller), fanning out to OpenMP.
 */
#ifndef H2O_CPU_OPS_H
#define H2O_CPU_OPS_H

#include "dtype.h"

#include <stdint.h>

/* dst [n, d] = table [ids[i], :] for each row; table [rows, d] fp32. */
void cpu_ops_embed(float *dst, const float *table, const int32_t *ids, int32_t n,
                   int32_t d);

/* x [n, d] += table [pos[i] + offset, :] (learned positions). */
void cpu_ops_add_positions(float *x, const float *table, const int32_t *pos, int32_t offset,
                           int32_t n, int32_t d);

/*
 * dst [n, d] = LayerNorm(x) * w + b, eps 1e-5, statistics in fp32 over each row.
 * dst has dtype dst_dtype (fp32 or bf16); dst may alias x when fp32.
 */
void cpu_ops_layernorm(void *dst, enum dtype dst_dtype, const float *x, const float *w,
                       const float *b, int32_t n, int32_t d);

/* x [n] += y [n]. */
void cpu_ops_add(float *x, const float *y, int64_t n);

/* Convert fp32 to bf16, n elements. */
void cpu_ops_to_bf16(uint16_t *dst, const float *src, int64_t n);

/* dst [n_rows, d] = src [rows[i], :]. */
void cpu_ops_gather_rows(float *dst, const float *src, const int32_t *rows, int32_t n_rows,
                         int32_t d);

#endif
