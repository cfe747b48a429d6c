/*
 * cpu_attn_walk.h - the block walks the bf16 and int8 kernel sets share
 * (cpu_attn_bf16.c, cpu_attn_int8.c). Not for use outside engine/cpu.
 *
 * Both read the paired layout, and the int8 set multiplies by operands of its own
 * kind (vpdpwssd): each query is first prepared once (kept fp32, or quantized to
 * int16), and each block's probabilities are prepared by the values kernel. Around that,
 * the walks over a sequence's blocks are the same: which blocks a tile can see, the shapes
 * the block kernels are instantiated for, the four-at-a-time queue of a lone decode query,
 * prefetching, the H2O scores, and the whole-sequence decode task with every head of a
 * block at once. They live here once, as always-inline functions that the sets call with
 * their own (constant) kernels, so each set still gets its kernels inlined with constant
 * sizes. Thread: the OpenMP threads of cpu_attn_forward.
 */
#ifndef H2O_CPU_ATTN_WALK_H
#define H2O_CPU_ATTN_WALK_H

#include "cpu_attn_impl.h"

/* Bytes of one prepared query: fp32 elements (bf16 set), or int16 elements and a scale. */
#define ATTN_PREP 1040
_Static_assert(ATTN_PREP >= 4 * ATTN_MAX_D + 16, "a prepared query fits");

/* Prepare one scaled query qv [head_dim] into prep (ATTN_PREP bytes). */
typedef void (*cpu_attn_prep_fn)(const float *qv, int32_t head_dim, unsigned char *prep);
/* Logits of NQ prepared queries (query q at prep + q * ATTN_PREP) against tile t, as
 * cpu_attn.c's block_logits: s[q * stride + j], -INFINITY where q cannot see j. */
typedef void (*cpu_attn_logits_fn)(const struct cpu_attn_args *a, int64_t t,
                                   int32_t n_valid, const unsigned char *prep,
                                   const int32_t *qpos, float *s, int32_t stride,
                                   int32_t NQ, int32_t BS);
/* One prepared query each against NT (1 or 4) tiles (block size 16), into s[b]. */
typedef void (*cpu_attn_logits_multi_fn)(const struct cpu_attn_args *a, const int64_t *t,
                                         const int32_t *n_valid,
                                         const unsigned char *const *prep, int32_t qpos,
                                         float *const *s, int32_t NT);
/* out [NQ, head_dim] += the values of tile t weighted by the NQ queries' fp32
 * probabilities of this block, p[q * stride + j] (the kernel prepares them). */
typedef void (*cpu_attn_values_fn)(const struct cpu_attn_args *a, int64_t t, const float *p,
                                   int32_t stride, float *out, int32_t NQ, int32_t BS);

static inline int32_t cpu_attn_walk_qmax(const int32_t *qpos, int32_t nq)
{
    int32_t qmax = qpos[0];
    for (int32_t q = 1; q < nq; q++)
        qmax = MAX(qmax, qpos[q]);
    return qmax;
}

/* Pass 1 (tile_logits) for any block size: the tile's queries prepared once, then
 * block by block, with the block kernel instantiated for a full tile and for one
 * query, at block size 16 and any. */
static inline __attribute__((always_inline)) int32_t
cpu_attn_walk_logits(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                     const float *qv, const int32_t *qpos, int32_t nq, float *s,
                     int32_t width, cpu_attn_prep_fn prep, cpu_attn_logits_fn logits)
{
    const int32_t D = a->head_dim, BS = a->block_size;
    const int32_t nb = CEIL_DIV(sq->n_slots, BS), qmax = cpu_attn_walk_qmax(qpos, nq);
    unsigned char qp[ATTN_QT * ATTN_PREP];
    for (int32_t q = 0; q < nq; q++)
        prep(qv + q * D, D, qp + q * ATTN_PREP);
    int32_t nb_vis = 0;
    for (int32_t bi = 0; bi < nb; bi++) {
        const int64_t t = cpu_attn_bh(a, sq->blocks[bi], h);
        const int32_t n_valid = MIN(BS, sq->n_slots - bi * BS);
        float *sb = s + bi * BS;
        if (!cpu_attn_block_visible(a, t, n_valid, qmax)) {
            for (int32_t q = 0; q < nq; q++)
                for (int32_t j = 0; j < BS; j++)
                    sb[q * width + j] = -INFINITY;
            continue;
        }
        nb_vis = bi + 1;
        if (nq == ATTN_QT && BS == 16) {
            logits(a, t, n_valid, qp, qpos, sb, width, ATTN_QT, 16);
        } else if (nq == ATTN_QT) {
            logits(a, t, n_valid, qp, qpos, sb, width, ATTN_QT, BS);
        } else {
            for (int32_t q = 0; q < nq; q++) {
                if (BS == 16)
                    logits(a, t, n_valid, qp + q * ATTN_PREP, qpos + q, sb + q * width,
                           width, 1, 16);
                else
                    logits(a, t, n_valid, qp + q * ATTN_PREP, qpos + q, sb + q * width,
                           width, 1, BS);
            }
        }
    }
    return nb_vis * BS;
}

/* Pass 3 (tile_values) for any block size: the H2O scores (fp32 p) and the values of
 * every visible block. */
static inline __attribute__((always_inline)) void
cpu_attn_walk_values(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                     const float *p, const int32_t *qpos, int32_t nq, int32_t width,
                     int32_t width_vis, float *out, cpu_attn_values_fn values)
{
    const int32_t D = a->head_dim, BS = a->block_size, qmax = cpu_attn_walk_qmax(qpos, nq);
    for (int32_t bi = 0; bi < width_vis / BS; bi++) {
        const int64_t t = cpu_attn_bh(a, sq->blocks[bi], h);
        const float *pb = p + bi * BS;
        if (!cpu_attn_block_visible(a, t, MIN(BS, sq->n_slots - bi * BS), qmax))
            continue; /* every probability is 0: no score, no value */
        cpu_attn_block_scores(a, t, pb, width, nq, BS);
        if (nq == ATTN_QT && BS == 16) {
            values(a, t, pb, width, out, ATTN_QT, 16);
        } else if (nq == ATTN_QT) {
            values(a, t, pb, width, out, ATTN_QT, BS);
        } else {
            for (int32_t q = 0; q < nq; q++) {
                if (BS == 16)
                    values(a, t, pb + q * width, width, out + q * D, 1, 16);
                else
                    values(a, t, pb + q * width, width, out + q * D, 1, BS);
            }
        }
    }
}

/*
 * Pass 1 for block size 16 (the AVX-512 sets): full tiles and a GQA group's 4 or 2
 * heads of one decode token share each K load; a lone decode query queues its
 * visible blocks and runs them four at a time (four independent chains), prefetching
 * the K tiles ahead. Per block the arithmetic of logits with NQ = 1.
 */
static inline __attribute__((always_inline)) int32_t
cpu_attn_walk_logits16(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                       const float *qv, const int32_t *qpos, int32_t nq, float *s,
                       int32_t width, cpu_attn_prep_fn prep, cpu_attn_logits_fn logits,
                       cpu_attn_logits_multi_fn multi)
{
    const int32_t D = a->head_dim;
    const int32_t nb = CEIL_DIV(sq->n_slots, 16), qmax = cpu_attn_walk_qmax(qpos, nq);
    unsigned char qp[ATTN_QT * ATTN_PREP];
    for (int32_t q = 0; q < nq; q++)
        prep(qv + q * D, D, qp + q * ATTN_PREP);
    const unsigned char *q4_p[4] = {qp, qp, qp, qp};
    int64_t q4_t[4];
    int32_t q4_valid[4], q4_n = 0, nb_vis = 0;
    float *q4_s[4];
    for (int32_t bi = 0; bi < nb; bi++) {
        const int64_t t = cpu_attn_bh(a, sq->blocks[bi], h);
        const int32_t n_valid = MIN(16, sq->n_slots - bi * 16);
        float *sb = s + bi * 16;
        if (!cpu_attn_block_visible(a, t, n_valid, qmax)) {
            for (int32_t q = 0; q < nq; q++)
                for (int32_t j = 0; j < 16; j++)
                    sb[q * width + j] = -INFINITY;
            continue;
        }
        nb_vis = bi + 1;
        if (nq == 1) {
            if (bi + 4 < nb)
                cpu_attn_prefetch_tile(a, a->kv.k, cpu_attn_bh(a, sq->blocks[bi + 4], h));
            q4_t[q4_n] = t;
            q4_valid[q4_n] = n_valid;
            q4_s[q4_n++] = sb;
            if (q4_n == 4) {
                multi(a, q4_t, q4_valid, q4_p, qpos[0], q4_s, 4);
                q4_n = 0;
            }
        } else if (nq == ATTN_QT) {
            logits(a, t, n_valid, qp, qpos, sb, width, ATTN_QT, 16);
        } else if (nq == 4) { /* a GQA group of 4 (Llama 3) for one decode token */
            logits(a, t, n_valid, qp, qpos, sb, width, 4, 16);
        } else if (nq == 2) {
            logits(a, t, n_valid, qp, qpos, sb, width, 2, 16);
        } else {
            for (int32_t q = 0; q < nq; q++)
                logits(a, t, n_valid, qp + q * ATTN_PREP, qpos + q, sb + q * width, width,
                       1, 16);
        }
    }
    for (int32_t i = 0; i < q4_n; i++) /* the same arithmetic, one block at a time */
        multi(a, q4_t + i, q4_valid + i, q4_p, qpos[0], q4_s + i, 1);
    return nb_vis * 16;
}

/* Pass 3 for block size 16: full tiles and GQA groups share each V load; other tiles
 * run query by query (the kernel's NQ = 1 form), prefetching the V tiles ahead. */
static inline __attribute__((always_inline)) void
cpu_attn_walk_values16(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                       const float *p, const int32_t *qpos, int32_t nq, int32_t width,
                       int32_t width_vis, float *out, cpu_attn_values_fn values)
{
    const int32_t D = a->head_dim, qmax = cpu_attn_walk_qmax(qpos, nq);
    for (int32_t bi = 0; bi < width_vis / 16; bi++) {
        const int64_t t = cpu_attn_bh(a, sq->blocks[bi], h);
        const float *pb = p + bi * 16;
        if (!cpu_attn_block_visible(a, t, MIN(16, sq->n_slots - bi * 16), qmax))
            continue; /* every probability is 0: no score, no value */
        cpu_attn_block_scores(a, t, pb, width, nq, 16);
        if (nq == ATTN_QT) {
            values(a, t, pb, width, out, ATTN_QT, 16);
        } else if (nq == 4) {
            values(a, t, pb, width, out, 4, 16);
        } else if (nq == 2) {
            values(a, t, pb, width, out, 2, 16);
        } else {
            if (bi + 2 < width_vis / 16)
                cpu_attn_prefetch_tile(a, a->kv.v, cpu_attn_bh(a, sq->blocks[bi + 2], h));
            for (int32_t q = 0; q < nq; q++)
                values(a, t, pb + q * width, width, out + q * D, 1, 16);
        }
    }
}

/*
 * A decode token of one sequence, every head in one task (block size 16), as
 * cpu_attn_decode_walk does for the fp32 set: a block's heads are one contiguous run
 * of the pool, so both passes walk blocks with every head at once. Per head the
 * arithmetic of the two passes above.
 */
static inline __attribute__((always_inline)) void
cpu_attn_walk_decode16(const struct cpu_attn_args *a, const struct be_seq *sq, float *s,
                       cpu_attn_prep_fn prep, cpu_attn_logits_multi_fn multi,
                       cpu_attn_values_fn values)
{
    const struct be_batch *b = a->batch;
    const int32_t H = a->n_head, D = a->head_dim;
    const int32_t nb = CEIL_DIV(sq->n_slots, 16), width = nb * 16;
    const int32_t r = sq->tok_start, qpos = b->pos[r];
    // qv: [head_dim] one head's scaled query; qp: [n_head] prepared; out: [n_head, D]
    float qv[ATTN_MAX_D], out[ATTN_MAX_HEADS * ATTN_MAX_D];
    unsigned char qp[ATTN_MAX_HEADS * ATTN_PREP];
    const float *qr = a->qkv + (int64_t)r * 3 * H * D;
    for (int32_t h = 0; h < H; h++) {
        for (int32_t d = 0; d < D; d++)
            qv[d] = qr[h * D + d] * a->scale;
        prep(qv, D, qp + h * ATTN_PREP);
    }

    for (int32_t bi = 0; bi < nb; bi++) {
        const int64_t t0 = cpu_attn_bh(a, sq->blocks[bi], 0);
        const int32_t n_valid = MIN(16, sq->n_slots - bi * 16);
        const int32_t nv[4] = {n_valid, n_valid, n_valid, n_valid};
        int32_t h = 0;
        for (; h + 4 <= H; h += 4) {
            const int64_t t[4] = {t0 + h, t0 + h + 1, t0 + h + 2, t0 + h + 3};
            const unsigned char *ps[4];
            float *ss[4];
            for (int32_t k = 0; k < 4; k++) {
                ps[k] = qp + (h + k) * ATTN_PREP;
                ss[k] = s + (int64_t)(h + k) * width + bi * 16;
            }
            multi(a, t, nv, ps, qpos, ss, 4);
        }
        for (; h < H; h++) {
            const int64_t t = t0 + h;
            const unsigned char *ps = qp + h * ATTN_PREP;
            float *ss = s + (int64_t)h * width + bi * 16;
            multi(a, &t, nv, &ps, qpos, &ss, 1);
        }
    }
    for (int32_t h = 0; h < H; h++)
        cpu_attn_softmax_row(s + (int64_t)h * width, width);
    memset(out, 0, (size_t)(H * D) * sizeof *out);
    for (int32_t bi = 0; bi < nb; bi++) {
        const int64_t t0 = cpu_attn_bh(a, sq->blocks[bi], 0);
        for (int32_t h = 0; h < H; h++) {
            const float *p = s + (int64_t)h * width + bi * 16;
            cpu_attn_block_scores(a, t0 + h, p, width, 1, 16);
            values(a, t0 + h, p, width, out + h * D, 1, 16);
        }
    }
    for (int32_t h = 0; h < H; h++)
        cpu_attn_store(a, r, h, out + h * D);
}

/*
 * The kernel table `table` of a set from its kernels, the walks above instantiated
 * with them: CPU_ATTN_WALK_SET for a portable set (any block size, no decode task),
 * CPU_ATTN_WALK_SET16 for a block-size-16 set with the whole-sequence decode task.
 * `fn` prefixes the generated functions' names.
 */
#define CPU_ATTN_WALK_SET(table, fn, set_name, dtype, prep, logits, values)                \
    static int32_t fn##_tile_logits(                                                       \
        const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,                 \
        const float *qv, const int32_t *qpos, int32_t nq, float *s, int32_t width)         \
    {                                                                                      \
        return cpu_attn_walk_logits(a, sq, h, qv, qpos, nq, s, width, prep, logits);       \
    }                                                                                      \
    static void fn##_tile_values(const struct cpu_attn_args *a, const struct be_seq *sq,   \
                                 int32_t h, const float *p, const int32_t *qpos,           \
                                 int32_t nq, int32_t width, int32_t width_vis, float *out) \
    {                                                                                      \
        cpu_attn_walk_values(a, sq, h, p, qpos, nq, width, width_vis, out, values);        \
    }                                                                                      \
    const struct cpu_attn_kernels table = {                                                \
        .name = set_name,                                                                  \
        .block_size = 0,                                                                   \
        .kv_dtype = dtype,                                                                 \
        .tile_logits = fn##_tile_logits,                                                   \
        .tile_values = fn##_tile_values,                                                   \
        .decode_seq = NULL,                                                                \
    }

#define CPU_ATTN_WALK_SET16(table, fn, set_name, dtype, prep, logits, multi, values)       \
    static int32_t fn##_tile_logits(                                                       \
        const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,                 \
        const float *qv, const int32_t *qpos, int32_t nq, float *s, int32_t width)         \
    {                                                                                      \
        return cpu_attn_walk_logits16(a, sq, h, qv, qpos, nq, s, width, prep, logits,      \
                                      multi);                                              \
    }                                                                                      \
    static void fn##_tile_values(const struct cpu_attn_args *a, const struct be_seq *sq,   \
                                 int32_t h, const float *p, const int32_t *qpos,           \
                                 int32_t nq, int32_t width, int32_t width_vis, float *out) \
    {                                                                                      \
        cpu_attn_walk_values16(a, sq, h, p, qpos, nq, width, width_vis, out, values);      \
    }                                                                                      \
    static void fn##_decode_seq(const struct cpu_attn_args *a, const struct be_seq *sq,    \
                                float *s)                                                  \
    {                                                                                      \
        cpu_attn_walk_decode16(a, sq, s, prep, multi, values);                             \
    }                                                                                      \
    static const struct cpu_attn_kernels table = {                                         \
        .name = set_name,                                                                  \
        .block_size = 16,                                                                  \
        .kv_dtype = dtype,                                                                 \
        .tile_logits = fn##_tile_logits,                                                   \
        .tile_values = fn##_tile_values,                                                   \
        .decode_seq = fn##_decode_seq,                                                     \
    }

#endif
