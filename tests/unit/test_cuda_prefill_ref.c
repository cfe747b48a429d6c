/*
 * test_cuda_prefill_ref.c - the host reference of the CUDA prefill attention
 * (cuda_ref_prefill_attn, cuda/cuda_ref.c) against the engine's own prefill on the
 * CPU: cpu_attn_forward on a batch of prompt chunks, which writes the chunk's K/V and
 * adds every query's probabilities to the attended slots' scores (the H2O column sums
 * of DESIGN section 5, accumulated over chunks).
 *
 * Both run the same random chunked prefills (tests/lib/paged_case.h) step by step, each
 * on its own copy of the pool: the reference on fp16 K/V, the engine on fp32 K/V
 * holding the same values widened (exactly). The engine uses fast_exp, 16-lane sums
 * and adds p into the scores query by query; the reference uses expf, plain sums, and
 * p = exp(l - lse) from the saved log-sum-exp summed per column first. So outputs and
 * scores agree within 1e-5 relative (absolute below 1), not bit for bit; K/V writes
 * and positions must be identical. The int8 KV cache runs the same cases made int8
 * (paged_pool_to_int8): the reference's int8 path against the engine's int8 attention
 * on the same bytes and scales, the chunk's int8 K/V and scales identical. This is the
 * CUDA kernel's logic checked where CI can run it; tests/gpu/test_cuda_prefill checks the
 * kernel against this reference.
 */
#include "test.h"

#include "cpu_attn.h"
#include "cuda_ref.h"
#include "paged_case.h"
#include "util.h"

#include "cuda_ref_testlib.h"

/* Within 1e-5 relative to the larger of |want| and 1. */
static bool close5(float got, float want)
{
    const float m = fabsf(want) > 1.0f ? fabsf(want) : 1.0f;
    return fabsf(got - want) <= 1e-5f * m;
}

/* The engine's int8 attention against the reference: the engine quantizes q to int16
 * and its value weights to int16 per block (cpu_attn_int8.c), 2^-16 of their largest
 * element, where the reference keeps them fp32. A logit is then off by up to about
 * 2^-16 of the logits' own size, which these random cases make large: 1e-3 of the
 * result, still far below what a lost or wrong scale costs. */
static bool close_engine(bool int8, float got, float want)
{
    const float m = fabsf(want) > 1.0f ? fabsf(want) : 1.0f;
    return fabsf(got - want) <= (int8 ? 1e-3f : 1e-5f) * m;
}

/* The engine's step on batch b over its own pool e (fp32 K/V, or int8 for an int8
 * case): out [n_tok, H * D]. */
static void engine_step(const struct prefill_case *c, const struct prefill_batch *pb,
                        float *out, struct cuda_ref_test_pool *e)
{
    /* H: KV heads (the pool's), Hq: query heads. */
    const int32_t H = c->pool.n_head, D = c->pool.head_dim, BS = c->pool.block_size;
    const int32_t Hq = c->n_q_head;
    const int64_t n_qkv = (int64_t)pb->n_tok * (Hq + 2 * H) * D;
    float *qkv = xmalloc((size_t)n_qkv * sizeof *qkv);
    cuda_ref_test_widen(qkv, pb->qkv, n_qkv);
    struct be_seq *seqs = xmalloc((size_t)pb->n_seq * sizeof *seqs);
    int32_t *tokens = xcalloc((size_t)pb->n_tok, sizeof *tokens);
    for (int32_t i = 0; i < pb->n_seq; i++) {
        const struct cuda_prefill_seq *sq = &pb->seqs[i];
        seqs[i] = (struct be_seq){
            .blocks = pb->blocks + (int64_t)i * c->pool.max_blocks,
            .n_blocks = CEIL_DIV(sq->n_slots, BS),
            .tok_start = sq->tok_start,
            .n_tok = sq->n_tok,
            .slot_start = sq->slot_start,
            .head_slots = NULL,
            .n_slots = sq->n_slots,
        };
    }
    struct be_batch b = {.n_tok = pb->n_tok,
                         .tokens = tokens,
                         .pos = pb->tok_pos,
                         .n_seq = pb->n_seq,
                         .seqs = seqs};
    cuda_ref_test_cpu_attn_pool(&b, qkv, out, e, Hq, H, c->window, BS, pb->max_slots);
    free(tokens);
    free(seqs);
    free(qkv);
}

/*
 * Runs a whole case, engine and reference step by step, comparing everything after
 * each step. Returns the number of steps that had a sequence with an earlier chunk.
 */
static int32_t compare_case(struct prefill_case *c)
{
    const int32_t H = c->pool.n_head, D = c->pool.head_dim, Hq = c->n_q_head;
    const int32_t rep = Hq / H;
    const int64_t pool_el = (int64_t)c->pool.n_pool * H * c->pool.block_size;
    struct cuda_ref_test_pool eng;
    cuda_ref_test_pool_copy(&eng, &c->pool);
    const int32_t *pos = eng.kv.pos;
    const float *score = eng.kv.score;

    int32_t bad = 0, n_later = 0;
    for (int32_t step = 0; step < c->n_steps && bad == 0; step++) {
        struct prefill_batch b;
        pc_batch(c, step, &b);
        const int64_t n_out = (int64_t)b.n_tok * Hq * D;
        float *out = xmalloc((size_t)n_out * 4), *ref_out = xmalloc((size_t)n_out * 4);
        /* The score increments of this step, for the row-sum check below. */
        float *before = xmalloc((size_t)pool_el * 4);
        engine_step(c, &b, out, &eng);
        struct cuda_prefill_attn_args a = pc_args(c, &b);
        memcpy(before, c->pool.score, (size_t)pool_el * 4);
        cuda_ref_prefill_attn(&a, ref_out);
        n_later += step > 0;

        for (int64_t e = 0; e < n_out && bad < 5; e++) {
            if (!close_engine(c->pool.k8 != NULL, out[e], ref_out[e])) {
                TEST_FAIL("step %d out[%lld]: engine %.9g, reference %.9g", step,
                          (long long)e, out[e], ref_out[e]);
                bad++;
            }
            if (b.out[e] != f32_to_f16(ref_out[e])) {
                TEST_FAIL("out[%lld]: fp16 output is not the rounded fp32 one",
                          (long long)e);
                bad++;
            }
        }
        for (int64_t e = 0; e < pool_el && bad < 5; e++) {
            if (pos[e] != c->pool.pos[e]) {
                TEST_FAIL("step %d pos[%lld]: engine %d, reference %d", step, (long long)e,
                          pos[e], c->pool.pos[e]);
                bad++;
            }
            if (!close_engine(c->pool.k8 != NULL, c->pool.score[e], score[e])) {
                TEST_FAIL("step %d score[%lld]: engine %.9g, reference %.9g", step,
                          (long long)e, score[e], c->pool.score[e]);
                bad++;
            }
        }
        const int64_t kv_diffs = cuda_ref_test_pool_kv_diffs(&eng, &c->pool);
        if (kv_diffs) {
            TEST_FAIL("step %d: %lld K/V elements (or int8 scales) written differently",
                      step, (long long)kv_diffs);
            bad++;
        }
        /* Each query's probabilities sum to 1, so per (sequence, KV head) the chunk
         * adds n_tok times the group's query heads to the scores in all; and each
         * row's lse is finite (a query sees itself). */
        for (int32_t i = 0; i < b.n_seq && bad < 5; i++) {
            const struct cuda_prefill_seq *sq = &b.seqs[i];
            /* The batch's tables over the case's pool. */
            struct paged_pool bp = c->pool;
            bp.blocks = b.blocks;
            for (int32_t h = 0; h < H; h++) {
                double added = 0.0;
                for (int32_t s = 0; s < sq->n_slots; s++) {
                    const int64_t e = paged_pool_index(&bp, i, s, h);
                    added += c->pool.score[e] - (s < sq->slot_start ? before[e] : 0.0f);
                }
                const double want = (double)sq->n_tok * rep;
                if (!(fabs(added - want) <= 1e-4 * want)) {
                    TEST_FAIL("step %d seq %d head %d: scores grew by %.7g, expected %g",
                              step, i, h, added, want);
                    bad++;
                }
            }
            for (int32_t h = 0; h < Hq; h++)
                for (int32_t r = 0; r < sq->n_tok; r++)
                    if (!isfinite(b.lse[(int64_t)(sq->tok_start + r) * Hq + h])) {
                        TEST_FAIL("lse of row %d head %d is not finite", sq->tok_start + r,
                                  h);
                        bad++;
                    }
        }
        free(before);
        free(out);
        free(ref_out);
        pc_batch_free(&b);
    }
    cuda_ref_test_pool_free(&eng);
    return n_later;
}

/* Geometries: head_dim a multiple of 16 (what cpu_attn supports, every OPT's 64, 80 and
 * 128 among them), the default block size 16 (the engine's AVX-512 paths) and odd ones
 * (its portable paths). */
static void run_cases(int n_cases, int32_t max_chunks, uint64_t seed, bool int8)
{
    static const int32_t dims[] = {16, 64, 80, 128}, bss[] = {16, 16, 5, 1};
    uint64_t st = seed;
    int32_t n_later = 0;
    for (int k = 0; k < n_cases && !test_cur_failed; k++) {
        struct prefill_case c;
        const int32_t n_seq = 1 + dc_int(&st, 4), H = 1 + dc_int(&st, 3);
        const int32_t D = dims[k % 4], BS = bss[dc_int(&st, 4)];
        const int32_t max_p = 1 + dc_int(&st, k % 5 == 0 ? 200 : 48);
        pc_make(&c, &st, n_seq, H, D, BS, max_p, max_chunks);
        if (int8) paged_pool_to_int8(&c.pool);
        n_later += compare_case(&c);
        pc_free(&c);
    }
    printf("# %s%d cases, up to %d chunks: %d steps after a first chunk\n",
           int8 ? "int8: " : "", n_cases, max_chunks, n_later);
    if (max_chunks > 1) EXPECT(n_later > n_cases / 4); /* later chunks really ran */
}

/* Grouped-query attention (1, 2, 4 or 7 query heads per KV head) and, in half of the
 * cases, a sliding window of 1 to max_p tokens, chunked: the engine with n_kv and
 * window against the reference with n_kv_head and window. */
static void run_gqa_cases(int n_cases, uint64_t st, bool int8)
{
    static const int32_t dims[] = {16, 64, 128}, bss[] = {16, 5, 1}, reps[] = {1, 2, 4, 7};
    int32_t n_later = 0;
    for (int k = 0; k < n_cases && !test_cur_failed; k++) {
        struct prefill_case c;
        const int32_t n_seq = 1 + dc_int(&st, 3), KV = 1 + dc_int(&st, 2);
        const int32_t r = reps[dc_int(&st, 4)], D = dims[k % 3], BS = bss[dc_int(&st, 3)];
        const int32_t max_p = 1 + dc_int(&st, k % 5 == 0 ? 150 : 40);
        const int32_t window = k % 2 ? 0 : 1 + dc_int(&st, max_p);
        pc_make_gqa(&c, &st, n_seq, KV * r, KV, D, BS, max_p,
                    1 + dc_int(&st, PC_MAX_CHUNKS), window);
        if (int8) paged_pool_to_int8(&c.pool);
        n_later += compare_case(&c);
        pc_free(&c);
    }
    printf("# %sgqa: %d cases: %d steps after a first chunk\n", int8 ? "int8 " : "",
           n_cases, n_later);
    EXPECT(n_later > n_cases / 4);
}

TEST(reference_matches_engine_with_gqa_and_window)
{
    run_gqa_cases(160, 29, false);
}

/* The int8 cache: one-chunk, chunked, and GQA with windows, against the engine's int8
 * attention over the same bytes and scales. */
TEST(int8_reference_matches_engine_int8)
{
    run_cases(60, 1, 103, true);
    run_cases(80, PC_MAX_CHUNKS, 105, true);
    run_gqa_cases(80, 129, true);
}

TEST(reference_matches_engine_on_one_chunk_prefills)
{
    run_cases(120, 1, 3, false);
}

TEST(reference_matches_engine_on_chunked_prefills)
{
    run_cases(160, PC_MAX_CHUNKS, 5, false);
}

/*
 * The column sums do not depend on how the prompt was chunked: one prompt (38 tokens
 * with this seed) in one chunk and in chunks of 1, 7, 12 and the rest ends with the
 * same scores (within fp32 noise) and the same outputs for every row.
 */
TEST(column_sums_do_not_depend_on_chunking)
{
    uint64_t st = 17;
    struct prefill_case one, many;
    pc_make(&one, &st, 1, 2, 64, 5, 40, 1);
    st = 17;
    pc_make(&many, &st, 1, 2, 64, 5, 40, 1);
    const int32_t P = one.len[0];
    /* Rewrite many's cuts: 1, 7, 12, rest. */
    const int32_t cuts[] = {0, 1, 8, 20, P};
    EXPECT(P >= 21);
    if (P >= 21) {
        many.n_chunks[0] = 4;
        many.n_steps = 4;
        memcpy(many.cut, cuts, sizeof cuts);
    }
    float *out_one = xmalloc((size_t)P * 2 * 64 * 4),
          *out_many = xmalloc((size_t)P * 2 * 64 * 4);
    struct prefill_batch b;
    pc_batch(&one, 0, &b);
    struct cuda_prefill_attn_args a = pc_args(&one, &b);
    cuda_ref_prefill_attn(&a, out_one);
    pc_batch_free(&b);
    int32_t row = 0;
    for (int32_t s = 0; s < many.n_steps; s++) {
        pc_batch(&many, s, &b);
        a = pc_args(&many, &b);
        cuda_ref_prefill_attn(&a, out_many + (int64_t)row * 2 * 64);
        row += b.n_tok;
        pc_batch_free(&b);
    }
    EXPECT_EQ(row, P);
    const int64_t pool_el = (int64_t)one.pool.n_pool * 2 * 5;
    for (int64_t e = 0; e < pool_el; e++) {
        EXPECT_EQ(many.pool.pos[e], one.pool.pos[e]);
        if (!close5(many.pool.score[e], one.pool.score[e]))
            TEST_FAIL("score[%lld]: chunked %.9g, one chunk %.9g", (long long)e,
                      many.pool.score[e], one.pool.score[e]);
    }
    for (int64_t e = 0; e < (int64_t)P * 2 * 64; e++)
        if (!close5(out_many[e], out_one[e]))
            TEST_FAIL("out[%lld]: chunked %.9g, one chunk %.9g", (long long)e, out_many[e],
                      out_one[e]);
    /* The first token is seen by every query: its column sum is the largest sum of
     * p(i, 0) over the 40 queries, and slot 0's score is above 1 (its own p = 1). */
    printf("# P = %d, score of the first token (head 0): %.4f\n", P,
           one.pool.score[(int64_t)one.pool.blocks[0] * 2 * 5]);
    EXPECT(one.pool.score[(int64_t)one.pool.blocks[0] * 2 * 5] >= 1.0f);
    free(out_one);
    free(out_many);
    pc_free(&one);
    pc_free(&many);
}

int main(void)
{
    RUN(reference_matches_engine_on_one_chunk_prefills);
    RUN(reference_matches_engine_on_chunked_prefills);
    RUN(column_sums_do_not_depend_on_chunking);
    RUN(reference_matches_engine_with_gqa_and_window);
    RUN(int8_reference_matches_engine_int8);
    return test_done();
}
