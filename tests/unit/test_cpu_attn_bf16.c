/*
 * test_cpu_attn_bf16.c - the bf16 KV cache's kernels (engine/cpu/cpu_attn_bf16.c)
 * against fp32 attention (cpu_attn.c's portable set) over a cache holding the same
 * bf16 values, and the paired layout through the write and the H2O compaction.
 *
 * The bf16 kernels widen the paired elements exactly and run the fp32 kernels' FMA
 * chains in the same order, so over a cache that holds exactly the bf16 values the
 * two give the same bits: outputs, scores, K/V and positions. That holds for every
 * shape here (decode tokens, partial and full prompt tiles, holed caches, odd block
 * sizes). The AVX-512 set against the portable one, bit for bit, is
 * tests/unit/test_cpu_attn_kernels.c.
 */
#include "test.h"

#include "cpu_attn.h"
#include "dtype.h"
#include "rng.h"
#include "util.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float rnd_f(struct rng *r)
{
    return (float)(2.0 * rng_uniform(r) - 1.0);
}

/* x rounded to bf16, as fp32. */
static float bf(float x)
{
    return bf16_to_f32(f32_to_bf16(x));
}

/* One sequence over a one-layer pool, fp32 and bf16 copies of the same values. */
struct bcase {
    int32_t H, D, BS, n_blocks, n_prior, n_new;
    int32_t blocks[64];
    int32_t *pos; /* [n_new] */
    float *qkv;   /* [n_new, 3 * H * D], new K/V already bf16 values */
    struct cpu_kv_layer b16, f32;
};

static size_t n_slots_of(const struct bcase *c)
{
    return (size_t)c->n_blocks * c->H * c->BS;
}

static void bcase_make(struct bcase *c, struct rng *r, int32_t BS, int32_t n_prior,
                       int32_t n_new, int32_t D)
{
    const int32_t H = c->H = 3;
    c->D = D;
    c->BS = BS;
    c->n_prior = n_prior;
    c->n_new = n_new;
    c->n_blocks = CEIL_DIV(n_prior + n_new, BS) + 2;
    CHECK(c->n_blocks <= 64);
    for (int32_t b = 0; b < c->n_blocks; b++)
        c->blocks[b] = c->n_blocks - 1 - b; /* scattered */
    const size_t n_el = n_slots_of(c);
    c->b16 = (struct cpu_kv_layer){.k = xcalloc(n_el * D, 2),
                                   .v = xcalloc(n_el * D, 2),
                                   .pos = xmalloc(n_el * sizeof(int32_t)),
                                   .score = xcalloc(n_el, sizeof(float))};
    c->f32 = (struct cpu_kv_layer){.k = xcalloc(n_el * D, sizeof(float)),
                                   .v = xcalloc(n_el * D, sizeof(float)),
                                   .pos = xmalloc(n_el * sizeof(int32_t)),
                                   .score = xcalloc(n_el, sizeof(float))};
    for (size_t e = 0; e < n_el; e++)
        c->b16.pos[e] = c->f32.pos[e] = -1;
    /* Prior slots: random bf16 K/V of varied size, every fifth slot an H2O hole. */
    for (int32_t s = 0; s < n_prior; s++)
        for (int32_t h = 0; h < H; h++) {
            const int64_t t = (int64_t)c->blocks[s / BS] * H + h, si = t * BS + s % BS;
            const float mag = 0.1f + 3.0f * (float)rng_uniform(r);
            for (int32_t d = 0; d < D; d++) {
                const float k = bf(mag * rnd_f(r)), v = bf(mag * rnd_f(r));
                const int64_t ki = t * D * BS, j = s % BS;
                ((uint16_t *)c->b16.k)[ki + cpu_attn_k_at(DTYPE_BF16, BS, d, j)] =
                    f32_to_bf16(k);
                ((uint16_t *)c->b16.v)[ki + cpu_attn_v_at(DTYPE_BF16, D, BS, j, d)] =
                    f32_to_bf16(v);
                ((float *)c->f32.k)[ki + cpu_attn_k_at(DTYPE_F32, BS, d, j)] = k;
                ((float *)c->f32.v)[ki + cpu_attn_v_at(DTYPE_F32, D, BS, j, d)] = v;
            }
            c->b16.pos[si] = c->f32.pos[si] = s % 5 == 3 ? -1 : s;
            c->b16.score[si] = c->f32.score[si] = (float)rng_uniform(r);
        }
    c->pos = xmalloc((size_t)n_new * sizeof *c->pos);
    c->qkv = xmalloc((size_t)n_new * 3 * H * D * sizeof *c->qkv);
    for (int32_t i = 0; i < n_new; i++) {
        c->pos[i] = n_prior + i;
        float *row = c->qkv + (int64_t)i * 3 * H * D;
        for (int32_t e = 0; e < 3 * H * D; e++) /* q full fp32; k, v bf16 values */
            row[e] = e < H * D ? 2.0f * rnd_f(r) : bf(2.0f * rnd_f(r));
    }
}

static void layer_free(struct cpu_kv_layer *kv)
{
    free(kv->k);
    free(kv->v);
    free(kv->pos);
    free(kv->score);
}

static void bcase_free(struct bcase *c)
{
    layer_free(&c->b16);
    layer_free(&c->f32);
    free(c->pos);
    free(c->qkv);
}

/* One forward of new tokens first .. first + count - 1 over kv (dtype dt) with kernel
 * set k (the earlier new tokens already written); out [count, H D]. */
static void forward_part(const struct bcase *c, const struct cpu_kv_layer *kv,
                         enum dtype dt, const struct cpu_attn_kernels *k, int32_t first,
                         int32_t count, float *out)
{
    int32_t tokens[64] = {0};
    struct be_seq sq = {.blocks = (int32_t *)c->blocks,
                        .n_blocks = c->n_blocks,
                        .n_tok = count,
                        .slot_start = c->n_prior + first,
                        .n_slots = c->n_prior + first + count};
    const struct be_batch b = {
        .n_tok = count, .tokens = tokens, .pos = c->pos + first, .n_seq = 1, .seqs = &sq};
    const int32_t stride = cpu_attn_scratch_floats(sq.n_slots, c->BS, c->H);
    float *scratch = xmalloc((size_t)omp_get_max_threads() * stride * sizeof *scratch);
    const struct cpu_attn_args a = {.batch = &b,
                                    .qkv = c->qkv + (int64_t)first * 3 * c->H * c->D,
                                    .out = out,
                                    .out_dtype = DTYPE_F32,
                                    .kv = *kv,
                                    .kv_dtype = dt,
                                    .n_head = c->H,
                                    .head_dim = c->D,
                                    .block_size = c->BS,
                                    .scale = 1.0f / sqrtf((float)c->D),
                                    .scratch = scratch,
                                    .scratch_stride = stride,
                                    .kernels = k};
    cpu_attn_forward(&a);
    free(scratch);
}

/* One forward of every new token. */
static void forward(const struct bcase *c, const struct cpu_kv_layer *kv, enum dtype dt,
                    const struct cpu_attn_kernels *k, float *out)
{
    forward_part(c, kv, dt, k, 0, c->n_new, out);
}

/* A copy of the bf16 pool, so that two runs can start from the same cache. */
static struct cpu_kv_layer pool_dup(const struct bcase *c)
{
    const size_t n_el = n_slots_of(c), kv_bytes = n_el * c->D * 2;
    struct cpu_kv_layer d = {.k = xmalloc(kv_bytes),
                             .v = xmalloc(kv_bytes),
                             .pos = xmalloc(n_el * sizeof(int32_t)),
                             .score = xmalloc(n_el * sizeof(float))};
    memcpy(d.k, c->b16.k, kv_bytes);
    memcpy(d.v, c->b16.v, kv_bytes);
    memcpy(d.pos, c->b16.pos, n_el * sizeof(int32_t));
    memcpy(d.score, c->b16.score, n_el * sizeof(float));
    return d;
}

/* Every slot's K/V, pos and score of the bf16 pool equal the fp32 pool's, read
 * through each dtype's layout; returns the differences (scores within tol of each
 * other, 0: the same bits). */
static int64_t pools_differ(const struct bcase *c, const struct cpu_kv_layer *b16,
                            const struct cpu_kv_layer *f32, float tol)
{
    const int32_t D = c->D, BS = c->BS;
    int64_t n = 0;
    for (size_t e = 0; e < n_slots_of(c); e++) {
        n += b16->pos[e] != f32->pos[e];
        n += fabsf(b16->score[e] - f32->score[e]) > tol * fmaxf(1.0f, f32->score[e]);
        if (f32->pos[e] < 0) continue;
        const int64_t base = (int64_t)(e / BS) * D * BS;
        const int32_t j = (int32_t)(e % BS);
        for (int32_t d = 0; d < D; d++) {
            n += bf16_to_f32(
                     ((uint16_t *)b16->k)[base + cpu_attn_k_at(DTYPE_BF16, BS, d, j)]) !=
                 ((float *)f32->k)[base + cpu_attn_k_at(DTYPE_F32, BS, d, j)];
            n += bf16_to_f32(
                     ((uint16_t *)b16->v)[base + cpu_attn_v_at(DTYPE_BF16, D, BS, j, d)]) !=
                 ((float *)f32->v)[base + cpu_attn_v_at(DTYPE_F32, D, BS, j, d)];
        }
    }
    return n;
}

TEST(bf16_attention_is_fp32_attention_on_the_same_values)
{
    struct rng r;
    rng_seed(&r, 21);
    /* Decode tokens (one query: the four-block path), partial and full prompt tiles,
     * over holed caches; block size 16 (both sets) and 5 (odd: the portable set's
     * plain last row of V); head_dim 80 (five chunks of 16) and 64. */
    const int32_t shapes[][4] = {{16, 70, 1, 80}, {16, 70, 5, 80},  {16, 33, 8, 80},
                                 {16, 0, 13, 64}, {16, 150, 1, 64}, {16, 70, 8, 64},
                                 {5, 40, 1, 80},  {5, 23, 9, 64}};
    const struct cpu_attn_kernels *sets[2] = {&cpu_attn_bf16_ref, cpu_attn_bf16_avx512()};
    for (int sh = 0; sh < 8; sh++)
        for (int si = 0; si < 2; si++) {
            if (!sets[si] || (si == 1 && shapes[sh][0] != 16)) /* AVX-512: block size 16 */
                continue;
            struct bcase c;
            bcase_make(&c, &r, shapes[sh][0], shapes[sh][1], shapes[sh][2], shapes[sh][3]);
            const size_t n_out = (size_t)c.n_new * c.H * c.D;
            float *o16 = xmalloc(n_out * sizeof *o16), *o32 = xmalloc(n_out * sizeof *o32);
            forward(&c, &c.b16, DTYPE_BF16, sets[si], o16);
            forward(&c, &c.f32, DTYPE_F32, &cpu_attn_ref, o32);
            double worst = 0.0, mag = 0.0;
            for (size_t e = 0; e < n_out; e++) {
                worst = fmax(worst, fabs((double)o16[e] - o32[e]));
                mag = fmax(mag, fabs((double)o32[e]));
            }
            if (worst != 0.0)
                TEST_FAIL(
                    "%s, block size %d, %d + %d slots: output off by %g (max |out| %g)",
                    cpu_attn_kernels_name(sets[si]), c.BS, c.n_prior, c.n_new, worst, mag);
            /* The new tokens' K/V landed in their slots in the paired layout. */
            const int64_t n_diff = pools_differ(&c, &c.b16, &c.f32, 0.0f);
            if (n_diff)
                TEST_FAIL("%s, block size %d: %lld slot elements differ",
                          cpu_attn_kernels_name(sets[si]), c.BS, (long long)n_diff);
            free(o16);
            free(o32);
            bcase_free(&c);
        }
}

TEST(a_query_gives_the_same_bits_in_any_tile)
{
    /* Twelve new tokens as one chunk (tiles of 8 + 4) and as chunks of 3 and 9 (tiles
     * 3, then 8 + 1): every query lands at another row of another tile, and the
     * outputs and the pool must be the same bits, in both sets. */
    struct rng r;
    rng_seed(&r, 23);
    const struct cpu_attn_kernels *sets[2] = {&cpu_attn_bf16_ref, cpu_attn_bf16_avx512()};
    for (int si = 0; si < 2; si++) {
        if (!sets[si]) continue;
        struct bcase c;
        bcase_make(&c, &r, 16, 70, 12, 64);
        const size_t row = (size_t)c.H * c.D;
        float *one = xmalloc(12 * row * sizeof *one),
              *two = xmalloc(12 * row * sizeof *two);
        struct cpu_kv_layer a = pool_dup(&c), b = pool_dup(&c);
        forward_part(&c, &a, DTYPE_BF16, sets[si], 0, 12, one);
        forward_part(&c, &b, DTYPE_BF16, sets[si], 0, 3, two);
        forward_part(&c, &b, DTYPE_BF16, sets[si], 3, 9, two + 3 * row);
        const size_t n_el = n_slots_of(&c);
        if (memcmp(one, two, 12 * row * sizeof *one) != 0 ||
            memcmp(a.score, b.score, n_el * sizeof(float)) != 0 ||
            memcmp(a.k, b.k, n_el * c.D * 2) != 0 || memcmp(a.v, b.v, n_el * c.D * 2) != 0)
            TEST_FAIL("%s: chunking changed the bits", cpu_attn_kernels_name(sets[si]));
        layer_free(&a);
        layer_free(&b);
        free(one);
        free(two);
        bcase_free(&c);
    }
}

TEST(compaction_moves_paired_elements_with_their_slots)
{
    struct rng r;
    rng_seed(&r, 22);
    const int32_t block_sizes[2] = {16, 5};
    for (int bi = 0; bi < 2; bi++) {
        struct bcase c;
        bcase_make(&c, &r, block_sizes[bi], 40, 0, 80);
        int32_t keep[40], n_keep = 0;
        for (int32_t s = 0; s < 40; s++)
            if (s % 3 != 1) keep[n_keep++] = s;
        for (int32_t h = 0; h < c.H; h++) {
            cpu_attn_kv_compact_head(&c.b16, DTYPE_BF16, c.H, c.D, c.BS, h, c.blocks, 40,
                                     keep, n_keep);
            cpu_attn_kv_compact_head(&c.f32, DTYPE_F32, c.H, c.D, c.BS, h, c.blocks, 40,
                                     keep, n_keep);
        }
        /* The fp32 compaction is the old, row-copying one: the same slots must hold
         * the same values after both. */
        EXPECT_EQ(pools_differ(&c, &c.b16, &c.f32, 0.0f), 0);
        bcase_free(&c);
    }
}

int main(void)
{
    RUN(bf16_attention_is_fp32_attention_on_the_same_values);
    RUN(a_query_gives_the_same_bits_in_any_tile);
    RUN(compaction_moves_paired_elements_with_their_slots);
    return test_done();
}
