/*
 * cpu_attn.c - paged attention with H2O scores on the CPU (see cpu_attn.h).
 *
 * Work is split over (sequence, head) pairs: a pair's queries run in order on one
 * thread, so its score updates need no atomics and the sums are deterministic
 * whatever the thread count. Queries are processed in tiles of ATTN_QT so that each
 * K and V block loaded from memory serves several queries (prefill is then
 * compute-bound, not bandwidth-bound). Every query's arithmetic is the same whatever
 * tile it lands in (the same operations in the same order), so a sequence's result
 * does not depend on the rest of the batch or on how its prompt was chunked.
 */
#include "cpu_attn.h"

#include "fast_exp.h"
#include "util.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <string.h>

#define ATTN_QT 8        /* queries per tile */
#define ATTN_MAX_D 256   /* head_dim bound of the on-stack tiles; every OPT has <= 128 */
#define ATTN_MAX_BS 64   /* block_size bound of the on-stack tiles */
#define ATTN_MAX_HEADS 128 /* heads in one decode task's on-stack query (OPT-175B: 96) */

/* Index of (block, this call's head h) in the pool's [n_blocks, pool heads, ...]
 * arrays, in units of a (block, head) tile. A tensor-parallel rank attends only its
 * heads head0 .. head0 + n_head - 1 of a pool that holds every head. */
static inline int64_t bh(const struct cpu_attn_args *a, int32_t block, int32_t h)
{
    return (int64_t)block * (a->kv_n_head ? a->kv_n_head : a->n_head) + a->head0 + h;
}

static void write_kv(const struct cpu_attn_args *a)
{
    const struct be_batch *b = a->batch;
    const int32_t H = a->n_head, D = a->head_dim, BS = a->block_size;
    const int32_t KH = a->kv_n_head ? a->kv_n_head : H; /* head_slots has every head */
    const int64_t row_stride = 3 * (int64_t)H * D;
#pragma omp parallel for schedule(static)
    for (int32_t r = 0; r < b->n_tok; r++) {
        /* Find the row's sequence; rows are in sequence order. */
        int32_t s = 0;
        while (r >= b->seqs[s].tok_start + b->seqs[s].n_tok) s++;
        const struct be_seq *sq = &b->seqs[s];
        for (int32_t h = 0; h < H; h++) {
            int32_t slot = sq->head_slots ? sq->head_slots[a->layer * KH + a->head0 + h]
                                          : sq->slot_start + (r - sq->tok_start);
            int32_t off = slot % BS;
            int64_t t = bh(a, sq->blocks[slot / BS], h);
            const float *k = a->qkv + r * row_stride + (int64_t)H * D + (int64_t)h * D;
            const float *v = k + (int64_t)H * D;
            if (a->kv_dtype == DTYPE_F32) {
                float *kt = (float *)a->kv.k + t * D * BS + off;
                for (int32_t d = 0; d < D; d++) kt[(int64_t)d * BS] = k[d];
                memcpy((float *)a->kv.v + (t * BS + off) * D, v, (size_t)D * sizeof(float));
            } else {
                uint16_t *kt = (uint16_t *)a->kv.k + t * D * BS + off;
                uint16_t *vd = (uint16_t *)a->kv.v + (t * BS + off) * D;
                for (int32_t d = 0; d < D; d++) {
                    kt[(int64_t)d * BS] = f32_to_bf16(k[d]);
                    vd[d] = f32_to_bf16(v[d]);
                }
            }
            a->kv.pos[t * BS + off] = b->pos[r];
            a->kv.score[t * BS + off] = 0.0f;
        }
    }
}

/* dst[0..n) = elements off..off+n of a K or V pool, as fp32. */
static inline void load_f32(float *dst, const void *base, int64_t off, int32_t n,
                            enum dtype dt)
{
    if (dt == DTYPE_F32) {
        memcpy(dst, (const float *)base + off, (size_t)n * sizeof(float));
    } else {
        const uint16_t *h = (const uint16_t *)base + off;
        for (int32_t i = 0; i < n; i++) dst[i] = bf16_to_f32(h[i]);
    }
}

/*
 * Logits of NQ queries against one block: s[q * stride + j] = q_q . k_j for the
 * block's slots, -INFINITY where slot j is free, beyond n_valid, or later than the
 * query. Always inlined with constant NQ and BS, so the accumulators live in vector
 * registers; the same multiply-adds (contracted to FMA) in the same order keep every
 * query's arithmetic identical in
 * every instantiation.
 */
static inline __attribute__((always_inline)) void
block_logits(const struct cpu_attn_args *a, int64_t t, int32_t n_valid, const float *qv,
             const int32_t *qpos, float *s, int32_t stride, const int32_t NQ, const int32_t BS)
{
    const int32_t D = a->head_dim;
    float acc[ATTN_QT][ATTN_MAX_BS];
    float kt[ATTN_MAX_BS];
    for (int32_t q = 0; q < NQ; q++)
        for (int32_t j = 0; j < BS; j++) acc[q][j] = 0.0f;
    for (int32_t d = 0; d < D; d++) {
        load_f32(kt, a->kv.k, (t * D + d) * BS, BS, a->kv_dtype);
        for (int32_t q = 0; q < NQ; q++) {
            const float qd = qv[q * D + d];
            for (int32_t j = 0; j < BS; j++) acc[q][j] += qd * kt[j];
        }
    }
    const int32_t *pos = a->kv.pos + t * BS;
    for (int32_t q = 0; q < NQ; q++)
        for (int32_t j = 0; j < BS; j++) {
            bool vis = j < n_valid && pos[j] >= 0 && pos[j] <= qpos[q];
            s[q * stride + j] = vis ? acc[q][j] : -INFINITY;
        }
}

/* The scores of one block's slots += p, one query at a time in query order, so the
 * sum is the same whatever the tiling. */
static inline void block_scores(const struct cpu_attn_args *a, int64_t t, const float *p,
                                int32_t stride, int32_t nq, int32_t BS)
{
    float *score = a->kv.score + t * BS;
    for (int32_t q = 0; q < nq; q++)
        for (int32_t j = 0; j < BS; j++) score[j] += p[q * stride + j];
}

/*
 * out[q] += sum_j p[q][j] v_j over one block, for NQ queries (constant when inlined).
 * The head dimension is walked in chunks of 16 (one vector) with the NQ partial
 * outputs of a chunk held in registers across the block's slots, so out is loaded
 * and stored once per chunk instead of once per slot.
 */
static inline __attribute__((always_inline)) void
block_values(const struct cpu_attn_args *a, int64_t t, const float *p, int32_t stride,
             float *out, const int32_t NQ, const int32_t BS)
{
    const int32_t D = a->head_dim; /* a multiple of 16, checked at load */
    for (int32_t d0 = 0; d0 < D; d0 += 16) {
        float acc[ATTN_QT][16], v[16];
        for (int32_t q = 0; q < NQ; q++)
            for (int32_t d = 0; d < 16; d++) acc[q][d] = out[q * D + d0 + d];
        for (int32_t j = 0; j < BS; j++) {
            load_f32(v, a->kv.v, (t * BS + j) * D + d0, 16, a->kv_dtype);
            for (int32_t q = 0; q < NQ; q++) {
                const float pj = p[q * stride + j];
                for (int32_t d = 0; d < 16; d++) acc[q][d] += pj * v[d];
            }
        }
        for (int32_t q = 0; q < NQ; q++)
            for (int32_t d = 0; d < 16; d++) out[q * D + d0 + d] = acc[q][d];
    }
}

/*
 * Whether any query of a tile can see a slot of this block: some slot holds a
 * position in [0, qmax]. Blocks entirely in the future of a prefill tile are
 * skipped (about half the causal square); the skip changes no arithmetic, since
 * their logits are -inf and their probabilities 0 either way.
 */
static inline bool block_visible(const struct cpu_attn_args *a, int64_t t, int32_t n_valid,
                                 int32_t qmax)
{
    const int32_t *pos = a->kv.pos + t * a->block_size;
    for (int32_t j = 0; j < n_valid; j++)
        if (pos[j] >= 0 && pos[j] <= qmax) return true;
    return false;
}

#ifdef __AVX512F__
/*
 * The same two kernels for the default block size of 16 (one 512-bit vector of
 * fp32 slots) in AVX-512 intrinsics: the compiler's vectoriser transposes these
 * loops in unhelpful ways, and these two loops are where attention spends its time.
 * Per element they do exactly what the portable versions above do: the same FMAs in
 * the same order.
 */
static inline __m512 load16(const void *base, int64_t off, enum dtype dt)
{
    if (dt == DTYPE_F32) return _mm512_loadu_ps((const float *)base + off);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)base + off));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Ask for one (block, head) tile of a K or V pool ahead of use: a decode step
 * streams the whole KV cache once, in 2-4 KiB tiles scattered over the pool, and the
 * hardware prefetchers do not cross from one tile to the next. */
static inline void prefetch_tile(const struct cpu_attn_args *a, const void *pool, int64_t t)
{
    const int64_t bytes = (int64_t)16 * a->head_dim * dtype_size(a->kv_dtype);
    const char *p = (const char *)pool + t * bytes;
    for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

static inline __attribute__((always_inline)) void
block_logits16(const struct cpu_attn_args *a, int64_t t, int32_t n_valid, const float *qv,
               const int32_t *qpos, float *s, int32_t stride, const int32_t NQ)
{
    const int32_t D = a->head_dim;
    __m512 acc[ATTN_QT];
    for (int32_t q = 0; q < NQ; q++) acc[q] = _mm512_setzero_ps();
    for (int32_t d = 0; d < D; d++) {
        const __m512 k = load16(a->kv.k, (t * D + d) * 16, a->kv_dtype);
        for (int32_t q = 0; q < NQ; q++)
            acc[q] = _mm512_fmadd_ps(_mm512_set1_ps(qv[q * D + d]), k, acc[q]);
    }
    const __m512i pos = _mm512_loadu_si512(a->kv.pos + t * 16);
    const __mmask16 valid = (__mmask16)((n_valid >= 16 ? 0xffffu : (1u << n_valid) - 1u) &
                                        _mm512_cmpge_epi32_mask(pos, _mm512_setzero_si512()));
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t q = 0; q < NQ; q++) {
        __mmask16 vis = valid & _mm512_cmple_epi32_mask(pos, _mm512_set1_epi32(qpos[q]));
        _mm512_storeu_ps(s + q * stride, _mm512_mask_blend_ps(vis, ninf, acc[q]));
    }
}

static inline __attribute__((always_inline)) void
block_values16(const struct cpu_attn_args *a, int64_t t, const float *p, int32_t stride,
               float *out, const int32_t NQ)
{
    const int32_t D = a->head_dim;
    for (int32_t d0 = 0; d0 < D; d0 += 16) {
        __m512 acc[ATTN_QT];
        for (int32_t q = 0; q < NQ; q++) acc[q] = _mm512_loadu_ps(out + q * D + d0);
        for (int32_t j = 0; j < 16; j++) {
            const __m512 v = load16(a->kv.v, (t * 16 + j) * D + d0, a->kv_dtype);
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
            acc[b] = _mm512_fmadd_ps(qd, load16(a->kv.k, (t[b] * D + d) * 16, a->kv_dtype),
                                     acc[b]);
    }
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t b = 0; b < 4; b++) {
        const __m512i pos = _mm512_loadu_si512(a->kv.pos + t[b] * 16);
        __mmask16 vis = (__mmask16)((n_valid[b] >= 16 ? 0xffffu : (1u << n_valid[b]) - 1u) &
                                    _mm512_cmpge_epi32_mask(pos, _mm512_setzero_si512()) &
                                    _mm512_cmple_epi32_mask(pos, _mm512_set1_epi32(qpos)));
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
            acc[c] = _mm512_fmadd_ps(pj, load16(a->kv.v, (t * 16 + j) * D + c * 16, a->kv_dtype),
                                     acc[c]);
    }
    for (int32_t c = 0; c < nc; c++) _mm512_storeu_ps(out + c * 16, acc[c]);
}

/*
 * One decode query per head for NH consecutive heads of one block (their K tiles
 * are adjacent in memory): NH independent FMA chains over one contiguous stretch of
 * the pool. Per head the arithmetic is exactly block_logits16's with NQ = 1.
 */
static inline __attribute__((always_inline)) void
block_logits16_heads(const struct cpu_attn_args *a, int64_t t0, int32_t n_valid, const float *qv,
                     int32_t qpos, float *s, int32_t stride, const int32_t NH)
{
    const int32_t D = a->head_dim;
    __m512 acc[4];
    for (int32_t k = 0; k < NH; k++) acc[k] = _mm512_setzero_ps();
    for (int32_t d = 0; d < D; d++)
        for (int32_t k = 0; k < NH; k++)
            acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(qv[k * D + d]),
                                     load16(a->kv.k, ((t0 + k) * D + d) * 16, a->kv_dtype), acc[k]);
    const __mmask16 in_range = (__mmask16)(n_valid >= 16 ? 0xffffu : (1u << n_valid) - 1u);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t k = 0; k < NH; k++) {
        const __m512i pos = _mm512_loadu_si512(a->kv.pos + (t0 + k) * 16);
        __mmask16 vis = in_range & _mm512_cmpge_epi32_mask(pos, _mm512_setzero_si512()) &
                        _mm512_cmple_epi32_mask(pos, _mm512_set1_epi32(qpos));
        _mm512_storeu_ps(s + k * stride, _mm512_mask_blend_ps(vis, ninf, acc[k]));
    }
}

#define block_logits_bs16(a, t, n_valid, qv, qpos, s, stride, NQ)                           \
    block_logits16(a, t, n_valid, qv, qpos, s, stride, NQ)
#define block_values_bs16(a, t, p, stride, out, NQ) block_values16(a, t, p, stride, out, NQ)
#else
#define block_logits_bs16(a, t, n_valid, qv, qpos, s, stride, NQ)                           \
    block_logits(a, t, n_valid, qv, qpos, s, stride, NQ, 16)
#define block_values_bs16(a, t, p, stride, out, NQ) block_values(a, t, p, stride, out, NQ, 16)
#endif

/*
 * Pass 1 over every block for a tile of nq queries; s is [nq, width]. Returns the
 * width up to the last block any query of the tile can see (slots past it are
 * never read again for this tile).
 */
static int32_t tile_logits(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                           const float *qv, const int32_t *qpos, int32_t nq, float *s,
                           int32_t width)
{
    const int32_t D = a->head_dim, BS = a->block_size;
    const int32_t nb = CEIL_DIV(sq->n_slots, BS);
    int32_t qmax = qpos[0], nb_vis = 0;
    for (int32_t q = 1; q < nq; q++) qmax = MAX(qmax, qpos[q]);
#ifdef __AVX512F__
    int64_t q4_t[4];
    int32_t q4_valid[4], q4_n = 0;
    float *q4_s[4];
#endif
    for (int32_t bi = 0; bi < nb; bi++) {
        const int64_t t = bh(a, sq->blocks[bi], h);
        const int32_t n_valid = MIN(BS, sq->n_slots - bi * BS);
        float *sb = s + bi * BS;
        if (!block_visible(a, t, n_valid, qmax)) {
            for (int32_t q = 0; q < nq; q++)
                for (int32_t j = 0; j < BS; j++) sb[q * width + j] = -INFINITY;
            continue;
        }
        nb_vis = bi + 1;
#ifdef __AVX512F__
        if (nq == 1 && BS == 16) {
            if (bi + 4 < nb) prefetch_tile(a, a->kv.k, bh(a, sq->blocks[bi + 4], h));
            /* Queue visible blocks and run them four at a time. */
            q4_t[q4_n] = t;
            q4_valid[q4_n] = n_valid;
            q4_s[q4_n++] = sb;
            if (q4_n == 4) {
                block_logits16_x4(a, q4_t, q4_valid, qv, qpos[0], q4_s);
                q4_n = 0;
            }
            continue;
        }
#endif
        if (nq == ATTN_QT && BS == 16) {
            block_logits_bs16(a, t, n_valid, qv, qpos, sb, width, ATTN_QT);
        } else if (nq == ATTN_QT) {
            block_logits(a, t, n_valid, qv, qpos, sb, width, ATTN_QT, BS);
        } else {
            for (int32_t q = 0; q < nq; q++) {
                if (BS == 16)
                    block_logits_bs16(a, t, n_valid, qv + q * D, qpos + q, sb + q * width, width,
                                      1);
                else
                    block_logits(a, t, n_valid, qv + q * D, qpos + q, sb + q * width, width, 1,
                                 BS);
            }
        }
    }
#ifdef __AVX512F__
    for (int32_t i = 0; i < q4_n; i++) /* the same arithmetic, one block at a time */
        block_logits16(a, q4_t[i], q4_valid[i], qv, qpos, q4_s[i], width, 1);
#endif
    return nb_vis * BS;
}

/* Pass 3 over the blocks of the visible width for a tile of nq queries: outputs and
 * H2O scores. */
static void tile_values(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                        const float *p, const int32_t *qpos, int32_t nq, int32_t width,
                        int32_t width_vis, float *out)
{
    const int32_t D = a->head_dim, BS = a->block_size;
    int32_t qmax = qpos[0];
    for (int32_t q = 1; q < nq; q++) qmax = MAX(qmax, qpos[q]);
    for (int32_t bi = 0; bi < width_vis / BS; bi++) {
        const int64_t t = bh(a, sq->blocks[bi], h);
        const float *pb = p + bi * BS;
        if (!block_visible(a, t, MIN(BS, sq->n_slots - bi * BS), qmax))
            continue; /* every probability is 0: no score, no value */
        block_scores(a, t, pb, width, nq, BS);
        if (nq == ATTN_QT && BS == 16) {
            block_values_bs16(a, t, pb, width, out, ATTN_QT);
        } else if (nq == ATTN_QT) {
            block_values(a, t, pb, width, out, ATTN_QT, BS);
        } else {
            for (int32_t q = 0; q < nq; q++) {
#ifdef __AVX512F__
                if (BS == 16 && bi + 2 < width_vis / BS)
                    prefetch_tile(a, a->kv.v, bh(a, sq->blocks[bi + 2], h));
                if (BS == 16) block_values16_1(a, t, pb + q * width, out + q * D);
#else
                if (BS == 16) block_values_bs16(a, t, pb + q * width, width, out + q * D, 1);
#endif
                else block_values(a, t, pb + q * width, width, out + q * D, 1, BS);
            }
        }
    }
}

/*
 * row[0..n) = softmax(row), in place, fp32. The maximum and the sum are kept in 16
 * lanes (lane = index mod 16) and reduced in lane order at the end: that
 * vectorises, and since slots a query cannot see contribute exactly 0, a query's
 * result does not depend on how many such slots the row has.
 */
static void softmax_row(float *row, int32_t n)
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

/* All queries of one sequence for one head; s is [ATTN_QT, n_blocks * BS] scratch. */
static void attend_seq_head(const struct cpu_attn_args *a, const struct be_seq *sq,
                            int32_t h, float *s)
{
    const struct be_batch *b = a->batch;
    const int32_t H = a->n_head, D = a->head_dim, BS = a->block_size;
    const int64_t row_stride = 3 * (int64_t)H * D;
    const int32_t width = CEIL_DIV(sq->n_slots, BS) * BS;
    float qv[ATTN_QT * ATTN_MAX_D], out[ATTN_QT * ATTN_MAX_D];
    int32_t qpos[ATTN_QT];

    for (int32_t i0 = 0; i0 < sq->n_tok; i0 += ATTN_QT) {
        const int32_t nq = MIN(ATTN_QT, sq->n_tok - i0);
        for (int32_t q = 0; q < nq; q++) {
            const int32_t r = sq->tok_start + i0 + q;
            const float *qr = a->qkv + r * row_stride + (int64_t)h * D;
            for (int32_t d = 0; d < D; d++) qv[q * D + d] = qr[d] * a->scale;
            qpos[q] = b->pos[r];
        }

        /* Pass 1: logits of every slot for every query of the tile. */
        const int32_t width_vis = tile_logits(a, sq, h, qv, qpos, nq, s, width);
        /* Pass 2: fp32 softmax per query over the visible width. */
        for (int32_t q = 0; q < nq; q++) softmax_row(s + (int64_t)q * width, width_vis);
        /* Pass 3: outputs and H2O scores. */
        memset(out, 0, (size_t)(nq * D) * sizeof(float));
        tile_values(a, sq, h, s, qpos, nq, width, width_vis, out);
        for (int32_t q = 0; q < nq; q++) {
            const int64_t oi = (int64_t)(sq->tok_start + i0 + q) * H * D + (int64_t)h * D;
            if (a->out_dtype == DTYPE_F32) {
                memcpy((float *)a->out + oi, out + q * D, (size_t)D * sizeof(float));
            } else {
                uint16_t *o = (uint16_t *)a->out + oi;
                for (int32_t d = 0; d < D; d++) o[d] = f32_to_bf16(out[q * D + d]);
            }
        }
    }
}

#ifdef __AVX512F__
/*
 * A decode token (one query) of one sequence, all heads in one task. The pool keeps
 * a block's heads next to each other, so walking blocks with every head at once
 * reads the sequence's cache as a few long contiguous runs instead of n_head
 * scattered 2-4 KiB tiles per block: a decode step streams the whole cache, and
 * this is what lets the hardware prefetchers keep up. Per head, the same arithmetic
 * as attend_seq_head (the same kernels, in the same order), so results do not
 * depend on which path ran. s is [n_head, width] scratch.
 */
static void attend_decode_seq(const struct cpu_attn_args *a, const struct be_seq *sq, float *s)
{
    const struct be_batch *b = a->batch;
    const int32_t H = a->n_head, D = a->head_dim;
    const int32_t nb = CEIL_DIV(sq->n_slots, 16), width = nb * 16;
    const int32_t r = sq->tok_start, qpos = b->pos[r];
    float qv[ATTN_MAX_HEADS * ATTN_MAX_D], out[ATTN_MAX_D];
    const float *qr = a->qkv + (int64_t)r * 3 * H * D;
    for (int32_t i = 0; i < H * D; i++) qv[i] = qr[i] * a->scale;

    for (int32_t bi = 0; bi < nb; bi++) {
        const int64_t t0 = bh(a, sq->blocks[bi], 0);
        const int32_t n_valid = MIN(16, sq->n_slots - bi * 16);
        int32_t h = 0;
        for (; h + 4 <= H; h += 4)
            block_logits16_heads(a, t0 + h, n_valid, qv + h * D, qpos, s + h * width + bi * 16,
                                 width, 4);
        for (; h < H; h++)
            block_logits16_heads(a, t0 + h, n_valid, qv + h * D, qpos, s + h * width + bi * 16,
                                 width, 1);
    }
    for (int32_t h = 0; h < H; h++) softmax_row(s + (int64_t)h * width, width);
    for (int32_t h = 0; h < H; h++) {
        const float *p = s + (int64_t)h * width;
        memset(out, 0, (size_t)D * sizeof *out);
        for (int32_t bi = 0; bi < nb; bi++) {
            const int64_t t = bh(a, sq->blocks[bi], h);
            block_scores(a, t, p + bi * 16, width, 1, 16);
            block_values16_1(a, t, p + bi * 16, out);
        }
        const int64_t oi = (int64_t)r * H * D + (int64_t)h * D;
        if (a->out_dtype == DTYPE_F32) {
            memcpy((float *)a->out + oi, out, (size_t)D * sizeof(float));
        } else {
            uint16_t *o = (uint16_t *)a->out + oi;
            for (int32_t d = 0; d < D; d++) o[d] = f32_to_bf16(out[d]);
        }
    }
}
#endif

void cpu_attn_forward(const struct cpu_attn_args *a)
{
    const struct be_batch *b = a->batch;
    CHECK(cpu_attn_supports(a->head_dim, a->block_size));
    write_kv(a);
    /* Tasks: a decode sequence as a whole (all heads, see attend_decode_seq) when
     * there are enough of them to keep every thread busy, else one task per
     * (sequence, head). head == -1 marks a whole-sequence task. */
    const int32_t H = a->n_head;
    int32_t n_decode = 0;
#ifdef __AVX512F__
    if (a->block_size == 16 && H <= ATTN_MAX_HEADS)
        for (int32_t i = 0; i < b->n_seq; i++) n_decode += b->seqs[i].n_tok == 1;
    if (n_decode < 2 * omp_get_max_threads()) n_decode = 0;
#endif
    struct { int32_t seq, head; } *task = xmalloc((size_t)MAX(b->n_seq * H, 1) * sizeof *task);
    int32_t n_task = 0;
    for (int32_t i = 0; i < b->n_seq; i++) {
        if (n_decode && b->seqs[i].n_tok == 1) {
            task[n_task].seq = i;
            task[n_task++].head = -1;
            continue;
        }
        for (int32_t h = 0; h < H; h++) {
            task[n_task].seq = i;
            task[n_task++].head = h;
        }
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int32_t t = 0; t < n_task; t++) {
        const struct be_seq *sq = &b->seqs[task[t].seq];
        CHECK(cpu_attn_scratch_floats(sq->n_slots, a->block_size, H) <= a->scratch_stride);
        float *s = a->scratch + (int64_t)omp_get_thread_num() * a->scratch_stride;
#ifdef __AVX512F__
        if (task[t].head < 0) {
            attend_decode_seq(a, sq, s);
            continue;
        }
#endif
        attend_seq_head(a, sq, task[t].head, s);
    }
    free(task);
}

int32_t cpu_attn_scratch_floats(int32_t n_slots, int32_t block_size, int32_t n_head)
{
    /* A query tile of one head, or one decode query of every head. */
    return MAX(ATTN_QT, n_head) * CEIL_DIV(n_slots, block_size) * block_size;
}

bool cpu_attn_supports(int32_t head_dim, int32_t block_size)
{
    return head_dim > 0 && head_dim <= ATTN_MAX_D && head_dim % 16 == 0 && block_size > 0 &&
           block_size <= ATTN_MAX_BS;
}

void cpu_kv_compact_head(const struct cpu_kv_layer *kv, size_t elem_size, int32_t n_head,
                         int32_t head_dim, int32_t block_size, int32_t h, const int32_t *blocks,
                         int32_t n_slots, const int32_t *keep, int32_t n_keep)
{
    const int32_t H = n_head, D = head_dim, BS = block_size;
    const size_t es = elem_size;
    const int32_t *k = keep;
    for (int32_t i = 0; i < n_slots; i++) {
        /* (block, head) tile and offset of the destination slot i. */
        const int64_t td = (int64_t)blocks[i / BS] * H + h, od = i % BS;
        if (i >= n_keep) {
            kv->pos[td * BS + od] = -1;
            kv->score[td * BS + od] = 0.0f;
            continue;
        }
        const int32_t src = k[i];
        CHECK(src >= i && src < n_slots && (i == 0 || src > k[i - 1]));
        if (src == i) continue;
        const int64_t ts = (int64_t)blocks[src / BS] * H + h, os = src % BS;
        /* K tiles are transposed ([head_dim, block_size]): one element per
         * dimension; V rows are contiguous. */
        char *kb = kv->k;
        for (int32_t d = 0; d < D; d++)
            memcpy(kb + ((td * D + d) * BS + od) * es, kb + ((ts * D + d) * BS + os) * es, es);
        memcpy((char *)kv->v + (td * BS + od) * D * es, (char *)kv->v + (ts * BS + os) * D * es,
               (size_t)D * es);
        kv->pos[td * BS + od] = kv->pos[ts * BS + os];
        kv->score[td * BS + od] = kv->score[ts * BS + os];
    }
}
