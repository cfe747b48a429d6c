/*
 * cpu_attn.h - attention over the paged KV cache, with H2O score accumulation.
 *
 * One layer's cache: K [n_blocks, n_head, head_dim, block_size] (each block's keys
 * transposed, so the logits of a block's slots are one vector FMA per dimension) and
 * V [n_blocks, n_head, block_size, head_dim] in the KV dtype (fp32, bf16, or int8 with
 * an fp32 scale per slot and head, cpu_attn_int8.c), and the slot state pos / score
 * [n_blocks, n_head, block_size].
 * bf16 and int8 tiles interleave pairs, so that one load brings two elements per 32-bit
 * lane: widened by a shift and a mask for bf16 (cpu_attn_bf16.c), the operands of
 * VNNI's vpdpwssd for int8 (cpu_attn_int8.c): K [head_dim / 2, block_size, 2]
 * (dimensions 2i and 2i + 1 of a slot side by side, lane = slot) and V
 * [block_size / 2, head_dim, 2] (slots 2m and 2m + 1 of a dimension side by side, lane
 * = dimension; with an odd block size the last slot is a plain row). The element
 * offsets are cpu_attn_k_at and cpu_attn_v_at.
 * Scores stay fp32 even with bf16 K/V: the accumulated attention of old heavy
 * hitters reaches hundreds, where bf16 would round away every new contribution.
 * Thread: engine (the caller), fanning out to OpenMP over (sequence, head).
 */
#ifndef H2O_CPU_ATTN_H
#define H2O_CPU_ATTN_H

#include "backend.h"
#include "dtype.h"

#include <stdbool.h>

#include <stdint.h>

struct cpu_kv_layer {
    void *k;        /* [n_blocks, n_head, head_dim, block_size] (transposed; bf16 paired) */
    void *v;        /* [n_blocks, n_head, block_size, head_dim] (bf16 paired) */
    int32_t *pos;   /* [n_blocks, n_head, block_size], -1 = free */
    float *score;   /* [n_blocks, n_head, block_size] accumulated attention */
    /* int8 KV only, else NULL: each slot's key and value dequantization scale (x =
     * scale * element), [n_blocks, n_head, block_size], moved with pos and score. */
    float *k_scale, *v_scale;
};

/* Offset of dimension d of slot j's key within its (block, head) K tile of
 * head_dim * block_size elements, in the layout of KV dtype dt. Thread: any. */
static inline int64_t cpu_attn_k_at(enum dtype dt, int32_t block_size, int32_t d, int32_t j)
{
    if (dt != DTYPE_F32) return ((int64_t)(d >> 1) * block_size + j) * 2 + (d & 1);
    return (int64_t)d * block_size + j;
}

/* Offset of dimension d of slot j's value within its V tile, likewise. */
static inline int64_t cpu_attn_v_at(enum dtype dt, int32_t head_dim, int32_t block_size,
                                    int32_t j, int32_t d)
{
    if (dt == DTYPE_F32 || ((block_size & 1) && j == block_size - 1))
        return (int64_t)j * head_dim + d;
    return ((int64_t)(j >> 1) * head_dim + d) * 2 + (j & 1);
}

struct cpu_attn_kernels; /* a kernel set (cpu_attn_impl.h) */

struct cpu_attn_args {
    const struct be_batch *batch;
    /* [n_tok, (n_head + 2 * n_kv) * head_dim]: q | k | v, q unscaled, q and k
     * already rotated for rotary models */
    const float *qkv;
    void *out;             /* [n_tok, n_head * head_dim] */
    enum dtype out_dtype;  /* fp32, or bf16 when it feeds a bf16 GEMM */
    struct cpu_kv_layer kv;
    enum dtype kv_dtype;
    int32_t layer, n_head, head_dim, block_size; /* n_head: query heads of qkv and out */
    /* KV heads of qkv (grouped-query attention: query head h reads KV head
     * h / (n_head / n_kv)); 0 means n_head. */
    int32_t n_kv;
    /* The pool may hold more KV heads than this call attends (a tensor-parallel rank
     * attends its own): kv and the batch's head_slots index KV heads
     * 0..kv_n_head-1, and this call's KV head h is pool head head0 + h. kv_n_head 0
     * means n_kv. */
    int32_t head0, kv_n_head;
    /* Sliding window (Mistral): a query at position t sees only positions
     * t - window + 1 .. t; 0 = none. */
    int32_t window;
    float scale;           /* head_dim^-0.5 */
    float *scratch;        /* [n_threads, scratch_stride] attention row buffers */
    int32_t scratch_stride; /* >= max n_slots of any sequence */
    /* The kernel set to run; NULL (what the backend passes) = cpu_attn_kernels_for.
     * Tests set it to compare the sets. */
    const struct cpu_attn_kernels *kernels;
};

/*
 * Write the batch's new K/V into their slots (pos = the token's position, score =
 * 0), then attend: each query sees the slots whose pos is in [0, its own position]
 * (and inside the window, when there is one), with an fp32 softmax, and adds its
 * probabilities to those slots' scores. With GQA a KV head's slots get the sum over
 * the query heads that read it, added in query-head order by one thread. Within a
 * prefill chunk this is the causal mask; across steps it is plain decode attention;
 * with H2O holes it skips evicted slots. Sums over queries give the prefill column
 * sums of DESIGN section 5 without a second pass.
 */
void cpu_attn_forward(const struct cpu_attn_args *a);

/*
 * The H2O prefill compaction (be_ops.kv_compact) of one layer's head h of one
 * sequence (block table `blocks`, slots 0..n_slots-1 in use): move slot keep[i] to
 * slot i (K, V, pos, score; bit copies) for i < n_keep, keep ascending with
 * keep[i] >= i, in increasing i (so a slot is read before it is overwritten); then
 * mark slots n_keep..n_slots-1 free (pos -1, score 0; their K/V stay), in the layout
 * of kv_dtype; with int8 K/V (kv->k_scale set) the scales move too. The CPU backend
 * runs it for every (layer, head); it is exported so that the CUDA twin's host reference is
 * tested against this very code.
 */
void cpu_attn_kv_compact_head(const struct cpu_kv_layer *kv, enum dtype kv_dtype,
                              int32_t n_head, int32_t head_dim, int32_t block_size,
                              int32_t h, const int32_t *blocks, int32_t n_slots,
                              const int32_t *keep, int32_t n_keep);

/* Whether the kernels handle this geometry: head_dim a multiple of 16 up to 256
 * (every OPT: 64, 80 or 128), block_size up to 64. */
bool cpu_attn_supports(int32_t head_dim, int32_t block_size);

/* The fp32 KV cache's portable kernel set (cpu_attn.c), the reference: any block
 * size. */
extern const struct cpu_attn_kernels cpu_attn_ref;

/* The fp32 AVX-512 kernel set (cpu_attn_avx512.c, block size 16 only), or NULL when
 * this build does not target AVX-512. Thread: any. */
const struct cpu_attn_kernels *cpu_attn_avx512(void);

/* The set cpu_attn_forward runs by default for an fp32 cache of this block size: the
 * AVX-512 one where it is built and handles the size, else the portable one. Thread:
 * any. */
const struct cpu_attn_kernels *cpu_attn_kernels_for(int32_t block_size);

/* The name of a kernel set ("portable", "avx512", ...), for test and log lines. */
const char *cpu_attn_kernels_name(const struct cpu_attn_kernels *k);

/* The bf16 KV cache's kernel sets (cpu_attn_bf16.c), as the fp32 ones: the portable
 * reference (any block size), the AVX-512 set (block size 16; NULL where not built),
 * and the default. Thread: any. */
extern const struct cpu_attn_kernels cpu_attn_bf16_ref;
const struct cpu_attn_kernels *cpu_attn_bf16_avx512(void);
const struct cpu_attn_kernels *cpu_attn_bf16_kernels_for(int32_t block_size);

/* The int8 KV cache's kernel sets (cpu_attn_int8.c), as the two above: the portable
 * reference (any block size), the AVX-512 set (block size 16; NULL where not built),
 * and the one cpu_attn_forward runs for int8 K/V by default. Thread: any. */
extern const struct cpu_attn_kernels cpu_attn_int8_ref;
const struct cpu_attn_kernels *cpu_attn_int8_avx512(void);
const struct cpu_attn_kernels *cpu_attn_int8_kernels_for(int32_t block_size);

/*
 * Quantize x[0..n) to symmetric int8: dst[i * stride] = round(x[i] / scale), scale =
 * max|x| / 127 (0 for an all-zero x, whose elements are then 0), so that
 * |x[i] - scale * dst[i * stride]| <= scale / 2. Returns the scale. The K/V write of
 * the int8 cache runs it per (token, KV head); stride lets it write a transposed K
 * column. Pure; the caller owns both buffers. Thread: any.
 */
float cpu_attn_int8_quantize(int8_t *dst, int64_t stride, const float *x, int32_t n);

/* Scratch floats one thread needs for a sequence of n_slots slots. */
int32_t cpu_attn_scratch_floats(int32_t n_slots, int32_t block_size, int32_t n_head);

#endif
