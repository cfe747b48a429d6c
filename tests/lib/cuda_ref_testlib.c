/*
 * cuda_ref_testlib.c - the CPU engine's side of the CUDA host reference tests
 * (cuda_ref_testlib.h).
 */
#include "cuda_ref_testlib.h"

#include "util.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

void cuda_ref_test_widen(float *dst, const uint16_t *src, int64_t n)
{
    for (int64_t e = 0; e < n; e++)
        dst[e] = f16_to_f32(src[e]);
}

void cuda_ref_test_cpu_attn(const struct be_batch *b, const float *qkv, float *out,
                            float *k32, float *v32, int32_t *pos, float *score,
                            int32_t n_head, int32_t head_dim, int32_t block_size,
                            int32_t max_slots)
{
    cuda_ref_test_cpu_attn_kv(b, qkv, out, k32, v32, pos, score, n_head, n_head, 0,
                              head_dim, block_size, max_slots);
}

/* One cpu_attn_forward over kv of dtype kv_dtype, as the CPU backend sets it up. */
static void cpu_attn_kv(const struct be_batch *b, const float *qkv, float *out,
                        struct cpu_kv_layer kv, enum dtype kv_dtype, int32_t n_head,
                        int32_t n_kv, int32_t window, int32_t head_dim, int32_t block_size,
                        int32_t max_slots)
{
    const int32_t stride = cpu_attn_scratch_floats(max_slots, block_size, n_head);
    float *scratch = xmalloc((size_t)omp_get_max_threads() * stride * sizeof *scratch);
    struct cpu_attn_args a = {
        .batch = b,
        .qkv = qkv,
        .out = out,
        .out_dtype = DTYPE_F32,
        .kv = kv,
        .kv_dtype = kv_dtype,
        .layer = 0,
        .n_head = n_head,
        .head_dim = head_dim,
        .block_size = block_size,
        .n_kv = n_kv,
        .window = window,
        .scale = 1.0f / sqrtf((float)head_dim),
        .scratch = scratch,
        .scratch_stride = stride,
    };
    cpu_attn_forward(&a);
    free(scratch);
}

void cuda_ref_test_cpu_attn_kv(const struct be_batch *b, const float *qkv, float *out,
                               float *k32, float *v32, int32_t *pos, float *score,
                               int32_t n_head, int32_t n_kv, int32_t window,
                               int32_t head_dim, int32_t block_size, int32_t max_slots)
{
    const struct cpu_kv_layer kv = {.k = k32, .v = v32, .pos = pos, .score = score};
    cpu_attn_kv(b, qkv, out, kv, DTYPE_F32, n_head, n_kv, window, head_dim, block_size,
                max_slots);
}

void cuda_ref_test_pool_copy(struct cuda_ref_test_pool *e, const struct paged_pool *p)
{
    const int64_t n = paged_pool_slots(p), D = p->head_dim;
    memset(e, 0, sizeof *e);
    e->n_slot = n;
    e->head_dim = p->head_dim;
    e->block_size = p->block_size;
    e->dtype = p->k8 ? DTYPE_I8 : DTYPE_F32;
    if (p->k8) {
        /* The CUDA pool keeps the fp16 layout; the CPU's int8 tiles pair their
         * elements (cpu_attn.h). */
        e->kv.k = xmalloc((size_t)(n * D));
        e->kv.v = xmalloc((size_t)(n * D));
        const int32_t BS = p->block_size;
        for (int64_t s = 0; s < n; s++) {
            const int64_t base = s / BS * D * BS;
            const int32_t j = (int32_t)(s % BS);
            for (int32_t d = 0; d < D; d++) {
                ((int8_t *)e->kv.k)[base + cpu_attn_k_at(DTYPE_I8, BS, d, j)] =
                    p->k8[base + (int64_t)d * BS + j];
                ((int8_t *)e->kv.v)[base + cpu_attn_v_at(DTYPE_I8, (int32_t)D, BS, j, d)] =
                    p->v8[s * D + d];
            }
        }
        e->kv.k_scale = xmalloc((size_t)n * sizeof(float));
        e->kv.v_scale = xmalloc((size_t)n * sizeof(float));
        memcpy(e->kv.k_scale, p->k_scale, (size_t)n * sizeof(float));
        memcpy(e->kv.v_scale, p->v_scale, (size_t)n * sizeof(float));
    } else {
        e->kv.k = xmalloc((size_t)(n * D) * sizeof(float));
        e->kv.v = xmalloc((size_t)(n * D) * sizeof(float));
        cuda_ref_test_widen(e->kv.k, p->k, n * D);
        cuda_ref_test_widen(e->kv.v, p->v, n * D);
    }
    e->kv.pos = xmalloc((size_t)n * sizeof(int32_t));
    e->kv.score = xmalloc((size_t)n * sizeof(float));
    memcpy(e->kv.pos, p->pos, (size_t)n * sizeof(int32_t));
    memcpy(e->kv.score, p->score, (size_t)n * sizeof(float));
}

void cuda_ref_test_pool_free(struct cuda_ref_test_pool *e)
{
    free(e->kv.k);
    free(e->kv.v);
    free(e->kv.k_scale);
    free(e->kv.v_scale);
    free(e->kv.pos);
    free(e->kv.score);
    memset(e, 0, sizeof *e);
}

int64_t cuda_ref_test_pool_kv_diffs(const struct cuda_ref_test_pool *e,
                                    const struct paged_pool *p)
{
    const int64_t n = e->n_slot, nd = n * e->head_dim;
    int64_t bad = 0;
    if (e->dtype == DTYPE_I8) {
        const int8_t *k = e->kv.k, *v = e->kv.v;
        const int32_t D = e->head_dim, BS = e->block_size;
        for (int64_t s = 0; s < n; s++) {
            const int64_t base = s / BS * D * BS;
            const int32_t j = (int32_t)(s % BS);
            for (int32_t d = 0; d < D; d++)
                bad += k[base + cpu_attn_k_at(DTYPE_I8, BS, d, j)] !=
                           p->k8[base + (int64_t)d * BS + j] ||
                       v[base + cpu_attn_v_at(DTYPE_I8, D, BS, j, d)] != p->v8[s * D + d];
        }
        for (int64_t i = 0; i < n; i++)
            bad += memcmp(&e->kv.k_scale[i], &p->k_scale[i], sizeof(float)) != 0 ||
                   memcmp(&e->kv.v_scale[i], &p->v_scale[i], sizeof(float)) != 0;
        return bad;
    }
    const float *k = e->kv.k, *v = e->kv.v;
    for (int64_t i = 0; i < nd; i++)
        bad += k[i] != f16_to_f32(p->k[i]) || v[i] != f16_to_f32(p->v[i]);
    return bad;
}

void cuda_ref_test_cpu_attn_pool(const struct be_batch *b, const float *qkv, float *out,
                                 struct cuda_ref_test_pool *e, int32_t n_head, int32_t n_kv,
                                 int32_t window, int32_t block_size, int32_t max_slots)
{
    cpu_attn_kv(b, qkv, out, e->kv, e->dtype, n_head, n_kv, window, e->head_dim, block_size,
                max_slots);
}
