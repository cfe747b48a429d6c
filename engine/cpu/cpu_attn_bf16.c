/*
 * cpu_attn_bf16.c - the attention's kernel sets for a bf16 KV cache (cpu_attn_impl.h):
 * the portable reference (any block size) and the AVX512-BF16 set (block size 16).
 *
 * Both multiply bf16 pairs as vdpbf16ps does (cpu_attn_dp2). The K tiles pair
 * dimensions and the V tiles pair slots (cpu_attn.h), so one instruction does 32
 * multiply-adds from one 64-byte load, where widening every element to fp32 took two
 * loads, two conversions, two shifts and two FMAs per 32: decode attention was bound
 * by those instructions, not by memory (docs/benchmarks.md, "bf16 attention on
 * vdpbf16ps"). q and the probabilities are split into bf16 halves hi + lo
 * (cpu_attn_bf16_split), each multiplied into its own accumulator and the two summed
 * at the end of a block, so that, as before, only the cache is rounded to bf16.
 *
 * Per element the AVX-512 set does the same operations in the same order as the
 * portable one, so which one ran never shows in the results
 * (tests/unit/test_cpu_attn_kernels.c), and a query's arithmetic is the same in a
 * prompt tile, alone, or in a whole-sequence decode task.
 * Thread: the OpenMP threads of cpu_attn_forward.
 */
#include "cpu_attn_impl.h"

/*
 * Logits of NQ queries (split into qh + ql, [NQ, head_dim] each) against one block,
 * as cpu_attn.c's block_logits: -INFINITY where a query cannot see the slot. The K
 * tile is [head_dim / 2, BS, 2]: per dimension pair, the BS slots' two elements.
 */
static inline __attribute__((always_inline)) void
block_logits(const struct cpu_attn_args *a, int64_t t, int32_t n_valid, const uint16_t *qh,
             const uint16_t *ql, const int32_t *qpos, float *s, int32_t stride,
             const int32_t NQ, const int32_t BS)
{
    const int32_t D = a->head_dim;
    const uint16_t *kt = (const uint16_t *)a->kv.k + t * D * BS;
    float ah[ATTN_QT][ATTN_MAX_BS], al[ATTN_QT][ATTN_MAX_BS]; // [NQ, BS] per half of q
    for (int32_t q = 0; q < NQ; q++)
        for (int32_t j = 0; j < BS; j++)
            ah[q][j] = al[q][j] = 0.0f;
    for (int32_t i = 0; i < D / 2; i++) {
        float k0[ATTN_MAX_BS], k1[ATTN_MAX_BS]; // dimensions 2i and 2i + 1 of each slot
        for (int32_t j = 0; j < BS; j++) {
            k0[j] = bf16_to_f32(kt[((int64_t)i * BS + j) * 2]);
            k1[j] = bf16_to_f32(kt[((int64_t)i * BS + j) * 2 + 1]);
        }
        for (int32_t q = 0; q < NQ; q++) {
            const float h0 = bf16_to_f32(qh[q * D + 2 * i]),
                        h1 = bf16_to_f32(qh[q * D + 2 * i + 1]);
            const float l0 = bf16_to_f32(ql[q * D + 2 * i]),
                        l1 = bf16_to_f32(ql[q * D + 2 * i + 1]);
            for (int32_t j = 0; j < BS; j++) {
                ah[q][j] = cpu_attn_dp2(ah[q][j], h0, h1, k0[j], k1[j]);
                al[q][j] = cpu_attn_dp2(al[q][j], l0, l1, k0[j], k1[j]);
            }
        }
    }
    const int32_t *pos = a->kv.pos + t * BS;
    for (int32_t q = 0; q < NQ; q++)
        for (int32_t j = 0; j < BS; j++) {
            bool vis = j < n_valid && pos[j] > cpu_attn_lo(a, qpos[q]) && pos[j] <= qpos[q];
            s[q * stride + j] = vis ? ah[q][j] + al[q][j] : -INFINITY;
        }
}

/*
 * out[q] += sum_j p[q][j] v_j over one block, for NQ queries whose probabilities of
 * this block are split into ph + pl ([NQ, BS] each). The V tile is [BS / 2, head_dim,
 * 2]: per slot pair, each dimension's two elements; with an odd BS the last slot is a
 * plain row, added alone. Per chunk of 16 dimensions the hi half accumulates onto out,
 * the lo half from zero, and their sum is the new out.
 */
static inline __attribute__((always_inline)) void
block_values(const struct cpu_attn_args *a, int64_t t, const uint16_t *ph,
             const uint16_t *pl, float *out, const int32_t NQ, const int32_t BS)
{
    const int32_t D = a->head_dim; /* a multiple of 16, checked at load */
    const uint16_t *vt = (const uint16_t *)a->kv.v + t * D * BS;
    for (int32_t d0 = 0; d0 < D; d0 += 16) {
        float ah[ATTN_QT][16], al[ATTN_QT][16]; // [NQ, 16] outputs d0.., per half of p
        for (int32_t q = 0; q < NQ; q++)
            for (int32_t d = 0; d < 16; d++) {
                ah[q][d] = out[q * D + d0 + d];
                al[q][d] = 0.0f;
            }
        for (int32_t m = 0; m < BS / 2; m++) {
            const uint16_t *vp = vt + ((int64_t)m * D + d0) * 2;
            float v0[16], v1[16]; // slots 2m and 2m + 1, dimensions d0..
            for (int32_t d = 0; d < 16; d++) {
                v0[d] = bf16_to_f32(vp[2 * d]);
                v1[d] = bf16_to_f32(vp[2 * d + 1]);
            }
            for (int32_t q = 0; q < NQ; q++) {
                const float h0 = bf16_to_f32(ph[q * BS + 2 * m]);
                const float h1 = bf16_to_f32(ph[q * BS + 2 * m + 1]);
                const float l0 = bf16_to_f32(pl[q * BS + 2 * m]);
                const float l1 = bf16_to_f32(pl[q * BS + 2 * m + 1]);
                for (int32_t d = 0; d < 16; d++) {
                    ah[q][d] = cpu_attn_dp2(ah[q][d], h0, h1, v0[d], v1[d]);
                    al[q][d] = cpu_attn_dp2(al[q][d], l0, l1, v0[d], v1[d]);
                }
            }
        }
        if (BS & 1) { /* the last slot, a plain row: one product per half */
            const uint16_t *vr = vt + (int64_t)(BS - 1) * D + d0;
            for (int32_t q = 0; q < NQ; q++) {
                const float h = bf16_to_f32(ph[q * BS + BS - 1]);
                const float l = bf16_to_f32(pl[q * BS + BS - 1]);
                for (int32_t d = 0; d < 16; d++) {
                    ah[q][d] = cpu_attn_ftz(fmaf(h, bf16_to_f32(vr[d]), ah[q][d]));
                    al[q][d] = cpu_attn_ftz(fmaf(l, bf16_to_f32(vr[d]), al[q][d]));
                }
            }
        }
        for (int32_t q = 0; q < NQ; q++)
            for (int32_t d = 0; d < 16; d++)
                out[q * D + d0 + d] = ah[q][d] + al[q][d];
    }
}

/* Pass 1 (tile_logits), portable: q split once per tile, then cpu_attn.c's block
 * walk with the block kernel instantiated for the common shapes. */
static int32_t tile_logits(const struct cpu_attn_args *a, const struct be_seq *sq,
                           int32_t h, const float *qv, const int32_t *qpos, int32_t nq,
                           float *s, int32_t width)
{
    const int32_t D = a->head_dim, BS = a->block_size;
    const int32_t nb = CEIL_DIV(sq->n_slots, BS);
    uint16_t qh[ATTN_QT * ATTN_MAX_D], ql[ATTN_QT * ATTN_MAX_D];
    cpu_attn_bf16_split(qv, nq * D, qh, ql);
    int32_t qmax = qpos[0], nb_vis = 0;
    for (int32_t q = 1; q < nq; q++)
        qmax = MAX(qmax, qpos[q]);
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
            block_logits(a, t, n_valid, qh, ql, qpos, sb, width, ATTN_QT, 16);
        } else if (nq == ATTN_QT) {
            block_logits(a, t, n_valid, qh, ql, qpos, sb, width, ATTN_QT, BS);
        } else {
            for (int32_t q = 0; q < nq; q++) {
                if (BS == 16)
                    block_logits(a, t, n_valid, qh + q * D, ql + q * D, qpos + q,
                                 sb + q * width, width, 1, 16);
                else
                    block_logits(a, t, n_valid, qh + q * D, ql + q * D, qpos + q,
                                 sb + q * width, width, 1, BS);
            }
        }
    }
    return nb_vis * BS;
}

/* Each query's probabilities of block bi split into ph, pl [nq, BS]. */
static inline void split_block(const float *p, int32_t width, int32_t nq, int32_t bi,
                               int32_t BS, uint16_t *ph, uint16_t *pl)
{
    for (int32_t q = 0; q < nq; q++)
        cpu_attn_bf16_split(p + (int64_t)q * width + bi * BS, BS, ph + q * BS, pl + q * BS);
}

/* Pass 3 (tile_values), portable: outputs and H2O scores (fp32 p, unsplit). */
static void tile_values(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                        const float *p, const int32_t *qpos, int32_t nq, int32_t width,
                        int32_t width_vis, float *out)
{
    const int32_t D = a->head_dim, BS = a->block_size;
    uint16_t ph[ATTN_QT * ATTN_MAX_BS], pl[ATTN_QT * ATTN_MAX_BS];
    int32_t qmax = qpos[0];
    for (int32_t q = 1; q < nq; q++)
        qmax = MAX(qmax, qpos[q]);
    for (int32_t bi = 0; bi < width_vis / BS; bi++) {
        const int64_t t = cpu_attn_bh(a, sq->blocks[bi], h);
        if (!cpu_attn_block_visible(a, t, MIN(BS, sq->n_slots - bi * BS), qmax))
            continue; /* every probability is 0: no score, no value */
        cpu_attn_block_scores(a, t, p + bi * BS, width, nq, BS);
        split_block(p, width, nq, bi, BS, ph, pl);
        if (nq == ATTN_QT && BS == 16) {
            block_values(a, t, ph, pl, out, ATTN_QT, 16);
        } else if (nq == ATTN_QT) {
            block_values(a, t, ph, pl, out, ATTN_QT, BS);
        } else {
            for (int32_t q = 0; q < nq; q++) {
                if (BS == 16)
                    block_values(a, t, ph + q * BS, pl + q * BS, out + q * D, 1, 16);
                else
                    block_values(a, t, ph + q * BS, pl + q * BS, out + q * D, 1, BS);
            }
        }
    }
}

/* The portable bf16 set: any block size, no whole-sequence decode task. */
const struct cpu_attn_kernels cpu_attn_bf16_ref = {
    .name = "portable-bf16",
    .block_size = 0,
    .kv_dtype = DTYPE_BF16,
    .tile_logits = tile_logits,
    .tile_values = tile_values,
    .decode_seq = NULL,
};

#if defined(__AVX512F__) && defined(__AVX512BF16__)

#include <immintrin.h>

/* Elements 2i and 2i + 1 of x as one 32-bit pair, the operand vdpbf16ps broadcasts. */
static inline uint32_t pair_at(const uint16_t *x, int32_t i)
{
    uint32_t u;
    memcpy(&u, x + 2 * i, sizeof u);
    return u;
}

/* acc += the pairs of x times the broadcast pair: cpu_attn_dp2 in every lane. */
static inline __m512 dp(__m512 acc, __m512i x, uint32_t pair)
{
    return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)_mm512_set1_epi32((int32_t)pair));
}

/* Which of a block's 16 slots a query at qpos sees. */
static inline __mmask16 visible16(const struct cpu_attn_args *a, int64_t t, int32_t n_valid,
                                  int32_t qpos)
{
    const __m512i pos = _mm512_loadu_si512(a->kv.pos + t * 16);
    return (
        __mmask16)((n_valid >= 16 ? 0xffffu : (1u << n_valid) - 1u) &
                   _mm512_cmpge_epi32_mask(pos, _mm512_setzero_si512()) &
                   _mm512_cmple_epi32_mask(pos, _mm512_set1_epi32(qpos)) &
                   _mm512_cmpgt_epi32_mask(pos, _mm512_set1_epi32(cpu_attn_lo(a, qpos))));
}

/* block_logits with BS = 16: one 64-byte load of a dimension pair serves all NQ
 * queries, two vdpbf16ps (hi and lo) per query. */
static inline __attribute__((always_inline)) void
block_logits16(const struct cpu_attn_args *a, int64_t t, int32_t n_valid,
               const uint16_t *qh, const uint16_t *ql, const int32_t *qpos, float *s,
               int32_t stride, const int32_t NQ)
{
    const int32_t D = a->head_dim;
    const uint16_t *kt = (const uint16_t *)a->kv.k + t * D * 16;
    __m512 ah[ATTN_QT], al[ATTN_QT];
    for (int32_t q = 0; q < NQ; q++)
        ah[q] = al[q] = _mm512_setzero_ps();
    for (int32_t i = 0; i < D / 2; i++) {
        const __m512i k = _mm512_loadu_si512(kt + i * 32);
        for (int32_t q = 0; q < NQ; q++) {
            ah[q] = dp(ah[q], k, pair_at(qh + q * D, i));
            al[q] = dp(al[q], k, pair_at(ql + q * D, i));
        }
    }
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t q = 0; q < NQ; q++)
        _mm512_storeu_ps(s + q * stride,
                         _mm512_mask_blend_ps(visible16(a, t, n_valid, qpos[q]), ninf,
                                              _mm512_add_ps(ah[q], al[q])));
}

/*
 * One query each against NT tiles: NT consecutive heads of one block (a decode
 * token, every head at once) or NT blocks of one head (a lone decode query), 2 * NT
 * independent chains. Per tile exactly block_logits16 with NQ = 1.
 */
static inline __attribute__((always_inline)) void
block_logits16_multi(const struct cpu_attn_args *a, const int64_t *t,
                     const int32_t *n_valid, const uint16_t *const *qh,
                     const uint16_t *const *ql, int32_t qpos, float *const *s,
                     const int32_t NT)
{
    const int32_t D = a->head_dim;
    __m512 ah[4], al[4];
    for (int32_t b = 0; b < NT; b++)
        ah[b] = al[b] = _mm512_setzero_ps();
    for (int32_t i = 0; i < D / 2; i++)
        for (int32_t b = 0; b < NT; b++) {
            const __m512i k =
                _mm512_loadu_si512((const uint16_t *)a->kv.k + t[b] * D * 16 + i * 32);
            ah[b] = dp(ah[b], k, pair_at(qh[b], i));
            al[b] = dp(al[b], k, pair_at(ql[b], i));
        }
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t b = 0; b < NT; b++)
        _mm512_storeu_ps(s[b], _mm512_mask_blend_ps(visible16(a, t[b], n_valid[b], qpos),
                                                    ninf, _mm512_add_ps(ah[b], al[b])));
}

/* block_values with BS = 16: per chunk of 16 dimensions, each slot pair's 64-byte
 * load serves the NQ queries. */
static inline __attribute__((always_inline)) void
block_values16(const struct cpu_attn_args *a, int64_t t, const uint16_t *ph,
               const uint16_t *pl, float *out, const int32_t NQ)
{
    const int32_t D = a->head_dim;
    const uint16_t *vt = (const uint16_t *)a->kv.v + t * D * 16;
    for (int32_t d0 = 0; d0 < D; d0 += 16) {
        __m512 ah[ATTN_QT], al[ATTN_QT];
        for (int32_t q = 0; q < NQ; q++) {
            ah[q] = _mm512_loadu_ps(out + q * D + d0);
            al[q] = _mm512_setzero_ps();
        }
        for (int32_t m = 0; m < 8; m++) {
            const __m512i v = _mm512_loadu_si512(vt + ((int64_t)m * D + d0) * 2);
            for (int32_t q = 0; q < NQ; q++) {
                ah[q] = dp(ah[q], v, pair_at(ph + q * 16, m));
                al[q] = dp(al[q], v, pair_at(pl + q * 16, m));
            }
        }
        for (int32_t q = 0; q < NQ; q++)
            _mm512_storeu_ps(out + q * D + d0, _mm512_add_ps(ah[q], al[q]));
    }
}

/* NC chunks of 16 dimensions from chunk c0 on, of one query's values over a block,
 * every chunk in its own registers: 2 * NC independent chains. */
static inline __attribute__((always_inline)) void
values16_chunks(const uint16_t *vt, int32_t D, const uint16_t *ph, const uint16_t *pl,
                float *out, int32_t c0, const int32_t NC)
{
    __m512 ah[8], al[8];
    for (int32_t c = 0; c < NC; c++) {
        ah[c] = _mm512_loadu_ps(out + (c0 + c) * 16);
        al[c] = _mm512_setzero_ps();
    }
    for (int32_t m = 0; m < 8; m++) {
        const uint32_t hp = pair_at(ph, m), lp = pair_at(pl, m);
        for (int32_t c = 0; c < NC; c++) {
            const __m512i v = _mm512_loadu_si512(vt + ((int64_t)m * D + (c0 + c) * 16) * 2);
            ah[c] = dp(ah[c], v, hp);
            al[c] = dp(al[c], v, lp);
        }
    }
    for (int32_t c = 0; c < NC; c++)
        _mm512_storeu_ps(out + (c0 + c) * 16, _mm512_add_ps(ah[c], al[c]));
}

/* One query's values over one block (ph, pl [16]): per element block_values16 with
 * NQ = 1, up to 8 chunks (128 dimensions) at a time. */
static inline void block_values16_1(const struct cpu_attn_args *a, int64_t t,
                                    const uint16_t *ph, const uint16_t *pl, float *out)
{
    const int32_t D = a->head_dim, nc = D / 16;
    const uint16_t *vt = (const uint16_t *)a->kv.v + t * D * 16;
    for (int32_t c0 = 0; c0 < nc; c0 += 8) {
        switch (MIN(8, nc - c0)) {
        case 1: values16_chunks(vt, D, ph, pl, out, c0, 1); break;
        case 2: values16_chunks(vt, D, ph, pl, out, c0, 2); break;
        case 3: values16_chunks(vt, D, ph, pl, out, c0, 3); break;
        case 4: values16_chunks(vt, D, ph, pl, out, c0, 4); break;
        case 5: values16_chunks(vt, D, ph, pl, out, c0, 5); break;
        case 6: values16_chunks(vt, D, ph, pl, out, c0, 6); break;
        case 7: values16_chunks(vt, D, ph, pl, out, c0, 7); break;
        default: values16_chunks(vt, D, ph, pl, out, c0, 8); break;
        }
    }
}

/* Pass 1 for block size 16: full tiles (and a GQA group's 4 or 2 heads) share each K
 * load; a lone decode query runs its visible blocks four at a time, prefetching. */
static int32_t tile_logits16(const struct cpu_attn_args *a, const struct be_seq *sq,
                             int32_t h, const float *qv, const int32_t *qpos, int32_t nq,
                             float *s, int32_t width)
{
    const int32_t D = a->head_dim;
    const int32_t nb = CEIL_DIV(sq->n_slots, 16);
    uint16_t qh[ATTN_QT * ATTN_MAX_D], ql[ATTN_QT * ATTN_MAX_D];
    cpu_attn_bf16_split(qv, nq * D, qh, ql);
    const uint16_t *q4_h[4] = {qh, qh, qh, qh}, *q4_l[4] = {ql, ql, ql, ql};
    int32_t qmax = qpos[0], nb_vis = 0;
    for (int32_t q = 1; q < nq; q++)
        qmax = MAX(qmax, qpos[q]);
    int64_t q4_t[4];
    int32_t q4_valid[4], q4_n = 0;
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
                block_logits16_multi(a, q4_t, q4_valid, q4_h, q4_l, qpos[0], q4_s, 4);
                q4_n = 0;
            }
        } else if (nq == ATTN_QT) {
            block_logits16(a, t, n_valid, qh, ql, qpos, sb, width, ATTN_QT);
        } else if (nq == 4) { /* a GQA group of 4 (Llama 3) for one decode token */
            block_logits16(a, t, n_valid, qh, ql, qpos, sb, width, 4);
        } else if (nq == 2) {
            block_logits16(a, t, n_valid, qh, ql, qpos, sb, width, 2);
        } else {
            for (int32_t q = 0; q < nq; q++)
                block_logits16(a, t, n_valid, qh + q * D, ql + q * D, qpos + q,
                               sb + q * width, width, 1);
        }
    }
    for (int32_t i = 0; i < q4_n; i++) /* the same arithmetic, one block at a time */
        block_logits16_multi(a, q4_t + i, q4_valid + i, q4_h, q4_l, qpos[0], q4_s + i, 1);
    return nb_vis * 16;
}

/* Pass 3 for block size 16: full tiles and GQA groups share each V load; other tiles
 * run query by query with every chunk in registers, prefetching the V tiles. */
static void tile_values16(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                          const float *p, const int32_t *qpos, int32_t nq, int32_t width,
                          int32_t width_vis, float *out)
{
    const int32_t D = a->head_dim;
    uint16_t ph[ATTN_QT * 16], pl[ATTN_QT * 16];
    int32_t qmax = qpos[0];
    for (int32_t q = 1; q < nq; q++)
        qmax = MAX(qmax, qpos[q]);
    for (int32_t bi = 0; bi < width_vis / 16; bi++) {
        const int64_t t = cpu_attn_bh(a, sq->blocks[bi], h);
        if (!cpu_attn_block_visible(a, t, MIN(16, sq->n_slots - bi * 16), qmax))
            continue; /* every probability is 0: no score, no value */
        cpu_attn_block_scores(a, t, p + bi * 16, width, nq, 16);
        split_block(p, width, nq, bi, 16, ph, pl);
        if (nq == ATTN_QT) {
            block_values16(a, t, ph, pl, out, ATTN_QT);
        } else if (nq == 4) {
            block_values16(a, t, ph, pl, out, 4);
        } else if (nq == 2) {
            block_values16(a, t, ph, pl, out, 2);
        } else {
            if (bi + 2 < width_vis / 16)
                cpu_attn_prefetch_tile(a, a->kv.v, cpu_attn_bh(a, sq->blocks[bi + 2], h));
            for (int32_t q = 0; q < nq; q++)
                block_values16_1(a, t, ph + q * 16, pl + q * 16, out + q * D);
        }
    }
}

/*
 * A decode token of one sequence, every head in one task, walking blocks with every
 * head at once as cpu_attn_decode_walk does for the other sets (a block's heads are
 * one contiguous run of the pool). Per head the arithmetic of the two passes above.
 */
static void attend_decode_seq(const struct cpu_attn_args *a, const struct be_seq *sq,
                              float *s)
{
    const struct be_batch *b = a->batch;
    const int32_t H = a->n_head, D = a->head_dim;
    const int32_t nb = CEIL_DIV(sq->n_slots, 16), width = nb * 16;
    const int32_t r = sq->tok_start, qpos = b->pos[r];
    // qv: [head_dim] one head's scaled query; qh, ql: [n_head, head_dim]; out likewise
    float qv[ATTN_MAX_D], out[ATTN_MAX_HEADS * ATTN_MAX_D];
    uint16_t qh[ATTN_MAX_HEADS * ATTN_MAX_D], ql[ATTN_MAX_HEADS * ATTN_MAX_D];
    const float *qr = a->qkv + (int64_t)r * 3 * H * D;
    for (int32_t h = 0; h < H; h++) {
        for (int32_t d = 0; d < D; d++)
            qv[d] = qr[h * D + d] * a->scale;
        cpu_attn_bf16_split(qv, D, qh + h * D, ql + h * D);
    }

    for (int32_t bi = 0; bi < nb; bi++) {
        const int64_t t0 = cpu_attn_bh(a, sq->blocks[bi], 0);
        const int32_t n_valid = MIN(16, sq->n_slots - bi * 16);
        const int32_t nv[4] = {n_valid, n_valid, n_valid, n_valid};
        int32_t h = 0;
        for (; h + 4 <= H; h += 4) {
            const int64_t t[4] = {t0 + h, t0 + h + 1, t0 + h + 2, t0 + h + 3};
            const uint16_t *hs[4] = {qh + h * D, qh + (h + 1) * D, qh + (h + 2) * D,
                                     qh + (h + 3) * D};
            const uint16_t *ls[4] = {ql + h * D, ql + (h + 1) * D, ql + (h + 2) * D,
                                     ql + (h + 3) * D};
            float *ss[4] = {s + h * width + bi * 16, s + (h + 1) * width + bi * 16,
                            s + (h + 2) * width + bi * 16, s + (h + 3) * width + bi * 16};
            block_logits16_multi(a, t, nv, hs, ls, qpos, ss, 4);
        }
        for (; h < H; h++) {
            const int64_t t = t0 + h;
            const uint16_t *hs = qh + h * D, *ls = ql + h * D;
            float *ss = s + h * width + bi * 16;
            block_logits16_multi(a, &t, nv, &hs, &ls, qpos, &ss, 1);
        }
    }
    for (int32_t h = 0; h < H; h++)
        cpu_attn_softmax_row(s + (int64_t)h * width, width);
    memset(out, 0, (size_t)(H * D) * sizeof *out);
    uint16_t ph[16], pl[16];
    for (int32_t bi = 0; bi < nb; bi++) {
        const int64_t t0 = cpu_attn_bh(a, sq->blocks[bi], 0);
        for (int32_t h = 0; h < H; h++) {
            const float *p = s + (int64_t)h * width + bi * 16;
            cpu_attn_block_scores(a, t0 + h, p, width, 1, 16);
            cpu_attn_bf16_split(p, 16, ph, pl);
            block_values16_1(a, t0 + h, ph, pl, out + h * D);
        }
    }
    for (int32_t h = 0; h < H; h++)
        cpu_attn_store(a, r, h, out + h * D);
}

static const struct cpu_attn_kernels avx512_bf16_kernels = {
    .name = "avx512-bf16",
    .block_size = 16,
    .kv_dtype = DTYPE_BF16,
    .tile_logits = tile_logits16,
    .tile_values = tile_values16,
    .decode_seq = attend_decode_seq,
};

const struct cpu_attn_kernels *cpu_attn_bf16_avx512(void)
{
    return &avx512_bf16_kernels;
}

#else /* no AVX512-BF16 in this build */

const struct cpu_attn_kernels *cpu_attn_bf16_avx512(void)
{
    return NULL;
}

#endif

const struct cpu_attn_kernels *cpu_attn_bf16_kernels_for(int32_t block_size)
{
    const struct cpu_attn_kernels *fast = cpu_attn_bf16_avx512();
    if (fast && fast->block_size == block_size) return fast;
    return &cpu_attn_bf16_ref;
}
