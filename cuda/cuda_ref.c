/*
 * cuda_ref.c - host references of cuda_decode_attn and cuda_prefill_attn, of the
 * KV state kernels cuda_kv_compact, cuda_kv_blocks_init and cuda_kv_blocks_gather_state,
 * and of the families' element-wise kernels cuda_norm, cuda_act, cuda_act_swiglu and
 * cuda_rope (see cuda_ref.h).
 *
 * Written to be read next to cuda_decode_attn.cu: the same steps in the same order
 * for one (sequence, head) at a time. The logits are the kernel's exact arithmetic
 * (q widened and scaled in fp32, then one fmaf per dimension in order), so they are
 * bit-identical on host and device; the softmax sums and the value sums are
 * sequential here and tree-shaped on the device, and expf differs by an ulp or two,
 * so those agree to fp32 rounding noise (about 1e-7 relative), not bit for bit.
 * With an int8 cache (a->k8 set) the same steps read int8 elements and their per-slot
 * scales: the logit is k_scale * (the fmaf chain over the widened int8 key), a value
 * row adds fmaf(p * v_scale, element, o), as the CPU's cpu_attn_int8.c does.
 */
#include "cuda_ref.h"

#include "dtype.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

float cuda_ref_int8_quantize(int8_t *dst, int64_t stride, const uint16_t *x, int32_t n)
{
    /* Operation for operation cpu_attn_int8_quantize on f16_to_f32(x): that function
     * lives in engine/cpu/, which this plain-C reference does not link (it is built in
     * every configuration, the kernels' contract alone); test_cuda_ref compares the
     * two on the same rows. */
    float amax = 0.0f;
    for (int32_t i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(f16_to_f32(x[i])));
    if (amax == 0.0f) {
        for (int32_t i = 0; i < n; i++)
            dst[i * stride] = 0;
        return 0.0f;
    }
    const float inv = 127.0f / amax;
    for (int32_t i = 0; i < n; i++) {
        /* The product may round past 127 by an ulp: clamp so it never wraps. */
        const long e = lrintf(f16_to_f32(x[i]) * inv);
        dst[i * stride] = (int8_t)(e > 127 ? 127 : e < -127 ? -127 : e);
    }
    return amax / 127.0f;
}

int32_t cuda_ref_victim(const float *score, const int32_t *pos, int32_t n, int32_t t,
                        int32_t recent)
{
    const int64_t last = (int64_t)t - (recent - 1); /* positions above stay */
    int32_t best = -1;
    for (int32_t j = 0; j < n; j++) {
        if (pos[j] < 0 || pos[j] > last) continue;
        if (best < 0 || score[j] < score[best] ||
            (score[j] == score[best] && pos[j] < pos[best]))
            best = j;
    }
    return best;
}

int32_t cuda_ref_victim_window(const float *score, const int32_t *pos, int32_t n, int32_t t,
                               int32_t recent, int32_t window)
{
    if (window > 0) {
        /* The oldest slot the next token (t + 1) cannot see goes first, whatever its
         * score and even among the R - 1 newest (h2o_select_evict_window). */
        int32_t best = -1;
        for (int32_t j = 0; j < n; j++)
            if (pos[j] >= 0 && pos[j] <= t + 1 - window && (best < 0 || pos[j] < pos[best]))
                best = j;
        if (best >= 0) return best;
    }
    return cuda_ref_victim(score, pos, n, t, recent);
}

/* KV heads of the pool: n_kv_head, or n_head when 0 (one KV head per query head). */
static int32_t decode_kv_heads(const struct cuda_decode_attn_args *a)
{
    return a->n_kv_head > 0 ? a->n_kv_head : a->n_head;
}

/* Index of slot s of KV head g in a [n_blocks, n_kv_head, block_size] array. */
static int64_t slot_index(const struct cuda_decode_attn_args *a, const int32_t *blocks,
                          int32_t s, int32_t g)
{
    return ((int64_t)blocks[s / a->block_size] * decode_kv_heads(a) + g) * a->block_size +
           s % a->block_size;
}

/*
 * Sequence i's KV head g: the new token's K/V, then each query head of the group in
 * order (their outputs into out_f32 / a->out), each adding its probabilities to the
 * KV head's scores as the CPU's attend_seq_kv_head does, then the victim.
 */
static void decode_kv_head(const struct cuda_decode_attn_args *a, int32_t i, int32_t g,
                           float *q, float *p, int32_t *hpos, float *hscore, float *o,
                           float *out_f32)
{
    const int32_t H = a->n_head, KV = decode_kv_heads(a), D = a->head_dim;
    const int32_t BS = a->block_size, rep = H / KV;
    const struct cuda_decode_seq *sq = &a->seqs[i];
    const int32_t *blocks = a->blocks + (int64_t)i * a->max_blocks;
    const uint16_t *row = a->qkv + (int64_t)i * (H + 2 * KV) * D;
    const int32_t n = sq->n_slots;
    /* Visible: 0 <= pos <= t, and inside the window when there is one. */
    const int64_t lo = a->window > 0 ? (int64_t)sq->t - a->window : -1;

    /* The new token's K, V and slot state. */
    const int32_t ns = a->new_slot[(int64_t)i * KV + g];
    const int64_t ni = slot_index(a, blocks, ns, g);
    const int64_t tile = ni / BS, off = ni % BS; /* (block, head) tile, slot in it */
    const uint16_t *kn = row + (int64_t)H * D + (int64_t)g * D, *vn = kn + (int64_t)KV * D;
    if (a->k8) {
        a->k_scale[ni] = cuda_ref_int8_quantize(a->k8 + tile * D * BS + off, BS, kn, D);
        a->v_scale[ni] = cuda_ref_int8_quantize(a->v8 + ni * D, 1, vn, D);
    } else {
        for (int32_t d = 0; d < D; d++) {
            a->k[(tile * D + d) * BS + off] = kn[d];
            a->v[ni * D + d] = vn[d];
        }
    }
    a->pos[ni] = sq->t;
    a->score[ni] = 0.0f;

    int32_t n_occ = 0;
    for (int32_t h = g * rep; h < (g + 1) * rep; h++) {
        for (int32_t d = 0; d < D; d++)
            q[d] = f16_to_f32(row[(int64_t)h * D + d]) * a->scale;

        /* Logits, -inf where the slot is free, outside the window or (never in
         * decode) later than t. */
        float mx = -INFINITY;
        for (int32_t j = 0; j < n; j++) {
            const int64_t si = slot_index(a, blocks, j, g);
            const int64_t tj = si / BS, oj = si % BS;
            const int32_t pj = a->pos[si];
            float l = -INFINITY;
            if (pj >= 0 && pj <= sq->t && pj > lo) {
                float acc = 0.0f;
                if (a->k8) {
                    for (int32_t d = 0; d < D; d++)
                        acc = fmaf(q[d], (float)a->k8[(tj * D + d) * BS + oj], acc);
                    acc = a->k_scale[si] * acc;
                } else {
                    for (int32_t d = 0; d < D; d++)
                        acc = fmaf(q[d], f16_to_f32(a->k[(tj * D + d) * BS + oj]), acc);
                }
                l = acc;
            }
            p[j] = l;
            mx = l > mx ? l : mx;
        }
        /* fp32 softmax; the token always sees itself, so the sum is at least 1. */
        float sum = 0.0f;
        for (int32_t j = 0; j < n; j++) {
            p[j] = expf(p[j] - mx);
            sum += p[j];
        }
        const float inv = 1.0f / sum;
        for (int32_t d = 0; d < D; d++)
            o[d] = 0.0f;
        n_occ = 0;
        for (int32_t j = 0; j < n; j++) {
            const int64_t si = slot_index(a, blocks, j, g);
            p[j] *= inv;
            if (a->pos[si] >= 0) n_occ++;
            if (p[j] != 0.0f) { /* free slots: no score, and their V may be anything */
                a->score[si] += p[j];
                if (a->k8) {
                    const float pv = p[j] * a->v_scale[si];
                    for (int32_t d = 0; d < D; d++)
                        o[d] = fmaf(pv, (float)a->v8[si * D + d], o[d]);
                } else {
                    for (int32_t d = 0; d < D; d++)
                        o[d] = fmaf(p[j], f16_to_f32(a->v[si * D + d]), o[d]);
                }
            }
        }
        const int64_t oi = (int64_t)i * H * D + (int64_t)h * D;
        for (int32_t d = 0; d < D; d++) {
            if (out_f32) out_f32[oi + d] = o[d];
            if (a->out) a->out[oi + d] = f32_to_f16(o[d]);
        }
    }
    for (int32_t j = 0; j < n; j++) {
        const int64_t si = slot_index(a, blocks, j, g);
        hpos[j] = a->pos[si];
        hscore[j] = a->score[si];
    }
    const bool evict = sq->budget > 0 && n_occ >= sq->budget;
    a->victim[(int64_t)i * KV + g] =
        evict ? cuda_ref_victim_window(hscore, hpos, n, sq->t, sq->recent, a->window) : -1;
}

void cuda_ref_decode_attn(const struct cuda_decode_attn_args *a, float *out_f32)
{
    const int32_t KV = decode_kv_heads(a), D = a->head_dim;
    if (a->n_head % KV != 0) abort(); /* the caller's contract: whole groups */
    float *q = malloc((size_t)D * sizeof *q), *o = malloc((size_t)D * sizeof *o);
    float *p = malloc((size_t)(a->max_slots > 0 ? a->max_slots : 1) * sizeof *p);
    float *hscore = malloc((size_t)(a->max_slots > 0 ? a->max_slots : 1) * sizeof *hscore);
    int32_t *hpos = malloc((size_t)(a->max_slots > 0 ? a->max_slots : 1) * sizeof *hpos);
    if (!q || !o || !p || !hscore || !hpos) abort();
    for (int32_t i = 0; i < a->n_seq; i++)
        for (int32_t g = 0; g < KV; g++)
            decode_kv_head(a, i, g, q, p, hpos, hscore, o, out_f32);
    free(q);
    free(o);
    free(p);
    free(hscore);
    free(hpos);
}

void cuda_ref_kv_compact(const struct cuda_kv_compact_args *a)
{
    const int32_t H = a->n_head, D = a->head_dim, BS = a->block_size;
    for (int32_t h = 0; h < H; h++) {
        const int32_t *keep = a->keep + (int64_t)h * a->n_keep;
        for (int32_t i = 0; i < a->n_slots; i++) {
            /* Tile (block, head) and offset of destination slot i. */
            const int64_t td = (int64_t)a->blocks[i / BS] * H + h, od = i % BS;
            if (i >= a->n_keep) {
                a->pos[td * BS + od] = -1;
                a->score[td * BS + od] = 0.0f;
                continue;
            }
            const int32_t src = keep[i];
            const int64_t ts = (int64_t)a->blocks[src / BS] * H + h, os = src % BS;
            if (a->k8) {
                for (int32_t d = 0; d < D; d++) /* K tile transposed, as below */
                    a->k8[(td * D + d) * BS + od] = a->k8[(ts * D + d) * BS + os];
                for (int32_t d = 0; d < D; d++)
                    a->v8[(td * BS + od) * D + d] = a->v8[(ts * BS + os) * D + d];
                a->k_scale[td * BS + od] = a->k_scale[ts * BS + os];
                a->v_scale[td * BS + od] = a->v_scale[ts * BS + os];
            } else {
                for (int32_t d = 0; d < D;
                     d++) /* K tile transposed: [head_dim, block_size] */
                    a->k[(td * D + d) * BS + od] = a->k[(ts * D + d) * BS + os];
                for (int32_t d = 0; d < D; d++)
                    a->v[(td * BS + od) * D + d] = a->v[(ts * BS + os) * D + d];
            }
            a->pos[td * BS + od] = a->pos[ts * BS + os];
            a->score[td * BS + od] = a->score[ts * BS + os];
        }
    }
}

/* ---- whole blocks and the state read-back ------------------------------------------ */

void cuda_ref_kv_init_blocks(uint16_t *v, int32_t *pos, float *score, const int32_t *blocks,
                             int32_t n, int32_t n_head, int32_t head_dim,
                             int32_t block_size)
{
    /* A block is contiguous in every array: n_state slots, n_state * head_dim V values. */
    const int64_t n_state = (int64_t)n_head * block_size, n_v = n_state * head_dim;
    for (int32_t i = 0; i < n; i++) {
        const int64_t b = blocks[i];
        for (int64_t e = 0; e < n_v; e++)
            v[b * n_v + e] = 0; /* fp16 +0.0 */
        for (int64_t e = 0; e < n_state; e++) {
            pos[b * n_state + e] = -1;
            score[b * n_state + e] = 0.0f;
        }
    }
}

void cuda_ref_kv_init_blocks_i8(int8_t *v8, float *v_scale, int32_t *pos, float *score,
                                const int32_t *blocks, int32_t n, int32_t n_head,
                                int32_t head_dim, int32_t block_size)
{
    const int64_t n_state = (int64_t)n_head * block_size, n_v = n_state * head_dim;
    for (int32_t i = 0; i < n; i++) {
        const int64_t b = blocks[i];
        memset(v8 + b * n_v, 0, (size_t)n_v);
        for (int64_t e = 0; e < n_state; e++) {
            pos[b * n_state + e] = -1;
            score[b * n_state + e] = 0.0f;
            v_scale[b * n_state + e] = 0.0f;
        }
    }
}

void cuda_ref_kv_gather_state(int32_t *pos_out, float *score_out, const int32_t *pos,
                              const float *score, const int32_t *blocks, int32_t n_slots,
                              int32_t n_head, int32_t block_size)
{
    for (int32_t h = 0; h < n_head; h++)
        for (int32_t s = 0; s < n_slots; s++) {
            const int64_t src =
                ((int64_t)blocks[s / block_size] * n_head + h) * block_size +
                s % block_size;
            pos_out[(int64_t)h * n_slots + s] = pos[src];
            score_out[(int64_t)h * n_slots + s] = score[src];
        }
}

/* ---- prefill ------------------------------------------------------------------------ */

/* Index of slot s of head h of a sequence with block table `blocks`. */
/* KV heads of the pool: n_kv_head, or n_head when 0. */
static int32_t prefill_kv_heads(const struct cuda_prefill_attn_args *a)
{
    return a->n_kv_head > 0 ? a->n_kv_head : a->n_head;
}

static int64_t prefill_slot(const struct cuda_prefill_attn_args *a, const int32_t *blocks,
                            int32_t s, int32_t g)
{
    return ((int64_t)blocks[s / a->block_size] * prefill_kv_heads(a) + g) * a->block_size +
           s % a->block_size;
}

/* The logit of query q (already scaled, fp32) against slot s of KV head g, or -inf
 * when the query at position qpos must not see it (free, later, or outside the
 * window): the kernel's fmaf chain over d. */
static float prefill_logit(const struct cuda_prefill_attn_args *a, const int32_t *blocks,
                           int32_t s, int32_t g, const float *q, int32_t qpos)
{
    const int32_t D = a->head_dim, BS = a->block_size;
    const int64_t si = prefill_slot(a, blocks, s, g);
    const int32_t ps = a->pos[si];
    if (ps < 0 || ps > qpos || (a->window > 0 && ps <= (int64_t)qpos - a->window))
        return -INFINITY;
    const int64_t tile = si / BS, off = si % BS;
    float acc = 0.0f;
    if (a->k8) {
        for (int32_t d = 0; d < D; d++)
            acc = fmaf(q[d], (float)a->k8[(tile * D + d) * BS + off], acc);
        return a->k_scale[si] * acc;
    }
    for (int32_t d = 0; d < D; d++)
        acc = fmaf(q[d], f16_to_f32(a->k[(tile * D + d) * BS + off]), acc);
    return acc;
}

void cuda_ref_prefill_attn(const struct cuda_prefill_attn_args *a, float *out_f32)
{
    const int32_t H = a->n_head, KV = prefill_kv_heads(a), D = a->head_dim;
    const int32_t BS = a->block_size;
    if (H % KV != 0) abort(); /* the caller's contract: whole groups */
    const int32_t rep = H / KV;
    const int64_t row_stride = (int64_t)(H + 2 * KV) * D;

    /* 1. Every row's K, V and slot state, in every KV head. */
    for (int32_t i = 0; i < a->n_seq; i++) {
        const struct cuda_prefill_seq *sq = &a->seqs[i];
        const int32_t *blocks = a->blocks + (int64_t)i * a->max_blocks;
        for (int32_t r = 0; r < sq->n_tok; r++) {
            const int64_t row = sq->tok_start + r;
            for (int32_t g = 0; g < KV; g++) {
                const int64_t si = prefill_slot(a, blocks, sq->slot_start + r, g);
                const int64_t tile = si / BS, off = si % BS;
                const uint16_t *k =
                    a->qkv + row * row_stride + (int64_t)H * D + (int64_t)g * D;
                const uint16_t *v = k + (int64_t)KV * D;
                if (a->k8) {
                    a->k_scale[si] =
                        cuda_ref_int8_quantize(a->k8 + tile * D * BS + off, BS, k, D);
                    a->v_scale[si] = cuda_ref_int8_quantize(a->v8 + si * D, 1, v, D);
                } else {
                    for (int32_t d = 0; d < D; d++) {
                        a->k[(tile * D + d) * BS + off] = k[d];
                        a->v[si * D + d] = v[d];
                    }
                }
                a->pos[si] = a->tok_pos[row];
                a->score[si] = 0.0f;
            }
        }
    }

    const int32_t n_max = a->max_slots > 0 ? a->max_slots : 1;
    const int32_t c_max = a->max_chunk > 0 ? a->max_chunk : 1;
    float *q = malloc((size_t)c_max * D * sizeof *q), *o = malloc((size_t)D * sizeof *o);
    float *p = malloc((size_t)n_max * sizeof *p),
          *lse = malloc((size_t)c_max * sizeof *lse);
    if (!q || !o || !p || !lse) abort();
    for (int32_t i = 0; i < a->n_seq; i++) {
        const struct cuda_prefill_seq *sq = &a->seqs[i];
        const int32_t *blocks = a->blocks + (int64_t)i * a->max_blocks;
        const int32_t n = sq->n_slots;
        /* Query heads in order; h reads KV head g = h / rep, so a KV head's scores get
         * its group's column sums one query head after another. */
        for (int32_t h = 0; h < H; h++) {
            const int32_t g = h / rep;
            /* 2. Each query: logits, softmax, output, log-sum-exp. */
            for (int32_t r = 0; r < sq->n_tok; r++) {
                const int64_t row = sq->tok_start + r;
                float *qr = q + (int64_t)r * D;
                for (int32_t d = 0; d < D; d++)
                    qr[d] = f16_to_f32(a->qkv[row * row_stride + (int64_t)h * D + d]) *
                            a->scale;
                float mx = -INFINITY;
                for (int32_t j = 0; j < n; j++) {
                    p[j] = prefill_logit(a, blocks, j, g, qr, a->tok_pos[row]);
                    mx = p[j] > mx ? p[j] : mx;
                }
                float sum = 0.0f; /* >= 1: a query always sees itself */
                for (int32_t j = 0; j < n; j++) {
                    p[j] = expf(p[j] - mx);
                    sum += p[j];
                }
                lse[r] = mx + logf(sum);
                const float inv = 1.0f / sum;
                for (int32_t d = 0; d < D; d++)
                    o[d] = 0.0f;
                for (int32_t j = 0; j < n; j++) {
                    const float pj = p[j] * inv;
                    if (pj == 0.0f) continue; /* free slots: their V may be anything */
                    const int64_t si = prefill_slot(a, blocks, j, g);
                    if (a->k8) {
                        const float pv = pj * a->v_scale[si];
                        for (int32_t d = 0; d < D; d++)
                            o[d] = fmaf(pv, (float)a->v8[si * D + d], o[d]);
                    } else {
                        for (int32_t d = 0; d < D; d++)
                            o[d] = fmaf(pj, f16_to_f32(a->v[si * D + d]), o[d]);
                    }
                }
                const int64_t oi = row * H * D + (int64_t)h * D;
                for (int32_t d = 0; d < D; d++) {
                    if (out_f32) out_f32[oi + d] = o[d];
                    if (a->out) a->out[oi + d] = f32_to_f16(o[d]);
                }
                if (a->lse) a->lse[row * H + h] = lse[r];
            }
            /* 3. Column sums from the saved log-sum-exp, added to the scores. */
            for (int32_t j = 0; j < n; j++) {
                float col = 0.0f;
                for (int32_t r = 0; r < sq->n_tok; r++) {
                    const int64_t row = sq->tok_start + r;
                    const float l =
                        prefill_logit(a, blocks, j, g, q + (int64_t)r * D, a->tok_pos[row]);
                    col += expf(l - lse[r]); /* expf(-inf) = 0 */
                }
                a->score[prefill_slot(a, blocks, j, g)] += col;
            }
        }
    }
    free(q);
    free(o);
    free(p);
    free(lse);
}

void cuda_ref_logits_rows(float *dst, const float *src, const int32_t *rows, int32_t n,
                          int32_t vocab, const int32_t *add_off, const int32_t *add_ids,
                          const float *add_vals)
{
    for (int32_t i = 0; i < n; i++) {
        float *d = dst + (int64_t)i * vocab;
        memcpy(d, src + (int64_t)rows[i] * vocab, (size_t)vocab * sizeof *d);
        for (int32_t k = add_off[i]; k < add_off[i + 1]; k++) d[add_ids[k]] += add_vals[k];
    }
}

void cuda_ref_norm(float *out, const uint16_t *x, const uint16_t *w, const uint16_t *b,
                   int rms, float eps, int32_t n, int32_t d)
{
    for (int32_t i = 0; i < n; i++) {
        const uint16_t *row = x + (int64_t)i * d;
        float mean = 0.0f, var = 0.0f;
        if (!rms) {
            for (int32_t j = 0; j < d; j++)
                mean += f16_to_f32(row[j]);
            mean /= (float)d;
        }
        /* cpu_ops_norm's one loop for both: RMSNorm is the variance around 0. */
        for (int32_t j = 0; j < d; j++) {
            const float c = f16_to_f32(row[j]) - mean;
            var += c * c;
        }
        var /= (float)d;
        const float rstd = 1.0f / sqrtf(var + eps);
        for (int32_t j = 0; j < d; j++)
            out[(int64_t)i * d + j] =
                (f16_to_f32(row[j]) - mean) * rstd * f16_to_f32(w[j]) +
                (rms ? 0.0f : f16_to_f32(b[j]));
    }
}

float cuda_ref_act_one(float x, enum cuda_act act)
{
    switch (act) {
    case CUDA_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case CUDA_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case CUDA_ACT_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case CUDA_ACT_SILU: return x / (1.0f + expf(-x));
    }
    return x;
}

void cuda_ref_act(float *out, const uint16_t *x, const uint16_t *bias, int32_t n, int32_t m,
                  enum cuda_act act)
{
    for (int64_t i = 0; i < (int64_t)n * m; i++) {
        /* The bias is added in fp32 before the activation, with no fp16 rounding in
         * between: the kernel fuses both, as oneDNN fuses them on the CPU. */
        const float v = f16_to_f32(x[i]) + (bias ? f16_to_f32(bias[i % m]) : 0.0f);
        out[i] = cuda_ref_act_one(v, act);
    }
}

void cuda_ref_act_swiglu(float *out, const uint16_t *src, int32_t n, int32_t f)
{
    for (int32_t i = 0; i < n; i++) {
        const uint16_t *gate = src + (int64_t)i * 2 * f, *up = gate + f;
        for (int32_t j = 0; j < f; j++)
            out[(int64_t)i * f + j] =
                cuda_ref_act_one(f16_to_f32(gate[j]), CUDA_ACT_SILU) * f16_to_f32(up[j]);
    }
}

void cuda_ref_rope(float *out, const uint16_t *x, int64_t row_stride, const int32_t *pos,
                   const float *inv_freq, int32_t n, int32_t n_heads, int32_t head_dim,
                   int32_t dims)
{
    const int32_t half = dims / 2;
    for (int64_t e = 0; e < (int64_t)n * row_stride; e++)
        out[e] = f16_to_f32(x[e]);
    for (int32_t r = 0; r < n; r++)
        for (int32_t h = 0; h < n_heads; h++) {
            float *v = out + r * row_stride + (int64_t)h * head_dim;
            for (int32_t i = 0; i < half; i++) {
                /* HF: the fp32 product position * inv_freq, then cos and sin. */
                const float ang = (float)pos[r] * inv_freq[i];
                const float c = cosf(ang), s = sinf(ang);
                const float x1 = v[i], x2 = v[i + half];
                v[i] = x1 * c - x2 * s;
                v[i + half] = x2 * c + x1 * s;
            }
        }
}
