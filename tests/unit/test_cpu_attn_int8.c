/*
 * test_cpu_attn_int8.c - the int8 KV cache of the CPU backend (engine/cpu/
 * cpu_attn_int8.c): the quantizer's error bound, int8 attention against fp32
 * attention over the dequantized cache, and the H2O compaction moving the scales with
 * their slots.
 *
 * The int8 kernels never dequantize a tile: they take integer dot products with q
 * quantized to int16 (2^-16 of its largest element) and apply the scales after
 * (keys), or with the value weights p * v_scale quantized to int16 per block (values).
 * Over a cache that holds exactly the dequantized values, fp32 attention computes the
 * same sums with the full q and p, so the two agree to what the int16 grids cost,
 * about 2^-16 of the logits' terms (a few 1e-5 of the result here): that is the
 * tight comparison. A q or p on an int8 grid would be off by about 1e-2. The cache's
 * own quantization error is bounded by the quantizer's test.
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

TEST(quantize_error_is_at_most_half_a_step)
{
    struct rng r;
    rng_seed(&r, 7);
    const float mags[] = {1e-4f, 0.3f, 1.0f, 17.0f, 3e3f};
    float x[128];
    int8_t q[128 * 3];
    for (int m = 0; m < 5; m++)
        for (int rep = 0; rep < 20; rep++) {
            const int32_t n = rep % 2 ? 128 : 64;
            for (int32_t i = 0; i < n; i++)
                x[i] = mags[m] * rnd_f(&r);
            if (rep % 5 == 0) x[rep % n] = 40.0f * mags[m]; /* one outlier */
            memset(q, 0x55, sizeof q);
            const float s =
                cpu_attn_int8_quantize(q, 3, x, n); /* stride 3, as a K column */
            float amax = 0.0f;
            int32_t qmax = 0;
            for (int32_t i = 0; i < n; i++)
                amax = fmaxf(amax, fabsf(x[i]));
            EXPECT_NEAR(s, amax / 127.0f, 1e-6f * amax);
            for (int32_t i = 0; i < n; i++) {
                const int32_t e = q[i * 3];
                qmax = MAX(qmax, abs(e));
                if (fabsf(x[i] - s * (float)e) > 0.5f * s * (1.0f + 1e-5f))
                    TEST_FAIL("mag %g: x %g -> %d * %g is off by more than half a step",
                              (double)mags[m], (double)x[i], e, (double)s);
                EXPECT(q[i * 3 + 1] == 0x55 && q[i * 3 + 2] == 0x55); /* stride kept */
            }
            EXPECT_EQ(qmax, 127); /* the largest element uses the whole range */
        }
    /* An all-zero row: scale 0, elements 0, and nothing divided by zero. */
    memset(x, 0, sizeof x);
    memset(q, 0x55, sizeof q);
    EXPECT(cpu_attn_int8_quantize(q, 1, x, 64) == 0.0f);
    for (int32_t i = 0; i < 64; i++)
        EXPECT_EQ(q[i], 0);
    /* Quantizing the dequantized values gives the same elements back: what the
     * comparison below relies on. */
    for (int32_t i = 0; i < 64; i++)
        x[i] = rnd_f(&r);
    const float s = cpu_attn_int8_quantize(q, 1, x, 64);
    for (int32_t i = 0; i < 64; i++)
        x[i] = s * (float)q[i];
    int8_t q2[64];
    cpu_attn_int8_quantize(q2, 1, x, 64);
    EXPECT(memcmp(q, q2, 64) == 0);
}

/* One sequence over a pool of one layer: n_prior cached slots, n_new new tokens. */
struct icase {
    int32_t H, D, BS, n_blocks, n_prior, n_new;
    int32_t blocks[16];
    int32_t *pos;            /* [n_new] */
    float *qkv;              /* [n_new, 3 * H * D], new K/V already on the int8 grid */
    struct cpu_kv_layer i8;  /* the int8 pool */
    struct cpu_kv_layer f32; /* the same pool dequantized */
};

static void icase_make(struct icase *c, struct rng *r, int32_t n_prior, int32_t n_new)
{
    const int32_t H = c->H = 4, D = c->D = 64, BS = c->BS = 16;
    c->n_prior = n_prior;
    c->n_new = n_new;
    c->n_blocks = CEIL_DIV(n_prior + n_new, BS) + 2;
    CHECK(c->n_blocks <= 16);
    for (int32_t b = 0; b < c->n_blocks; b++)
        c->blocks[b] = c->n_blocks - 1 - b; /* scattered */
    const size_t n_el = (size_t)c->n_blocks * H * BS;
    c->i8 = (struct cpu_kv_layer){.k = xcalloc(n_el * D, 1),
                                  .v = xcalloc(n_el * D, 1),
                                  .pos = xmalloc(n_el * sizeof(int32_t)),
                                  .score = xcalloc(n_el, sizeof(float)),
                                  .k_scale = xcalloc(n_el, sizeof(float)),
                                  .v_scale = xcalloc(n_el, sizeof(float))};
    c->f32 = (struct cpu_kv_layer){.k = xcalloc(n_el * D, sizeof(float)),
                                   .v = xcalloc(n_el * D, sizeof(float)),
                                   .pos = xmalloc(n_el * sizeof(int32_t)),
                                   .score = xcalloc(n_el, sizeof(float))};
    for (size_t e = 0; e < n_el; e++)
        c->i8.pos[e] = c->f32.pos[e] = -1;
    /* Prior slots: quantized random K/V, every fifth slot an H2O hole. */
    float x[64];
    for (int32_t s = 0; s < n_prior; s++)
        for (int32_t h = 0; h < H; h++) {
            const int64_t t = (int64_t)c->blocks[s / BS] * H + h, si = t * BS + s % BS;
            const float mag = 0.1f + 3.0f * (float)rng_uniform(r);
            for (int32_t d = 0; d < D; d++)
                x[d] = mag * rnd_f(r);
            /* Each pool in its own layout (cpu_attn.h: int8 pairs its elements). */
            const int64_t base = t * D * BS;
            const int32_t j = s % BS;
            int8_t q8[64];
            c->i8.k_scale[si] = cpu_attn_int8_quantize(q8, 1, x, D);
            for (int32_t d = 0; d < D; d++) {
                ((int8_t *)c->i8.k)[base + cpu_attn_k_at(DTYPE_I8, BS, d, j)] = q8[d];
                ((float *)c->f32.k)[base + cpu_attn_k_at(DTYPE_F32, BS, d, j)] =
                    c->i8.k_scale[si] * (float)q8[d];
            }
            for (int32_t d = 0; d < D; d++)
                x[d] = mag * rnd_f(r);
            c->i8.v_scale[si] = cpu_attn_int8_quantize(q8, 1, x, D);
            for (int32_t d = 0; d < D; d++) {
                ((int8_t *)c->i8.v)[base + cpu_attn_v_at(DTYPE_I8, D, BS, j, d)] = q8[d];
                ((float *)c->f32.v)[base + cpu_attn_v_at(DTYPE_F32, D, BS, j, d)] =
                    c->i8.v_scale[si] * (float)q8[d];
            }
            c->i8.pos[si] = c->f32.pos[si] = s % 5 == 3 ? -1 : s;
            c->i8.score[si] = c->f32.score[si] = (float)rng_uniform(r);
        }
    /* New tokens: q fp32, k and v rounded to the int8 grid first, so that the int8
     * write stores exactly what the fp32 write does. */
    c->pos = xmalloc((size_t)n_new * sizeof *c->pos);
    c->qkv = xmalloc((size_t)n_new * 3 * H * D * sizeof *c->qkv);
    int8_t q8[64];
    for (int32_t i = 0; i < n_new; i++) {
        c->pos[i] = n_prior + i;
        float *row = c->qkv + (int64_t)i * 3 * H * D;
        for (int32_t e = 0; e < 3 * H * D; e++)
            row[e] = 2.0f * rnd_f(r);
        for (int32_t kv = 0; kv < 2 * H; kv++) {
            float *p = row + (int64_t)(H + kv) * D;
            const float s = cpu_attn_int8_quantize(q8, 1, p, D);
            for (int32_t d = 0; d < D; d++)
                p[d] = s * (float)q8[d];
        }
    }
}

static void layer_free(struct cpu_kv_layer *kv)
{
    free(kv->k);
    free(kv->v);
    free(kv->pos);
    free(kv->score);
    free(kv->k_scale);
    free(kv->v_scale);
}

static void icase_free(struct icase *c)
{
    layer_free(&c->i8);
    layer_free(&c->f32);
    free(c->pos);
    free(c->qkv);
}

/* One forward over kv (dtype dt) with kernel set k (NULL: the default); out [n_new, H D].
 */
static void forward(const struct icase *c, const struct cpu_kv_layer *kv, enum dtype dt,
                    const struct cpu_attn_kernels *k, float *out)
{
    int32_t tokens[64] = {0};
    struct be_seq sq = {.blocks = (int32_t *)c->blocks,
                        .n_blocks = c->n_blocks,
                        .tok_start = 0,
                        .n_tok = c->n_new,
                        .slot_start = c->n_prior,
                        .n_slots = c->n_prior + c->n_new};
    const struct be_batch b = {
        .n_tok = c->n_new, .tokens = tokens, .pos = c->pos, .n_seq = 1, .seqs = &sq};
    const int32_t stride = cpu_attn_scratch_floats(sq.n_slots, c->BS, c->H);
    float *scratch = xmalloc((size_t)omp_get_max_threads() * stride * sizeof *scratch);
    const struct cpu_attn_args a = {.batch = &b,
                                    .qkv = c->qkv,
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

/* Copy of kv's int8 arrays, so that several sets can run on the same cache. */
static struct cpu_kv_layer layer_dup(const struct icase *c, const struct cpu_kv_layer *kv)
{
    const size_t n_el = (size_t)c->n_blocks * c->H * c->BS;
    struct cpu_kv_layer d = {.k = xmalloc(n_el * c->D),
                             .v = xmalloc(n_el * c->D),
                             .pos = xmalloc(n_el * sizeof(int32_t)),
                             .score = xmalloc(n_el * sizeof(float)),
                             .k_scale = xmalloc(n_el * sizeof(float)),
                             .v_scale = xmalloc(n_el * sizeof(float))};
    memcpy(d.k, kv->k, n_el * c->D);
    memcpy(d.v, kv->v, n_el * c->D);
    memcpy(d.pos, kv->pos, n_el * sizeof(int32_t));
    memcpy(d.score, kv->score, n_el * sizeof(float));
    memcpy(d.k_scale, kv->k_scale, n_el * sizeof(float));
    memcpy(d.v_scale, kv->v_scale, n_el * sizeof(float));
    return d;
}

TEST(int8_attention_matches_fp32_on_the_dequantized_cache)
{
    struct rng r;
    rng_seed(&r, 11);
    /* A decode token (one query: the AVX-512 set's four-block path), a partial and a
     * full prompt tile, over a holed cache of several blocks. */
    const int32_t shapes[][2] = {{70, 1}, {70, 5}, {33, 8}, {0, 13}, {150, 1}};
    const struct cpu_attn_kernels *sets[2] = {&cpu_attn_int8_ref, cpu_attn_int8_avx512()};
    for (int sh = 0; sh < 5; sh++)
        for (int si = 0; si < 2; si++) {
            if (!sets[si]) continue;
            struct icase c;
            icase_make(&c, &r, shapes[sh][0], shapes[sh][1]);
            const size_t n_out = (size_t)c.n_new * c.H * c.D;
            float *o8 = xmalloc(n_out * sizeof *o8), *o32 = xmalloc(n_out * sizeof *o32);
            struct cpu_kv_layer kv = layer_dup(&c, &c.i8);
            forward(&c, &kv, DTYPE_I8, sets[si], o8);
            forward(&c, &c.f32, DTYPE_F32, &cpu_attn_ref, o32);
            double worst = 0.0, mag = 0.0;
            for (size_t e = 0; e < n_out; e++) {
                worst = fmax(worst, fabs((double)o8[e] - o32[e]));
                mag = fmax(mag, fabs((double)o32[e]));
            }
            if (worst > 2e-4 * fmax(mag, 1.0))
                TEST_FAIL("%s, %d + %d slots: output off by %g (max |out| %g)",
                          cpu_attn_kernels_name(sets[si]), c.n_prior, c.n_new, worst, mag);
            const size_t n_el = (size_t)c.n_blocks * c.H * c.BS;
            for (size_t e = 0; e < n_el; e++) {
                EXPECT_EQ(kv.pos[e], c.f32.pos[e]);
                if (fabsf(kv.score[e] - c.f32.score[e]) >
                    2e-4f * fmaxf(1.0f, c.f32.score[e]))
                    TEST_FAIL("%s: score of slot %zu: %g vs %g",
                              cpu_attn_kernels_name(sets[si]), e, (double)kv.score[e],
                              (double)c.f32.score[e]);
                if (kv.pos[e] < 0) continue;
                /* The new tokens' K/V were written on the int8 grid: the dequantized
                 * int8 write is the fp32 write. */
                const int64_t base = (int64_t)e / c.BS * c.D * c.BS;
                const int32_t j = (int32_t)(e % c.BS);
                for (int32_t d = 0; d < c.D; d++) {
                    const float k8 =
                        kv.k_scale[e] *
                        ((int8_t *)kv.k)[base + cpu_attn_k_at(DTYPE_I8, c.BS, d, j)];
                    const float k32 =
                        ((float *)c.f32.k)[base + cpu_attn_k_at(DTYPE_F32, c.BS, d, j)];
                    const float v8 =
                        kv.v_scale[e] *
                        ((int8_t *)kv.v)[base + cpu_attn_v_at(DTYPE_I8, c.D, c.BS, j, d)];
                    const float v32 =
                        ((float *)
                             c.f32.v)[base + cpu_attn_v_at(DTYPE_F32, c.D, c.BS, j, d)];
                    if (fabsf(k8 - k32) > 1e-6f * fabsf(k32) ||
                        fabsf(v8 - v32) > 1e-6f * fabsf(v32))
                        TEST_FAIL("slot %zu dim %d: int8 K/V %g %g vs fp32 %g %g", e, d,
                                  (double)k8, (double)v8, (double)k32, (double)v32);
                }
            }
            layer_free(&kv);
            free(o8);
            free(o32);
            icase_free(&c);
        }
}

TEST(int8_attention_is_close_to_fp32_attention_on_the_original_values)
{
    /* The end-to-end error of one attention: K/V quantized from fp32 (not already on
     * the grid) against fp32 K/V. Half a step per element of keys of |x| <= 1 moves a
     * logit by at most ~0.5/127 * |q|_1 / sqrt(D); the outputs move by about that
     * relative amount. The bound catches a lost scale or a sign error by far. */
    struct rng r;
    rng_seed(&r, 12);
    struct icase c;
    icase_make(&c, &r, 0, 40); /* a prompt: every K/V is written by this forward */
    /* Undo the rounding to the grid: fresh fp32 K/V. */
    for (int32_t i = 0; i < c.n_new; i++)
        for (int32_t e = c.H * c.D; e < 3 * c.H * c.D; e++)
            c.qkv[(int64_t)i * 3 * c.H * c.D + e] = rnd_f(&r);
    const size_t n_out = (size_t)c.n_new * c.H * c.D;
    float *o8 = xmalloc(n_out * sizeof *o8), *o32 = xmalloc(n_out * sizeof *o32);
    forward(&c, &c.i8, DTYPE_I8, NULL, o8);
    forward(&c, &c.f32, DTYPE_F32, NULL, o32);
    double err = 0.0, ref = 0.0;
    for (size_t e = 0; e < n_out; e++) {
        err += ((double)o8[e] - o32[e]) * ((double)o8[e] - o32[e]);
        ref += (double)o32[e] * o32[e];
    }
    const double rel = sqrt(err / ref);
    printf("# int8 vs fp32 attention: relative RMS error %.2e\n", rel);
    EXPECT(rel > 0.0 && rel < 1e-2);
    free(o8);
    free(o32);
    icase_free(&c);
}

TEST(compaction_moves_the_scales_with_their_slots)
{
    struct rng r;
    rng_seed(&r, 13);
    struct icase c;
    icase_make(&c, &r, 40, 1);
    struct cpu_kv_layer before = layer_dup(&c, &c.i8);
    const int32_t keep[] = {1, 3, 4, 17, 18, 30, 39}, n_keep = 7, h = 2;
    cpu_attn_kv_compact_head(&c.i8, DTYPE_I8, c.H, c.D, c.BS, h, c.blocks, 40, keep,
                             n_keep);
    for (int32_t i = 0; i < 40; i++) {
        const int64_t td = (int64_t)c.blocks[i / c.BS] * c.H + h, di = td * c.BS + i % c.BS;
        if (i >= n_keep) {
            EXPECT_EQ(c.i8.pos[di], -1);
            EXPECT(c.i8.score[di] == 0.0f);
            continue;
        }
        const int32_t s = keep[i];
        const int64_t ts = (int64_t)c.blocks[s / c.BS] * c.H + h, si = ts * c.BS + s % c.BS;
        EXPECT_EQ(c.i8.pos[di], before.pos[si]);
        EXPECT(c.i8.score[di] == before.score[si]);
        EXPECT(c.i8.k_scale[di] == before.k_scale[si]);
        EXPECT(c.i8.v_scale[di] == before.v_scale[si]);
        for (int32_t d = 0; d < c.D; d++) {
            EXPECT_EQ(
                ((int8_t *)
                     c.i8.k)[td * c.D * c.BS + cpu_attn_k_at(DTYPE_I8, c.BS, d, i % c.BS)],
                ((int8_t *)before
                     .k)[ts * c.D * c.BS + cpu_attn_k_at(DTYPE_I8, c.BS, d, s % c.BS)]);
            EXPECT_EQ(
                ((int8_t *)c.i8
                     .v)[td * c.D * c.BS + cpu_attn_v_at(DTYPE_I8, c.D, c.BS, i % c.BS, d)],
                ((int8_t *)before.v)[ts * c.D * c.BS +
                                     cpu_attn_v_at(DTYPE_I8, c.D, c.BS, s % c.BS, d)]);
        }
    }
    /* Other heads are untouched. */
    const size_t n_el = (size_t)c.n_blocks * c.H * c.BS;
    for (size_t e = 0; e < n_el; e++)
        if ((int32_t)(e / c.BS) % c.H != h) {
            EXPECT(c.i8.k_scale[e] == before.k_scale[e]);
            EXPECT_EQ(c.i8.pos[e], before.pos[e]);
        }
    layer_free(&before);
    icase_free(&c);
}

int main(void)
{
    RUN(quantize_error_is_at_most_half_a_step);
    RUN(int8_attention_matches_fp32_on_the_dequantized_cache);
    RUN(int8_attention_is_close_to_fp32_attention_on_the_original_values);
    RUN(compaction_moves_the_scales_with_their_slots);
    return test_done();
}
