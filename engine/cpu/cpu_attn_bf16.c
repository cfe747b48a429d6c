/*
 * cpu_attn_bf16.c - the attention's kernel sets for a bf16 KV cache (cpu_attn_impl.h):
 * the portable reference (any block size) and the AVX-512 set (block size 16).
 *
 * The K tiles pair dimensions and the V tiles pair slots (cpu_attn.h), so one 64-byte
 * load brings two fp32 vectors' worth: a shift and a mask widen the pair's even and
 * odd halves exactly, where the row layout took two loads, two conversions and two
 * shifts. The arithmetic is the fp32 kernels' (cpu_attn.c): q and the probabilities
 * stay fp32, and each logit and output element is one FMA chain in dimension (or
 * slot) order, so a bf16 cache gives the bits the fp32 kernels give on the same
 * values. vdpbf16ps, which the layout was first made for, multiplies the pairs
 * directly but needs q and p in bf16 too; split into two halves to keep their
 * precision it ran prompts 1.7x slower on Sapphire Rapids, whose FMA units issue two
 * 512-bit FMAs a cycle against one vdpbf16ps, and decode no faster: it reads memory
 * at the same rate (docs/benchmarks.md, "bf16 attention on vdpbf16ps").
 *
 * Per element the AVX-512 set does the same operations in the same order as the
 * portable one, so which one ran never shows in the results
 * (tests/unit/test_cpu_attn_kernels.c), and a query's arithmetic is the same in a
 * prompt tile, alone, or in a whole-sequence decode task.
 * Thread: the OpenMP threads of cpu_attn_forward.
 */
#include "cpu_attn_walk.h"

/* A query prepared: its fp32 elements, as they are. */
static void prep_q(const float *qv, int32_t D, unsigned char *prep)
{
    memcpy(prep, qv, (size_t)D * sizeof *qv);
}

static inline float f32_at(const unsigned char *p, int32_t i)
{
    float f;
    memcpy(&f, p + 4 * i, sizeof f);
    return f;
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
    float acc[ATTN_QT][ATTN_MAX_BS]; // [NQ, BS]
    for (int32_t q = 0; q < NQ; q++)
        for (int32_t j = 0; j < BS; j++)
            acc[q][j] = 0.0f;
    for (int32_t i = 0; i < D / 2; i++) {
        float k0[ATTN_MAX_BS], k1[ATTN_MAX_BS]; // dimensions 2i and 2i + 1 of each slot
        for (int32_t j = 0; j < BS; j++) {
            k0[j] = bf16_to_f32(kt[((int64_t)i * BS + j) * 2]);
            k1[j] = bf16_to_f32(kt[((int64_t)i * BS + j) * 2 + 1]);
        }
        for (int32_t q = 0; q < NQ; q++) {
            const float q0 = f32_at(prep + q * ATTN_PREP, 2 * i);
            const float q1 = f32_at(prep + q * ATTN_PREP, 2 * i + 1);
            for (int32_t j = 0; j < BS; j++)
                acc[q][j] = fmaf(q1, k1[j], fmaf(q0, k0[j], acc[q][j]));
        }
    }
    const int32_t *pos = a->kv.pos + t * BS;
    for (int32_t q = 0; q < NQ; q++)
        for (int32_t j = 0; j < BS; j++) {
            bool vis = j < n_valid && pos[j] > cpu_attn_lo(a, qpos[q]) && pos[j] <= qpos[q];
            s[q * stride + j] = vis ? acc[q][j] : -INFINITY;
        }
}

/*
 * out[q] += sum_j p[q][j] v_j over one block, for NQ queries (p[q * stride + j]),
 * as cpu_attn.c's block_values. The V tile is [BS / 2, head_dim, 2]: per slot pair,
 * each dimension's two elements; with an odd BS the last slot is a plain row.
 */
static inline __attribute__((always_inline)) void
block_values(const struct cpu_attn_args *a, int64_t t, const float *p, int32_t stride,
             float *out, const int32_t NQ, const int32_t BS)
{
    const int32_t D = a->head_dim; /* a multiple of 16, checked at load */
    const uint16_t *vt = (const uint16_t *)a->kv.v + t * D * BS;
    for (int32_t d0 = 0; d0 < D; d0 += 16) {
        float acc[ATTN_QT][16]; // [NQ, 16] outputs d0..
        for (int32_t q = 0; q < NQ; q++)
            for (int32_t d = 0; d < 16; d++)
                acc[q][d] = out[q * D + d0 + d];
        for (int32_t m = 0; m < BS / 2; m++) {
            const uint16_t *vp = vt + ((int64_t)m * D + d0) * 2;
            float v0[16], v1[16]; // slots 2m and 2m + 1, dimensions d0..
            for (int32_t d = 0; d < 16; d++) {
                v0[d] = bf16_to_f32(vp[2 * d]);
                v1[d] = bf16_to_f32(vp[2 * d + 1]);
            }
            for (int32_t q = 0; q < NQ; q++) {
                const float p0 = p[q * stride + 2 * m], p1 = p[q * stride + 2 * m + 1];
                for (int32_t d = 0; d < 16; d++)
                    acc[q][d] = fmaf(p1, v1[d], fmaf(p0, v0[d], acc[q][d]));
            }
        }
        if (BS & 1) { /* the last slot, a plain row */
            const uint16_t *vr = vt + (int64_t)(BS - 1) * D + d0;
            for (int32_t q = 0; q < NQ; q++)
                for (int32_t d = 0; d < 16; d++)
                    acc[q][d] = fmaf(p[q * stride + BS - 1], bf16_to_f32(vr[d]), acc[q][d]);
        }
        for (int32_t q = 0; q < NQ; q++)
            for (int32_t d = 0; d < 16; d++)
                out[q * D + d0 + d] = acc[q][d];
    }
}

/* The portable bf16 set: any block size, no whole-sequence decode task. */
CPU_ATTN_WALK_SET(cpu_attn_bf16_ref, portable, "portable-bf16", DTYPE_BF16, prep_q,
                  block_logits, block_values);

#ifdef __AVX512F__

#include <immintrin.h>

/* The even and odd elements of 16 bf16 pairs, widened exactly to fp32. */
static inline __m512 even16(__m512i x)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}

static inline __m512 odd16(__m512i x)
{
    return _mm512_castsi512_ps(
        _mm512_and_si512(x, _mm512_set1_epi32((int32_t)0xffff0000u)));
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

/* block_logits with BS = 16: each dimension pair's 64-byte load, widened once,
 * serves all NQ queries. */
static inline __attribute__((always_inline)) void
block_logits16(const struct cpu_attn_args *a, int64_t t, int32_t n_valid,
               const unsigned char *prep, const int32_t *qpos, float *s, int32_t stride,
               const int32_t NQ, const int32_t BS)
{
    (void)BS; /* 16 */
    const int32_t D = a->head_dim;
    const uint16_t *kt = (const uint16_t *)a->kv.k + t * D * 16;
    __m512 acc[ATTN_QT];
    for (int32_t q = 0; q < NQ; q++)
        acc[q] = _mm512_setzero_ps();
    for (int32_t i = 0; i < D / 2; i++) {
        const __m512i k = _mm512_loadu_si512(kt + i * 32);
        const __m512 k0 = even16(k), k1 = odd16(k);
        for (int32_t q = 0; q < NQ; q++) {
            const unsigned char *qp = prep + q * ATTN_PREP;
            acc[q] = _mm512_fmadd_ps(_mm512_set1_ps(f32_at(qp, 2 * i)), k0, acc[q]);
            acc[q] = _mm512_fmadd_ps(_mm512_set1_ps(f32_at(qp, 2 * i + 1)), k1, acc[q]);
        }
    }
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t q = 0; q < NQ; q++)
        _mm512_storeu_ps(
            s + q * stride,
            _mm512_mask_blend_ps(visible16(a, t, n_valid, qpos[q]), ninf, acc[q]));
}

/* One prepared query each against NT tiles, NT independent chains; per tile exactly
 * block_logits16 with NQ = 1. */
static inline __attribute__((always_inline)) void
block_logits16_multi(const struct cpu_attn_args *a, const int64_t *t,
                     const int32_t *n_valid, const unsigned char *const *prep, int32_t qpos,
                     float *const *s, const int32_t NT)
{
    const int32_t D = a->head_dim;
    __m512 acc[4];
    for (int32_t b = 0; b < NT; b++)
        acc[b] = _mm512_setzero_ps();
    for (int32_t i = 0; i < D / 2; i++)
        for (int32_t b = 0; b < NT; b++) {
            const __m512i k =
                _mm512_loadu_si512((const uint16_t *)a->kv.k + t[b] * D * 16 + i * 32);
            acc[b] =
                _mm512_fmadd_ps(_mm512_set1_ps(f32_at(prep[b], 2 * i)), even16(k), acc[b]);
            acc[b] = _mm512_fmadd_ps(_mm512_set1_ps(f32_at(prep[b], 2 * i + 1)), odd16(k),
                                     acc[b]);
        }
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int32_t b = 0; b < NT; b++)
        _mm512_storeu_ps(
            s[b], _mm512_mask_blend_ps(visible16(a, t[b], n_valid[b], qpos), ninf, acc[b]));
}

/* NC chunks of 16 dimensions from chunk c0 on, of one query's values over a block,
 * every chunk in its own register: NC independent chains. */
static inline __attribute__((always_inline)) void values16_chunks(const uint16_t *vt,
                                                                  int32_t D, const float *p,
                                                                  float *out, int32_t c0,
                                                                  const int32_t NC)
{
    __m512 acc[8];
    for (int32_t c = 0; c < NC; c++)
        acc[c] = _mm512_loadu_ps(out + (c0 + c) * 16);
    for (int32_t m = 0; m < 8; m++) {
        const __m512 p0 = _mm512_set1_ps(p[2 * m]), p1 = _mm512_set1_ps(p[2 * m + 1]);
        for (int32_t c = 0; c < NC; c++) {
            const __m512i v = _mm512_loadu_si512(vt + ((int64_t)m * D + (c0 + c) * 16) * 2);
            acc[c] = _mm512_fmadd_ps(p1, odd16(v), _mm512_fmadd_ps(p0, even16(v), acc[c]));
        }
    }
    for (int32_t c = 0; c < NC; c++)
        _mm512_storeu_ps(out + (c0 + c) * 16, acc[c]);
}

/* One query's values over one block: per element block_values16's arithmetic, up to
 * 8 chunks (128 dimensions) at a time with every chunk in registers. */
static inline void values16_1(const uint16_t *vt, int32_t D, const float *p, float *out)
{
    for (int32_t c0 = 0; c0 < D / 16; c0 += 8) {
        switch (MIN(8, D / 16 - c0)) {
        case 1: values16_chunks(vt, D, p, out, c0, 1); break;
        case 2: values16_chunks(vt, D, p, out, c0, 2); break;
        case 3: values16_chunks(vt, D, p, out, c0, 3); break;
        case 4: values16_chunks(vt, D, p, out, c0, 4); break;
        case 5: values16_chunks(vt, D, p, out, c0, 5); break;
        case 6: values16_chunks(vt, D, p, out, c0, 6); break;
        case 7: values16_chunks(vt, D, p, out, c0, 7); break;
        default: values16_chunks(vt, D, p, out, c0, 8); break;
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
    if (NQ == 1) {
        values16_1(vt, D, p, out);
        return;
    }
    for (int32_t d0 = 0; d0 < D; d0 += 16) {
        __m512 acc[ATTN_QT];
        for (int32_t q = 0; q < NQ; q++)
            acc[q] = _mm512_loadu_ps(out + q * D + d0);
        for (int32_t m = 0; m < 8; m++) {
            const __m512i v = _mm512_loadu_si512(vt + ((int64_t)m * D + d0) * 2);
            const __m512 v0 = even16(v), v1 = odd16(v);
            for (int32_t q = 0; q < NQ; q++) {
                acc[q] = _mm512_fmadd_ps(_mm512_set1_ps(p[q * stride + 2 * m]), v0, acc[q]);
                acc[q] =
                    _mm512_fmadd_ps(_mm512_set1_ps(p[q * stride + 2 * m + 1]), v1, acc[q]);
            }
        }
        for (int32_t q = 0; q < NQ; q++)
            _mm512_storeu_ps(out + q * D + d0, acc[q]);
    }
}

/* The AVX-512 bf16 set: block size 16, with the whole-sequence decode task. */
CPU_ATTN_WALK_SET16(avx512_bf16_kernels, fast, "avx512-bf16", DTYPE_BF16, prep_q,
                    block_logits16, block_logits16_multi, block_values16);

const struct cpu_attn_kernels *cpu_attn_bf16_avx512(void)
{
    return &avx512_bf16_kernels;
}

#else /* no AVX-512 in this build */

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
