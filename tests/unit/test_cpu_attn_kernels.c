/*
 * test_cpu_attn_kernels.c - the attention's AVX-512 kernel set (engine/cpu/
 * cpu_attn_avx512.c) against the portable reference (cpu_attn.c), bit for bit.
 *
 * The comments of both promise the same operations in the same order per element, so
 * the same batch on the same pool must leave the same bits in the outputs, the H2O
 * scores and the K/V/pos writes, whichever set runs and whichever task split
 * cpu_attn_forward picks (per (sequence, head), or a whole decode sequence at once
 * when there are enough of them). The batches cover what the engine sends: prompt
 * chunks of every tile shape (full tiles of ATTN_QT = 8, partial tiles, one query),
 * decode tokens into contiguous slots or into H2O holes (head_slots), freed slots in
 * the middle of a sequence, positions out of slot order (after H2O compaction), a last
 * block partly beyond n_slots, a tensor-parallel rank's share of the heads, and fp32,
 * bf16 and int8 K/V (int8: the AVX-512 int8 set against the portable int8 set, scales
 * included) and fp32 and bf16 outputs.
 * Where the build has no AVX-512 set (cpu_attn_avx512 returns NULL) there is nothing
 * to compare: the set selection is still checked and the comparisons do not run.
 */
#include "test.h"

#include "cpu_attn.h"
#include "dtype.h"
#include "rng.h"
#include "util.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One layer's pool and a batch over it, owned by the case. */
struct kcase {
    int32_t n_blocks, n_head, kv_n_head, head0, head_dim, block_size;
    enum dtype kv_dtype, out_dtype;
    struct cpu_kv_layer kv;   /* [n_blocks, kv_n_head, ...] */
    int32_t n_seq, n_tok;
    struct be_seq seqs[64];
    int32_t *blocks;          /* [n_seq, max_blocks] */
    int32_t *head_slots;      /* [n_seq, kv_n_head] (layer 0) */
    int32_t *tokens, *pos;    /* [n_tok] */
    float *qkv;               /* [n_tok, 3 * n_head * head_dim] */
    int32_t max_slots;
};

static int32_t rnd_int(struct rng *r, int32_t n)
{
    return (int32_t)(rng_uniform(r) * n) % n;
}

static float rnd_f(struct rng *r)
{
    return (float)(2.0 * rng_uniform(r) - 1.0);
}

static size_t pool_elems(const struct kcase *c)
{
    return (size_t)c->n_blocks * c->kv_n_head * c->block_size;
}

/* Pool index of slot s of sequence i, pool head h. */
static size_t slot_index(const struct kcase *c, int32_t i, int32_t s, int32_t h)
{
    const int32_t *bt = c->seqs[i].blocks;
    return ((size_t)bt[s / c->block_size] * c->kv_n_head + h) * c->block_size +
           s % c->block_size;
}

/*
 * A random case: n_seq sequences, each with n_prior slots already holding tokens and
 * n_new[i] new ones (1 = a decode token, which goes into an H2O hole of each head when
 * holes is set). Some prior slots are freed (pos -1) when holes is set, and prior
 * positions are shuffled among the slots when shuffle is set.
 */
static void kcase_make(struct kcase *c, struct rng *r, int32_t n_seq, const int32_t *n_new,
                       int32_t max_prior, bool holes, bool shuffle)
{
    const int32_t KH = c->kv_n_head, H = c->n_head, D = c->head_dim, BS = c->block_size;
    const size_t es = (size_t)dtype_size(c->kv_dtype);
    CHECK(n_seq <= 64);
    c->n_seq = n_seq;
    c->n_tok = 0;
    for (int32_t i = 0; i < n_seq; i++) c->n_tok += n_new[i];
    const int32_t max_blocks = CEIL_DIV(max_prior + 64, BS);
    c->n_blocks = n_seq * max_blocks + 3;
    const size_t n_el = pool_elems(c);
    c->kv.k = xmalloc(n_el * D * es);
    c->kv.v = xmalloc(n_el * D * es);
    c->kv.pos = xmalloc(n_el * sizeof(int32_t));
    c->kv.score = xmalloc(n_el * sizeof(float));
    if (c->kv_dtype == DTYPE_I8) {
        c->kv.k_scale = xmalloc(n_el * sizeof(float));
        c->kv.v_scale = xmalloc(n_el * sizeof(float));
        for (size_t e = 0; e < n_el; e++) {
            c->kv.k_scale[e] = 0.02f * (float)rng_uniform(r);
            c->kv.v_scale[e] = 0.02f * (float)rng_uniform(r);
        }
    }
    for (size_t e = 0; e < n_el * D; e++) {
        const float k = rnd_f(r), v = rnd_f(r);
        if (c->kv_dtype == DTYPE_I8) {
            ((int8_t *)c->kv.k)[e] = (int8_t)(k * 127.0f);
            ((int8_t *)c->kv.v)[e] = (int8_t)(v * 127.0f);
        } else if (c->kv_dtype == DTYPE_F32) {
            ((float *)c->kv.k)[e] = k;
            ((float *)c->kv.v)[e] = v;
        } else {
            ((uint16_t *)c->kv.k)[e] = f32_to_bf16(k);
            ((uint16_t *)c->kv.v)[e] = f32_to_bf16(v);
        }
    }
    for (size_t e = 0; e < n_el; e++) {
        c->kv.pos[e] = -1;
        c->kv.score[e] = 4.0f * (float)rng_uniform(r);
    }
    /* Block tables: a shuffled permutation of the pool, dealt out. */
    int32_t *perm = xmalloc((size_t)c->n_blocks * sizeof *perm);
    for (int32_t b = 0; b < c->n_blocks; b++) perm[b] = b;
    for (int32_t b = c->n_blocks - 1; b > 0; b--) {
        const int32_t j = rnd_int(r, b + 1), t = perm[b];
        perm[b] = perm[j];
        perm[j] = t;
    }
    c->blocks = xmalloc((size_t)n_seq * max_blocks * sizeof *c->blocks);
    memcpy(c->blocks, perm, (size_t)n_seq * max_blocks * sizeof *c->blocks);
    free(perm);
    c->head_slots = xmalloc((size_t)n_seq * KH * sizeof *c->head_slots);
    c->tokens = xcalloc((size_t)c->n_tok, sizeof *c->tokens);
    c->pos = xmalloc((size_t)c->n_tok * sizeof *c->pos);
    c->qkv = xmalloc((size_t)c->n_tok * 3 * H * D * sizeof *c->qkv);
    for (int64_t e = 0; e < (int64_t)c->n_tok * 3 * H * D; e++) c->qkv[e] = 2.0f * rnd_f(r);

    c->max_slots = 0;
    int32_t row = 0;
    for (int32_t i = 0; i < n_seq; i++) {
        struct be_seq *sq = &c->seqs[i];
        const int32_t n_prior = rnd_int(r, max_prior + 1);
        const int32_t p0 = n_prior + rnd_int(r, 40); /* H2O may have dropped some */
        *sq = (struct be_seq){.blocks = c->blocks + (int64_t)i * max_blocks,
                              .n_blocks = max_blocks,
                              .tok_start = row,
                              .n_tok = n_new[i],
                              .slot_start = n_prior,
                              .n_slots = n_prior + n_new[i]};
        /* Prior slots: positions below p0, ascending or shuffled, some freed. */
        for (int32_t h = 0; h < KH; h++) {
            int32_t *ps = xmalloc((size_t)MAX(n_prior, 1) * sizeof *ps);
            for (int32_t s = 0; s < n_prior; s++) ps[s] = (int32_t)((int64_t)s * p0 / MAX(n_prior, 1));
            if (shuffle)
                for (int32_t s = n_prior - 1; s > 0; s--) {
                    const int32_t j = rnd_int(r, s + 1), t = ps[s];
                    ps[s] = ps[j];
                    ps[j] = t;
                }
            int32_t hole = -1;
            for (int32_t s = 0; s < n_prior; s++) {
                if (holes && rnd_int(r, 5) == 0) {
                    ps[s] = -1;
                    if (hole < 0 || rnd_int(r, 2)) hole = s;
                }
                c->kv.pos[slot_index(c, i, s, h)] = ps[s];
            }
            c->head_slots[(int64_t)i * KH + h] = hole >= 0 ? hole : n_prior;
            free(ps);
        }
        if (holes && n_new[i] == 1) {
            sq->head_slots = c->head_slots + (int64_t)i * KH;
            int32_t top = 0;
            for (int32_t h = 0; h < KH; h++) top = MAX(top, sq->head_slots[h] + 1);
            sq->n_slots = MAX(n_prior, top);
        }
        for (int32_t q = 0; q < n_new[i]; q++) c->pos[row + q] = p0 + q;
        row += n_new[i];
        c->max_slots = MAX(c->max_slots, sq->n_slots);
    }
}

static void kcase_free(struct kcase *c)
{
    free(c->kv.k);
    free(c->kv.v);
    free(c->kv.pos);
    free(c->kv.score);
    free(c->kv.k_scale);
    free(c->kv.v_scale);
    free(c->blocks);
    free(c->head_slots);
    free(c->tokens);
    free(c->pos);
    free(c->qkv);
}

/* The pool after one forward with kernel set k, and its output [n_tok, n_head * D]. */
struct kresult {
    struct cpu_kv_layer kv;
    void *out;
};

static void run(const struct kcase *c, const struct cpu_attn_kernels *k, struct kresult *res)
{
    const int32_t D = c->head_dim;
    const size_t n_el = pool_elems(c), es = (size_t)dtype_size(c->kv_dtype);
    res->kv.k = xmalloc(n_el * D * es);
    res->kv.v = xmalloc(n_el * D * es);
    res->kv.pos = xmalloc(n_el * sizeof(int32_t));
    res->kv.score = xmalloc(n_el * sizeof(float));
    memcpy(res->kv.k, c->kv.k, n_el * D * es);
    memcpy(res->kv.v, c->kv.v, n_el * D * es);
    memcpy(res->kv.pos, c->kv.pos, n_el * sizeof(int32_t));
    memcpy(res->kv.score, c->kv.score, n_el * sizeof(float));
    res->kv.k_scale = res->kv.v_scale = NULL;
    if (c->kv.k_scale) {
        res->kv.k_scale = xmalloc(n_el * sizeof(float));
        res->kv.v_scale = xmalloc(n_el * sizeof(float));
        memcpy(res->kv.k_scale, c->kv.k_scale, n_el * sizeof(float));
        memcpy(res->kv.v_scale, c->kv.v_scale, n_el * sizeof(float));
    }
    const size_t out_bytes = (size_t)c->n_tok * c->n_head * D * dtype_size(c->out_dtype);
    res->out = xmalloc(out_bytes);
    memset(res->out, 0xa5, out_bytes); /* every element must be written */
    const int32_t stride = cpu_attn_scratch_floats(c->max_slots, c->block_size, c->n_head);
    float *scratch = xmalloc((size_t)omp_get_max_threads() * stride * sizeof *scratch);
    const struct be_batch b = {.n_tok = c->n_tok,
                               .tokens = c->tokens,
                               .pos = c->pos,
                               .n_seq = c->n_seq,
                               .seqs = c->seqs};
    const struct cpu_attn_args a = {
        .batch = &b,
        .qkv = c->qkv,
        .out = res->out,
        .out_dtype = c->out_dtype,
        .kv = res->kv,
        .kv_dtype = c->kv_dtype,
        .layer = 0,
        .n_head = c->n_head,
        .head_dim = D,
        .block_size = c->block_size,
        .head0 = c->head0,
        .kv_n_head = c->kv_n_head == c->n_head ? 0 : c->kv_n_head,
        .scale = 1.0f / sqrtf((float)D),
        .scratch = scratch,
        .scratch_stride = stride,
        .kernels = k,
    };
    cpu_attn_forward(&a);
    free(scratch);
}

static void kresult_free(struct kresult *r)
{
    free(r->kv.k);
    free(r->kv.v);
    free(r->kv.pos);
    free(r->kv.score);
    free(r->kv.k_scale);
    free(r->kv.v_scale);
    free(r->out);
}

/* Differences in bits between the two results: out, score, K, V, pos. */
static int64_t compare(const struct kcase *c, const struct kresult *x, const struct kresult *y)
{
    const int32_t D = c->head_dim;
    const size_t n_el = pool_elems(c), es = (size_t)dtype_size(c->kv_dtype),
                 oes = (size_t)dtype_size(c->out_dtype);
    int64_t n_diff = 0;
    const size_t n_out = (size_t)c->n_tok * c->n_head * D;
    for (size_t e = 0; e < n_out; e++)
        n_diff += memcmp((char *)x->out + e * oes, (char *)y->out + e * oes, oes) != 0;
    for (size_t e = 0; e < n_el; e++) {
        n_diff += memcmp(&x->kv.score[e], &y->kv.score[e], sizeof(float)) != 0;
        n_diff += x->kv.pos[e] != y->kv.pos[e];
        if (c->kv_dtype == DTYPE_I8) {
            n_diff += memcmp(&x->kv.k_scale[e], &y->kv.k_scale[e], sizeof(float)) != 0;
            n_diff += memcmp(&x->kv.v_scale[e], &y->kv.v_scale[e], sizeof(float)) != 0;
        }
    }
    n_diff += memcmp(x->kv.k, y->kv.k, n_el * D * es) != 0;
    n_diff += memcmp(x->kv.v, y->kv.v, n_el * D * es) != 0;
    return n_diff;
}

/* Run c with both sets and expect the same bits; returns the differences. */
static int64_t agree(const struct kcase *c, const char *what)
{
    const enum dtype dt = c->kv_dtype;
    const struct cpu_attn_kernels *fast = dt == DTYPE_I8     ? cpu_attn_int8_avx512()
                                          : dt == DTYPE_BF16 ? cpu_attn_bf16_avx512()
                                                             : cpu_attn_avx512();
    if (!fast) return 0;
    struct kresult ref, got;
    run(c,
        dt == DTYPE_I8     ? &cpu_attn_int8_ref
        : dt == DTYPE_BF16 ? &cpu_attn_bf16_ref
                           : &cpu_attn_ref,
        &ref);
    run(c, fast, &got);
    const int64_t n = compare(c, &ref, &got);
    if (n)
        TEST_FAIL("%s: H %d of %d, D %d, kv %s, out %s: %lld elements differ", what,
                  c->n_head, c->kv_n_head, c->head_dim, dtype_name(c->kv_dtype),
                  dtype_name(c->out_dtype), (long long)n);
    kresult_free(&ref);
    kresult_free(&got);
    return n;
}

static void geometry(struct kcase *c, int32_t H, int32_t D, enum dtype kv, enum dtype out)
{
    memset(c, 0, sizeof *c);
    c->n_head = c->kv_n_head = H;
    c->head_dim = D;
    c->block_size = 16;
    c->kv_dtype = kv;
    c->out_dtype = out;
}

/* The geometries: OPT's head_dim 64, 80 and 128, a small one, fp32 and bf16. */
static const struct {
    int32_t H, D;
    enum dtype kv, out;
} geoms[] = {
    {4, 64, DTYPE_F32, DTYPE_F32},    {3, 80, DTYPE_F32, DTYPE_F32},
    {2, 128, DTYPE_BF16, DTYPE_BF16}, {5, 16, DTYPE_BF16, DTYPE_F32},
    {6, 64, DTYPE_BF16, DTYPE_BF16},  {4, 64, DTYPE_I8, DTYPE_F32},
    {3, 80, DTYPE_I8, DTYPE_BF16},    {2, 128, DTYPE_I8, DTYPE_F32},
    /* bf16 with head_dim 80: five chunks of 16 in the values pass */
    {3, 80, DTYPE_BF16, DTYPE_F32},
};
#define N_GEOMS ((int)(sizeof geoms / sizeof geoms[0]))

TEST(default_set_is_avx512_for_block_size_16_where_built)
{
    const struct cpu_attn_kernels *fast = cpu_attn_avx512();
#ifdef __AVX512F__
    EXPECT(fast != NULL);
#endif
    if (!fast) {
        printf("# this build has no AVX-512 kernel set: the comparisons do not run\n");
        EXPECT(cpu_attn_kernels_for(16) == &cpu_attn_ref);
        EXPECT(cpu_attn_int8_kernels_for(16) == &cpu_attn_int8_ref);
        return;
    }
    EXPECT_STR(cpu_attn_kernels_name(fast), "avx512");
    EXPECT(cpu_attn_kernels_for(16) == fast);
    /* Other block sizes run the portable set: the AVX-512 one has only 16. */
    EXPECT(cpu_attn_kernels_for(8) == &cpu_attn_ref);
    EXPECT(cpu_attn_kernels_for(32) == &cpu_attn_ref);
    EXPECT_STR(cpu_attn_kernels_name(&cpu_attn_ref), "portable");
    /* int8 K/V have their own pair of sets, chosen the same way. */
    const struct cpu_attn_kernels *fast8 = cpu_attn_int8_avx512();
    EXPECT(fast8 != NULL && fast8 != fast);
    EXPECT_STR(cpu_attn_kernels_name(&cpu_attn_int8_ref), "portable-int8");
    EXPECT(cpu_attn_int8_kernels_for(16) == fast8);
    EXPECT(cpu_attn_int8_kernels_for(32) == &cpu_attn_int8_ref);
    EXPECT_STR(cpu_attn_kernels_name(fast8), "avx512-int8");
    /* So do bf16 K/V. */
#ifdef __AVX512F__
    const struct cpu_attn_kernels *fast16 = cpu_attn_bf16_avx512();
    EXPECT(fast16 != NULL);
    EXPECT(cpu_attn_bf16_kernels_for(16) == fast16);
    EXPECT_STR(cpu_attn_kernels_name(fast16), "avx512-bf16");
#endif
    EXPECT(cpu_attn_bf16_kernels_for(32) == &cpu_attn_bf16_ref);
    EXPECT_STR(cpu_attn_kernels_name(&cpu_attn_bf16_ref), "portable-bf16");
}

TEST(prompt_chunks_agree_bit_for_bit)
{
    /* Chunk lengths hit every tile shape: 1, partial (3, 13 = 8 + 5), full (8, 16). */
    struct rng r;
    rng_seed(&r, 1);
    const int32_t lens[][4] = {{8, 1, 16, 3}, {13, 5, 1, 7}, {24, 2, 9, 1}};
    for (int g = 0; g < N_GEOMS; g++)
        for (int l = 0; l < 3; l++)
            for (int v = 0; v < 3; v++) {
                struct kcase c;
                geometry(&c, geoms[g].H, geoms[g].D, geoms[g].kv, geoms[g].out);
                /* 0: a fresh prompt; 1: a later chunk; 2: over an H2O-compacted,
                 * holed cache. */
                kcase_make(&c, &r, 4, lens[l], v == 0 ? 0 : 70, v == 2, v == 2);
                agree(&c, "prompt chunks");
                kcase_free(&c);
            }
}

TEST(decode_tokens_agree_bit_for_bit_per_head_and_per_sequence)
{
    /* Few decode sequences run one task per head; at least twice the threads run
     * whole sequences (the AVX-512 set's decode_seq). Both against the reference. */
    struct rng r;
    rng_seed(&r, 2);
    const int32_t many = MIN(64, 2 * omp_get_max_threads() + 3);
    int32_t ones[64];
    for (int32_t i = 0; i < 64; i++) ones[i] = 1;
    for (int g = 0; g < N_GEOMS; g++)
        for (int v = 0; v < 4; v++) {
            struct kcase c;
            geometry(&c, geoms[g].H, geoms[g].D, geoms[g].kv, geoms[g].out);
            /* v & 1: H2O holes and head_slots; v & 2: many sequences. */
            kcase_make(&c, &r, v & 2 ? many : 2, ones, 150, v & 1, v & 1);
            agree(&c, v & 2 ? "decode, whole sequences" : "decode, per head");
            kcase_free(&c);
        }
}

TEST(mixed_batches_and_tensor_parallel_shares_agree)
{
    /* Prompt chunks beside decode tokens (the scheduler's mixed steps), and a rank
     * attending heads 2..3 of a pool of 6. */
    struct rng r;
    rng_seed(&r, 3);
    int32_t n_new[64];
    const int32_t n_seq = MIN(64, 2 * omp_get_max_threads() + 4);
    for (int32_t i = 0; i < n_seq; i++) n_new[i] = i % 3 == 0 ? 1 + rnd_int(&r, 20) : 1;
    const enum dtype kvs[3] = {DTYPE_F32, DTYPE_BF16, DTYPE_I8};
    for (int tp = 0; tp < 2; tp++)
        for (int v = 0; v < 3; v++) {
            struct kcase c;
            geometry(&c, tp ? 2 : 6, 64, kvs[v], v == 1 ? DTYPE_BF16 : DTYPE_F32);
            if (tp) {
                c.kv_n_head = 6;
                c.head0 = 2;
            }
            kcase_make(&c, &r, n_seq, n_new, 100, v, v);
            agree(&c, tp ? "tensor-parallel share" : "mixed batch");
            kcase_free(&c);
        }
}

TEST(long_sequences_agree_bit_for_bit)
{
    /* OPT-6.7B-like heads over a long cache: sums over hundreds of blocks. */
    struct rng r;
    rng_seed(&r, 4);
    int32_t n_new[8] = {1, 1, 1, 1, 8, 1, 1, 1};
    struct kcase c;
    geometry(&c, 4, 128, DTYPE_BF16, DTYPE_BF16);
    kcase_make(&c, &r, 8, n_new, 1500, true, false);
    agree(&c, "long sequences");
    kcase_free(&c);
    geometry(&c, 4, 64, DTYPE_I8, DTYPE_F32);
    kcase_make(&c, &r, 8, n_new, 1500, true, false);
    agree(&c, "long sequences, int8");
    kcase_free(&c);
}

int main(void)
{
    RUN(default_set_is_avx512_for_block_size_16_where_built);
    if (!cpu_attn_avx512()) return test_done(); /* one set: nothing to compare */
    RUN(prompt_chunks_agree_bit_for_bit);
    RUN(decode_tokens_agree_bit_for_bit_per_head_and_per_sequence);
    RUN(mixed_batches_and_tensor_parallel_shares_agree);
    RUN(long_sequences_agree_bit_for_bit);
    return test_done();
}
