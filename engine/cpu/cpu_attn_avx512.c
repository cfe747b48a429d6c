/*
 * cpu_attn_avx512.c - the attention's AVX-512 kernel set (cpu_attn_impl.h) for an fp32
 * cache of the default block size of 16, one 512-bit vector of fp32 slots (bf16 and
 * int8 caches have their own sets, cpu_attn_bf16.c and cpu_attn_int8.c).
 *
 * The compiler's vectoriser transposes the portable loops of cpu_attn.c in unhelpful
 * ways, and the two passes over the blocks are where attention spends its time, so
 * they are written here in intrinsics. Per element they do exactly what the portable
 * versions do: the same FMAs in the same order, so the outputs and scores are the
 * same bits whichever set runs (tests/unit/test_cpu_attn_kernels.c). What differs is
 * only how the work is fed to the core: four blocks at once for a decode query,
 * prefetches across the pool's scattered tiles, and a whole decode sequence (every
 * head) in one task.
 * Built on every machine; without __AVX512F__ (a build without -march=native, or a
 * CPU without AVX-512) it holds no kernels and cpu_attn_avx512 returns NULL.
 * Thread: the OpenMP threads of cpu_attn_forward.
 */
#include "cpu_attn_impl.h"

#ifdef __AVX512F__

#include <immintrin.h>

/* 16 elements of an fp32 K or V pool from element off on. */
static inline __m512 load16(const void *base, int64_t off)
{
    return _mm512_loadu_ps((const float *)base + off);
}

/* cpu_attn.c's block_logits with BS = 16: one vector of 16 slots per query,
 * one FMA per dimension. */
static inline __attribute__((always_inline)) void
block_logits16(const struct cpu_attn_args *a, int64_t t, int32_t n_valid, const float *qv,
               const int32_t *qpos, float *s, int32_t stride, const int32_t NQ)
{
    const int32_t D = a->head_dim;
    __m512 acc[ATTN_QT];
    for (int32_t q = 0; q < NQ; q++) acc[q] = _mm512_setzero_ps();
    for (int32_t d = 0; d < D; d++) {
        const __m512 k = load16(a->kv.k, (t * D + d) * 16);
        for (int32_t q = 0; q < NQ; q++)
            acc[q] = _mm512_fmadd_ps(_mm512_set1_ps(qv[q * D + d]), k, acc[q]);
    }
    const __m512i pos = _mm512_loadu_si512(a->kv.pos + t * 16);
    const __mmask16 valid = (__mmask16)((n_valid >= 16 ? 0xffffu : (1u << n_valid) - 1u) &
                                        _mm512_cmpge_epi32_mask(pos, _mm512_setzero_si512()));
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t q = 0; q < NQ; q++) {
        __mmask16 vis =
            valid & _mm512_cmple_epi32_mask(pos, _mm512_set1_epi32(qpos[q])) &
            _mm512_cmpgt_epi32_mask(pos, _mm512_set1_epi32(cpu_attn_lo(a, qpos[q])));
        _mm512_storeu_ps(s + q * stride, _mm512_mask_blend_ps(vis, ninf, acc[q]));
    }
}

/* cpu_attn.c's block_values with BS = 16: out is walked in chunks of 16, the NQ
 * partial outputs of a chunk held in registers across the block's slots. */
static inline __attribute__((always_inline)) void
block_values16(const struct cpu_attn_args *a, int64_t t, const float *p, int32_t stride,
               float *out, const int32_t NQ)
{
    const int32_t D = a->head_dim;
    for (int32_t d0 = 0; d0 < D; d0 += 16) {
        __m512 acc[ATTN_QT];
        for (int32_t q = 0; q < NQ; q++) acc[q] = _mm512_loadu_ps(out + q * D + d0);
        for (int32_t j = 0; j < 16; j++) {
            const __m512 v = load16(a->kv.v, (t * 16 + j) * D + d0);
            for (int32_t q = 0; q < NQ; q++)
                acc[q] = _mm512_fmadd_ps(_mm512_set1_ps(p[q * stride + j]), v, acc[q]);
        }
        for (int32_t q = 0; q < NQ; q++) _mm512_storeu_ps(out + q * D + d0, acc[q]);
    }
}
/*
 * A decode query (NQ = 1) against four blocks at once: four independent FMA chains
 * instead of one, and four K streams in flight. Per block the arithmetic is exactly
 * block_logits16's with NQ = 1.
 */
static inline void block_logits16_x4(const struct cpu_attn_args *a, const int64_t *t,
                                     const int32_t *n_valid, const float *qv, int32_t qpos,
                                     float *const *s)
{
    const int32_t D = a->head_dim;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    for (int32_t d = 0; d < D; d++) {
        const __m512 qd = _mm512_set1_ps(qv[d]);
        for (int32_t b = 0; b < 4; b++)
            acc[b] = _mm512_fmadd_ps(qd, load16(a->kv.k, (t[b] * D + d) * 16), acc[b]);
    }
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t b = 0; b < 4; b++) {
        const __m512i pos = _mm512_loadu_si512(a->kv.pos + t[b] * 16);
        __mmask16 vis = (__mmask16)((n_valid[b] >= 16 ? 0xffffu : (1u << n_valid[b]) - 1u) &
                                    _mm512_cmpge_epi32_mask(pos, _mm512_setzero_si512()) &
                                    _mm512_cmple_epi32_mask(pos, _mm512_set1_epi32(qpos)) &
                                    _mm512_cmpgt_epi32_mask(
                                        pos, _mm512_set1_epi32(cpu_attn_lo(a, qpos))));
        _mm512_storeu_ps(s[b], _mm512_mask_blend_ps(vis, ninf, acc[b]));
    }
}

/*
 * A decode query's values over one block with every 16-wide chunk of the head in
 * its own register: head_dim / 16 independent FMA chains. Per element the same
 * operations in the same order as block_values16 with NQ = 1.
 */
static inline void block_values16_1(const struct cpu_attn_args *a, int64_t t, const float *p,
                                    float *out)
{
    const int32_t D = a->head_dim, nc = D / 16;
    __m512 acc[ATTN_MAX_D / 16];
    for (int32_t c = 0; c < nc; c++) acc[c] = _mm512_loadu_ps(out + c * 16);
    for (int32_t j = 0; j < 16; j++) {
        const __m512 pj = _mm512_set1_ps(p[j]);
        for (int32_t c = 0; c < nc; c++)
            acc[c] =
                _mm512_fmadd_ps(pj, load16(a->kv.v, (t * 16 + j) * D + c * 16), acc[c]);
    }
    for (int32_t c = 0; c < nc; c++) _mm512_storeu_ps(out + c * 16, acc[c]);
}

/*
 * One decode query per head for NH consecutive heads of one block (their K tiles
 * are adjacent in memory): NH independent FMA chains over one contiguous stretch of
 * the pool. Per head the arithmetic is exactly block_logits16's with NQ = 1.
 */
static inline __attribute__((always_inline)) void
block_logits16_heads(const struct cpu_attn_args *a, int64_t t0, int32_t n_valid,
                     const float *qv, int32_t qpos, float *s, int32_t stride,
                     const int32_t NH)
{
    const int32_t D = a->head_dim;
    __m512 acc[4];
    for (int32_t k = 0; k < NH; k++)
        acc[k] = _mm512_setzero_ps();
    for (int32_t d = 0; d < D; d++)
        for (int32_t k = 0; k < NH; k++)
            acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(qv[k * D + d]),
                                     load16(a->kv.k, ((t0 + k) * D + d) * 16), acc[k]);
    const __mmask16 in_range = (__mmask16)(n_valid >= 16 ? 0xffffu : (1u << n_valid) - 1u);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t k = 0; k < NH; k++) {
        const __m512i pos = _mm512_loadu_si512(a->kv.pos + (t0 + k) * 16);
        __mmask16 vis =
            in_range & _mm512_cmpge_epi32_mask(pos, _mm512_setzero_si512()) &
            _mm512_cmple_epi32_mask(pos, _mm512_set1_epi32(qpos)) &
            _mm512_cmpgt_epi32_mask(pos, _mm512_set1_epi32(cpu_attn_lo(a, qpos)));
        _mm512_storeu_ps(s + k * stride, _mm512_mask_blend_ps(vis, ninf, acc[k]));
    }
}

/*
 * Pass 1 (tile_logits) for block size 16: a full tile runs block_logits16 with NQ =
 * ATTN_QT (or 4 or 2: a GQA group's heads of one decode token, sharing each K load);
 * a lone decode query queues its visible blocks and runs them four at a time
 * (block_logits16_x4), prefetching the K tiles ahead; other tiles run query by query.
 */
static int32_t tile_logits16(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                             const float *qv, const int32_t *qpos, int32_t nq, float *s,
                             int32_t width)
{
    const int32_t D = a->head_dim;
    const int32_t nb = CEIL_DIV(sq->n_slots, 16);
    int32_t qmax = qpos[0], nb_vis = 0;
    for (int32_t q = 1; q < nq; q++) qmax = MAX(qmax, qpos[q]);
    int64_t q4_t[4];
    int32_t q4_valid[4], q4_n = 0;
    float *q4_s[4];
    for (int32_t bi = 0; bi < nb; bi++) {
        const int64_t t = cpu_attn_bh(a, sq->blocks[bi], h);
        const int32_t n_valid = MIN(16, sq->n_slots - bi * 16);
        float *sb = s + bi * 16;
        if (!cpu_attn_block_visible(a, t, n_valid, qmax)) {
            for (int32_t q = 0; q < nq; q++)
                for (int32_t j = 0; j < 16; j++) sb[q * width + j] = -INFINITY;
            continue;
        }
        nb_vis = bi + 1;
        if (nq == 1) {
            if (bi + 4 < nb)
                cpu_attn_prefetch_tile(a, a->kv.k, cpu_attn_bh(a, sq->blocks[bi + 4], h));
            /* Queue visible blocks and run them four at a time. */
            q4_t[q4_n] = t;
            q4_valid[q4_n] = n_valid;
            q4_s[q4_n++] = sb;
            if (q4_n == 4) {
                block_logits16_x4(a, q4_t, q4_valid, qv, qpos[0], q4_s);
                q4_n = 0;
            }
        } else if (nq == ATTN_QT) {
            block_logits16(a, t, n_valid, qv, qpos, sb, width, ATTN_QT);
        } else if (nq == 4) { /* a GQA group of 4 (Llama 3) for one decode token */
            block_logits16(a, t, n_valid, qv, qpos, sb, width, 4);
        } else if (nq == 2) {
            block_logits16(a, t, n_valid, qv, qpos, sb, width, 2);
        } else {
            for (int32_t q = 0; q < nq; q++)
                block_logits16(a, t, n_valid, qv + q * D, qpos + q, sb + q * width, width, 1);
        }
    }
    for (int32_t i = 0; i < q4_n; i++) /* the same arithmetic, one block at a time */
        block_logits16(a, q4_t[i], q4_valid[i], qv, qpos, q4_s[i], width, 1);
    return nb_vis * 16;
}

/* Pass 3 (tile_values) for block size 16: a full tile runs block_values16 with NQ =
 * ATTN_QT, other tiles query by query with a register per chunk of the head
 * (block_values16_1), prefetching the V tiles ahead. */
static void tile_values16(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                          const float *p, const int32_t *qpos, int32_t nq, int32_t width,
                          int32_t width_vis, float *out)
{
    const int32_t D = a->head_dim;
    int32_t qmax = qpos[0];
    for (int32_t q = 1; q < nq; q++) qmax = MAX(qmax, qpos[q]);
    for (int32_t bi = 0; bi < width_vis / 16; bi++) {
        const int64_t t = cpu_attn_bh(a, sq->blocks[bi], h);
        const float *pb = p + bi * 16;
        if (!cpu_attn_block_visible(a, t, MIN(16, sq->n_slots - bi * 16), qmax))
            continue; /* every probability is 0: no score, no value */
        cpu_attn_block_scores(a, t, pb, width, nq, 16);
        if (nq == ATTN_QT) {
            block_values16(a, t, pb, width, out, ATTN_QT);
        } else if (nq == 4) {
            block_values16(a, t, pb, width, out, 4);
        } else if (nq == 2) {
            block_values16(a, t, pb, width, out, 2);
        } else {
            for (int32_t q = 0; q < nq; q++) {
                if (bi + 2 < width_vis / 16)
                    cpu_attn_prefetch_tile(a, a->kv.v,
                                           cpu_attn_bh(a, sq->blocks[bi + 2], h));
                block_values16_1(a, t, pb + q * width, out + q * D);
            }
        }
    }
}

/* A decode token of one sequence, every head in one task (cpu_attn_decode_walk). */
static void attend_decode_seq(const struct cpu_attn_args *a, const struct be_seq *sq, float *s)
{
    cpu_attn_decode_walk(a, sq, s, block_logits16_heads, block_values16_1);
}

static const struct cpu_attn_kernels avx512_kernels = {
    .name = "avx512",
    .block_size = 16,
    .kv_dtype = DTYPE_F32,
    .tile_logits = tile_logits16,
    .tile_values = tile_values16,
    .decode_seq = attend_decode_seq,
};

const struct cpu_attn_kernels *cpu_attn_avx512(void)
{
    return &avx512_kernels;
}

#else /* no AVX-512 in this build */

const struct cpu_attn_kernels *cpu_attn_avx512(void)
{
    return NULL;
}

#endif
