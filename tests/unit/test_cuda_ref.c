/*
 * test_cuda_ref.c - the host reference of the CUDA decode attention (cuda/cuda_ref.c)
 * against the engine's own decode step on the CPU: cpu_attn_forward (K/V write,
 * attention, H2O score update) followed by the eviction kv_seq_after_decode does
 * (h2o_select_evict over the head's slots once n_slots reaches B).
 *
 * Both run on the same random steps (tests/lib/paged_case.h): the reference on fp16 K/V,
 * the engine on fp32 K/V holding the same values widened (exactly). The engine uses
 * its fast_exp and 16-lane sums, the reference expf and plain sums, so outputs and
 * scores agree within 1e-5, not bit for bit; K/V writes, positions and victims must be
 * identical. With ties on, every logit is 0 and every probability exactly 1/n on both
 * sides, so equal scores stay equal and the tie rule (older position first) decides.
 * The int8 KV cache runs the same checks on the same states made int8
 * (paged_pool_to_int8): the reference's int8 path against the engine's int8
 * attention over the very same bytes and scales (new K/V bytes and scales identical),
 * its quantizer against cpu_attn_int8_quantize, its compaction against
 * cpu_attn_kv_compact_head with scales.
 * This is the CUDA kernel's logic checked where CI can run it; tests/gpu checks the
 * kernel against this reference.
 */
#include "test.h"

#include "cpu_attn.h"
#include "cuda_ref.h"
#include "paged_case.h"
#include "h2o.h"
#include "util.h"

#include "cuda_ref_testlib.h"

/* The engine's step on c: outputs [n_seq, n_head * head_dim] fp32 into out, the pool
 * into e (copied from c first: fp32, or c's int8 cache), and the victims
 * kv_seq_after_decode would pick (-1 when it evicts nothing). */
static void engine_step(const struct decode_case *c, float *out,
                        struct cuda_ref_test_pool *e, int32_t *victim)
{
    /* H: KV heads (the pool's), Hq: query heads. */
    const int32_t H = c->pool.n_head, D = c->pool.head_dim, BS = c->pool.block_size;
    const int32_t Hq = c->n_q_head;
    const int64_t n_qkv = (int64_t)c->n_seq * (Hq + 2 * H) * D;
    cuda_ref_test_pool_copy(e, &c->pool);
    const int32_t *pos = e->kv.pos;
    const float *score = e->kv.score;
    float *qkv = xmalloc((size_t)n_qkv * sizeof *qkv);
    cuda_ref_test_widen(qkv, c->qkv, n_qkv);

    struct be_seq *seqs = xmalloc((size_t)c->n_seq * sizeof *seqs);
    int32_t *tpos = xmalloc((size_t)c->n_seq * sizeof *tpos);
    int32_t *tokens = xmalloc((size_t)c->n_seq * sizeof *tokens);
    for (int32_t i = 0; i < c->n_seq; i++) {
        const struct cuda_decode_seq *sq = &c->seqs[i];
        seqs[i] = (struct be_seq){
            .blocks = c->pool.blocks + (int64_t)i * c->pool.max_blocks,
            .n_blocks = CEIL_DIV(sq->n_slots, BS),
            .tok_start = i,
            .n_tok = 1,
            .slot_start = c->new_slot[(int64_t)i * H],
            .head_slots = c->new_slot + (int64_t)i * H, /* layer 0 */
            .n_slots = sq->n_slots,
        };
        tpos[i] = sq->t;
        tokens[i] = 0;
    }
    struct be_batch b = {
        .n_tok = c->n_seq, .tokens = tokens, .pos = tpos, .n_seq = c->n_seq, .seqs = seqs};
    cuda_ref_test_cpu_attn_pool(&b, qkv, out, e, Hq, H, c->window, BS, c->max_slots);

    /* kv_seq_after_decode: nothing for full or below B; else per KV head over its B
     * slots (all occupied in every state the engine reaches), the window first. */
    int32_t *hpos = xmalloc((size_t)c->max_slots * sizeof *hpos);
    float *hscore = xmalloc((size_t)c->max_slots * sizeof *hscore);
    for (int32_t i = 0; i < c->n_seq; i++) {
        const struct cuda_decode_seq *sq = &c->seqs[i];
        const bool full = sq->budget == INT32_MAX;
        for (int32_t h = 0; h < H; h++) {
            int32_t e = -1;
            if (!full && sq->n_slots >= sq->budget) {
                for (int32_t s = 0; s < sq->n_slots; s++) {
                    hpos[s] = pos[dc_index(c, i, s, h)];
                    hscore[s] = score[dc_index(c, i, s, h)];
                }
                e = h2o_select_evict_window(hscore, hpos, sq->n_slots, sq->t, sq->recent,
                                            c->window);
            }
            victim[(int64_t)i * H + h] = e;
        }
    }
    free(hpos);
    free(hscore);
    free(qkv);
    free(seqs);
    free(tpos);
    free(tokens);
}

/* Runs both on one case and compares everything; returns the evictions seen. */
static int32_t compare_case(struct decode_case *c)
{
    const int32_t H = c->pool.n_head, D = c->pool.head_dim, BS = c->pool.block_size;
    const int64_t pool_el = (int64_t)c->pool.n_pool * H * BS,
                  n_out = (int64_t)c->n_seq * c->n_q_head * D;
    float *out = xmalloc((size_t)n_out * sizeof *out),
          *ref_out = xmalloc((size_t)n_out * 4);
    int32_t *victim = xmalloc((size_t)c->n_seq * H * 4);
    struct cuda_ref_test_pool eng;
    engine_step(c, out, &eng, victim);
    const int32_t *pos = eng.kv.pos;
    const float *score = eng.kv.score;
    struct cuda_decode_attn_args a = dc_args(c);
    cuda_ref_decode_attn(&a, ref_out);

    /* int8: the engine quantizes q to int16 and its value weights to int16 per block
     * (cpu_attn_int8.c), 2^-16 of their largest element, where the reference keeps
     * them fp32: up to 1e-3 of the result apart (test_cuda_prefill_ref.c says why),
     * against 1e-5 otherwise. */
    const bool i8 = c->pool.k8 != NULL;
    int32_t bad = 0, n_evict = 0;
    for (int64_t e = 0; e < n_out && bad < 5; e++)
        if (!(fabsf(out[e] - ref_out[e]) <=
              (i8 ? 1e-3f * fmaxf(1.0f, fabsf(ref_out[e])) : 1e-5f))) {
            TEST_FAIL("out[%lld]: engine %.9g, reference %.9g", (long long)e, out[e],
                      ref_out[e]);
            bad++;
        }
    for (int64_t e = 0; e < n_out && bad < 5; e++)
        if (c->out[e] != f32_to_f16(ref_out[e])) {
            TEST_FAIL("out[%lld]: fp16 output is not the rounded fp32 one", (long long)e);
            bad++;
        }
    for (int64_t e = 0; e < pool_el && bad < 5; e++) {
        if (pos[e] != c->pool.pos[e]) {
            TEST_FAIL("pos[%lld]: engine %d, reference %d", (long long)e, pos[e],
                      c->pool.pos[e]);
            bad++;
        }
        if (!(fabsf(score[e] - c->pool.score[e]) <=
              (i8 ? 1e-3f * fmaxf(1.0f, c->pool.score[e]) : 1e-5f))) {
            TEST_FAIL("score[%lld]: engine %.9g, reference %.9g", (long long)e, score[e],
                      c->pool.score[e]);
            bad++;
        }
    }
    const int64_t kv_diffs = cuda_ref_test_pool_kv_diffs(&eng, &c->pool);
    if (kv_diffs) {
        TEST_FAIL("%lld K/V elements (or int8 scales) written differently",
                  (long long)kv_diffs);
        bad++;
    }
    for (int64_t e = 0; e < (int64_t)c->n_seq * H && bad < 5; e++) {
        if (victim[e] != c->victim[e]) {
            TEST_FAIL("victim of (seq %lld, head %lld): engine slot %d, reference slot %d",
                      (long long)(e / H), (long long)(e % H), victim[e], c->victim[e]);
            bad++;
        }
        n_evict += victim[e] >= 0;
    }
    free(out);
    free(ref_out);
    cuda_ref_test_pool_free(&eng);
    free(victim);
    return n_evict;
}

/* Geometries: head_dim a multiple of 16 (what cpu_attn supports), the default block
 * size 16 (the engine's AVX-512 paths) and odd ones (its portable paths). */
static void run_cases(bool ties, int n_cases, bool int8)
{
    static const int32_t dims[] = {16, 64, 80, 128}, bss[] = {16, 16, 8, 5, 1};
    uint64_t st = (ties ? 7 : 3) + (int8 ? 100 : 0);
    int64_t n_evict = 0;
    for (int k = 0; k < n_cases && !test_cur_failed; k++) {
        struct decode_case c;
        const int32_t n_seq = 1 + dc_int(&st, 6), H = 1 + dc_int(&st, 4);
        const int32_t D = dims[dc_int(&st, 4)], BS = bss[dc_int(&st, 5)];
        const int32_t max_b = 2 + dc_int(&st, k % 5 == 0 ? 300 : 40);
        dc_make(&c, &st, n_seq, H, D, BS, max_b, ties);
        if (int8) paged_pool_to_int8(&c.pool);
        n_evict += compare_case(&c);
        dc_free(&c);
    }
    printf("# %s%s: %d cases, %lld evictions\n", int8 ? "int8 " : "",
           ties ? "ties" : "random", n_cases, (long long)n_evict);
    EXPECT(n_evict > n_cases / 4); /* the eviction path really ran */
}

TEST(reference_matches_engine_on_random_decode_steps)
{
    run_cases(false, 400, false);
}

TEST(reference_matches_engine_when_scores_tie)
{
    run_cases(true, 400, false);
}

/* Grouped-query attention (1, 2, 4 or 7 query heads per KV head) and, in half of the
 * cases, a sliding window of 1 to 2 max_b tokens (so some states have slots outside
 * it, some attended by nothing, and the window-first eviction runs): the engine with
 * n_kv and window against the reference with n_kv_head and window. */
static void run_gqa_cases(bool ties, int n_cases, bool int8)
{
    static const int32_t dims[] = {16, 64, 128}, bss[] = {16, 8, 5, 1},
                         reps[] = {1, 2, 4, 7};
    uint64_t st = (ties ? 17 : 13) + (int8 ? 100 : 0);
    int64_t n_evict = 0;
    for (int k = 0; k < n_cases && !test_cur_failed; k++) {
        struct decode_case c;
        const int32_t n_seq = 1 + dc_int(&st, 4), KV = 1 + dc_int(&st, 3);
        const int32_t rep = reps[dc_int(&st, 4)];
        const int32_t D = dims[dc_int(&st, 3)], BS = bss[dc_int(&st, 4)];
        const int32_t max_b = 2 + dc_int(&st, k % 5 == 0 ? 200 : 40);
        const int32_t window = k % 2 ? 0 : 1 + dc_int(&st, 2 * max_b);
        dc_make_gqa(&c, &st, n_seq, KV * rep, KV, D, BS, max_b, ties, window);
        if (int8) paged_pool_to_int8(&c.pool);
        n_evict += compare_case(&c);
        dc_free(&c);
    }
    printf("# %sgqa %s: %d cases, %lld evictions\n", int8 ? "int8 " : "",
           ties ? "ties" : "random", n_cases, (long long)n_evict);
    EXPECT(n_evict > n_cases / 4);
}

TEST(reference_matches_engine_with_gqa_and_window)
{
    run_gqa_cases(false, 300, false);
    run_gqa_cases(true, 200, false);
}

/* ---- the int8 KV cache ------------------------------------------------------- */

/*
 * The quantizer of the CUDA side (cuda_ref_int8_quantize, the rule the kernels follow
 * in cuda_int8.cuh) against the CPU backend's cpu_attn_int8_quantize itself on the
 * widened values: the same bytes and the same scale bits, on random heads of every
 * size up to 256 over magnitudes from fp16 subnormals to 60000, all-zero heads, one
 * lone non-zero, and values that land exactly halfway between two steps (x * 127 /
 * amax = k + 0.5, where round-to-nearest-even decides).
 */
TEST(int8_quantizer_is_the_cpu_backends)
{
    uint64_t st = 77;
    uint16_t x[256];
    float xf[256];
    int8_t got[2 * 256], want[2 * 256];
    int64_t n_bad = 0, n_rows = 0, n_half = 0;
    for (int r = 0; r < 4000; r++) {
        const int32_t n = 1 + dc_int(&st, 256), stride = 1 + (r % 2);
        const float mag = r % 7 == 0   ? 6e-5f
                          : r % 7 == 1 ? 60000.0f
                                       : dc_float(&st, 0.01f, 8.0f);
        for (int32_t i = 0; i < n; i++)
            x[i] = f32_to_f16(r % 11 == 0 ? 0.0f : dc_float(&st, -mag, mag));
        if (r % 13 == 0) { /* one lone value, the rest zero */
            for (int32_t i = 0; i < n; i++)
                x[i] = 0;
            x[dc_int(&st, n)] = f32_to_f16(dc_float(&st, -mag, mag));
        }
        if (r % 5 == 0 && n > 1 && mag <= 100.0f) { /* amax 127, a value at k + 0.5 */
            x[0] = f32_to_f16(127.0f);
            x[1] = f32_to_f16((float)(dc_int(&st, 126) - 63) + 0.5f);
            n_half++;
        }
        memset(got, 0x55, sizeof got);
        memset(want, 0x55, sizeof want);
        for (int32_t i = 0; i < n; i++)
            xf[i] = f16_to_f32(x[i]);
        const float sg = cuda_ref_int8_quantize(got, stride, x, n);
        const float sw = cpu_attn_int8_quantize(want, stride, xf, n);
        if (memcmp(&sg, &sw, sizeof sg) != 0 || memcmp(got, want, sizeof got) != 0) {
            if (n_bad++ < 5)
                TEST_FAIL("row %d (n %d, stride %d): scale %.9g vs the CPU's %.9g, or "
                          "different bytes",
                          r, n, stride, sg, sw);
        }
        n_rows++;
    }
    /* The halfway values really round to even: 127 * 0.5 / 127 -> 0, 1.5 -> 2. */
    x[0] = f32_to_f16(127.0f), x[1] = f32_to_f16(0.5f), x[2] = f32_to_f16(1.5f);
    x[3] = f32_to_f16(-2.5f);
    EXPECT_NEAR(cuda_ref_int8_quantize(got, 1, x, 4), 1.0f, 0);
    EXPECT_EQ(got[0], 127);
    EXPECT_EQ(got[1], 0);
    EXPECT_EQ(got[2], 2);
    EXPECT_EQ(got[3], -2);
    printf("# %lld rows (%lld with halfway values), %lld differ\n", (long long)n_rows,
           (long long)n_half, (long long)n_bad);
    EXPECT_EQ(n_bad, 0);
}

/*
 * The int8 decode reference against the CPU engine's int8 attention (kv_dtype int8,
 * cpu_attn_int8.c) on the same states with the same int8 bytes and scales: the new
 * token quantized to identical bytes and scales, outputs and scores within 1e-3 (the
 * engine's int16 q and value weights, compare_case), positions and victims identical;
 * plain heads, ties, and grouped-query attention with sliding windows. A reference
 * that forgot a scale, or dequantized with the wrong slot's, is off by far more.
 */
TEST(int8_reference_matches_engine_int8)
{
    run_cases(false, 200, true);
    run_cases(true, 100, true);
    run_gqa_cases(false, 200, true);
    run_gqa_cases(true, 100, true);
}

/*
 * A hand-made head, 1 sequence, 1 head, block size 4, slots 0..2 holding positions
 * p0..p2 with scores s0..s2, the new token (position 3) going to slot 3. Every query is
 * 0, so each of the 4 tokens gets p = 1/4. Returns the victim.
 */
static int32_t small_victim(int32_t heavy, int32_t recent, const int32_t *p, const float *s)
{
    struct decode_case c;
    uint64_t st = 11;
    dc_make(&c, &st, 1, 1, 16, 4, 4, true);
    c.pool.blocks[0] = 0;
    for (int32_t j = 0; j < 4; j++) {
        c.pool.pos[j] = j < 3 ? p[j] : -1;
        c.pool.score[j] = j < 3 ? s[j] : 0.0f;
    }
    c.new_slot[0] = 3;
    c.seqs[0] = (struct cuda_decode_seq){
        .n_slots = 4, .t = 3, .budget = heavy + recent, .recent = recent};
    c.max_slots = 4;
    compare_case(&c); /* the engine agrees on this one too */
    const int32_t v = c.victim[0];
    for (int32_t j = 0; j < 4; j++)
        EXPECT_NEAR(c.pool.score[j], (j < 3 ? s[j] : 0.0f) + 0.25f, 0);
    dc_free(&c);
    return v;
}

TEST(victim_rules_of_design_section_5)
{
    const int32_t p[3] = {2, 0, 1};
    /* H = 0 (local, R = 4): a sliding window evicts the oldest whatever its score. */
    const float s1[3] = {0.1f, 5.0f, 0.2f};
    EXPECT_EQ(small_victim(0, 4, p, s1), 1);
    /* R = 1: the new token competes, and with the lowest score (0.25) it goes. */
    EXPECT_EQ(small_victim(3, 1, p, s1), 3);
    /* R = 2 protects the new token only: the lowest of the rest (slot 0, 0.1). */
    EXPECT_EQ(small_victim(2, 2, p, s1), 0);
    /* R = 3 also protects position 2 (slot 0): slot 2 (0.2). */
    EXPECT_EQ(small_victim(1, 3, p, s1), 2);
    /* Ties: equal scores go to the older position (slot 1, position 0). */
    const float s2[3] = {0.5f, 0.5f, 0.5f};
    EXPECT_EQ(small_victim(2, 2, p, s2), 1);
    /* R = 1 and a tie with the new token (both 0 + 0.25): the older one goes. */
    const float s3[3] = {1.0f, 0.0f, 1.0f};
    EXPECT_EQ(small_victim(3, 1, p, s3), 1);
    /* Below the budget nothing is evicted. */
    EXPECT_EQ(small_victim(4, 1, p, s1), -1);
}

/* ---- kv_compact -------------------------------------------------------------- */

/*
 * One random compaction: cuda_ref_kv_compact on the fp16 case against the CPU
 * backend's cpu_attn_kv_compact_head for every head on fp32 K/V holding the same values
 * (widening is exact, so the moved values must be bit-identical), over the whole
 * pool (blocks outside the table untouched on both sides); and both against the
 * rule itself: slot i holds what slot keep[i] held, slots past n_keep are free.
 */
static int64_t compare_compact(uint64_t *st, int32_t H, int32_t D, int32_t BS,
                               int32_t n_slots, int32_t n_keep)
{
    struct compact_case c;
    cc_make(&c, st, H, D, BS, n_slots, n_keep);
    const int64_t ns = cc_slots(&c);
    float *k32 = xmalloc((size_t)ns * D * sizeof *k32), *v32 = xmalloc((size_t)ns * D * sizeof *v32);
    float *k0 = xmalloc((size_t)ns * D * sizeof *k0), *v0 = xmalloc((size_t)ns * D * sizeof *v0);
    int32_t *pos = xmalloc((size_t)ns * sizeof *pos), *pos0 = xmalloc((size_t)ns * sizeof *pos0);
    float *score = xmalloc((size_t)ns * sizeof *score), *score0 = xmalloc((size_t)ns * sizeof *score0);
    for (int64_t e = 0; e < ns * D; e++) {
        k0[e] = k32[e] = f16_to_f32(c.pool.k[e]);
        v0[e] = v32[e] = f16_to_f32(c.pool.v[e]);
    }
    memcpy(pos, c.pool.pos, (size_t)ns * sizeof *pos);
    memcpy(pos0, c.pool.pos, (size_t)ns * sizeof *pos);
    memcpy(score, c.pool.score, (size_t)ns * sizeof *score);
    memcpy(score0, c.pool.score, (size_t)ns * sizeof *score);

    struct cuda_kv_compact_args a = cc_args(&c);
    cuda_ref_kv_compact(&a);
    const struct cpu_kv_layer kv = {.k = k32, .v = v32, .pos = pos, .score = score};
    for (int32_t h = 0; h < H; h++)
        cpu_attn_kv_compact_head(&kv, DTYPE_F32, H, D, BS, h, c.pool.blocks, n_slots,
                                 c.keep + (int64_t)h * n_keep, n_keep);

    int64_t bad = 0;
    for (int64_t e = 0; e < ns * D; e++) {
        const float rk = f16_to_f32(c.pool.k[e]), rv = f16_to_f32(c.pool.v[e]);
        if (memcmp(&rk, &k32[e], 4) != 0 || memcmp(&rv, &v32[e], 4) != 0) {
            if (bad++ < 5)
                TEST_FAIL("H=%d D=%d BS=%d n=%d keep=%d: K/V element %lld: ref %g/%g, cpu %g/%g",
                          H, D, BS, n_slots, n_keep, (long long)e, rk, rv, k32[e], v32[e]);
        }
    }
    for (int64_t e = 0; e < ns; e++) {
        if (c.pool.pos[e] != pos[e] || memcmp(&c.pool.score[e], &score[e], 4) != 0) {
            if (bad++ < 5)
                TEST_FAIL(
                    "H=%d D=%d BS=%d n=%d keep=%d: slot state %lld: ref %d/%g, cpu %d/%g",
                    H, D, BS, n_slots, n_keep, (long long)e, c.pool.pos[e], c.pool.score[e],
                    pos[e], score[e]);
        }
    }
    /* The rule, from the saved original state. */
    for (int32_t h = 0; h < H; h++)
        for (int32_t i = 0; i < n_slots; i++) {
            const int64_t td = (int64_t)c.pool.blocks[i / BS] * H + h, od = i % BS;
            const int64_t di = td * BS + od;
            if (i >= n_keep) {
                if (pos[di] != -1 || score[di] != 0.0f) bad++;
                continue;
            }
            const int32_t src = c.keep[(int64_t)h * n_keep + i];
            const int64_t ts = (int64_t)c.pool.blocks[src / BS] * H + h, os = src % BS;
            const int64_t si = ts * BS + os;
            bool ok = pos[di] == pos0[si] && score[di] == score0[si];
            for (int32_t d = 0; d < D; d++)
                ok = ok && k32[(td * D + d) * BS + od] == k0[(ts * D + d) * BS + os] &&
                     v32[di * D + d] == v0[si * D + d];
            if (!ok && bad++ < 5)
                TEST_FAIL("H=%d BS=%d n=%d keep=%d: head %d slot %d does not hold slot %d",
                          H, BS, n_slots, n_keep, h, i, src);
        }
    free(k32), free(v32), free(k0), free(v0), free(pos), free(pos0), free(score), free(score0);
    cc_free(&c);
    return bad;
}

TEST(kv_compact_reference_matches_cpu_backend)
{
    uint64_t st = 2024;
    const int32_t bss[] = {16, 8, 5, 1};
    for (int r = 0; r < 300; r++) {
        const int32_t BS = bss[r % 4], H = 1 + dc_int(&st, 6), D = 2 * (1 + dc_int(&st, 40));
        const int32_t n = 1 + dc_int(&st, 120);
        /* Mostly an H2O budget (20%-80%), sometimes everything or nothing kept. */
        int32_t keep = r % 10 == 0 ? n : r % 10 == 1 ? 0 : 1 + dc_int(&st, n);
        EXPECT_EQ(compare_compact(&st, H, D, BS, n, keep), 0);
    }
    /* OPT-6.7B-like: 32 heads of 128, 544 prompt slots into a budget of 110. */
    EXPECT_EQ(compare_compact(&st, 32, 128, 16, 544, 110), 0);
}

/*
 * The int8 compaction: cuda_ref_kv_compact on an int8 case against the CPU backend's
 * cpu_attn_kv_compact_head on copies of the same bytes and scales (DTYPE_I8,
 * kv.k_scale set), over the whole pool, bit for bit; and the rule for the scales:
 * kept slot i carries slot keep[i]'s key and value scales.
 */
static int64_t compare_compact_int8(uint64_t *st, int32_t H, int32_t D, int32_t BS,
                                    int32_t n_slots, int32_t n_keep)
{
    struct compact_case c;
    cc_make(&c, st, H, D, BS, n_slots, n_keep);
    paged_pool_to_int8(&c.pool);
    struct cuda_ref_test_pool eng, orig;
    cuda_ref_test_pool_copy(&eng, &c.pool);
    cuda_ref_test_pool_copy(&orig, &c.pool);
    struct cuda_kv_compact_args a = cc_args(&c);
    cuda_ref_kv_compact(&a);
    for (int32_t h = 0; h < H; h++)
        cpu_attn_kv_compact_head(&eng.kv, DTYPE_I8, H, D, BS, h, c.pool.blocks, n_slots,
                                 c.keep + (int64_t)h * n_keep, n_keep);
    int64_t bad = cuda_ref_test_pool_kv_diffs(&eng, &c.pool);
    for (int64_t e = 0; e < cc_slots(&c); e++)
        bad += c.pool.pos[e] != eng.kv.pos[e] ||
               memcmp(&c.pool.score[e], &eng.kv.score[e], 4) != 0;
    for (int32_t h = 0; h < H; h++)
        for (int32_t i = 0; i < n_keep; i++) {
            const int32_t src = c.keep[(int64_t)h * n_keep + i];
            const int64_t di = ((int64_t)c.pool.blocks[i / BS] * H + h) * BS + i % BS;
            const int64_t si = ((int64_t)c.pool.blocks[src / BS] * H + h) * BS + src % BS;
            bad += c.pool.k_scale[di] != orig.kv.k_scale[si] ||
                   c.pool.v_scale[di] != orig.kv.v_scale[si];
        }
    if (bad)
        TEST_FAIL("int8 H=%d D=%d BS=%d n=%d keep=%d: %lld differences", H, D, BS, n_slots,
                  n_keep, (long long)bad);
    cuda_ref_test_pool_free(&eng);
    cuda_ref_test_pool_free(&orig);
    cc_free(&c);
    return bad;
}

TEST(int8_kv_compact_reference_matches_cpu_backend)
{
    uint64_t st = 4048;
    const int32_t bss[] = {16, 8, 5, 1};
    for (int r = 0; r < 200 && !test_cur_failed; r++) {
        const int32_t BS = bss[r % 4], H = 1 + dc_int(&st, 6),
                      D = 2 * (1 + dc_int(&st, 40));
        const int32_t n = 1 + dc_int(&st, 120);
        const int32_t keep = r % 10 == 0 ? n : r % 10 == 1 ? 0 : 1 + dc_int(&st, n);
        EXPECT_EQ(compare_compact_int8(&st, H, D, BS, n, keep), 0);
    }
    EXPECT_EQ(compare_compact_int8(&st, 8, 128, 16, 544, 110), 0);
}

int main(void)
{
    RUN(reference_matches_engine_on_random_decode_steps);
    RUN(reference_matches_engine_when_scores_tie);
    RUN(reference_matches_engine_with_gqa_and_window);
    RUN(int8_quantizer_is_the_cpu_backends);
    RUN(int8_reference_matches_engine_int8);
    RUN(victim_rules_of_design_section_5);
    RUN(kv_compact_reference_matches_cpu_backend);
    RUN(int8_kv_compact_reference_matches_cpu_backend);
    return test_done();
}
