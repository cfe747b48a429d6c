/*
 * cpu_attn_impl.h - what the attention's kernel sets share: the kernel table, the
 * tile bounds and the small helpers both cpu_attn.c (the portable reference) and
 * cpu_attn_avx512.c (the AVX-512 kernels) call. Not for use outside engine/cpu.
 *
 * The kernel table is small on purpose: cpu_attn.c keeps the algorithm (K/V write,
 * tiling of the queries, softmax, task split over threads) and asks the table only for
 * the two passes over a sequence's blocks, where the time goes, and optionally for a
 * whole decode sequence at once. Each pass is called once per query tile and head, so
 * the indirect call costs nothing measurable; the block kernels inside a pass are
 * inlined with constant sizes, as before the split.
 * Thread: the OpenMP threads of cpu_attn_forward; everything here is pure over its
 * arguments except the score and output updates it is asked for.
 */
#ifndef H2O_CPU_ATTN_IMPL_H
#define H2O_CPU_ATTN_IMPL_H

#include "cpu_attn.h"
#include "dtype.h"
#include "fast_exp.h"
#include "util.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#define ATTN_QT 8          /* queries per tile */
#define ATTN_MAX_D 256     /* head_dim bound of the on-stack tiles; every OPT has <= 128 */
#define ATTN_MAX_BS 64     /* block_size bound of the on-stack tiles */
#define ATTN_MAX_HEADS 128 /* heads in one decode task's on-stack query (OPT-175B: 96) */

/*
 * One kernel set. Every set computes, per element, the same operations in the same
 * order as the portable one (cpu_attn_ref), so the results are identical bit for bit
 * whichever set runs; tests/unit/test_cpu_attn_kernels.c checks it.
 */
struct cpu_attn_kernels {
    const char *name;
    int32_t block_size; /* the only block size the set handles; 0 = any */
    /* The KV dtype the set reads, in that dtype's layout (cpu_attn.h): fp32
     * (cpu_attn.c, cpu_attn_avx512.c), bf16 (cpu_attn_bf16.c) or int8 with per-slot
     * scales (cpu_attn_int8.c). cpu_attn_forward checks that it matches. */
    enum dtype kv_dtype;
    /*
     * Pass 1 over every block of sequence sq for head h and a tile of nq <= ATTN_QT
     * queries (qv [nq, head_dim] scaled, qpos [nq]): s [nq, width] gets each slot's
     * logit, -INFINITY where the query cannot see it. Returns the width up to the
     * last block any query of the tile can see (slots past it are never read again
     * for this tile).
     */
    int32_t (*tile_logits)(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                           const float *qv, const int32_t *qpos, int32_t nq, float *s,
                           int32_t width);
    /*
     * Pass 3 over the blocks of the visible width: out [nq, head_dim] += p . V and
     * the slots' scores += p, one query at a time in query order. p is [nq, width].
     */
    void (*tile_values)(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                        const float *p, const int32_t *qpos, int32_t nq, int32_t width,
                        int32_t width_vis, float *out);
    /*
     * Optional (NULL: a decode token runs as one task per head, through the two
     * passes). A decode token (n_tok 1) of sq, every head in one task, with s
     * [n_head, width] scratch; per head the same arithmetic as the two passes.
     */
    void (*decode_seq)(const struct cpu_attn_args *a, const struct be_seq *sq, float *s);
};

/* Index of (block, this call's head h) in the pool's [n_blocks, pool heads, ...]
 * arrays, in units of a (block, head) tile. A tensor-parallel rank attends only its
 * heads head0 .. head0 + n_head - 1 of a pool that holds every head. */
static inline int32_t cpu_attn_n_kv(const struct cpu_attn_args *a)
{
    return a->n_kv ? a->n_kv : a->n_head;
}

static inline int64_t cpu_attn_bh(const struct cpu_attn_args *a, int32_t block, int32_t h)
{
    return (int64_t)block * (a->kv_n_head ? a->kv_n_head : cpu_attn_n_kv(a)) + a->head0 + h;
}

/* The slots a query at qpos sees hold positions in (cpu_attn_lo, qpos]: -1 without a
 * window (every position, and never a free slot's -1), else qpos - window. */
static inline int32_t cpu_attn_lo(const struct cpu_attn_args *a, int32_t qpos)
{
    return a->window > 0 ? qpos - a->window : -1;
}

/*
 * Whether any query of a tile can see a slot of this block: some slot holds a
 * position in [0, qmax]. Blocks entirely in the future of a prefill tile are
 * skipped (about half the causal square); the skip changes no arithmetic, since
 * their logits are -inf and their probabilities 0 either way.
 */
static inline bool cpu_attn_block_visible(const struct cpu_attn_args *a, int64_t t,
                                          int32_t n_valid, int32_t qmax)
{
    const int32_t *pos = a->kv.pos + t * a->block_size;
    for (int32_t j = 0; j < n_valid; j++)
        if (pos[j] >= 0 && pos[j] <= qmax) return true;
    return false;
}

/* Ask for one (block, head) tile of a K or V pool of block size 16 ahead of use: a
 * decode step streams the whole KV cache once, in 1-4 KiB tiles scattered over the
 * pool, and the hardware prefetchers do not cross from one tile to the next. */
static inline void cpu_attn_prefetch_tile(const struct cpu_attn_args *a, const void *pool,
                                          int64_t t)
{
    const int64_t bytes = (int64_t)16 * a->head_dim * dtype_size(a->kv_dtype);
    const char *p = (const char *)pool + t * bytes;
    for (int64_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(p + o, 0, 3);
}

/* The scores of one block's slots += p, one query at a time in query order, so the
 * sum is the same whatever the tiling. */
static inline void cpu_attn_block_scores(const struct cpu_attn_args *a, int64_t t,
                                         const float *p, int32_t stride, int32_t nq, int32_t BS)
{
    float *score = a->kv.score + t * BS;
    for (int32_t q = 0; q < nq; q++)
        for (int32_t j = 0; j < BS; j++) score[j] += p[q * stride + j];
}

/*
 * row[0..n) = softmax(row), in place, fp32. The maximum and the sum are kept in 16
 * lanes (lane = index mod 16) and reduced in lane order at the end: that
 * vectorises, and since slots a query cannot see contribute exactly 0, a query's
 * result does not depend on how many such slots the row has.
 */
static inline void cpu_attn_softmax_row(float *row, int32_t n)
{
    float m16[16], s16[16];
    for (int32_t l = 0; l < 16; l++) m16[l] = -INFINITY;
    int32_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int32_t l = 0; l < 16; l++) m16[l] = row[j + l] > m16[l] ? row[j + l] : m16[l];
    for (; j < n; j++) m16[j & 15] = row[j] > m16[j & 15] ? row[j] : m16[j & 15];
    float mx = m16[0];
    for (int32_t l = 1; l < 16; l++) mx = m16[l] > mx ? m16[l] : mx;
    for (int32_t l = 0; l < 16; l++) s16[l] = 0.0f;
    for (j = 0; j + 16 <= n; j += 16)
        for (int32_t l = 0; l < 16; l++) {
            row[j + l] = fast_exp(row[j + l] - mx);
            s16[l] += row[j + l];
        }
    for (; j < n; j++) {
        row[j] = fast_exp(row[j] - mx);
        s16[j & 15] += row[j];
    }
    float sum = 0.0f;
    for (int32_t l = 0; l < 16; l++) sum += s16[l];
    const float inv = 1.0f / sum; /* a query always sees itself: sum >= 1 */
    for (j = 0; j < n; j++) row[j] *= inv;
}

/* Row r, head h of the attention output [n_tok, n_head * head_dim] = o [head_dim],
 * converted to the output dtype. */
static inline void cpu_attn_store(const struct cpu_attn_args *a, int32_t r, int32_t h,
                                  const float *o)
{
    const int32_t D = a->head_dim;
    const int64_t oi = (int64_t)r * a->n_head * D + (int64_t)h * D;
    if (a->out_dtype == DTYPE_F32) {
        memcpy((float *)a->out + oi, o, (size_t)D * sizeof(float));
    } else {
        uint16_t *dst = (uint16_t *)a->out + oi;
        for (int32_t d = 0; d < D; d++) dst[d] = f32_to_bf16(o[d]);
    }
}

/* The two block kernels a whole-sequence decode walk runs (cpu_attn_decode_walk):
 * the logits of one query per head for NH (1 or 4) consecutive heads of a block, and
 * one head's values (and nothing else) over a block. */
typedef void (*cpu_attn_heads_fn)(const struct cpu_attn_args *a, int64_t t0,
                                  int32_t n_valid, const float *qv, int32_t qpos, float *s,
                                  int32_t stride, int32_t NH);
typedef void (*cpu_attn_values1_fn)(const struct cpu_attn_args *a, int64_t t,
                                    const float *p, float *out);

/*
 * A decode token (one query) of sequence sq, every head in one task: the fp32
 * AVX-512 set's decode_seq, with its block kernels (inlined here: the set calls it
 * with constant kernels; the bf16 and int8 sets have cpu_attn_walk.h's twin, which
 * prepares each query first). The pool keeps a block's heads next to each
 * other, so both passes walk blocks with every head at once: the sequence's cache is
 * read as one contiguous run per block (n_head tiles) instead of n_head scattered
 * tiles per block, which the hardware prefetchers follow well (docs/benchmarks.md,
 * "Decode attention and the memory roofline"). Per head the same operations in the
 * same order as the sets' tile passes (blocks in order, slots in order), so results
 * do not depend on which path ran. Block size 16; s is [n_head, width] scratch.
 */
static inline __attribute__((always_inline)) void
cpu_attn_decode_walk(const struct cpu_attn_args *a, const struct be_seq *sq, float *s,
                     cpu_attn_heads_fn logits_heads, cpu_attn_values1_fn values1)
{
    const struct be_batch *b = a->batch;
    const int32_t H = a->n_head, D = a->head_dim;
    const int32_t nb = CEIL_DIV(sq->n_slots, 16), width = nb * 16;
    const int32_t r = sq->tok_start, qpos = b->pos[r];
    // qv: [n_head, head_dim] scaled query, out: [n_head, head_dim]
    float qv[ATTN_MAX_HEADS * ATTN_MAX_D], out[ATTN_MAX_HEADS * ATTN_MAX_D];
    const float *qr = a->qkv + (int64_t)r * 3 * H * D;
    for (int32_t i = 0; i < H * D; i++)
        qv[i] = qr[i] * a->scale;

    for (int32_t bi = 0; bi < nb; bi++) {
        const int64_t t0 = cpu_attn_bh(a, sq->blocks[bi], 0);
        const int32_t n_valid = MIN(16, sq->n_slots - bi * 16);
        int32_t h = 0;
        for (; h + 4 <= H; h += 4)
            logits_heads(a, t0 + h, n_valid, qv + h * D, qpos, s + h * width + bi * 16,
                         width, 4);
        for (; h < H; h++)
            logits_heads(a, t0 + h, n_valid, qv + h * D, qpos, s + h * width + bi * 16,
                         width, 1);
    }
    for (int32_t h = 0; h < H; h++)
        cpu_attn_softmax_row(s + (int64_t)h * width, width);
    memset(out, 0, (size_t)(H * D) * sizeof *out);
    for (int32_t bi = 0; bi < nb; bi++) {
        const int64_t t0 = cpu_attn_bh(a, sq->blocks[bi], 0);
        for (int32_t h = 0; h < H; h++) {
            const float *p = s + (int64_t)h * width + bi * 16;
            cpu_attn_block_scores(a, t0 + h, p, width, 1, 16);
            values1(a, t0 + h, p, out + h * D);
        }
    }
    for (int32_t h = 0; h < H; h++)
        cpu_attn_store(a, r, h, out + h * D);
}

#endif
