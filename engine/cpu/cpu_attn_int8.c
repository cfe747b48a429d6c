/*
 * cpu_attn_int8.c - the attention's kernel sets for the int8 KV cache
 * (--kv-cache-dtype int8): the quantizer of the K/V write, a portable set (any block
 * size, the reference) and an AVX-512 VNNI set for block size 16.
 *
 * Format: symmetric int8, one fp32 scale per (token, KV head) for its key and one
 * for its value: scale = max|x| / 127 over the head's head_dim elements, element =
 * round(x / scale), so x = scale * element within scale / 2. The scales sit beside
 * pos and score ([n_blocks, n_head, block_size], struct cpu_kv_layer), so compaction
 * and block copies move them with their slots. The tiles pair their elements as the
 * bf16 ones do (cpu_attn.h): K by dimensions, V by slots, the operand layout of
 * vpdpwssd once sign-extended to int16.
 *
 * Arithmetic: integer dot products, exact. A query is quantized to int16 (scale
 * max|q| / 32767: 2^-16 of its largest element, against int8's 2^-8 for the cache),
 * so a logit is ((float)(q16 . k8_j) * q_scale) * k_scale[j]. A block's value weights
 * p[j] * v_scale[j] are quantized to int16 with one scale per block and query, and
 * the block adds (float)(w16 . v8[:, d]) * w_scale to the output (one FMA). vpdpwssd
 * does 32 multiply-adds per instruction from one 32-byte load, where widening every
 * element to fp32 took a load, two conversions and an FMA per 16. Integer sums do
 * not depend on their order, and the conversions and scalings are the same
 * operations in both sets, so their outputs and scores are the same bits
 * (tests/unit/test_cpu_attn_kernels.c). The H2O scores add the unscaled fp32 p, so
 * the policy sees the probabilities it would with fp32 K/V of the dequantized values.
 * Thread: the OpenMP threads of cpu_attn_forward; the quantizers are pure.
 */
#include "cpu_attn_walk.h"

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

/* Where a prepared query keeps its scale, after its int16 elements. */
#define PREP_SCALE (2 * ATTN_MAX_D)

/*
 * x[0..n) as int16 with one scale: e[i] = round(x[i] / scale), scale = max|x| / 32767
 * (0 for an all-zero x). The AVX-512 set's quantize16_x16 computes the same bits
 * 16 at a time (the same maximum, reciprocal, products and rounding).
 */
static inline float quantize16(const float *x, int32_t n, int16_t *e)
{
    float amax = 0.0f;
    for (int32_t i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    if (amax == 0.0f) {
        for (int32_t i = 0; i < n; i++)
            e[i] = 0;
        return 0.0f;
    }
    const float inv = 32767.0f / amax;
    for (int32_t i = 0; i < n; i++) {
        const long v = lrintf(x[i] * inv);
        e[i] = (int16_t)(v > 32767 ? 32767 : v < -32767 ? -32767 : v);
    }
    return amax / 32767.0f;
}

/* A query prepared: its int16 elements [head_dim], and their scale at PREP_SCALE. */
static void prep_q(const float *qv, int32_t D, unsigned char *prep)
{
    int16_t e[ATTN_MAX_D];
    const float scale = quantize16(qv, D, e);
    memcpy(prep, e, (size_t)D * sizeof *e);
    memcpy(prep + PREP_SCALE, &scale, sizeof scale);
}

static inline int32_t i16_at(const unsigned char *p, int32_t i)
{
    int16_t v;
    memcpy(&v, p + 2 * i, sizeof v);
    return v;
}

static inline float scale_of(const unsigned char *prep)
{
    float s;
    memcpy(&s, prep + PREP_SCALE, sizeof s);
    return s;
}

/*
 * Logits of NQ prepared queries against one int8 block: s[q * stride + j] =
 * ((float)(q16 . k8_j) * q_scale) * k_scale[j], -INFINITY where the query cannot see
 * slot j. The K tile is [head_dim / 2, BS, 2].
 */
static inline __attribute__((always_inline)) void
block_logits(const struct cpu_attn_args *a, int64_t t, int32_t n_valid,
             const unsigned char *prep, const int32_t *qpos, float *s, int32_t stride,
             const int32_t NQ, const int32_t BS)
{
    const int32_t D = a->head_dim;
    const int8_t *kt = (const int8_t *)a->kv.k + t * D * BS;
    int32_t acc[ATTN_QT][ATTN_MAX_BS]; // [NQ, BS] integer dot products
    for (int32_t q = 0; q < NQ; q++)
        for (int32_t j = 0; j < BS; j++)
            acc[q][j] = 0;
    for (int32_t i = 0; i < D / 2; i++)
        for (int32_t q = 0; q < NQ; q++) {
            const int32_t q0 = i16_at(prep + q * ATTN_PREP, 2 * i);
            const int32_t q1 = i16_at(prep + q * ATTN_PREP, 2 * i + 1);
            for (int32_t j = 0; j < BS; j++)
                acc[q][j] += q0 * kt[((int64_t)i * BS + j) * 2] +
                             q1 * kt[((int64_t)i * BS + j) * 2 + 1];
        }
    const int32_t *pos = a->kv.pos + t * BS;
    const float *ks = a->kv.k_scale + t * BS;
    for (int32_t q = 0; q < NQ; q++) {
        const float qs = scale_of(prep + q * ATTN_PREP);
        for (int32_t j = 0; j < BS; j++) {
            bool vis = j < n_valid && pos[j] >= 0 && pos[j] > cpu_attn_lo(a, qpos[q]) &&
                       pos[j] <= qpos[q];
            s[q * stride + j] = vis ? (float)acc[q][j] * qs * ks[j] : -INFINITY;
        }
    }
}

/* One query's value weights of a block, p[j] * v_scale[j], as int16 with a scale. */
static inline float weights16(const float *p, const float *vs, int32_t BS, int16_t *e)
{
    float w[ATTN_MAX_BS];
    for (int32_t j = 0; j < BS; j++)
        w[j] = p[j] * vs[j];
    return quantize16(w, BS, e);
}

/*
 * out[q] += w_scale * (w16 . v8) over one int8 block, for NQ queries whose
 * probabilities of the block are p[q * stride + j]. The V tile is [BS / 2, head_dim,
 * 2] (with an odd BS the last slot is a plain row).
 */
static inline __attribute__((always_inline)) void
block_values(const struct cpu_attn_args *a, int64_t t, const float *p, int32_t stride,
             float *out, const int32_t NQ, const int32_t BS)
{
    const int32_t D = a->head_dim;
    const int8_t *vt = (const int8_t *)a->kv.v + t * D * BS;
    int16_t w[ATTN_QT][ATTN_MAX_BS];
    float ws[ATTN_QT];
    for (int32_t q = 0; q < NQ; q++)
        ws[q] = weights16(p + (int64_t)q * stride, a->kv.v_scale + t * BS, BS, w[q]);
    for (int32_t d0 = 0; d0 < D; d0 += 16) {
        int32_t acc[ATTN_QT][16]; // [NQ, 16] integer sums of dimensions d0..
        for (int32_t q = 0; q < NQ; q++)
            for (int32_t d = 0; d < 16; d++)
                acc[q][d] = 0;
        for (int32_t j = 0; j < BS; j++) {
            const int8_t *vr = vt + cpu_attn_v_at(DTYPE_I8, D, BS, j, d0);
            const int32_t step =
                j == BS - 1 && (BS & 1) ? 1 : 2; /* a plain row, or pairs */
            for (int32_t q = 0; q < NQ; q++)
                for (int32_t d = 0; d < 16; d++)
                    acc[q][d] += w[q][j] * vr[d * step];
        }
        for (int32_t q = 0; q < NQ; q++)
            for (int32_t d = 0; d < 16; d++)
                out[q * D + d0 + d] = fmaf((float)acc[q][d], ws[q], out[q * D + d0 + d]);
    }
}

/* The portable int8 set: any block size, no whole-sequence decode task. */
CPU_ATTN_WALK_SET(cpu_attn_int8_ref, portable, "portable-int8", DTYPE_I8, prep_q,
                  block_logits, block_values);

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

#include <immintrin.h>

/* Elements 2i and 2i + 1 of the int16 array at x as one 32-bit pair, the operand
 * vpdpwssd broadcasts. */
static inline int32_t pair_at(const void *x, int32_t i)
{
    int32_t u;
    memcpy(&u, (const unsigned char *)x + 4 * i, sizeof u);
    return u;
}

/* 32 int8 elements from p on, sign-extended to int16: 16 lanes of pairs. */
static inline __m512i load32_i8(const int8_t *p)
{
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p));
}

/* quantize16 of 16 elements, in one vector: the same bits. */
/* 16 elements x times inv, rounded as lrintf and clamped to +-32767: quantize16's
 * elements, 16 at a time. */
static inline void round16_x16(__m512 x, __m512 inv, int16_t *e)
{
    __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(x, inv));
    v = _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(32767)),
                         _mm512_set1_epi32(-32767));
    _mm256_storeu_si256((__m256i *)e, _mm512_cvtepi32_epi16(v));
}

/* quantize16 of 16 elements, in one vector: the same bits. */
static inline float quantize16_x16(__m512 x, int16_t *e)
{
    const float amax = _mm512_reduce_max_ps(_mm512_abs_ps(x));
    if (amax == 0.0f) {
        memset(e, 0, 16 * sizeof *e);
        return 0.0f;
    }
    round16_x16(x, _mm512_set1_ps(32767.0f / amax), e);
    return amax / 32767.0f;
}

/* prep_q, 16 elements at a time; the maximum over the whole query as quantize16's. */
static void prep_q16(const float *qv, int32_t D, unsigned char *prep)
{
    __m512 m = _mm512_setzero_ps();
    for (int32_t d = 0; d < D; d += 16)
        m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(qv + d)));
    const float amax = _mm512_reduce_max_ps(m);
    int16_t e[ATTN_MAX_D];
    float scale = 0.0f;
    if (amax == 0.0f) {
        memset(e, 0, (size_t)D * sizeof *e);
    } else {
        const __m512 inv = _mm512_set1_ps(32767.0f / amax);
        for (int32_t d = 0; d < D; d += 16)
            round16_x16(_mm512_loadu_ps(qv + d), inv, e + d);
        scale = amax / 32767.0f;
    }
    memcpy(prep, e, (size_t)D * sizeof *e);
    memcpy(prep + PREP_SCALE, &scale, sizeof scale);
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

/* The logits of one query's integer sums acc for tile t, into s. */
static inline void store_logits16(const struct cpu_attn_args *a, int64_t t, int32_t n_valid,
                                  int32_t qpos, __m512i acc, const unsigned char *prep,
                                  float *s)
{
    const __m512 l = _mm512_mul_ps(
        _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(scale_of(prep))),
        _mm512_loadu_ps(a->kv.k_scale + t * 16));
    _mm512_storeu_ps(s, _mm512_mask_blend_ps(visible16(a, t, n_valid, qpos),
                                             _mm512_set1_ps(-INFINITY), l));
}

/* block_logits with BS = 16: each dimension pair's 32-byte load serves all NQ
 * queries, one vpdpwssd each. */
static inline __attribute__((always_inline)) void
block_logits16(const struct cpu_attn_args *a, int64_t t, int32_t n_valid,
               const unsigned char *prep, const int32_t *qpos, float *s, int32_t stride,
               const int32_t NQ, const int32_t BS)
{
    (void)BS; /* 16 */
    const int32_t D = a->head_dim;
    const int8_t *kt = (const int8_t *)a->kv.k + t * D * 16;
    __m512i acc[ATTN_QT];
    for (int32_t q = 0; q < NQ; q++)
        acc[q] = _mm512_setzero_si512();
    for (int32_t i = 0; i < D / 2; i++) {
        const __m512i k = load32_i8(kt + i * 32);
        for (int32_t q = 0; q < NQ; q++)
            acc[q] = _mm512_dpwssd_epi32(
                acc[q], k, _mm512_set1_epi32(pair_at(prep + q * ATTN_PREP, i)));
    }
    for (int32_t q = 0; q < NQ; q++)
        store_logits16(a, t, n_valid, qpos[q], acc[q], prep + q * ATTN_PREP,
                       s + q * stride);
}

/* One prepared query each against NT tiles, NT independent chains; per tile exactly
 * block_logits16 with NQ = 1. */
static inline __attribute__((always_inline)) void
block_logits16_multi(const struct cpu_attn_args *a, const int64_t *t,
                     const int32_t *n_valid, const unsigned char *const *prep, int32_t qpos,
                     float *const *s, const int32_t NT)
{
    const int32_t D = a->head_dim;
    __m512i acc[4];
    for (int32_t b = 0; b < NT; b++)
        acc[b] = _mm512_setzero_si512();
    for (int32_t i = 0; i < D / 2; i++)
        for (int32_t b = 0; b < NT; b++)
            acc[b] = _mm512_dpwssd_epi32(
                acc[b], load32_i8((const int8_t *)a->kv.k + t[b] * D * 16 + i * 32),
                _mm512_set1_epi32(pair_at(prep[b], i)));
    for (int32_t b = 0; b < NT; b++)
        store_logits16(a, t[b], n_valid[b], qpos, acc[b], prep[b], s[b]);
}

/* NC chunks of 16 dimensions from chunk c0 on, of one query's values over a block,
 * every chunk in its own register. */
static inline __attribute__((always_inline)) void
values16_chunks(const int8_t *vt, int32_t D, const int16_t *w, float ws, float *out,
                int32_t c0, const int32_t NC)
{
    __m512i acc[8];
    for (int32_t c = 0; c < NC; c++)
        acc[c] = _mm512_setzero_si512();
    for (int32_t m = 0; m < 8; m++) {
        const __m512i wp = _mm512_set1_epi32(pair_at(w, m));
        for (int32_t c = 0; c < NC; c++)
            acc[c] = _mm512_dpwssd_epi32(
                acc[c], load32_i8(vt + ((int64_t)m * D + (c0 + c) * 16) * 2), wp);
    }
    for (int32_t c = 0; c < NC; c++)
        _mm512_storeu_ps(out + (c0 + c) * 16,
                         _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[c]), _mm512_set1_ps(ws),
                                         _mm512_loadu_ps(out + (c0 + c) * 16)));
}

static inline void values16_1(const int8_t *vt, int32_t D, const int16_t *w, float ws,
                              float *out)
{
    for (int32_t c0 = 0; c0 < D / 16; c0 += 8) {
        switch (MIN(8, D / 16 - c0)) {
        case 1: values16_chunks(vt, D, w, ws, out, c0, 1); break;
        case 2: values16_chunks(vt, D, w, ws, out, c0, 2); break;
        case 3: values16_chunks(vt, D, w, ws, out, c0, 3); break;
        case 4: values16_chunks(vt, D, w, ws, out, c0, 4); break;
        case 5: values16_chunks(vt, D, w, ws, out, c0, 5); break;
        case 6: values16_chunks(vt, D, w, ws, out, c0, 6); break;
        case 7: values16_chunks(vt, D, w, ws, out, c0, 7); break;
        default: values16_chunks(vt, D, w, ws, out, c0, 8); break;
        }
    }
}

/* block_values with BS = 16: the weights quantized 16 at a time, then per chunk of
 * 16 dimensions each slot pair's 32-byte load serves the NQ queries (one query keeps
 * every chunk in registers instead). */
static inline __attribute__((always_inline)) void
block_values16(const struct cpu_attn_args *a, int64_t t, const float *p, int32_t stride,
               float *out, const int32_t NQ, const int32_t BS)
{
    (void)BS; /* 16 */
    const int32_t D = a->head_dim;
    const int8_t *vt = (const int8_t *)a->kv.v + t * D * 16;
    const __m512 vs = _mm512_loadu_ps(a->kv.v_scale + t * 16);
    int16_t w[ATTN_QT][16];
    float ws[ATTN_QT];
    for (int32_t q = 0; q < NQ; q++)
        ws[q] = quantize16_x16(_mm512_mul_ps(_mm512_loadu_ps(p + (int64_t)q * stride), vs),
                               w[q]);
    if (NQ == 1) {
        values16_1(vt, D, w[0], ws[0], out);
        return;
    }
    for (int32_t d0 = 0; d0 < D; d0 += 16) {
        __m512i acc[ATTN_QT];
        for (int32_t q = 0; q < NQ; q++)
            acc[q] = _mm512_setzero_si512();
        for (int32_t m = 0; m < 8; m++) {
            const __m512i v = load32_i8(vt + ((int64_t)m * D + d0) * 2);
            for (int32_t q = 0; q < NQ; q++)
                acc[q] =
                    _mm512_dpwssd_epi32(acc[q], v, _mm512_set1_epi32(pair_at(w[q], m)));
        }
        for (int32_t q = 0; q < NQ; q++)
            _mm512_storeu_ps(out + q * D + d0,
                             _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[q]),
                                             _mm512_set1_ps(ws[q]),
                                             _mm512_loadu_ps(out + q * D + d0)));
    }
}

/* The AVX-512 VNNI set: block size 16, with the whole-sequence decode task. */
CPU_ATTN_WALK_SET16(avx512_int8_kernels, fast, "avx512-int8", DTYPE_I8, prep_q16,
                    block_logits16, block_logits16_multi, block_values16);

const struct cpu_attn_kernels *cpu_attn_int8_avx512(void)
{
    return &avx512_int8_kernels;
}

#else /* no AVX-512 VNNI in this build */

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
