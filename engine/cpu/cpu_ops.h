/*
 * cpu_ops.h - the small CPU kernels of the forward besides GEMMs and attention:
 * embedding lookup, LayerNorm and RMSNorm, activations (GELU, SwiGLU), rotary
 * positions, residual add, dtype conversion, row gather.
 *
 * Every loop runs on OpenMP threads (the same pool oneDNN uses, so the cores are
 * never oversubscribed). All functions are pure over their arguments.
 * Thread: engine (the caller), fanning out to OpenMP.
 */
#ifndef H2O_CPU_OPS_H
#define H2O_CPU_OPS_H

#include "arch.h"
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

/*
 * dst [n, d] = the norm `kind` of each row of x with weight w and bias b (NULL for
 * RMSNorm), eps as the model's config says, statistics in fp32 (RMSNorm as HF:
 * x * rsqrt(mean(x^2) + eps) * w). dst has dtype dst_dtype; it may alias x when fp32.
 */
void cpu_ops_norm(void *dst, enum dtype dst_dtype, const float *x, const float *w,
                  const float *b, enum arch_norm kind, float eps, int32_t n, int32_t d);

/* dst [n, f] (dtype dst_dtype) = act(src [n, f]), for GELU (exact or tanh) and ReLU. */
void cpu_ops_act(void *dst, enum dtype dst_dtype, const float *src, enum arch_act act,
                 int32_t n, int32_t f);

/* SwiGLU: dst [n, f] (dtype dst_dtype) = silu(src[:, :f]) * src[:, f:], src [n, 2f]
 * (gate then up, as shard.h stacks them). */
void cpu_ops_swiglu(void *dst, enum dtype dst_dtype, const float *src, int32_t n,
                    int32_t f);

/*
 * Rotary positions, in place, on the first n_heads heads of each row of x (row r is
 * x + r * row_stride; heads of head_dim, contiguous): within the first `dims`
 * elements of a head, element i < dims / 2 pairs with i + dims / 2 and the pair
 * turns by the angle pos[r] * inv_freq[i] (HF's rotate_half; the rest of the head
 * is left alone, NeoX's partial rotary). pos are the tokens' true positions.
 */
void cpu_ops_rope(float *x, int64_t row_stride, const int32_t *pos, int32_t n,
                  int32_t n_heads, int32_t head_dim, int32_t dims, const float *inv_freq);

/* x [n] += y [n]. */
void cpu_ops_add(float *x, const float *y, int64_t n);

/* Convert fp32 to bf16, n elements. */
void cpu_ops_to_bf16(uint16_t *dst, const float *src, int64_t n);

/* dst [n_rows, d] = src [rows[i], :]. */
void cpu_ops_gather_rows(float *dst, const float *src, const int32_t *rows, int32_t n_rows,
                         int32_t d);

#endif
