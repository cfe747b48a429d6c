/*
 * test_cuda_kernels.c - every kernel in cuda/cuda_kernels.h against a host reference
 * written from the CPU backend's semantics (engine/cpu/cpu_ops.c), on random fp16 data.
 *
 * The host reference reads the same fp16 inputs widened to float and computes in
 * fp32, as the kernels do. The elementwise kernels (embed, positions, bias + ReLU,
 * residual add) do one fp32 add of two fp16 values, then a max with 0, then one
 * round-to-nearest-even to fp16: IEEE fp32 gives the same bits on host and device,
 * so those outputs must be bit-identical. LayerNorm sums in a different order and
 * uses rsqrtf (2 ulp in fp32), so its output is checked against the unrounded fp32
 * reference within fp16's rounding (2^-11 relative) plus 1e-5 for the fp32 noise.
 *
 * Decode attention (cuda_decode_attn) is compared with its host reference
 * cuda_ref_decode_attn (cuda/cuda_ref.c, itself checked against the CPU engine by
 * tests/unit/test_cuda_ref.c) on the same random paged states (tests/lib/paged_case.h):
 * K/V writes and positions bit-identical, scores within 1e-5, outputs within half an
 * fp16 ulp of the unrounded reference plus 1e-5, victims identical (with ties on,
 * where every probability is exactly 1/n on both sides, and otherwise unless the two
 * candidates' scores are within 1e-5, which is reported).
 *
 * The prefill compaction (cuda_kv_compact) only moves values, so the whole pool (K,
 * V, pos, score, blocks outside the table included) must equal cuda_ref_kv_compact's
 * bit for bit on the random states of tests/lib/paged_case.h, which
 * tests/unit/test_cuda_ref.c checks against the CPU backend's own compaction.
 *
 * Without a CUDA device (cudaGetDeviceCount finds none, or no driver) it prints
 * "no CUDA device: skipping" and exits 77, meson's skip code. Run on a GPU machine
 * with tests/gpu/run.sh.
 */
#include "paged_case.h"
#include "cuda_kernels.h"
#include "dtype.h"
#include "test.h"

#include "gpu_testlib.h"

#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stdint.h>

/* A failed CUDA call fails the test and leaves it (device memory is freed at exit). */
#define CUDA_OK(call)                                                                      \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            TEST_FAIL("%s: %s", #call, cudaGetErrorString(e_));                            \
            return;                                                                        \
        }                                                                                  \
    } while (0)

/* The random inputs (gpu_rnd_*): the same data on every run. */
static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* Wait for the kernels, copy n fp16 values back into out; 0 or the CUDA error. */
static cudaError_t from_dev(uint16_t *out, const void *d, int64_t n)
{
    return gpu_from_dev(cudaDeviceSynchronize(), out, d, (size_t)n * sizeof *out);
}

/* How many of got [n] differ from want [n] in their bits; reports the first few. */
static int64_t count_bit_diffs(const char *what, const uint16_t *got, const uint16_t *want,
                               int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (got[i] == want[i]) continue;
        if (bad++ < 5)
            TEST_FAIL("%s[%lld] = %g (0x%04x), expected %g (0x%04x)", what, (long long)i,
                      f16_to_f32(got[i]), got[i], f16_to_f32(want[i]), want[i]);
    }
    return bad;
}

/* ---- embedding + positions ------------------------------------------------------ */

/* cpu_embed then cpu_add_positions on fp16 tables: dst [n, d]; tok NULL = dst kept. */
static void ref_embed(uint16_t *dst, const uint16_t *tok, const int32_t *ids,
                      const uint16_t *pos_table, const int32_t *pos, int32_t offset,
                      int32_t n, int32_t d)
{
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < d; j++) {
            uint16_t *o = dst + (int64_t)i * d + j;
            float v = f16_to_f32(tok ? tok[(int64_t)ids[i] * d + j] : *o);
            if (pos_table) v += f16_to_f32(pos_table[(int64_t)(pos[i] + offset) * d + j]);
            *o = f32_to_f16(v);
        }
}

/* One embed check: `mode` 0 = tokens + positions, 1 = tokens only, 2 = positions onto
 * an existing x (the project_in path). */
static void check_embed(int32_t n, int32_t d, int mode)
{
    const int32_t vocab = 97, max_pos = 64, offset = 2;
    uint16_t *tok = gpu_rnd_f16(&rng, (int64_t)vocab * d, -1.0f, 1.0f);
    uint16_t *pt = gpu_rnd_f16(&rng, (int64_t)(max_pos + offset) * d, -0.5f, 0.5f);
    uint16_t *x0 = gpu_rnd_f16(&rng, (int64_t)n * d, -1.0f, 1.0f);
    int32_t *ids = malloc((size_t)n * sizeof *ids), *pos = malloc((size_t)n * sizeof *pos);
    for (int32_t i = 0; i < n; i++) {
        ids[i] = (int32_t)gpu_rnd_uniform(&rng, 0.0f, (float)vocab);
        pos[i] = (int32_t)gpu_rnd_uniform(&rng, 0.0f, (float)max_pos);
    }
    /* The last row reads the table's last rows: the offset must stay in range. */
    ids[n - 1] = vocab - 1;
    pos[n - 1] = max_pos - 1;
    uint16_t *want = malloc((size_t)n * d * sizeof *want);
    uint16_t *got = malloc((size_t)n * d * sizeof *got);
    memcpy(want, x0, (size_t)n * d * sizeof *want);
    ref_embed(want, mode == 2 ? NULL : tok, ids, mode == 1 ? NULL : pt, pos, offset, n, d);

    uint16_t *d_tok = gpu_to_dev(tok, (size_t)vocab * d * 2);
    uint16_t *d_pt = gpu_to_dev(pt, (size_t)(max_pos + offset) * d * 2);
    uint16_t *d_x = gpu_to_dev(x0, (size_t)n * d * 2);
    int32_t *d_ids = gpu_to_dev(ids, (size_t)n * 4), *d_pos = gpu_to_dev(pos, (size_t)n * 4);
    EXPECT(d_tok && d_pt && d_x && d_ids && d_pos);
    cudaError_t e;
    if (mode == 2)
        e = cuda_add_positions(d_x, d_pt, d_pos, offset, n, d, 0);
    else
        e = cuda_embed(d_x, d_tok, d_ids, mode == 1 ? NULL : d_pt, d_pos, offset, n, d, 0);
    EXPECT_EQ(e, cudaSuccess);
    EXPECT_EQ(from_dev(got, d_x, (int64_t)n * d), cudaSuccess);
    EXPECT_EQ(count_bit_diffs("embed", got, want, (int64_t)n * d), 0);

    cudaFree(d_tok), cudaFree(d_pt), cudaFree(d_x), cudaFree(d_ids), cudaFree(d_pos);
    free(tok), free(pt), free(x0), free(ids), free(pos), free(want), free(got);
}

TEST(embed_tokens_plus_positions_at_offset_2)
{
    check_embed(7, 768, 0);  /* OPT-125m width, a short prompt */
    check_embed(1, 4096, 0); /* one decode token, OPT-6.7B width */
    check_embed(300, 10, 0); /* rows narrower than the block */
}

TEST(embed_tokens_only_then_add_positions)
{
    check_embed(5, 512, 1); /* OPT-350m: tokens at 512, project_in, then positions */
    check_embed(5, 1024, 2);
}

/* ---- LayerNorm --------------------------------------------------------------------- */

/* cpu_layernorm on fp16 data, result left in fp32: out [n, d]. */
static void ref_layernorm(float *out, const uint16_t *x, const uint16_t *w,
                          const uint16_t *b, int32_t n, int32_t d)
{
    for (int32_t i = 0; i < n; i++) {
        const uint16_t *row = x + (int64_t)i * d;
        float mean = 0.0f, var = 0.0f;
        for (int32_t j = 0; j < d; j++)
            mean += f16_to_f32(row[j]);
        mean /= (float)d;
        for (int32_t j = 0; j < d; j++) {
            float c = f16_to_f32(row[j]) - mean;
            var += c * c;
        }
        var /= (float)d;
        float rstd = 1.0f / sqrtf(var + 1e-5f);
        for (int32_t j = 0; j < d; j++)
            out[(int64_t)i * d + j] =
                (f16_to_f32(row[j]) - mean) * rstd * f16_to_f32(w[j]) + f16_to_f32(b[j]);
    }
}

/* One LayerNorm check on rows centred at `centre` (a large centre tests that the
 * variance is taken around the mean, as the two-pass formula does). */
static void check_layernorm(int32_t n, int32_t d, float centre, bool in_place)
{
    const int64_t nd = (int64_t)n * d;
    uint16_t *x = gpu_rnd_f16(&rng, nd, centre - 2.0f, centre + 2.0f);
    uint16_t *w = gpu_rnd_f16(&rng, d, 0.5f, 1.5f), *b = gpu_rnd_f16(&rng, d, -0.2f, 0.2f);
    float *want = malloc((size_t)nd * sizeof *want);
    uint16_t *got = malloc((size_t)nd * sizeof *got);
    ref_layernorm(want, x, w, b, n, d);

    uint16_t *d_x = gpu_to_dev(x, (size_t)nd * 2), *d_w = gpu_to_dev(w, (size_t)d * 2);
    uint16_t *d_b = gpu_to_dev(b, (size_t)d * 2), *d_out = in_place ? d_x : NULL;
    if (!in_place) cudaMalloc((void **)&d_out, (size_t)nd * 2);
    EXPECT(d_x && d_w && d_b && d_out);
    EXPECT_EQ(cuda_layernorm(d_out, d_x, d_w, d_b, n, d, 0), cudaSuccess);
    EXPECT_EQ(from_dev(got, d_out, nd), cudaSuccess);

    int64_t bad = 0;
    double worst = 0.0;
    for (int64_t i = 0; i < nd; i++) {
        double g = f16_to_f32(got[i]), r = want[i], err = fabs(g - r);
        double tol = fabs(r) / 2048.0 + 1e-5; /* half an fp16 ulp, plus fp32 noise */
        if (err > worst) worst = err;
        if (!(err <= tol) && bad++ < 5) /* a NaN output fails too */
            TEST_FAIL("layernorm[%lld] = %g, expected %g (tol %g)", (long long)i, g, r,
                      tol);
    }
    printf("# layernorm n=%d d=%d centre=%g%s: max |err| %.3g\n", n, d, (double)centre,
           in_place ? " in place" : "", worst);
    EXPECT_EQ(bad, 0);

    if (!in_place) cudaFree(d_out);
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_b);
    free(x), free(w), free(b), free(want), free(got);
}

TEST(layernorm_matches_cpu_two_pass)
{
    check_layernorm(4, 768, 0.0f, false);
    check_layernorm(3, 4096, 0.0f, false);
    check_layernorm(2, 7168, 0.0f, false); /* OPT-30B width: 14 pairs per thread */
    check_layernorm(5, 18, 0.0f, false);   /* most threads of the block idle */
}

TEST(layernorm_large_mean_and_in_place)
{
    check_layernorm(4, 2048, 60.0f, false);
    check_layernorm(4, 2048, 0.0f, true); /* post-LN models normalise x in place */
}

/* ---- bias + ReLU ------------------------------------------------------------------- */

static void check_bias_relu(int32_t n, int32_t m, bool relu)
{
    const int64_t nm = (int64_t)n * m;
    uint16_t *x = gpu_rnd_f16(&rng, nm, -2.0f, 2.0f), *bias = gpu_rnd_f16(&rng, m, -1.0f, 1.0f);
    uint16_t *want = malloc((size_t)nm * sizeof *want), *got = malloc((size_t)nm * 2);
    for (int64_t i = 0; i < nm; i++) {
        float v = f16_to_f32(x[i]) + f16_to_f32(bias[i % m]);
        want[i] = f32_to_f16(relu && v < 0.0f ? 0.0f : v);
    }
    uint16_t *d_x = gpu_to_dev(x, (size_t)nm * 2), *d_b = gpu_to_dev(bias, (size_t)m * 2);
    EXPECT(d_x && d_b);
    EXPECT_EQ(cuda_bias_relu(d_x, d_b, n, m, relu, 0), cudaSuccess);
    EXPECT_EQ(from_dev(got, d_x, nm), cudaSuccess);
    EXPECT_EQ(count_bit_diffs(relu ? "bias_relu" : "bias", got, want, nm), 0);
    cudaFree(d_x), cudaFree(d_b);
    free(x), free(bias), free(want), free(got);
}

TEST(bias_relu_is_the_fc1_epilogue)
{
    check_bias_relu(6, 3072, true);  /* OPT-125m fc1 */
    check_bias_relu(1, 16384, true); /* one decode row of OPT-6.7B fc1 */
    check_bias_relu(333, 6, true);   /* many narrow rows: the bias index wraps */
}

TEST(bias_without_relu_keeps_negatives)
{
    check_bias_relu(5, 2304, false); /* q/k/v of OPT-125m */
}

/* ---- residual add ------------------------------------------------------------------ */

static void check_add(int64_t n)
{
    uint16_t *x = gpu_rnd_f16(&rng, n, -4.0f, 4.0f), *y = gpu_rnd_f16(&rng, n, -4.0f, 4.0f);
    uint16_t *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        want[i] = f32_to_f16(f16_to_f32(x[i]) + f16_to_f32(y[i]));
    uint16_t *d_x = gpu_to_dev(x, (size_t)n * 2), *d_y = gpu_to_dev(y, (size_t)n * 2);
    EXPECT(d_x && d_y);
    EXPECT_EQ(cuda_add(d_x, d_y, n, 0), cudaSuccess);
    EXPECT_EQ(from_dev(got, d_x, n), cudaSuccess);
    EXPECT_EQ(count_bit_diffs("add", got, want, n), 0);
    cudaFree(d_x), cudaFree(d_y);
    free(x), free(y), free(want), free(got);
}

TEST(residual_add_any_length)
{
    check_add(7 * 768);
    check_add(1001); /* odd: the last thread adds one element */
    check_add(1);
    check_add(1 << 22); /* many blocks */
}

/* ---- decode attention with H2O ------------------------------------------------------ */

/* cudaMalloc + copy of n bytes, or NULL (counted as a failure by the caller). */
#define DEV(ptr, n) gpu_to_dev((ptr), (size_t)(n))

/* One decode attention step on the device and in the reference; compares all of it.
 * Returns the number of evictions, or -1 after a failure. */
static int64_t check_decode_case(struct decode_case *c)
{
    const int32_t H = c->pool.n_head, D = c->pool.head_dim, BS = c->pool.block_size;
    const int64_t pool_el = (int64_t)c->pool.n_pool * H * BS,
                  n_out = (int64_t)c->n_seq * H * D;
    const int64_t n_sh = (int64_t)c->n_seq * H;

    /* The device copies first: the reference then updates c in place. */
    struct cuda_decode_attn_args d = dc_args(c);
    d.qkv = DEV(c->qkv, (int64_t)c->n_seq * 3 * H * D * 2);
    d.k = DEV(c->pool.k, pool_el * D * 2);
    d.v = DEV(c->pool.v, pool_el * D * 2);
    d.pos = DEV(c->pool.pos, pool_el * 4);
    d.score = DEV(c->pool.score, pool_el * 4);
    d.blocks = DEV(c->pool.blocks, (int64_t)c->n_seq * c->pool.max_blocks * 4);
    d.seqs = DEV(c->seqs, (int64_t)c->n_seq * (int64_t)sizeof *c->seqs);
    d.new_slot = DEV(c->new_slot, n_sh * 4);
    d.out = NULL;
    d.victim = NULL;
    cudaMalloc((void **)&d.out, (size_t)n_out * 2);
    cudaMalloc((void **)&d.victim, (size_t)n_sh * 4);
    int64_t ret = -1;
    float *want = malloc((size_t)n_out * sizeof *want);
    uint16_t *got = malloc((size_t)n_out * 2), *gk = malloc((size_t)(pool_el * D) * 2);
    uint16_t *gv = malloc((size_t)(pool_el * D) * 2);
    int32_t *gpos = malloc((size_t)pool_el * 4), *gvic = malloc((size_t)n_sh * 4);
    float *gscore = malloc((size_t)pool_el * 4);
    if (!d.qkv || !d.k || !d.v || !d.pos || !d.score || !d.blocks || !d.seqs ||
        !d.new_slot || !d.out || !d.victim) {
        TEST_FAIL("device allocation failed");
        goto out;
    }
    cudaError_t e = cuda_decode_attn(&d, 0);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    e = gpu_from_dev(e, got, d.out, (size_t)n_out * 2);
    e = gpu_from_dev(e, gk, d.k, (size_t)(pool_el * D) * 2);
    e = gpu_from_dev(e, gv, d.v, (size_t)(pool_el * D) * 2);
    e = gpu_from_dev(e, gpos, d.pos, (size_t)pool_el * 4);
    e = gpu_from_dev(e, gscore, d.score, (size_t)pool_el * 4);
    e = gpu_from_dev(e, gvic, d.victim, (size_t)n_sh * 4);
    if (e != cudaSuccess) {
        TEST_FAIL("cuda_decode_attn: %s", cudaGetErrorString(e));
        goto out;
    }
    struct cuda_decode_attn_args h = dc_args(c);
    cuda_ref_decode_attn(&h, want);

    int64_t bad = 0, n_evict = 0, near_ties = 0;
    double worst = 0.0, worst_score = 0.0;
    bad += count_bit_diffs("k", gk, c->pool.k, pool_el * D);
    bad += count_bit_diffs("v", gv, c->pool.v, pool_el * D);
    for (int64_t i = 0; i < pool_el; i++) {
        const double err = fabs((double)gscore[i] - c->pool.score[i]);
        if (err > worst_score) worst_score = err;
        if ((gpos[i] != c->pool.pos[i] || !(err <= 1e-5)) && bad++ < 5)
            TEST_FAIL("slot state %lld: pos %d score %.9g, expected pos %d score %.9g",
                      (long long)i, gpos[i], gscore[i], c->pool.pos[i], c->pool.score[i]);
    }
    bad += gpu_f16_misses("out", got, want, n_out, &worst);
    for (int64_t i = 0; i < n_sh; i++) {
        n_evict += c->victim[i] >= 0;
        if (gvic[i] == c->victim[i]) continue;
        /* Both must be candidates of a near tie: the device's choice scores within
         * 1e-5 of the reference's minimum (fp32 noise in p can reorder them). */
        const int32_t seq = (int32_t)(i / H), head = (int32_t)(i % H);
        bool near = gvic[i] >= 0 && c->victim[i] >= 0 && gvic[i] < c->seqs[seq].n_slots;
        if (near) {
            const float sg = c->pool.score[dc_index(c, seq, gvic[i], head)];
            const float sr = c->pool.score[dc_index(c, seq, c->victim[i], head)];
            near = fabsf(sg - sr) <= 1e-5f;
        }
        if (near) {
            near_ties++;
        } else if (bad++ < 5) {
            TEST_FAIL("victim (seq %d, head %d): slot %d, expected %d", seq, head, gvic[i],
                      c->victim[i]);
        }
    }
    printf("# decode n_seq=%d heads=%d head_dim=%d block=%d max_slots=%d: max |out err| "
           "%.3g, max |score err| %.3g, %lld evictions, %lld near ties\n",
           c->n_seq, H, D, BS, c->max_slots, worst, worst_score, (long long)n_evict,
           (long long)near_ties);
    EXPECT_EQ(bad, 0);
    ret = bad ? -1 : n_evict;
out:
    cudaFree((void *)d.qkv), cudaFree(d.k), cudaFree(d.v), cudaFree(d.pos);
    cudaFree(d.score), cudaFree((void *)d.blocks), cudaFree((void *)d.seqs);
    cudaFree((void *)d.new_slot), cudaFree(d.out), cudaFree(d.victim);
    free(want), free(got), free(gk), free(gv), free(gpos), free(gvic), free(gscore);
    return ret;
}

/* n random steps over a spread of geometries (head_dim 64/80/128 as in OPT, plus
 * small and odd ones), checked one by one; the tie cases must match exactly. */
static void check_decode_random(bool ties, int n, uint64_t seed)
{
    static const int32_t dims[] = {2, 64, 80, 128, 256, 18}, bss[] = {16, 16, 8, 5, 32};
    uint64_t st = seed;
    int64_t n_evict = 0;
    for (int k = 0; k < n && !test_cur_failed; k++) {
        struct decode_case c;
        const int32_t n_seq = 1 + dc_int(&st, 8), H = 1 + dc_int(&st, 5);
        const int32_t D = dims[dc_int(&st, 6)], BS = bss[dc_int(&st, 5)];
        const int32_t max_b = 2 + dc_int(&st, k % 4 == 0 ? 700 : 60);
        dc_make(&c, &st, n_seq, H, D, BS, max_b, ties);
        const int64_t got = check_decode_case(&c);
        if (got > 0) n_evict += got;
        dc_free(&c);
    }
    EXPECT(n_evict > 0);
}

TEST(decode_attn_matches_reference_on_random_steps)
{
    check_decode_random(false, 60, 5);
}

TEST(decode_attn_ties_pick_the_same_victims)
{
    check_decode_random(true, 60, 9);
}

TEST(decode_attn_long_sequences_use_large_shared_memory)
{
    /* Heads of up to 20000 slots: past the default 48 KiB of shared memory (12288
     * slots), so the launch opts in to more. */
    struct decode_case c;
    uint64_t st = 13;
    dc_make(&c, &st, 6, 2, 128, 16, 20000, false);
    EXPECT(c.max_slots > 12288);
    EXPECT(check_decode_case(&c) >= 0);
    dc_free(&c);
}

/* cuda_decode_attn on the default stream, in the shape gpu_time_us calls. */
static cudaError_t launch_decode(const void *args)
{
    return cuda_decode_attn(args, 0);
}

/* Time one OPT-6.7B-shaped step (32 heads of 128, 64 sequences) with n_slots slots
 * each; prints the achieved DRAM bandwidth (K and V read once, the slot state read
 * and the scores written). Nothing is asserted: docs/cuda.md quotes the expectation. */
static void time_decode(int32_t n_slots)
{
    const int32_t n_seq = 64, H = 32, D = 128, BS = 16;
    const int32_t nb = (n_slots + BS - 1) / BS, n_pool = n_seq * nb;
    const int64_t pool_el = (int64_t)n_pool * H * BS;
    int32_t *blocks = malloc((size_t)n_pool * 4), *new_slot = malloc((size_t)n_seq * H * 4);
    int32_t *pos = malloc((size_t)pool_el * 4);
    struct cuda_decode_seq *seqs = malloc((size_t)n_seq * sizeof *seqs);
    for (int32_t b = 0; b < n_pool; b++)
        blocks[b] = b;
    for (int64_t e = 0; e < pool_el; e++)
        pos[e] = (int32_t)(e % BS); /* all occupied */
    for (int32_t i = 0; i < n_seq; i++) {
        seqs[i] = (struct cuda_decode_seq){.n_slots = n_slots,
                                           .t = n_slots + 5,
                                           .budget = n_slots,
                                           .recent = n_slots / 2 + 1};
        for (int32_t h = 0; h < H; h++)
            new_slot[i * H + h] = n_slots - 1;
    }
    uint16_t *qkv = gpu_rnd_f16(&rng, (int64_t)n_seq * 3 * H * D, -1.0f, 1.0f);
    struct cuda_decode_attn_args d = {
        .max_blocks = nb,
        .n_seq = n_seq,
        .n_head = H,
        .head_dim = D,
        .block_size = BS,
        .max_slots = n_slots,
        .scale = 1.0f / sqrtf((float)D),
    };
    d.qkv = DEV(qkv, (int64_t)n_seq * 3 * H * D * 2);
    d.pos = DEV(pos, pool_el * 4);
    d.blocks = DEV(blocks, n_pool * 4);
    d.seqs = DEV(seqs, n_seq * (int64_t)sizeof *seqs);
    d.new_slot = DEV(new_slot, (int64_t)n_seq * H * 4);
    cudaMalloc((void **)&d.k, (size_t)(pool_el * D) * 2);
    cudaMalloc((void **)&d.v, (size_t)(pool_el * D) * 2);
    cudaMalloc((void **)&d.score, (size_t)pool_el * 4);
    cudaMalloc((void **)&d.out, (size_t)n_seq * H * D * 2);
    cudaMalloc((void **)&d.victim, (size_t)n_seq * H * 4);
    if (!d.qkv || !d.pos || !d.blocks || !d.seqs || !d.new_slot || !d.k || !d.v ||
        !d.score || !d.out || !d.victim) {
        TEST_FAIL("device allocation failed");
    } else {
        cudaMemset(d.k, 0, (size_t)(pool_el * D) * 2);
        cudaMemset(d.v, 0, (size_t)(pool_el * D) * 2);
        cudaMemset(d.score, 0, (size_t)pool_el * 4);
        const double us = gpu_time_us(launch_decode, &d, 20);
        EXPECT(us >= 0.0);
        const double bytes = (double)n_seq * H * n_slots * (2.0 * D * 2 + 4 + 8);
        printf("# decode timing: 64 seqs x 32 heads x %d slots, head_dim 128: %.1f us, "
               "%.1f MB, %.0f GB/s\n",
               n_slots, us, bytes / 1e6, bytes / us / 1e3);
    }
    cudaFree((void *)d.qkv), cudaFree(d.pos), cudaFree((void *)d.blocks);
    cudaFree((void *)d.seqs), cudaFree((void *)d.new_slot), cudaFree(d.k), cudaFree(d.v);
    cudaFree(d.score), cudaFree(d.out), cudaFree(d.victim);
    free(blocks), free(new_slot), free(pos), free(seqs), free(qkv);
}

TEST(decode_attn_timing)
{
    time_decode(110); /* h2o 20% of 512 + 32 tokens */
    time_decode(544); /* full: 512 + 32 */
    time_decode(2048);
}

/* ---- kv_compact ------------------------------------------------------------------- */

/* One random compaction (tests/lib/paged_case.h) on the device and with
 * cuda_ref_kv_compact on the host: the whole pool (K, V, pos, score) bit-identical.
 * Returns the differing elements. */
static int64_t check_compact(uint64_t *st, int32_t H, int32_t D, int32_t BS, int32_t n_slots,
                             int32_t n_keep)
{
    struct compact_case c;
    cc_make(&c, st, H, D, BS, n_slots, n_keep);
    const int64_t ns = cc_slots(&c);
    const int32_t nb = (n_slots + BS - 1) / BS;
    struct cuda_kv_compact_args d = cc_args(&c);
    d.k = gpu_to_dev(c.pool.k, (size_t)ns * D * 2);
    d.v = gpu_to_dev(c.pool.v, (size_t)ns * D * 2);
    d.pos = gpu_to_dev(c.pool.pos, (size_t)ns * 4);
    d.score = gpu_to_dev(c.pool.score, (size_t)ns * 4);
    d.blocks = gpu_to_dev(c.pool.blocks, (size_t)(nb ? nb : 1) * 4);
    d.keep = gpu_to_dev(c.keep, (size_t)H * (n_keep ? n_keep : 1) * 4);
    uint16_t *k = malloc((size_t)ns * D * 2), *v = malloc((size_t)ns * D * 2);
    int32_t *pos = malloc((size_t)ns * 4);
    float *score = malloc((size_t)ns * 4);
    int64_t bad = 1;
    cudaError_t e = cudaErrorMemoryAllocation;
    if (d.k && d.v && d.pos && d.score && d.blocks && d.keep) e = cuda_kv_compact(&d, 0);
    if (e == cudaSuccess) e = from_dev(k, d.k, ns * D);
    if (e == cudaSuccess) e = from_dev(v, d.v, ns * D);
    e = gpu_from_dev(e, pos, d.pos, (size_t)ns * 4);
    e = gpu_from_dev(e, score, d.score, (size_t)ns * 4);
    if (e != cudaSuccess) {
        TEST_FAIL("cuda_kv_compact H=%d D=%d BS=%d n=%d keep=%d: %s", H, D, BS, n_slots,
                  n_keep, cudaGetErrorString(e));
    } else {
        struct cuda_kv_compact_args r = cc_args(&c);
        cuda_ref_kv_compact(&r);
        bad = count_bit_diffs("K", k, c.pool.k, ns * D) +
              count_bit_diffs("V", v, c.pool.v, ns * D);
        for (int64_t i = 0; i < ns; i++) {
            if (pos[i] == c.pool.pos[i] && memcmp(&score[i], &c.pool.score[i], 4) == 0)
                continue;
            if (bad++ < 5)
                TEST_FAIL("slot state %lld: pos %d score %g, expected %d %g", (long long)i,
                          pos[i], score[i], c.pool.pos[i], c.pool.score[i]);
        }
        if (bad)
            TEST_FAIL("H=%d D=%d BS=%d n=%d keep=%d: %lld differences", H, D, BS, n_slots,
                      n_keep, (long long)bad);
    }
    cudaFree(d.k), cudaFree(d.v), cudaFree(d.pos), cudaFree(d.score);
    cudaFree((void *)d.blocks), cudaFree((void *)d.keep);
    free(k), free(v), free(pos), free(score);
    cc_free(&c);
    return bad;
}

TEST(kv_compact_matches_reference_bit_for_bit)
{
    uint64_t st = 77;
    const int32_t bss[] = {16, 8, 5, 1};
    for (int r = 0; r < 200; r++) {
        const int32_t BS = bss[r % 4], H = 1 + dc_int(&st, 6), D = 2 * (1 + dc_int(&st, 128));
        const int32_t n = 1 + dc_int(&st, 300);
        const int32_t keep = r % 10 == 0 ? n : r % 10 == 1 ? 0 : 1 + dc_int(&st, n);
        EXPECT_EQ(check_compact(&st, H, D, BS, n, keep), 0);
    }
    /* Chunk edges (32 slots per chunk), the largest head, OPT-6.7B's h2o 20%. */
    EXPECT_EQ(check_compact(&st, 4, 64, 16, 64, 32), 0);
    EXPECT_EQ(check_compact(&st, 4, 64, 16, 65, 33), 0);
    EXPECT_EQ(check_compact(&st, 2, 256, 16, 400, 200), 0);
    EXPECT_EQ(check_compact(&st, 32, 128, 16, 544, 110), 0);
    EXPECT_EQ(check_compact(&st, 32, 128, 16, 2048, 2048), 0);
}

/* ---- arguments --------------------------------------------------------------------- */

TEST(bad_arguments_are_refused_before_launch)
{
    uint16_t *d = NULL;
    CUDA_OK(cudaMalloc((void **)&d, 64));
    int32_t *ids = (int32_t *)d;
    EXPECT_EQ(cuda_embed(d, d, ids, d, ids, 2, 1, 3, 0), cudaErrorInvalidValue); /* odd d */
    EXPECT_EQ(cuda_embed(d, NULL, ids, d, ids, 2, 1, 4, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_add_positions(d, NULL, ids, 2, 1, 4, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_layernorm(d, d, d, d, 1, 5, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_layernorm(d, d, d, d, -1, 4, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_bias_relu(d, d, 2, 7, true, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cuda_add(d, d, -1, 0), cudaErrorInvalidValue);
    /* Empty work is not an error and launches nothing. */
    EXPECT_EQ(cuda_embed(d, d, ids, d, ids, 2, 0, 4, 0), cudaSuccess);
    EXPECT_EQ(cuda_layernorm(d, d, d, d, 0, 4, 0), cudaSuccess);
    EXPECT_EQ(cuda_bias_relu(d, d, 0, 4, false, 0), cudaSuccess);
    EXPECT_EQ(cuda_add(d, d, 0, 0), cudaSuccess);
    struct cuda_decode_attn_args a = {
        .n_seq = 1, .n_head = 1, .head_dim = 3, .block_size = 16};
    EXPECT_EQ(cuda_decode_attn(&a, 0), cudaErrorInvalidValue); /* odd head_dim */
    a.head_dim = 258;
    EXPECT_EQ(cuda_decode_attn(&a, 0), cudaErrorInvalidValue); /* above 256 */
    a.head_dim = 64;
    a.block_size = 0;
    EXPECT_EQ(cuda_decode_attn(&a, 0), cudaErrorInvalidValue);
    a.block_size = 16;
    a.n_seq = 0;
    EXPECT_EQ(cuda_decode_attn(&a, 0), cudaSuccess); /* nothing to do */
    struct cuda_kv_compact_args ca = {
        .n_slots = 4, .n_keep = 2, .n_head = 1, .head_dim = 3, .block_size = 16};
    EXPECT_EQ(cuda_kv_compact(&ca, 0), cudaErrorInvalidValue); /* odd head_dim */
    ca.head_dim = 258;
    EXPECT_EQ(cuda_kv_compact(&ca, 0), cudaErrorInvalidValue); /* above 256 */
    ca.head_dim = 64;
    ca.n_keep = 5;
    EXPECT_EQ(cuda_kv_compact(&ca, 0), cudaErrorInvalidValue); /* more kept than slots */
    ca.n_keep = 2;
    ca.n_slots = 0;
    ca.n_keep = 0;
    EXPECT_EQ(cuda_kv_compact(&ca, 0), cudaSuccess); /* nothing to do */
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d);
}

int main(void)
{
    const int n_dev = gpu_device_count();
    if (n_dev == 0) return 77; /* meson's skip code */
    gpu_print_device(n_dev);

    RUN(embed_tokens_plus_positions_at_offset_2);
    RUN(embed_tokens_only_then_add_positions);
    RUN(layernorm_matches_cpu_two_pass);
    RUN(layernorm_large_mean_and_in_place);
    RUN(bias_relu_is_the_fc1_epilogue);
    RUN(bias_without_relu_keeps_negatives);
    RUN(residual_add_any_length);
    RUN(decode_attn_matches_reference_on_random_steps);
    RUN(decode_attn_ties_pick_the_same_victims);
    RUN(decode_attn_long_sequences_use_large_shared_memory);
    RUN(decode_attn_timing);
    RUN(kv_compact_matches_reference_bit_for_bit);
    RUN(bad_arguments_are_refused_before_launch);
    return test_done();
}
