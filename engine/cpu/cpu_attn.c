/*
 * cpu_attn.c - paged attention with H2O scores on the CPU (see cpu_attn.h): the
 * readable reference, portable C that the compiler vectorises.
 *
 * Work is split over (sequence, head) pairs: a pair's queries run in order on one
 * thread, so its score updates need no atomics and the sums are deterministic
 * whatever the thread count. Queries are processed in tiles of ATTN_QT so that each
 * K and V block loaded from memory serves several queries (prefill is then
 * compute-bound, not bandwidth-bound). Every query's arithmetic is the same whatever
 * tile it lands in (the same operations in the same order), so a sequence's result
 * does not depend on the rest of the batch or on how its prompt was chunked.
 *
 * The two passes over a sequence's blocks come from a kernel table
 * (cpu_attn_impl.h): this file's portable set (cpu_attn_ref), or the AVX-512 set of
 * cpu_attn_avx512.c for block size 16 when the build targets AVX-512. Both do the
 * same operations in the same order per element, so which one ran never shows in
 * the results (tests/unit/test_cpu_attn_kernels.c).
 */
#include "cpu_attn.h"
#include "cpu_attn_impl.h"

#include "util.h"

#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Each new token's K and V into its slot in every head (K transposed, V as a row),
 * with pos = the token's position and score 0. */
static void write_kv(const struct cpu_attn_args *a)
{
    const struct be_batch *b = a->batch;
    const int32_t H = a->n_head, NKV = cpu_attn_n_kv(a), D = a->head_dim,
                  BS = a->block_size;
    const int32_t KH = a->kv_n_head ? a->kv_n_head : NKV; /* head_slots has every head */
    const int64_t row_stride = (int64_t)(H + 2 * NKV) * D;
#pragma omp parallel for schedule(static)
    for (int32_t r = 0; r < b->n_tok; r++) {
        /* Find the row's sequence; rows are in sequence order. */
        int32_t s = 0;
        while (r >= b->seqs[s].tok_start + b->seqs[s].n_tok) s++;
        const struct be_seq *sq = &b->seqs[s];
        for (int32_t h = 0; h < NKV; h++) {
            int32_t slot = sq->head_slots ? sq->head_slots[a->layer * KH + a->head0 + h]
                                          : sq->slot_start + (r - sq->tok_start);
            int32_t off = slot % BS;
            int64_t t = cpu_attn_bh(a, sq->blocks[slot / BS], h);
            const float *k = a->qkv + r * row_stride + (int64_t)H * D + (int64_t)h * D;
            const float *v = k + (int64_t)NKV * D;
            if (a->kv_dtype == DTYPE_I8) { /* quantized, then into the paired layout */
                const int64_t si = t * BS + off;
                int8_t kq[ATTN_MAX_D], vq[ATTN_MAX_D];
                a->kv.k_scale[si] = cpu_attn_int8_quantize(kq, 1, k, D);
                a->kv.v_scale[si] = cpu_attn_int8_quantize(vq, 1, v, D);
                int8_t *kt = (int8_t *)a->kv.k + t * D * BS,
                       *vt = (int8_t *)a->kv.v + t * D * BS;
                for (int32_t d = 0; d < D; d++) {
                    kt[cpu_attn_k_at(DTYPE_I8, BS, d, off)] = kq[d];
                    vt[cpu_attn_v_at(DTYPE_I8, D, BS, off, d)] = vq[d];
                }
            } else if (a->kv_dtype == DTYPE_F32) {
                float *kt = (float *)a->kv.k + t * D * BS + off;
                for (int32_t d = 0; d < D; d++) kt[(int64_t)d * BS] = k[d];
                memcpy((float *)a->kv.v + (t * BS + off) * D, v, (size_t)D * sizeof(float));
            } else { /* bf16, in the paired layout (cpu_attn.h) */
                uint16_t *kt = (uint16_t *)a->kv.k + t * D * BS;
                uint16_t *vt = (uint16_t *)a->kv.v + t * D * BS;
                for (int32_t d = 0; d < D; d++) {
                    kt[cpu_attn_k_at(DTYPE_BF16, BS, d, off)] = f32_to_bf16(k[d]);
                    vt[cpu_attn_v_at(DTYPE_BF16, D, BS, off, d)] = f32_to_bf16(v[d]);
                }
            }
            a->kv.pos[t * BS + off] = b->pos[r];
            a->kv.score[t * BS + off] = 0.0f;
        }
    }
}

/*
 * Logits of NQ queries against one block: s[q * stride + j] = q_q . k_j for the
 * block's slots, -INFINITY where slot j is free, beyond n_valid, or later than the
 * query. Always inlined with constant NQ and BS, so the accumulators live in vector
 * registers; the same multiply-adds (contracted to FMA) in the same order keep every
 * query's arithmetic identical in every instantiation, and in the AVX-512 set's.
 */
static inline __attribute__((always_inline)) void
block_logits(const struct cpu_attn_args *a, int64_t t, int32_t n_valid, const float *qv,
             const int32_t *qpos, float *s, int32_t stride, const int32_t NQ, const int32_t BS)
{
    // qv: [NQ, head_dim] scaled queries; K tile t: [head_dim, BS]; s: [NQ, stride]
    const int32_t D = a->head_dim;
    float acc[ATTN_QT][ATTN_MAX_BS]; // acc: [NQ, BS] logits
    for (int32_t q = 0; q < NQ; q++)
        for (int32_t j = 0; j < BS; j++) acc[q][j] = 0.0f;
    for (int32_t d = 0; d < D; d++) {
        float kt[ATTN_MAX_BS]; // kt: [BS] dimension d of the block's keys
        memcpy(kt, (const float *)a->kv.k + (t * D + d) * BS, (size_t)BS * sizeof(float));
        for (int32_t q = 0; q < NQ; q++) {
            const float qd = qv[q * D + d];
            for (int32_t j = 0; j < BS; j++) acc[q][j] += qd * kt[j];
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
 * out[q] += sum_j p[q][j] v_j over one block, for NQ queries (constant when inlined).
 * The head dimension is walked in chunks of 16 (one vector) with the NQ partial
 * outputs of a chunk held in registers across the block's slots, so out is loaded
 * and stored once per chunk instead of once per slot.
 */
static inline __attribute__((always_inline)) void
block_values(const struct cpu_attn_args *a, int64_t t, const float *p, int32_t stride,
             float *out, const int32_t NQ, const int32_t BS)
{
    // p: [NQ, stride] probabilities; V tile t: [BS, head_dim]; out: [NQ, head_dim]
    const int32_t D = a->head_dim; /* a multiple of 16, checked at load */
    for (int32_t d0 = 0; d0 < D; d0 += 16) {
        float acc[ATTN_QT][16]; // acc: [NQ, 16] outputs d0..
        for (int32_t q = 0; q < NQ; q++)
            for (int32_t d = 0; d < 16; d++) acc[q][d] = out[q * D + d0 + d];
        for (int32_t j = 0; j < BS; j++) {
            float v[16]; // v: [16] of slot j
            memcpy(v, (const float *)a->kv.v + (t * BS + j) * D + d0, sizeof v);
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
 * Pass 1 (kernel table's tile_logits) for any block size: the tile's logits block by
 * block, with the block kernels instantiated for the common shapes (a full tile and
 * one query; block size 16 and any) so their accumulators stay in registers.
 */
static int32_t tile_logits(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                           const float *qv, const int32_t *qpos, int32_t nq, float *s,
                           int32_t width)
{
    const int32_t D = a->head_dim, BS = a->block_size;
    const int32_t nb = CEIL_DIV(sq->n_slots, BS);
    int32_t qmax = qpos[0], nb_vis = 0;
    for (int32_t q = 1; q < nq; q++) qmax = MAX(qmax, qpos[q]);
    for (int32_t bi = 0; bi < nb; bi++) {
        const int64_t t = cpu_attn_bh(a, sq->blocks[bi], h);
        const int32_t n_valid = MIN(BS, sq->n_slots - bi * BS);
        float *sb = s + bi * BS;
        if (!cpu_attn_block_visible(a, t, n_valid, qmax)) {
            for (int32_t q = 0; q < nq; q++)
                for (int32_t j = 0; j < BS; j++) sb[q * width + j] = -INFINITY;
            continue;
        }
        nb_vis = bi + 1;
        if (nq == ATTN_QT && BS == 16) {
            block_logits(a, t, n_valid, qv, qpos, sb, width, ATTN_QT, 16);
        } else if (nq == 4 && BS == 16) { /* a GQA group of 4, one decode token */
            block_logits(a, t, n_valid, qv, qpos, sb, width, 4, 16);
        } else if (nq == 2 && BS == 16) {
            block_logits(a, t, n_valid, qv, qpos, sb, width, 2, 16);
        } else if (nq == ATTN_QT) {
            block_logits(a, t, n_valid, qv, qpos, sb, width, ATTN_QT, BS);
        } else {
            for (int32_t q = 0; q < nq; q++) {
                if (BS == 16)
                    block_logits(a, t, n_valid, qv + q * D, qpos + q, sb + q * width, width, 1,
                                 16);
                else
                    block_logits(a, t, n_valid, qv + q * D, qpos + q, sb + q * width, width, 1,
                                 BS);
            }
        }
    }
    return nb_vis * BS;
}

/* Pass 3 (kernel table's tile_values) for any block size: outputs and H2O scores. */
static void tile_values(const struct cpu_attn_args *a, const struct be_seq *sq, int32_t h,
                        const float *p, const int32_t *qpos, int32_t nq, int32_t width,
                        int32_t width_vis, float *out)
{
    const int32_t D = a->head_dim, BS = a->block_size;
    int32_t qmax = qpos[0];
    for (int32_t q = 1; q < nq; q++) qmax = MAX(qmax, qpos[q]);
    for (int32_t bi = 0; bi < width_vis / BS; bi++) {
        const int64_t t = cpu_attn_bh(a, sq->blocks[bi], h);
        const float *pb = p + bi * BS;
        if (!cpu_attn_block_visible(a, t, MIN(BS, sq->n_slots - bi * BS), qmax))
            continue; /* every probability is 0: no score, no value */
        cpu_attn_block_scores(a, t, pb, width, nq, BS);
        if (nq == ATTN_QT && BS == 16) {
            block_values(a, t, pb, width, out, ATTN_QT, 16);
        } else if (nq == 4 && BS == 16) {
            block_values(a, t, pb, width, out, 4, 16);
        } else if (nq == 2 && BS == 16) {
            block_values(a, t, pb, width, out, 2, 16);
        } else if (nq == ATTN_QT) {
            block_values(a, t, pb, width, out, ATTN_QT, BS);
        } else {
            for (int32_t q = 0; q < nq; q++) {
                if (BS == 16) block_values(a, t, pb + q * width, width, out + q * D, 1, 16);
                else block_values(a, t, pb + q * width, width, out + q * D, 1, BS);
            }
        }
    }
}

/* The portable fp32 kernel set: any block size, no whole-sequence decode task. */
const struct cpu_attn_kernels cpu_attn_ref = {
    .name = "portable",
    .block_size = 0,
    .kv_dtype = DTYPE_F32,
    .tile_logits = tile_logits,
    .tile_values = tile_values,
    .decode_seq = NULL,
};

const struct cpu_attn_kernels *cpu_attn_kernels_for(int32_t block_size)
{
    const struct cpu_attn_kernels *fast = cpu_attn_avx512();
    if (fast && (fast->block_size == 0 || fast->block_size == block_size)) return fast;
    return &cpu_attn_ref;
}

const char *cpu_attn_kernels_name(const struct cpu_attn_kernels *k)
{
    return k->name;
}

/*
 * All queries of one sequence that read KV head kvh: with GQA the rep query heads
 * kvh * rep .. kvh * rep + rep - 1 of every token. They are tiled token by token,
 * the group's heads next to each other (query qi is token qi / rep, head
 * kvh * rep + qi % rep), so one pass over the KV head's blocks serves the whole
 * group: a decode token's rep heads share each K and V load instead of reading the
 * cache rep times. One task owns the KV head's scores and adds the queries in this
 * fixed order, so the sum over the group needs no atomics and is deterministic (and,
 * token order being kept, independent of chunking). Without GQA (rep 1) this is one
 * head's queries in token order. s is [ATTN_QT, n_blocks * BS] scratch.
 */
static void attend_seq_kv_head(const struct cpu_attn_args *a,
                               const struct cpu_attn_kernels *k, const struct be_seq *sq,
                               int32_t kvh, float *s)
{
    const struct be_batch *b = a->batch;
    const int32_t H = a->n_head, NKV = cpu_attn_n_kv(a), D = a->head_dim,
                  BS = a->block_size;
    const int32_t rep = H / NKV, n_q = sq->n_tok * rep;
    const int64_t row_stride = (int64_t)(H + 2 * NKV) * D;
    const int32_t width = CEIL_DIV(sq->n_slots, BS) * BS;
    float qv[ATTN_QT * ATTN_MAX_D], out[ATTN_QT * ATTN_MAX_D]; // qv, out: [nq, head_dim]
    int32_t qpos[ATTN_QT];

    for (int32_t q0 = 0; q0 < n_q; q0 += ATTN_QT) {
        const int32_t nq = MIN(ATTN_QT, n_q - q0);
        for (int32_t q = 0; q < nq; q++) {
            const int32_t r = sq->tok_start + (q0 + q) / rep;
            const int32_t h = kvh * rep + (q0 + q) % rep;
            const float *qr = a->qkv + r * row_stride + (int64_t)h * D;
            for (int32_t d = 0; d < D; d++) qv[q * D + d] = qr[d] * a->scale;
            qpos[q] = b->pos[r];
        }

        /* Pass 1: logits of every slot for every query of the tile, s: [nq, width]. */
        const int32_t width_vis = k->tile_logits(a, sq, kvh, qv, qpos, nq, s, width);
        /* Pass 2: fp32 softmax per query over the visible width. */
        for (int32_t q = 0; q < nq; q++) cpu_attn_softmax_row(s + (int64_t)q * width, width_vis);
        /* Pass 3: outputs and H2O scores (of the KV head's slots). */
        memset(out, 0, (size_t)(nq * D) * sizeof(float));
        k->tile_values(a, sq, kvh, s, qpos, nq, width, width_vis, out);
        for (int32_t q = 0; q < nq; q++)
            cpu_attn_store(a, sq->tok_start + (q0 + q) / rep, kvh * rep + (q0 + q) % rep,
                           out + q * D);
    }
}

void cpu_attn_forward(const struct cpu_attn_args *a)
{
    const struct be_batch *b = a->batch;
    CHECK(cpu_attn_supports(a->head_dim, a->block_size));
    const struct cpu_attn_kernels *k =
        a->kernels                  ? a->kernels
        : a->kv_dtype == DTYPE_I8   ? cpu_attn_int8_kernels_for(a->block_size)
        : a->kv_dtype == DTYPE_BF16 ? cpu_attn_bf16_kernels_for(a->block_size)
                                    : cpu_attn_kernels_for(a->block_size);
    CHECK(k->block_size == 0 || k->block_size == a->block_size);
    CHECK(k->kv_dtype == a->kv_dtype);
    write_kv(a);
    /* Tasks: a decode sequence as a whole (all heads, the table's decode_seq) when
     * the table has one and there are enough of them to keep every thread busy, else
     * one task per (sequence, head). head == -1 marks a whole-sequence task. */
    /* One task per (sequence, KV head); the whole-sequence decode kernel handles one
     * query head per KV head only. */
    const int32_t H = cpu_attn_n_kv(a);
    CHECK(a->n_head % H == 0);
    int32_t n_decode = 0;
    if (k->decode_seq && H == a->n_head && H <= ATTN_MAX_HEADS)
        for (int32_t i = 0; i < b->n_seq; i++) n_decode += b->seqs[i].n_tok == 1;
    if (n_decode < 2 * omp_get_max_threads()) n_decode = 0;
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
        CHECK(cpu_attn_scratch_floats(sq->n_slots, a->block_size, a->n_head) <=
              a->scratch_stride);
        float *s = a->scratch + (int64_t)omp_get_thread_num() * a->scratch_stride;
        if (task[t].head < 0) k->decode_seq(a, sq, s);
        else
            attend_seq_kv_head(a, k, sq, task[t].head, s);
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

void cpu_attn_kv_compact_head(const struct cpu_kv_layer *kv, enum dtype kv_dtype,
                              int32_t n_head, int32_t head_dim, int32_t block_size,
                              int32_t h, const int32_t *blocks, int32_t n_slots,
                              const int32_t *keep, int32_t n_keep)
{
    const int32_t H = n_head, D = head_dim, BS = block_size;
    const size_t es = (size_t)dtype_size(kv_dtype);
    const bool v_row = kv_dtype == DTYPE_F32; /* V slots are plain rows */
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
        /* A slot's key is one element per dimension (K tiles are transposed); its
         * value is a contiguous row except in the paired layouts of bf16 and int8. */
        char *kb = (char *)kv->k, *vb = (char *)kv->v;
        for (int32_t d = 0; d < D; d++) {
            memcpy(kb + (td * D * BS + cpu_attn_k_at(kv_dtype, BS, d, od)) * es,
                   kb + (ts * D * BS + cpu_attn_k_at(kv_dtype, BS, d, os)) * es, es);
            if (!v_row)
                memcpy(vb + (td * D * BS + cpu_attn_v_at(kv_dtype, D, BS, od, d)) * es,
                       vb + (ts * D * BS + cpu_attn_v_at(kv_dtype, D, BS, os, d)) * es, es);
        }
        if (v_row)
            memcpy(vb + (td * BS + od) * D * es, vb + (ts * BS + os) * D * es,
                   (size_t)D * es);
        kv->pos[td * BS + od] = kv->pos[ts * BS + os];
        kv->score[td * BS + od] = kv->score[ts * BS + os];
        if (kv->k_scale) {
            kv->k_scale[td * BS + od] = kv->k_scale[ts * BS + os];
            kv->v_scale[td * BS + od] = kv->v_scale[ts * BS + os];
        }
    }
}
