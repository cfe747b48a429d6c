/*
 * cpu_attn_int8.c - the attention's kernel sets for the int8 KV cache
 * (--kv-cache-dtype int8): the quantizer of the K/V write, a portable set (any block
 * size, the reference) and an AVX-512 set for block size 16.
 *
 * Format: symmetric int8, one fp32 scale per (token, KV head) for its key and one
 * for its value: scale = max|x| / 127 over the head's head_dim elements, element =
 * round(x / scale), so x = scale * element within scale / 2. The scales sit beside
 * pos and score ([n_blocks, n_head, block_size], struct cpu_kv_layer), so compaction
 * and block copies move them with their slots; the int8 tiles keep the fp32/bf16
 * layout (K transposed per block, V as rows), a quarter / half their bytes.
 * Attention never dequantizes a tile: a logit is k_scale[j] * (q . kq[:, j]) (the
 * scale is constant over the dot product), and a value row enters as
 * (p[j] * v_scale[j]) * vq[j, :]. The H2O scores add the unscaled p, so the policy
 * sees the same probabilities it would with fp32 K/V of the dequantized values.
 *
 * Both sets do, per element, the same operations in the same order (int8 widened to
 * fp32 exactly, the same FMAs, the scale applied by the same multiply), so their
 * outputs and scores are the same bits (tests/unit/test_cpu_attn_kernels.c). Decode
 * attention is memory bound: the widening costs uops, not bytes, and int8 reads a
 * quarter of fp32's bytes. q stays fp32 (no VNNI with a quantized q): a second
 * rounding of q would cost accuracy that the fp32 reference on the dequantized cache
 * would then not match.
 * Thread: the OpenMP threads of cpu_attn_forward; the quantizer is pure.
 */
#include "cpu_attn_impl.h"

#include <math.h>
#include <stdint.h>

float cpu_attn_int8_quantize(int8_t *dst, int64_t stride, const float *x, int32_t n)
{
    float amax = 0.0f;
    for (int32_t i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    if (amax == 0.0f) { /* an all-zero row: any scale reads back zeros */
        for (int32_t i = 0; i < n; i++)
            dst[i * stride] = 0;
        return 0.0f;
    }
    const float inv = 127.0f / amax;
    for (int32_t i = 0; i < n; i++) {
        /* x * inv is at most 127 plus a rounding error: clamp so it never wraps. */
        long e = lrintf(x[i] * inv);
        dst[i * stride] = (int8_t)(e > 127 ? 127 : e < -127 ? -127 : e);
    }
    return amax / 127.0f;
}

/*
 * Logits of NQ queries against one int8 block: s[q * stride + j] = k_scale[j] *
 * (q_q . kq_j), -INFINITY where slot j is free, beyond n_valid, or not visible to the
 * query. Inlined with constant NQ and BS, as cpu_attn.c's block_logits.
 */
static inline __attribute__((always_inline)) void
block_logits_i8(const struct cpu_attn_args *a, int64_t t, int32_t n_valid, const float *qv,
                const int32_t *qpos, float *s, int32_t stride, const int32_t NQ,
                const int32_t BS)
{
    // qv: [NQ, head_dim] scaled queries; K tile t: [head_dim, BS] int8; s: [NQ, stride]
    const int32_t D = a->head_dim;
    const int8_t *kq = (const int8_t *)a->kv.k + t * D * BS;
    float acc[ATTN_QT][ATTN_MAX_BS]; // acc: [NQ, BS] unscaled logits
    float kt[ATTN_MAX_BS];           // kt: [BS] dimension d of the block's keys
    for (int32_t q = 0; q < NQ; q++)
        for (int32_t j = 0; j < BS; j++)
            acc[q][j] = 0.0f;
    for (int32_t d = 0; d < D; d++) {
        for (int32_t j = 0; j < BS; j++)
            kt[j] = (float)kq[(int64_t)d * BS + j];
        for (int32_t q = 0; q < NQ; q++) {
            const float qd = qv[q * D + d];
            for (int32_t j = 0; j < BS; j++)
                acc[q][j] += qd * kt[j];
        }
    }
    const int32_t *pos = a->kv.pos + t * BS;
    const float *ks = a->kv.k_scale + t * BS;
    for (int32_t q = 0; q < NQ; q++)
        for (int32_t j = 0; j < BS; j++) {
            bool vis = j < n_valid && pos[j] >= 0 && pos[j] > cpu_attn_lo(a, qpos[q]) &&
                       pos[j] <= qpos[q];
            s[q * stride + j] = vis ? ks[j] * acc[q][j] : -INFINITY;
        }
}

/* out[q] += sum_j (p[q][j] * v_scale[j]) vq_j over one int8 block, for NQ queries,
 * in chunks of 16 of the head as cpu_attn.c's block_values. */
static inline __attribute__((always_inline)) void
block_values_i8(const struct cpu_attn_args *a, int64_t t, const float *p, int32_t stride,
                float *out, const int32_t NQ, const int32_t BS)
{
    // p: [NQ, stride] probabilities; V tile t: [BS, head_dim] int8; out: [NQ, head_dim]
    const int32_t D = a->head_dim;
    const int8_t *vq = (const int8_t *)a->kv.v + t * BS * D;
    const float *vs = a->kv.v_scale + t * BS;
    for (int32_t d0 = 0; d0 < D; d0 += 16) {
        float acc[ATTN_QT][16], v[16]; // acc: [NQ, 16] outputs d0.., v: [16] of slot j
        for (int32_t q = 0; q < NQ; q++)
            for (int32_t d = 0; d < 16; d++)
                acc[q][d] = out[q * D + d0 + d];
        for (int32_t j = 0; j < BS; j++) {
            for (int32_t d = 0; d < 16; d++)
                v[d] = (float)vq[(int64_t)j * D + d0 + d];
            for (int32_t q = 0; q < NQ; q++) {
                const float pj = p[q * stride + j] * vs[j];
                for (int32_t d = 0; d < 16; d++)
                    acc[q][d] += pj * v[d];
            }
        }
        for (int32_t q = 0; q < NQ; q++)
            for (int32_t d = 0; d < 16; d++)
                out[q * D + d0 + d] = acc[q][d];
    }
}

/* Pass 1 (tile_logits) of the portable int8 set, any block size. */
static int32_t tile_logits_i8(const struct cpu_attn_args *a, const struct be_seq *sq,
                              int32_t h, const float *qv, const int32_t *qpos, int32_t nq,
                              float *s, int32_t width)
{
    const int32_t D = a->head_dim, BS = a->block_size;
    const int32_t nb = CEIL_DIV(sq->n_slots, BS);
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
            block_logits_i8(a, t, n_valid, qv, qpos, sb, width, ATTN_QT, 16);
        } else if (nq == ATTN_QT) {
            block_logits_i8(a, t, n_valid, qv, qpos, sb, width, ATTN_QT, BS);
        } else {
            for (int32_t q = 0; q < nq; q++) {
                if (BS == 16)
                    block_logits_i8(a, t, n_valid, qv + q * D, qpos + q, sb + q * width,
                                    width, 1, 16);
                else
                    block_logits_i8(a, t, n_valid, qv + q * D, qpos + q, sb + q * width,
                                    width, 1, BS);
            }
        }
    }
    return nb_vis * BS;
}

/* Pass 3 (tile_values) of the portable int8 set: outputs and H2O scores. */
static void tile_values_i8(const struct cpu_attn_args *a, const struct be_seq *sq,
                           int32_t h, const float *p, const int32_t *qpos, int32_t nq,
                           int32_t width, int32_t width_vis, float *out)
{
    const int32_t D = a->head_dim, BS = a->block_size;
    int32_t qmax = qpos[0];
    for (int32_t q = 1; q < nq; q++)
        qmax = MAX(qmax, qpos[q]);
    for (int32_t bi = 0; bi < width_vis / BS; bi++) {
        const int64_t t = cpu_attn_bh(a, sq->blocks[bi], h);
        const float *pb = p + bi * BS;
        if (!cpu_attn_block_visible(a, t, MIN(BS, sq->n_slots - bi * BS), qmax))
            continue; /* every probability is 0: no score, no value */
        cpu_attn_block_scores(a, t, pb, width, nq, BS);
        if (nq == ATTN_QT && BS == 16) {
            block_values_i8(a, t, pb, width, out, ATTN_QT, 16);
        } else if (nq == ATTN_QT) {
            block_values_i8(a, t, pb, width, out, ATTN_QT, BS);
        } else {
            for (int32_t q = 0; q < nq; q++) {
                if (BS == 16)
                    block_values_i8(a, t, pb + q * width, width, out + q * D, 1, 16);
                else
                    block_values_i8(a, t, pb + q * width, width, out + q * D, 1, BS);
            }
        }
    }
}

const struct cpu_attn_kernels cpu_attn_int8_ref = {
    .name = "portable-int8",
    .block_size = 0,
    .kv_dtype = DTYPE_I8,
    .tile_logits = tile_logits_i8,
    .tile_values = tile_values_i8,
    .decode_seq = NULL,
};

#ifdef __AVX512F__

#include <immintrin.h>

/* 16 int8 elements from p on, widened to fp32 (exact). */
static inline __m512 load16_i8(const int8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* Which of a block's 16 slots a query at qpos sees (a free slot's -1 never, even when
 * a window puts the lower bound below it). */
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

/* block_logits_i8 with BS = 16: one vector of 16 slots per query. */
static inline __attribute__((always_inline)) void
block_logits16_i8(const struct cpu_attn_args *a, int64_t t, int32_t n_valid,
                  const float *qv, const int32_t *qpos, float *s, int32_t stride,
                  const int32_t NQ)
{
    const int32_t D = a->head_dim;
    const int8_t *kq = (const int8_t *)a->kv.k + t * D * 16;
    __m512 acc[ATTN_QT];
    for (int32_t q = 0; q < NQ; q++)
        acc[q] = _mm512_setzero_ps();
    for (int32_t d = 0; d < D; d++) {
        const __m512 k = load16_i8(kq + (int64_t)d * 16);
        for (int32_t q = 0; q < NQ; q++)
            acc[q] = _mm512_fmadd_ps(_mm512_set1_ps(qv[q * D + d]), k, acc[q]);
    }
    const __m512 ks = _mm512_loadu_ps(a->kv.k_scale + t * 16),
                 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t q = 0; q < NQ; q++)
        _mm512_storeu_ps(s + q * stride,
                         _mm512_mask_blend_ps(visible16(a, t, n_valid, qpos[q]), ninf,
                                              _mm512_mul_ps(ks, acc[q])));
}

/* A decode query against four blocks at once: four independent FMA chains and four
 * K streams in flight; per block exactly block_logits16_i8's arithmetic (NQ = 1). */
static inline void block_logits16_i8_x4(const struct cpu_attn_args *a, const int64_t *t,
                                        const int32_t *n_valid, const float *qv,
                                        int32_t qpos, float *const *s)
{
    const int32_t D = a->head_dim;
    const int8_t *kq[4];
    __m512 acc[4];
    for (int32_t b = 0; b < 4; b++) {
        kq[b] = (const int8_t *)a->kv.k + t[b] * D * 16;
        acc[b] = _mm512_setzero_ps();
    }
    for (int32_t d = 0; d < D; d++) {
        const __m512 qd = _mm512_set1_ps(qv[d]);
        for (int32_t b = 0; b < 4; b++)
            acc[b] = _mm512_fmadd_ps(qd, load16_i8(kq[b] + (int64_t)d * 16), acc[b]);
    }
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t b = 0; b < 4; b++) {
        const __m512 ks = _mm512_loadu_ps(a->kv.k_scale + t[b] * 16);
        _mm512_storeu_ps(s[b], _mm512_mask_blend_ps(visible16(a, t[b], n_valid[b], qpos),
                                                    ninf, _mm512_mul_ps(ks, acc[b])));
    }
}

/* block_values_i8 with BS = 16 for NQ queries, a chunk of 16 of the head at a time. */
static inline __attribute__((always_inline)) void
block_values16_i8(const struct cpu_attn_args *a, int64_t t, const float *p, int32_t stride,
                  float *out, const int32_t NQ)
{
    const int32_t D = a->head_dim;
    const int8_t *vq = (const int8_t *)a->kv.v + t * 16 * D;
    const float *vs = a->kv.v_scale + t * 16;
    for (int32_t d0 = 0; d0 < D; d0 += 16) {
        __m512 acc[ATTN_QT];
        for (int32_t q = 0; q < NQ; q++)
            acc[q] = _mm512_loadu_ps(out + q * D + d0);
        for (int32_t j = 0; j < 16; j++) {
            const __m512 v = load16_i8(vq + (int64_t)j * D + d0);
            for (int32_t q = 0; q < NQ; q++)
                acc[q] =
                    _mm512_fmadd_ps(_mm512_set1_ps(p[q * stride + j] * vs[j]), v, acc[q]);
        }
        for (int32_t q = 0; q < NQ; q++)
            _mm512_storeu_ps(out + q * D + d0, acc[q]);
    }
}

/* One query's values over one block, every chunk of the head in its own register
 * (head_dim / 16 independent FMA chains); per element block_values16_i8's order. */
static inline void block_values16_i8_1(const struct cpu_attn_args *a, int64_t t,
                                       const float *p, float *out)
{
    const int32_t D = a->head_dim, nc = D / 16;
    const int8_t *vq = (const int8_t *)a->kv.v + t * 16 * D;
    const float *vs = a->kv.v_scale + t * 16;
    __m512 acc[ATTN_MAX_D / 16];
    for (int32_t c = 0; c < nc; c++)
        acc[c] = _mm512_loadu_ps(out + c * 16);
    for (int32_t j = 0; j < 16; j++) {
        const __m512 pj = _mm512_set1_ps(p[j] * vs[j]);
        for (int32_t c = 0; c < nc; c++)
            acc[c] = _mm512_fmadd_ps(pj, load16_i8(vq + (int64_t)j * D + c * 16), acc[c]);
    }
    for (int32_t c = 0; c < nc; c++)
        _mm512_storeu_ps(out + c * 16, acc[c]);
}

/* Pass 1 of the AVX-512 int8 set: full tiles through block_logits16_i8; a lone
 * decode query queues its visible blocks and runs them four at a time. */
static int32_t tile_logits16_i8(const struct cpu_attn_args *a, const struct be_seq *sq,
                                int32_t h, const float *qv, const int32_t *qpos, int32_t nq,
                                float *s, int32_t width)
{
    const int32_t D = a->head_dim;
    const int32_t nb = CEIL_DIV(sq->n_slots, 16);
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
                block_logits16_i8_x4(a, q4_t, q4_valid, qv, qpos[0], q4_s);
                q4_n = 0;
            }
        } else if (nq == ATTN_QT) {
            block_logits16_i8(a, t, n_valid, qv, qpos, sb, width, ATTN_QT);
        } else {
            for (int32_t q = 0; q < nq; q++)
                block_logits16_i8(a, t, n_valid, qv + q * D, qpos + q, sb + q * width,
                                  width, 1);
        }
    }
    for (int32_t i = 0; i < q4_n; i++) /* the same arithmetic, one block at a time */
        block_logits16_i8(a, q4_t[i], q4_valid[i], qv, qpos, q4_s[i], width, 1);
    return nb_vis * 16;
}

/* Pass 3 of the AVX-512 int8 set: outputs and H2O scores. */
static void tile_values16_i8(const struct cpu_attn_args *a, const struct be_seq *sq,
                             int32_t h, const float *p, const int32_t *qpos, int32_t nq,
                             int32_t width, int32_t width_vis, float *out)
{
    const int32_t D = a->head_dim;
    int32_t qmax = qpos[0];
    for (int32_t q = 1; q < nq; q++)
        qmax = MAX(qmax, qpos[q]);
    for (int32_t bi = 0; bi < width_vis / 16; bi++) {
        const int64_t t = cpu_attn_bh(a, sq->blocks[bi], h);
        const float *pb = p + bi * 16;
        if (!cpu_attn_block_visible(a, t, MIN(16, sq->n_slots - bi * 16), qmax))
            continue; /* every probability is 0: no score, no value */
        cpu_attn_block_scores(a, t, pb, width, nq, 16);
        if (nq == ATTN_QT) {
            block_values16_i8(a, t, pb, width, out, ATTN_QT);
        } else {
            if (bi + 2 < width_vis / 16)
                cpu_attn_prefetch_tile(a, a->kv.v, cpu_attn_bh(a, sq->blocks[bi + 2], h));
            for (int32_t q = 0; q < nq; q++)
                block_values16_i8_1(a, t, pb + q * width, out + q * D);
        }
    }
}

/* Logits of one decode query per head for NH consecutive heads of one block (their
 * K tiles are adjacent): NH independent FMA chains over one contiguous stretch of the
 * pool; per head exactly block_logits16_i8's arithmetic with NQ = 1. */
static inline __attribute__((always_inline)) void
block_logits16_i8_heads(const struct cpu_attn_args *a, int64_t t0, int32_t n_valid,
                        const float *qv, int32_t qpos, float *s, int32_t stride,
                        const int32_t NH)
{
    const int32_t D = a->head_dim;
    const int8_t *kq = (const int8_t *)a->kv.k + t0 * D * 16;
    __m512 acc[4];
    for (int32_t k = 0; k < NH; k++)
        acc[k] = _mm512_setzero_ps();
    for (int32_t d = 0; d < D; d++)
        for (int32_t k = 0; k < NH; k++)
            acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(qv[k * D + d]),
                                     load16_i8(kq + ((int64_t)k * D + d) * 16), acc[k]);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t k = 0; k < NH; k++) {
        const __m512 ks = _mm512_loadu_ps(a->kv.k_scale + (t0 + k) * 16);
        _mm512_storeu_ps(s + k * stride,
                         _mm512_mask_blend_ps(visible16(a, t0 + k, n_valid, qpos), ninf,
                                              _mm512_mul_ps(ks, acc[k])));
    }
}

/* A decode token of one sequence, every head in one task (cpu_attn_decode_walk, with
 * the int8 block kernels). */
static void attend_decode_seq_i8(const struct cpu_attn_args *a, const struct be_seq *sq,
                                 float *s)
{
    cpu_attn_decode_walk(a, sq, s, block_logits16_i8_heads, block_values16_i8_1);
}

static const struct cpu_attn_kernels avx512_int8_kernels = {
    .name = "avx512-int8",
    .block_size = 16,
    .kv_dtype = DTYPE_I8,
    .tile_logits = tile_logits16_i8,
    .tile_values = tile_values16_i8,
    .decode_seq = attend_decode_seq_i8,
};

const struct cpu_attn_kernels *cpu_attn_int8_avx512(void)
{
    return &avx512_int8_kernels;
}

#else /* no AVX-512 in this build */

const struct cpu_attn_kernels *cpu_attn_int8_avx512(void)
{
    return NULL;
}

#endif

const struct cpu_attn_kernels *cpu_attn_int8_kernels_for(int32_t block_size)
{
    const struct cpu_attn_kernels *fast = cpu_attn_int8_avx512();
    if (fast && fast->block_size == block_size) return fast;
    return &cpu_attn_int8_ref;
}
