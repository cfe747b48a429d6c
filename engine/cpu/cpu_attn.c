/*
 * cpu_attn.c - paged attention with H2O scores on the CPU (see cpu_attn.h).
 *
 * Work is split over (sequence, head) pairs: a pair's queries run in order on one
 * thread, so its score updates need no atomics and the sums are deterministic
 * whatever the thread count. That also makes a sequence's result independent of the
 * rest of the batch (batch invariance).
 */
#include "cpu_attn.h"

#include "util.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* Index of (block, head, offset) in a [n_blocks, n_head, block_size] array. */
static inline int64_t slot_index(int32_t block, int32_t head, int32_t off, int32_t n_head,
                                 int32_t block_size)
{
    return ((int64_t)block * n_head + head) * block_size + off;
}

static void write_kv(const struct cpu_attn_args *a)
{
    const struct be_batch *b = a->batch;
    const int32_t H = a->n_head, D = a->head_dim, BS = a->block_size;
    const int64_t row_stride = 3 * (int64_t)H * D;
#pragma omp parallel for schedule(static) collapse(2)
    for (int32_t r = 0; r < b->n_tok; r++) {
        for (int32_t h = 0; h < H; h++) {
            /* Find the row's sequence; batches are small lists, rows are in order. */
            int32_t s = 0;
            while (r >= b->seqs[s].tok_start + b->seqs[s].n_tok) s++;
            const struct be_seq *sq = &b->seqs[s];
            int32_t slot = sq->head_slots ? sq->head_slots[a->layer * H + h]
                                          : sq->slot_start + (r - sq->tok_start);
            int64_t si = slot_index(sq->blocks[slot / BS], h, slot % BS, H, BS);
            const float *k = a->qkv + r * row_stride + (int64_t)H * D + (int64_t)h * D;
            const float *v = k + (int64_t)H * D;
            if (a->kv_dtype == DTYPE_F32) {
                memcpy((float *)a->kv.k + si * D, k, (size_t)D * sizeof(float));
                memcpy((float *)a->kv.v + si * D, v, (size_t)D * sizeof(float));
            } else {
                uint16_t *kd = (uint16_t *)a->kv.k + si * D, *vd = (uint16_t *)a->kv.v + si * D;
                for (int32_t d = 0; d < D; d++) {
                    kd[d] = f32_to_bf16(k[d]);
                    vd[d] = f32_to_bf16(v[d]);
                }
            }
            a->kv.pos[si] = b->pos[r];
            a->kv.score[si] = 0.0f;
        }
    }
}

/* q . k over D elements, k in the KV dtype. */
static inline float dot_kv(const float *q, const void *k, int64_t off, int32_t D,
                           enum dtype dt)
{
    float acc = 0.0f;
    if (dt == DTYPE_F32) {
        const float *kf = (const float *)k + off;
#pragma omp simd reduction(+ : acc)
        for (int32_t d = 0; d < D; d++) acc += q[d] * kf[d];
    } else {
        const uint16_t *kh = (const uint16_t *)k + off;
#pragma omp simd reduction(+ : acc)
        for (int32_t d = 0; d < D; d++) acc += q[d] * bf16_to_f32(kh[d]);
    }
    return acc;
}

/* o += p * v over D elements, v in the KV dtype. */
static inline void axpy_kv(float *o, float p, const void *v, int64_t off, int32_t D,
                           enum dtype dt)
{
    if (dt == DTYPE_F32) {
        const float *vf = (const float *)v + off;
#pragma omp simd
        for (int32_t d = 0; d < D; d++) o[d] += p * vf[d];
    } else {
        const uint16_t *vh = (const uint16_t *)v + off;
#pragma omp simd
        for (int32_t d = 0; d < D; d++) o[d] += p * bf16_to_f32(vh[d]);
    }
}

/* All queries of one sequence for one head. */
static void attend_seq_head(const struct cpu_attn_args *a, const struct be_seq *sq,
                            int32_t h, float *logit)
{
    const struct be_batch *b = a->batch;
    const int32_t H = a->n_head, D = a->head_dim, BS = a->block_size;
    const int64_t row_stride = 3 * (int64_t)H * D;
    float q[512], o[512]; /* head_dim <= 256 for every OPT; checked at load */

    for (int32_t i = 0; i < sq->n_tok; i++) {
        const int32_t r = sq->tok_start + i;
        const int32_t qpos = b->pos[r];
        const float *qr = a->qkv + r * row_stride + (int64_t)h * D;
        for (int32_t d = 0; d < D; d++) q[d] = qr[d] * a->scale;

        /* Pass 1: logits of the visible slots (-INFINITY marks the others). */
        float mx = -INFINITY;
        for (int32_t s = 0; s < sq->n_slots; s++) {
            int64_t si = slot_index(sq->blocks[s / BS], h, s % BS, H, BS);
            int32_t p = a->kv.pos[si];
            if (p < 0 || p > qpos) {
                logit[s] = -INFINITY;
                continue;
            }
            logit[s] = dot_kv(q, a->kv.k, si * D, D, a->kv_dtype);
            mx = MAX(mx, logit[s]);
        }
        /* Pass 2: fp32 softmax. A query always sees itself, so mx is finite. */
        float sum = 0.0f;
        for (int32_t s = 0; s < sq->n_slots; s++) {
            float e = logit[s] == -INFINITY ? 0.0f : expf(logit[s] - mx);
            logit[s] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
        /* Pass 3: output and the H2O score of every attended slot. */
        memset(o, 0, (size_t)D * sizeof *o);
        for (int32_t s = 0; s < sq->n_slots; s++) {
            if (logit[s] == 0.0f) continue;
            float p = logit[s] * inv;
            int64_t si = slot_index(sq->blocks[s / BS], h, s % BS, H, BS);
            axpy_kv(o, p, a->kv.v, si * D, D, a->kv_dtype);
            a->kv.score[si] += p;
        }
        int64_t oi = (int64_t)r * H * D + (int64_t)h * D;
        if (a->out_dtype == DTYPE_F32) {
            memcpy((float *)a->out + oi, o, (size_t)D * sizeof *o);
        } else {
            uint16_t *out = (uint16_t *)a->out + oi;
            for (int32_t d = 0; d < D; d++) out[d] = f32_to_bf16(o[d]);
        }
    }
}

void cpu_attn_forward(const struct cpu_attn_args *a)
{
    const struct be_batch *b = a->batch;
    CHECK(a->head_dim <= 512);
    write_kv(a);
    const int32_t n_task = b->n_seq * a->n_head;
#pragma omp parallel for schedule(dynamic, 1)
    for (int32_t t = 0; t < n_task; t++) {
        const struct be_seq *sq = &b->seqs[t / a->n_head];
        CHECK(sq->n_slots <= a->scratch_stride);
        float *logit = a->scratch + (int64_t)omp_get_thread_num() * a->scratch_stride;
        attend_seq_head(a, sq, t % a->n_head, logit);
    }
}
