/*
 * fakecuda_kernels.c - the kernels of cuda/cuda_kernels.h on the host: the attention
 * and KV-state kernels are their host references (cuda/cuda_ref.h), the element-wise
 * ones are written out here from the contracts in cuda_kernels.h (fp16 in and out,
 * fp32 arithmetic, one rounding on the store). Before running, each checks what the
 * GPU would need (fakecuda.h): device pointers of the current device, the stream,
 * 4-byte aligned fp16 pointers, and the size preconditions a real kernel would not
 * check but silently violate (n_slots <= max_slots, n_tok <= max_chunk).
 *
 * Owns: nothing. Thread: any (the caller's current device).
 */
#include "fakecuda_impl.h"

#include "cuda_kernels.h"
#include "dtype.h"

#include <math.h>
#include <stdlib.h>

#define DEV(p, what) fakecuda_dev_ok((p), 1, (what))

/* The pool arrays of an attention or compaction call: fp16 K/V, or with an int8
 * cache (k8 set) int8 K/V and both scale arrays, all device memory; the other pair is
 * not read, and the kernels take whichever k8 says. */
static bool kv_pool_ok(const void *k, const void *v, const int8_t *k8, const int8_t *v8,
                       const float *k_scale, const float *v_scale, const char *what)
{
    if (!k8) return DEV(k, what) && DEV(v, what);
    if (!v8 || !k_scale || !v_scale) {
        (void)fakecuda_violation("%s: int8 cache without v8 or scales", what);
        return false;
    }
    return DEV(k8, what) && DEV(v8, what) && DEV(k_scale, what) && DEV(v_scale, what);
}

cudaError_t cuda_embed(uint16_t *dst, const uint16_t *tok, const int32_t *ids,
                       const uint16_t *pos_table, const int32_t *pos, int32_t offset,
                       int32_t n, int32_t d, cudaStream_t stream)
{
    if (n < 0 || d < 0 || d % 2) return cudaErrorInvalidValue;
    if (n == 0 || d == 0) return cudaSuccess;
    if (!fakecuda_stream_ok(stream, "cuda_embed") ||
        !fakecuda_dev_ok(dst, (size_t)n * (size_t)d * 2, "cuda_embed dst") ||
        !DEV(tok, "cuda_embed tok") || !fakecuda_dev_ok(ids, (size_t)n * 4, "cuda_embed ids") ||
        (pos_table && (!DEV(pos_table, "cuda_embed pos_table") ||
                       !fakecuda_dev_ok(pos, (size_t)n * 4, "cuda_embed pos"))) ||
        !fakecuda_aligned4(dst, "cuda_embed") || !fakecuda_aligned4(tok, "cuda_embed"))
        return cudaErrorInvalidValue;
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < d; j++) {
            float x = f16_to_f32(tok[(int64_t)ids[i] * d + j]);
            if (pos_table) x += f16_to_f32(pos_table[(int64_t)(pos[i] + offset) * d + j]);
            dst[(int64_t)i * d + j] = f32_to_f16(x);
        }
    return cudaSuccess;
}

cudaError_t cuda_embed_positions(uint16_t *x, const uint16_t *pos_table, const int32_t *pos,
                                 int32_t offset, int32_t n, int32_t d, cudaStream_t stream)
{
    if (n < 0 || d < 0 || d % 2) return cudaErrorInvalidValue;
    if (n == 0 || d == 0) return cudaSuccess;
    if (!fakecuda_stream_ok(stream, "cuda_embed_positions") ||
        !fakecuda_dev_ok(x, (size_t)n * (size_t)d * 2, "cuda_embed_positions x") ||
        !DEV(pos_table, "cuda_embed_positions table") ||
        !fakecuda_dev_ok(pos, (size_t)n * 4, "cuda_embed_positions pos") ||
        !fakecuda_aligned4(x, "cuda_embed_positions"))
        return cudaErrorInvalidValue;
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < d; j++) {
            uint16_t *o = &x[(int64_t)i * d + j];
            *o = f32_to_f16(f16_to_f32(*o) +
                            f16_to_f32(pos_table[(int64_t)(pos[i] + offset) * d + j]));
        }
    return cudaSuccess;
}

cudaError_t cuda_layernorm(uint16_t *dst, const uint16_t *x, const uint16_t *w,
                           const uint16_t *b, int32_t n, int32_t d, cudaStream_t stream)
{
    if (n < 0 || d < 0 || d % 2) return cudaErrorInvalidValue;
    if (n == 0 || d == 0) return cudaSuccess;
    const size_t bytes = (size_t)n * (size_t)d * 2;
    if (!fakecuda_stream_ok(stream, "cuda_layernorm") ||
        !fakecuda_dev_ok(dst, bytes, "cuda_layernorm dst") ||
        !fakecuda_dev_ok(x, bytes, "cuda_layernorm x") ||
        !fakecuda_dev_ok(w, (size_t)d * 2, "cuda_layernorm w") ||
        !fakecuda_dev_ok(b, (size_t)d * 2, "cuda_layernorm b") ||
        !fakecuda_aligned4(dst, "cuda_layernorm") || !fakecuda_aligned4(x, "cuda_layernorm"))
        return cudaErrorInvalidValue;
    float *row = malloc((size_t)d * sizeof *row);
    if (!row) return cudaErrorMemoryAllocation;
    for (int32_t i = 0; i < n; i++) {
        /* Read the whole row first: dst may alias x. */
        for (int32_t j = 0; j < d; j++) row[j] = f16_to_f32(x[(int64_t)i * d + j]);
        float mean = 0.0f, var = 0.0f;
        for (int32_t j = 0; j < d; j++) mean += row[j];
        mean /= (float)d;
        for (int32_t j = 0; j < d; j++) var += (row[j] - mean) * (row[j] - mean);
        var /= (float)d;
        const float rstd = 1.0f / sqrtf(var + 1e-5f);
        for (int32_t j = 0; j < d; j++)
            dst[(int64_t)i * d + j] =
                f32_to_f16((row[j] - mean) * rstd * f16_to_f32(w[j]) + f16_to_f32(b[j]));
    }
    free(row);
    return cudaSuccess;
}

cudaError_t cuda_bias_relu(uint16_t *x, const uint16_t *bias, int32_t n, int32_t m, bool relu,
                           cudaStream_t stream)
{
    if (n < 0 || m < 0 || m % 2) return cudaErrorInvalidValue;
    if (n == 0 || m == 0) return cudaSuccess;
    if (!fakecuda_stream_ok(stream, "cuda_bias_relu") ||
        !fakecuda_dev_ok(x, (size_t)n * (size_t)m * 2, "cuda_bias_relu x") ||
        !fakecuda_dev_ok(bias, (size_t)m * 2, "cuda_bias_relu bias") ||
        !fakecuda_aligned4(x, "cuda_bias_relu"))
        return cudaErrorInvalidValue;
    for (int64_t i = 0; i < (int64_t)n * m; i++) {
        float y = f16_to_f32(x[i]) + f16_to_f32(bias[i % m]);
        x[i] = f32_to_f16(relu && !(y > 0.0f) ? 0.0f : y);
    }
    return cudaSuccess;
}

cudaError_t cuda_add(uint16_t *x, const uint16_t *y, int64_t n, cudaStream_t stream)
{
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    if (!fakecuda_stream_ok(stream, "cuda_add") ||
        !fakecuda_dev_ok(x, (size_t)n * 2, "cuda_add x") ||
        !fakecuda_dev_ok(y, (size_t)n * 2, "cuda_add y"))
        return cudaErrorInvalidValue;
    for (int64_t i = 0; i < n; i++) x[i] = f32_to_f16(f16_to_f32(x[i]) + f16_to_f32(y[i]));
    return cudaSuccess;
}

/* Round a reference's fp32 result into dst [n] (the kernels' one rounding). */
static void round_into(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = f32_to_f16(src[i]);
}

cudaError_t cuda_norm(uint16_t *dst, const uint16_t *x, const uint16_t *w,
                      const uint16_t *b, bool rms, float eps, int32_t n, int32_t d,
                      cudaStream_t stream)
{
    if (n < 0 || d < 0 || d % 2 || (!rms && !b) || !(eps >= 0.0f))
        return cudaErrorInvalidValue;
    if (n == 0 || d == 0) return cudaSuccess;
    const size_t bytes = (size_t)n * (size_t)d * 2;
    if (!fakecuda_stream_ok(stream, "cuda_norm") ||
        !fakecuda_dev_ok(dst, bytes, "cuda_norm dst") ||
        !fakecuda_dev_ok(x, bytes, "cuda_norm x") ||
        !fakecuda_dev_ok(w, (size_t)d * 2, "cuda_norm w") ||
        (!rms && !fakecuda_dev_ok(b, (size_t)d * 2, "cuda_norm b")) ||
        !fakecuda_aligned4(dst, "cuda_norm") || !fakecuda_aligned4(x, "cuda_norm"))
        return cudaErrorInvalidValue;
    float *out = malloc(bytes * 2); /* n * d floats; dst may alias x, so round after */
    if (!out) return cudaErrorMemoryAllocation;
    cuda_ref_norm(out, x, w, rms ? NULL : b, rms, eps, n, d);
    round_into(dst, out, (int64_t)n * d);
    free(out);
    return cudaSuccess;
}

cudaError_t cuda_act(uint16_t *x, const uint16_t *bias, int32_t n, int32_t m,
                     enum cuda_act act, cudaStream_t stream)
{
    if (n < 0 || m < 0 || m % 2 || act < CUDA_ACT_RELU || act > CUDA_ACT_SILU)
        return cudaErrorInvalidValue;
    if (n == 0 || m == 0) return cudaSuccess;
    const size_t bytes = (size_t)n * (size_t)m * 2;
    if (!fakecuda_stream_ok(stream, "cuda_act") ||
        !fakecuda_dev_ok(x, bytes, "cuda_act x") ||
        (bias && !fakecuda_dev_ok(bias, (size_t)m * 2, "cuda_act bias")) ||
        !fakecuda_aligned4(x, "cuda_act"))
        return cudaErrorInvalidValue;
    float *out = malloc(bytes * 2);
    if (!out) return cudaErrorMemoryAllocation;
    cuda_ref_act(out, x, bias, n, m, act);
    round_into(x, out, (int64_t)n * m);
    free(out);
    return cudaSuccess;
}

cudaError_t cuda_act_swiglu(uint16_t *dst, const uint16_t *src, int32_t n, int32_t f,
                            cudaStream_t stream)
{
    if (n < 0 || f < 0 || f % 2) return cudaErrorInvalidValue;
    if (n == 0 || f == 0) return cudaSuccess;
    const size_t bytes = (size_t)n * (size_t)f * 2;
    if (!fakecuda_stream_ok(stream, "cuda_act_swiglu") ||
        !fakecuda_dev_ok(dst, bytes, "cuda_act_swiglu dst") ||
        !fakecuda_dev_ok(src, 2 * bytes, "cuda_act_swiglu src") ||
        !fakecuda_aligned4(dst, "cuda_act_swiglu") ||
        !fakecuda_aligned4(src, "cuda_act_swiglu"))
        return cudaErrorInvalidValue;
    if ((const char *)dst < (const char *)src + 2 * bytes &&
        (const char *)src < (const char *)dst + bytes)
        return fakecuda_violation("cuda_act_swiglu: dst overlaps src");
    float *out = malloc(bytes * 2);
    if (!out) return cudaErrorMemoryAllocation;
    cuda_ref_act_swiglu(out, src, n, f);
    round_into(dst, out, (int64_t)n * f);
    free(out);
    return cudaSuccess;
}

cudaError_t cuda_rope(uint16_t *x, int64_t row_stride, const int32_t *pos,
                      const float *inv_freq, int32_t n, int32_t n_heads, int32_t head_dim,
                      int32_t dims, cudaStream_t stream)
{
    if (n < 0 || n_heads < 0 || n_heads > 65535 || dims <= 0 || dims % 2 ||
        dims > head_dim || row_stride < (int64_t)n_heads * head_dim)
        return cudaErrorInvalidValue;
    if (n == 0 || n_heads == 0) return cudaSuccess;
    /* The last row need only reach its last rotated head. */
    const size_t span = ((size_t)(n - 1) * (size_t)row_stride + (size_t)n_heads * head_dim);
    if (!fakecuda_stream_ok(stream, "cuda_rope") ||
        !fakecuda_dev_ok(x, span * 2, "cuda_rope x") ||
        !fakecuda_dev_ok(pos, (size_t)n * 4, "cuda_rope pos") ||
        !fakecuda_dev_ok(inv_freq, (size_t)(dims / 2) * 4, "cuda_rope inv_freq"))
        return cudaErrorInvalidValue;
    /* The reference works on whole rows; run it row by row on a copy of the span. */
    float *out = malloc((size_t)row_stride * sizeof *out);
    if (!out) return cudaErrorMemoryAllocation;
    for (int32_t r = 0; r < n; r++) {
        uint16_t *row = x + (int64_t)r * row_stride;
        cuda_ref_rope(out, row, (int64_t)n_heads * head_dim, &pos[r], inv_freq, 1, n_heads,
                      head_dim, dims);
        round_into(row, out, (int64_t)n_heads * head_dim);
    }
    free(out);
    return cudaSuccess;
}

cudaError_t cuda_decode_attn(const struct cuda_decode_attn_args *a, cudaStream_t stream)
{
    if (a->n_seq < 0 || a->n_head < 0 || a->head_dim % 2 || a->head_dim > 256 ||
        a->head_dim <= 0 || a->n_seq > 65535 || a->block_size < 1 || a->n_kv_head < 0 ||
        a->window < 0 || (a->n_kv_head > 0 && a->n_head % a->n_kv_head))
        return fakecuda_violation("cuda_decode_attn: bad sizes");
    if (a->n_seq == 0 || a->n_head == 0) return cudaSuccess;
    const int32_t KV = a->n_kv_head > 0 ? a->n_kv_head : a->n_head;
    const size_t rows = (size_t)a->n_seq;
    const size_t hd = (size_t)a->n_head * (size_t)a->head_dim;
    const size_t qkv_row = (size_t)(a->n_head + 2 * KV) * (size_t)a->head_dim;
    if (!fakecuda_stream_ok(stream, "cuda_decode_attn") ||
        !fakecuda_dev_ok(a->qkv, rows * qkv_row * 2, "cuda_decode_attn qkv") ||
        !fakecuda_dev_ok(a->out, rows * hd * 2, "cuda_decode_attn out") ||
        !kv_pool_ok(a->k, a->v, a->k8, a->v8, a->k_scale, a->v_scale,
                    "cuda_decode_attn K/V") ||
        !DEV(a->pos, "cuda_decode_attn pos") || !DEV(a->score, "cuda_decode_attn score") ||
        !fakecuda_dev_ok(a->blocks, rows * (size_t)a->max_blocks * 4,
                         "cuda_decode_attn blocks") ||
        !fakecuda_dev_ok(a->seqs, rows * sizeof *a->seqs, "cuda_decode_attn seqs") ||
        !fakecuda_dev_ok(a->new_slot, rows * (size_t)KV * 4, "cuda_decode_attn new_slot") ||
        !fakecuda_dev_ok(a->victim, rows * (size_t)KV * 4, "cuda_decode_attn victim") ||
        !fakecuda_aligned4(a->qkv, "cuda_decode_attn qkv") ||
        !fakecuda_aligned4(a->out, "cuda_decode_attn out"))
        return cudaErrorInvalidValue;
    for (int32_t i = 0; i < a->n_seq; i++) {
        const struct cuda_decode_seq *s = &a->seqs[i];
        if (s->n_slots > a->max_slots || s->n_slots < 1 ||
            s->n_slots > a->max_blocks * a->block_size)
            return fakecuda_violation("cuda_decode_attn: sequence %d has %d slots, max_slots "
                                      "%d, max_blocks %d", i, s->n_slots, a->max_slots,
                                      a->max_blocks);
        for (int32_t h = 0; h < KV; h++) {
            const int32_t ns = a->new_slot[(int64_t)i * KV + h];
            if (ns < 0 || ns >= s->n_slots)
                return fakecuda_violation("cuda_decode_attn: sequence %d head %d new slot %d "
                                          "outside [0, %d)", i, h, ns, s->n_slots);
        }
    }
    cuda_ref_decode_attn(a, NULL);
    return cudaSuccess;
}

cudaError_t cuda_prefill_attn(const struct cuda_prefill_attn_args *a, cudaStream_t stream)
{
    if (a->n_seq < 0 || a->n_head < 0 || a->head_dim < 1 || a->head_dim > 256 ||
        a->n_seq > 65535 || a->n_head > 65535 || a->block_size < 1 || a->n_kv_head < 0 ||
        a->window < 0 || (a->n_kv_head > 0 && a->n_head % a->n_kv_head))
        return fakecuda_violation("cuda_prefill_attn: bad sizes");
    if (a->n_seq == 0 || a->n_head == 0) return cudaSuccess;
    const int32_t KV = a->n_kv_head > 0 ? a->n_kv_head : a->n_head;
    const size_t rows = (size_t)a->n_tok;
    const size_t hd = (size_t)a->n_head * (size_t)a->head_dim;
    const size_t qkv_row = (size_t)(a->n_head + 2 * KV) * (size_t)a->head_dim;
    if (!fakecuda_stream_ok(stream, "cuda_prefill_attn") ||
        !fakecuda_dev_ok(a->qkv, rows * qkv_row * 2, "cuda_prefill_attn qkv") ||
        !fakecuda_dev_ok(a->out, rows * hd * 2, "cuda_prefill_attn out") ||
        !fakecuda_dev_ok(a->lse, rows * (size_t)a->n_head * 4, "cuda_prefill_attn lse") ||
        !kv_pool_ok(a->k, a->v, a->k8, a->v8, a->k_scale, a->v_scale,
                    "cuda_prefill_attn K/V") ||
        !DEV(a->pos, "cuda_prefill_attn pos") ||
        !DEV(a->score, "cuda_prefill_attn score") ||
        !fakecuda_dev_ok(a->blocks, (size_t)a->n_seq * (size_t)a->max_blocks * 4,
                         "cuda_prefill_attn blocks") ||
        !fakecuda_dev_ok(a->tok_pos, rows * 4, "cuda_prefill_attn tok_pos") ||
        !fakecuda_dev_ok(a->seqs, (size_t)a->n_seq * sizeof *a->seqs,
                         "cuda_prefill_attn seqs"))
        return cudaErrorInvalidValue;
    for (int32_t i = 0; i < a->n_seq; i++) {
        const struct cuda_prefill_seq *s = &a->seqs[i];
        if (s->n_tok < 1 || s->n_tok > a->max_chunk || s->n_slots > a->max_slots ||
            s->tok_start < 0 || s->tok_start + s->n_tok > a->n_tok ||
            s->slot_start + s->n_tok > s->n_slots ||
            s->n_slots > a->max_blocks * a->block_size)
            return fakecuda_violation("cuda_prefill_attn: chunk %d (rows %d+%d of %d, slots "
                                      "%d+%d of %d) against max_chunk %d max_slots %d "
                                      "max_blocks %d", i, s->tok_start, s->n_tok, a->n_tok,
                                      s->slot_start, s->n_tok, s->n_slots, a->max_chunk,
                                      a->max_slots, a->max_blocks);
    }
    cuda_ref_prefill_attn(a, NULL);
    return cudaSuccess;
}

cudaError_t cuda_kv_compact(const struct cuda_kv_compact_args *a, cudaStream_t stream)
{
    if (a->n_keep < 0 || a->n_keep > a->n_slots || a->head_dim % 2 || a->head_dim > 256)
        return fakecuda_violation("cuda_kv_compact: n_keep %d of %d slots", a->n_keep,
                                  a->n_slots);
    if (a->n_head == 0 || a->n_slots == 0) return cudaSuccess;
    const size_t nb = (size_t)((a->n_slots + a->block_size - 1) / a->block_size);
    if (!fakecuda_stream_ok(stream, "cuda_kv_compact") ||
        !kv_pool_ok(a->k, a->v, a->k8, a->v8, a->k_scale, a->v_scale,
                    "cuda_kv_compact K/V") ||
        !DEV(a->pos, "cuda_kv_compact pos") || !DEV(a->score, "cuda_kv_compact score") ||
        !fakecuda_dev_ok(a->blocks, nb * 4, "cuda_kv_compact blocks") ||
        !fakecuda_dev_ok(a->keep, (size_t)a->n_head * (size_t)a->n_keep * 4,
                         "cuda_kv_compact keep"))
        return cudaErrorInvalidValue;
    for (int32_t h = 0; h < a->n_head; h++)
        for (int32_t i = 0; i < a->n_keep; i++) {
            const int32_t k = a->keep[(int64_t)h * a->n_keep + i];
            if (k < i || k >= a->n_slots || (i && k <= a->keep[(int64_t)h * a->n_keep + i - 1]))
                return fakecuda_violation("cuda_kv_compact: head %d keep[%d] = %d not ascending "
                                          "in [0, %d)", h, i, k, a->n_slots);
        }
    cuda_ref_kv_compact(a);
    return cudaSuccess;
}

cudaError_t cuda_kv_blocks_init(uint16_t *v, int32_t *pos, float *score,
                                const int32_t *blocks, int32_t n, int32_t n_head,
                                int32_t head_dim, int32_t block_size, cudaStream_t stream)
{
    if (n < 0 || n_head < 0 || head_dim % 2 || block_size < 1) return cudaErrorInvalidValue;
    if (n == 0 || n_head == 0) return cudaSuccess;
    const size_t st = (size_t)n_head * (size_t)block_size;
    if (!fakecuda_stream_ok(stream, "cuda_kv_blocks_init") ||
        !fakecuda_dev_ok(blocks, (size_t)n * 4, "cuda_kv_blocks_init blocks") ||
        !fakecuda_aligned4(v, "cuda_kv_blocks_init v"))
        return cudaErrorInvalidValue;
    for (int32_t i = 0; i < n; i++) {
        const size_t b = (size_t)blocks[i];
        if (!fakecuda_dev_ok(v + b * st * (size_t)head_dim, st * (size_t)head_dim * 2,
                             "cuda_kv_blocks_init v") ||
            !fakecuda_dev_ok(pos + b * st, st * 4, "cuda_kv_blocks_init pos") ||
            !fakecuda_dev_ok(score + b * st, st * 4, "cuda_kv_blocks_init score"))
            return cudaErrorInvalidValue;
    }
    cuda_ref_kv_init_blocks(v, pos, score, blocks, n, n_head, head_dim, block_size);
    return cudaSuccess;
}

cudaError_t cuda_kv_blocks_init_i8(int8_t *v8, float *v_scale, int32_t *pos, float *score,
                                   const int32_t *blocks, int32_t n, int32_t n_head,
                                   int32_t head_dim, int32_t block_size,
                                   cudaStream_t stream)
{
    if (n < 0 || n_head < 0 || head_dim % 2 || block_size < 1 || !v_scale)
        return cudaErrorInvalidValue;
    if (n == 0 || n_head == 0) return cudaSuccess;
    const size_t st = (size_t)n_head * (size_t)block_size;
    if (!fakecuda_stream_ok(stream, "cuda_kv_blocks_init_i8") ||
        !fakecuda_dev_ok(blocks, (size_t)n * 4, "cuda_kv_blocks_init_i8 blocks"))
        return cudaErrorInvalidValue;
    for (int32_t i = 0; i < n; i++) {
        const size_t b = (size_t)blocks[i];
        if (!fakecuda_dev_ok(v8 + b * st * (size_t)head_dim, st * (size_t)head_dim,
                             "cuda_kv_blocks_init_i8 v8") ||
            !fakecuda_dev_ok(v_scale + b * st, st * 4, "cuda_kv_blocks_init_i8 v_scale") ||
            !fakecuda_dev_ok(pos + b * st, st * 4, "cuda_kv_blocks_init_i8 pos") ||
            !fakecuda_dev_ok(score + b * st, st * 4, "cuda_kv_blocks_init_i8 score"))
            return cudaErrorInvalidValue;
    }
    cuda_ref_kv_init_blocks_i8(v8, v_scale, pos, score, blocks, n, n_head, head_dim,
                               block_size);
    return cudaSuccess;
}

cudaError_t cuda_kv_blocks_gather_state(int32_t *pos_out, float *score_out,
                                        const int32_t *pos, const float *score,
                                        const int32_t *blocks, int32_t n_slots,
                                        int32_t n_head, int32_t block_size,
                                        cudaStream_t stream)
{
    if (n_slots < 0 || n_head < 0 || n_head > 65535 || block_size < 1)
        return cudaErrorInvalidValue;
    if (n_slots == 0 || n_head == 0) return cudaSuccess;
    const size_t out = (size_t)n_head * (size_t)n_slots * 4;
    const size_t nb = (size_t)((n_slots + block_size - 1) / block_size);
    if (!fakecuda_stream_ok(stream, "cuda_kv_blocks_gather_state") ||
        !fakecuda_dev_ok(pos_out, out, "cuda_kv_blocks_gather_state pos_out") ||
        !fakecuda_dev_ok(score_out, out, "cuda_kv_blocks_gather_state score_out") ||
        !DEV(pos, "cuda_kv_blocks_gather_state pos") ||
        !DEV(score, "cuda_kv_blocks_gather_state score") ||
        !fakecuda_dev_ok(blocks, nb * 4, "cuda_kv_blocks_gather_state blocks"))
        return cudaErrorInvalidValue;
    cuda_ref_kv_gather_state(pos_out, score_out, pos, score, blocks, n_slots, n_head,
                             block_size);
    return cudaSuccess;
}

cudaError_t cuda_sample(const struct cuda_sample_args *a, cudaStream_t stream)
{
    if (a->n < 0 || a->vocab <= 0 || !a->scratch) return cudaErrorInvalidValue;
    if (a->n == 0) return cudaSuccess;
    const size_t n = (size_t)a->n, T = CUDA_SAMPLE_MAX_TOP;
    if (!fakecuda_stream_ok(stream, "cuda_sample") ||
        !fakecuda_dev_ok(a->logits, n * (size_t)a->vocab * 4, "cuda_sample logits") ||
        !fakecuda_dev_ok(a->temperature, n * 4, "cuda_sample temperature") ||
        !fakecuda_dev_ok(a->top_k, n * 4, "cuda_sample top_k") ||
        !fakecuda_dev_ok(a->top_p, n * 4, "cuda_sample top_p") ||
        !fakecuda_dev_ok(a->u, n * 8, "cuda_sample u") ||
        !fakecuda_dev_ok(a->n_logprobs, n * 4, "cuda_sample n_logprobs") ||
        !fakecuda_dev_ok(a->token, n * 4, "cuda_sample token") ||
        !fakecuda_dev_ok(a->logprob, n * 4, "cuda_sample logprob") ||
        !fakecuda_dev_ok(a->n_top, n * 4, "cuda_sample n_top") ||
        !fakecuda_dev_ok(a->top_ids, n * T * 4, "cuda_sample top_ids") ||
        !fakecuda_dev_ok(a->top_logprobs, n * T * 4, "cuda_sample top_logprobs") ||
        !fakecuda_dev_ok(a->scratch, CUDA_SAMPLE_SCRATCH_BYTES(a->n, a->vocab),
                         "cuda_sample scratch"))
        return cudaErrorInvalidValue;
    cuda_ref_sample(a);
    return cudaSuccess;
}

cudaError_t cuda_logits_rows(float *dst, const float *src, const int32_t *rows, int32_t n,
                             int32_t vocab, const int32_t *add_off, const int32_t *add_ids,
                             const float *add_vals, cudaStream_t stream)
{
    if (n < 0 || vocab <= 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    if (!fakecuda_stream_ok(stream, "cuda_logits_rows") ||
        !fakecuda_dev_ok(dst, (size_t)n * (size_t)vocab * 4, "cuda_logits_rows dst") ||
        !fakecuda_dev_ok(rows, (size_t)n * 4, "cuda_logits_rows rows") ||
        !fakecuda_dev_ok(add_off, (size_t)(n + 1) * 4, "cuda_logits_rows add_off"))
        return cudaErrorInvalidValue;
    for (int32_t i = 0; i < n; i++)
        if (!fakecuda_dev_ok(src + (int64_t)rows[i] * vocab, (size_t)vocab * 4,
                             "cuda_logits_rows src row"))
            return cudaErrorInvalidValue;
    if (add_off[n] > 0 &&
        (!fakecuda_dev_ok(add_ids, (size_t)add_off[n] * 4, "cuda_logits_rows add_ids") ||
         !fakecuda_dev_ok(add_vals, (size_t)add_off[n] * 4, "cuda_logits_rows add_vals")))
        return cudaErrorInvalidValue;
    cuda_ref_logits_rows(dst, src, rows, n, vocab, add_off, add_ids, add_vals);
    return cudaSuccess;
}
