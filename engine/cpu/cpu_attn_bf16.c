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
#include "cpu_attn_walk.h"

/* Element i of a prepared operand's bf16 array at p. */
static inline float bf16_at(const unsigned char *p, int32_t i)
{
    uint16_t h;
    memcpy(&h, p + 2 * i, sizeof h);
    return bf16_to_f32(h);
}

/* A query prepared: its hi halves [head_dim], then its lo halves [head_dim]. */
static void prep_q(const float *qv, int32_t D, unsigned char *prep)
{
    uint16_t hi[ATTN_MAX_D], lo[ATTN_MAX_D];
    cpu_attn_bf16_split(qv, D, hi, lo);
    memcpy(prep, hi, (size_t)D * sizeof *hi);
    memcpy(prep + 2 * D, lo, (size_t)D * sizeof *lo);
}

/*
 * Logits of NQ prepared queries against one block, as cpu_attn.c's block_logits:
 * -INFINITY where a query cannot see the slot. The K tile is [head_dim / 2, BS, 2]:
 * per dimension pair, the BS slots' two elements.
 */
static inline __attribute__((always_inline)) void
block_logits(const struct cpu_attn_args *a, int64_t t, int32_t n_valid,
             const unsigned char *prep, const int32_t *qpos, float *s, int32_t stride,
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
            const unsigned char *hi = prep + q * ATTN_PREP, *lo = hi + 2 * D;
            const float h0 = bf16_at(hi, 2 * i), h1 = bf16_at(hi, 2 * i + 1);
            const float l0 = bf16_at(lo, 2 * i), l1 = bf16_at(lo, 2 * i + 1);
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

/* Each of NQ queries' probabilities of one block (p[q * stride + j]) split into ph,
 * pl [NQ, BS]. */
static inline void split_p(const float *p, int32_t stride, int32_t NQ, int32_t BS,
                           uint16_t *ph, uint16_t *pl)
{
    for (int32_t q = 0; q < NQ; q++)
        cpu_attn_bf16_split(p + (int64_t)q * stride, BS, ph + q * BS, pl + q * BS);
}

/*
 * out[q] += sum_j p[q][j] v_j over one block, for NQ queries, p split into halves
 * here. The V tile is [BS / 2, head_dim, 2]: per slot pair, each dimension's two
 * elements; with an odd BS the last slot is a plain row, added alone. Per chunk of 16
 * dimensions the hi half accumulates onto out, the lo half from zero, and their sum
 * is the new out.
 */
static inline __attribute__((always_inline)) void
block_values(const struct cpu_attn_args *a, int64_t t, const float *p, int32_t stride,
             float *out, const int32_t NQ, const int32_t BS)
{
    const int32_t D = a->head_dim; /* a multiple of 16, checked at load */
    const uint16_t *vt = (const uint16_t *)a->kv.v + t * D * BS;
    uint16_t ph[ATTN_QT * ATTN_MAX_BS], pl[ATTN_QT * ATTN_MAX_BS];
    split_p(p, stride, NQ, BS, ph, pl);
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

/* The portable bf16 set: any block size, no whole-sequence decode task. */
CPU_ATTN_WALK_SET(cpu_attn_bf16_ref, portable, "portable-bf16", DTYPE_BF16, prep_q,
                  block_logits, block_values);

#if defined(__AVX512F__) && defined(__AVX512BF16__)

#include <immintrin.h>

/* Elements 2i and 2i + 1 of the bf16 array at x as one 32-bit pair, the operand
 * vdpbf16ps broadcasts. */
static inline uint32_t pair_at(const void *x, int32_t i)
{
    uint32_t u;
    memcpy(&u, (const unsigned char *)x + 4 * i, sizeof u);
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
               const unsigned char *prep, const int32_t *qpos, float *s, int32_t stride,
               const int32_t NQ, const int32_t BS)
{
    (void)BS; /* 16 */
    const int32_t D = a->head_dim;
    const uint16_t *kt = (const uint16_t *)a->kv.k + t * D * 16;
    __m512 ah[ATTN_QT], al[ATTN_QT];
    for (int32_t q = 0; q < NQ; q++)
        ah[q] = al[q] = _mm512_setzero_ps();
    for (int32_t i = 0; i < D / 2; i++) {
        const __m512i k = _mm512_loadu_si512(kt + i * 32);
        for (int32_t q = 0; q < NQ; q++) {
            const unsigned char *hi = prep + q * ATTN_PREP;
            ah[q] = dp(ah[q], k, pair_at(hi, i));
            al[q] = dp(al[q], k, pair_at(hi + 2 * D, i));
        }
    }
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t q = 0; q < NQ; q++)
        _mm512_storeu_ps(s + q * stride,
                         _mm512_mask_blend_ps(visible16(a, t, n_valid, qpos[q]), ninf,
                                              _mm512_add_ps(ah[q], al[q])));
}

/* One prepared query each against NT tiles, 2 * NT independent chains; per tile
 * exactly block_logits16 with NQ = 1. */
static inline __attribute__((always_inline)) void
block_logits16_multi(const struct cpu_attn_args *a, const int64_t *t,
                     const int32_t *n_valid, const unsigned char *const *prep, int32_t qpos,
                     float *const *s, const int32_t NT)
{
    const int32_t D = a->head_dim;
    __m512 ah[4], al[4];
    for (int32_t b = 0; b < NT; b++)
        ah[b] = al[b] = _mm512_setzero_ps();
    for (int32_t i = 0; i < D / 2; i++)
        for (int32_t b = 0; b < NT; b++) {
            const __m512i k =
                _mm512_loadu_si512((const uint16_t *)a->kv.k + t[b] * D * 16 + i * 32);
            ah[b] = dp(ah[b], k, pair_at(prep[b], i));
            al[b] = dp(al[b], k, pair_at(prep[b] + 2 * D, i));
        }
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t b = 0; b < NT; b++)
        _mm512_storeu_ps(s[b], _mm512_mask_blend_ps(visible16(a, t[b], n_valid[b], qpos),
                                                    ninf, _mm512_add_ps(ah[b], al[b])));
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

/* One query's values over one block: per element block_values16's arithmetic, up to
 * 8 chunks (128 dimensions) at a time with every chunk in registers. */
static inline void values16_1(const uint16_t *vt, int32_t D, const uint16_t *ph,
                              const uint16_t *pl, float *out)
{
    for (int32_t c0 = 0; c0 < D / 16; c0 += 8) {
        switch (MIN(8, D / 16 - c0)) {
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

/* block_values with BS = 16: per chunk of 16 dimensions, each slot pair's 64-byte
 * load serves the NQ queries; one query keeps every chunk in registers instead. */
static inline __attribute__((always_inline)) void
block_values16(const struct cpu_attn_args *a, int64_t t, const float *p, int32_t stride,
               float *out, const int32_t NQ, const int32_t BS)
{
    (void)BS; /* 16 */
    const int32_t D = a->head_dim;
    const uint16_t *vt = (const uint16_t *)a->kv.v + t * D * 16;
    uint16_t ph[ATTN_QT * 16], pl[ATTN_QT * 16];
    split_p(p, stride, NQ, 16, ph, pl);
    if (NQ == 1) {
        values16_1(vt, D, ph, pl, out);
        return;
    }
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

/* The AVX512-BF16 set: block size 16, with the whole-sequence decode task. */
CPU_ATTN_WALK_SET16(avx512_bf16_kernels, fast, "avx512-bf16", DTYPE_BF16, prep_q,
                    block_logits16, block_logits16_multi, block_values16);

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
