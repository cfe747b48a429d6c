/*
 * test_cuda_kv_blocks_ref.c - the host references of the CUDA KV state kernels
 * cuda_kv_blocks_init and cuda_kv_blocks_gather_state (cuda/cuda_ref.c) against the CPU
 * backend's semantics, written out here independently of the reference's code.
 *
 * init: the CPU backend's kv_init_blocks (engine/cpu/be_cpu.c) sets pos -1, score 0
 * and V to zero bytes in every slot of each listed block, and touches nothing else.
 * The pools start as garbage (NaN V values, random positions and scores), so a missed
 * slot shows, and every byte outside the listed blocks must be unchanged. With an int8
 * cache (cuda_ref_kv_init_blocks_i8) it clears the int8 V bytes and the value scales
 * too (be_cpu.c clears kv->v_scale), here over random bytes and NaN scales.
 * gather: be_ops.kv_read_state's layout [n_head, n_slots] per layer, slot s of a
 * sequence being offset s % block_size of block blocks[s / block_size]; the
 * expectation walks the block table block by block (no division), so a wrong index
 * formula in the reference differs from it. tests/gpu/test_cuda_kv_blocks checks the
 * kernels against these references on the same kind of pools.
 */
#include "test.h"

#include "cuda_ref.h"
#include "paged_case.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* One random init: returns the wrong bytes or slots. */
static int64_t check_init(uint64_t *st, int32_t H, int32_t D, int32_t BS, int32_t n_pool,
                          int32_t n)
{
    const int64_t per = (int64_t)H * BS, ns = per * n_pool;
    uint16_t *v = dc_alloc((size_t)(ns * D + 1) * sizeof *v),
             *v0 = dc_alloc((size_t)(ns * D + 1) * sizeof *v0);
    int32_t *pos = dc_alloc((size_t)(ns + 1) * sizeof *pos),
            *pos0 = dc_alloc((size_t)(ns + 1) * sizeof *pos0);
    float *score = dc_alloc((size_t)(ns + 1) * sizeof *score),
          *score0 = dc_alloc((size_t)(ns + 1) * sizeof *score0);
    int32_t *blocks = dc_alloc((size_t)(n ? n : 1) * sizeof *blocks);
    bool *listed = dc_alloc((size_t)n_pool * sizeof *listed);
    kb_fill_pool(st, v, pos, score, ns, D);
    dc_shuffle_blocks(st, blocks, n_pool, n);
    memcpy(v0, v, (size_t)ns * D * sizeof *v);
    memcpy(pos0, pos, (size_t)ns * sizeof *pos);
    memcpy(score0, score, (size_t)ns * sizeof *score);
    memset(listed, 0, (size_t)n_pool * sizeof *listed);
    for (int32_t i = 0; i < n; i++)
        listed[blocks[i]] = true;

    cuda_ref_kv_init_blocks(v, pos, score, blocks, n, H, D, BS);

    int64_t bad = 0;
    const float zero = 0.0f;
    for (int32_t b = 0; b < n_pool; b++)
        for (int64_t e = b * per; e < (b + 1) * per; e++) {
            bool ok;
            if (listed[b]) {
                ok = pos[e] == -1 && memcmp(&score[e], &zero, sizeof zero) == 0;
                for (int32_t d = 0; d < D; d++)
                    ok = ok && v[e * D + d] == 0;
            } else {
                ok = pos[e] == pos0[e] && memcmp(&score[e], &score0[e], sizeof zero) == 0 &&
                     memcmp(&v[e * D], &v0[e * D], (size_t)D * sizeof *v) == 0;
            }
            if (!ok && bad++ < 5)
                TEST_FAIL("H=%d D=%d BS=%d n=%d: block %d (%s) slot %lld is wrong", H, D,
                          BS, n, b, listed[b] ? "freed" : "not listed",
                          (long long)(e - b * per));
        }
    free(v), free(v0), free(pos), free(pos0), free(score), free(score0), free(blocks);
    free(listed);
    return bad;
}

TEST(init_blocks_frees_listed_blocks_only)
{
    /* OPT-like heads of 64 and 128, odd head counts and D = 2; none, some or every
     * block of the pool listed. */
    uint64_t st = 31;
    for (int r = 0; r < 200; r++) {
        const int32_t BS = kb_block_sizes[r % 4], H = 1 + dc_int(&st, 7);
        const int32_t D = r % 5 == 0 ? 2 : 2 * (1 + dc_int(&st, 64));
        const int32_t n_pool = 1 + dc_int(&st, 12);
        const int32_t n = r % 7 == 0 ? 0 : r % 7 == 1 ? n_pool : dc_int(&st, n_pool + 1);
        EXPECT_EQ(check_init(&st, H, D, BS, n_pool, n), 0);
    }
    EXPECT_EQ(check_init(&st, 32, 128, 16, 40, 34), 0); /* OPT-6.7B, a 544-token prompt */
}

/* One random int8 init: v8 random bytes, v_scale NaN or random, the slot state as
 * kb_fill_pool makes it. Returns the wrong bytes or slots. */
static int64_t check_init_i8(uint64_t *st, int32_t H, int32_t D, int32_t BS, int32_t n_pool,
                             int32_t n)
{
    const int64_t per = (int64_t)H * BS, ns = per * n_pool;
    int8_t *v8 = dc_alloc((size_t)(ns * D)), *v80 = dc_alloc((size_t)(ns * D));
    uint16_t *v16 = dc_alloc((size_t)(ns * D) * sizeof *v16); /* kb_fill_pool's V, unused */
    float *vs = dc_alloc((size_t)ns * sizeof *vs),
          *vs0 = dc_alloc((size_t)ns * sizeof *vs0);
    int32_t *pos = dc_alloc((size_t)ns * sizeof *pos), *pos0 = dc_alloc((size_t)ns * 4);
    float *score = dc_alloc((size_t)ns * sizeof *score), *score0 = dc_alloc((size_t)ns * 4);
    int32_t *blocks = dc_alloc((size_t)(n ? n : 1) * sizeof *blocks);
    bool *listed = dc_alloc((size_t)n_pool * sizeof *listed);
    kb_fill_pool(st, v16, pos, score, ns, D);
    for (int64_t e = 0; e < ns * D; e++)
        v8[e] = (int8_t)(dc_int(st, 255) - 127);
    for (int64_t e = 0; e < ns; e++)
        vs[e] = dc_int(st, 4) == 0 ? NAN : dc_float(st, 0.0f, 1.0f);
    dc_shuffle_blocks(st, blocks, n_pool, n);
    memcpy(v80, v8, (size_t)(ns * D));
    memcpy(vs0, vs, (size_t)ns * 4);
    memcpy(pos0, pos, (size_t)ns * 4);
    memcpy(score0, score, (size_t)ns * 4);
    for (int32_t i = 0; i < n; i++)
        listed[blocks[i]] = true;

    cuda_ref_kv_init_blocks_i8(v8, vs, pos, score, blocks, n, H, D, BS);

    int64_t bad = 0;
    const float zero = 0.0f;
    for (int32_t b = 0; b < n_pool; b++)
        for (int64_t e = b * per; e < (b + 1) * per; e++) {
            bool ok;
            if (listed[b]) {
                ok = pos[e] == -1 && memcmp(&score[e], &zero, 4) == 0 &&
                     memcmp(&vs[e], &zero, 4) == 0;
                for (int32_t d = 0; d < D; d++)
                    ok = ok && v8[e * D + d] == 0;
            } else {
                ok = pos[e] == pos0[e] && memcmp(&score[e], &score0[e], 4) == 0 &&
                     memcmp(&vs[e], &vs0[e], 4) == 0 &&
                     memcmp(&v8[e * D], &v80[e * D], (size_t)D) == 0;
            }
            if (!ok && bad++ < 5)
                TEST_FAIL("int8 H=%d D=%d BS=%d n=%d: block %d (%s) slot %lld is wrong", H,
                          D, BS, n, b, listed[b] ? "freed" : "not listed",
                          (long long)(e - b * per));
        }
    free(v8), free(v80), free(v16), free(vs), free(vs0), free(pos), free(pos0);
    free(score), free(score0), free(blocks), free(listed);
    return bad;
}

TEST(int8_init_blocks_clears_bytes_and_value_scales)
{
    uint64_t st = 37;
    for (int r = 0; r < 120; r++) {
        const int32_t BS = kb_block_sizes[r % 4], H = 1 + dc_int(&st, 7);
        const int32_t D = r % 5 == 0 ? 2 : 2 * (1 + dc_int(&st, 64));
        const int32_t n_pool = 1 + dc_int(&st, 12);
        const int32_t n = r % 7 == 0 ? 0 : r % 7 == 1 ? n_pool : dc_int(&st, n_pool + 1);
        EXPECT_EQ(check_init_i8(&st, H, D, BS, n_pool, n), 0);
    }
}

/* One random gather: returns the wrong outputs. */
static int64_t check_gather(uint64_t *st, int32_t H, int32_t BS, int32_t n_slots)
{
    const int32_t nb = (n_slots + BS - 1) / BS, n_pool = nb + 3;
    const int64_t ns = (int64_t)n_pool * H * BS, n_out = (int64_t)H * n_slots;
    uint16_t *v = dc_alloc((size_t)ns * 2 * sizeof *v);
    int32_t *pos = dc_alloc((size_t)ns * sizeof *pos);
    float *score = dc_alloc((size_t)ns * sizeof *score);
    int32_t *blocks = dc_alloc((size_t)(nb ? nb : 1) * sizeof *blocks);
    /* One guard element past each output: the reference writes exactly [H, n_slots]. */
    int32_t *pos_out = dc_alloc((size_t)(n_out + 1) * sizeof *pos_out);
    float *score_out = dc_alloc((size_t)(n_out + 1) * sizeof *score_out);
    kb_fill_pool(st, v, pos, score, ns, 2);
    dc_shuffle_blocks(st, blocks, n_pool, nb);
    pos_out[n_out] = 12345;
    score_out[n_out] = 6.5f;

    cuda_ref_kv_gather_state(pos_out, score_out, pos, score, blocks, n_slots, H, BS);

    int64_t bad = 0;
    if (pos_out[n_out] != 12345 || score_out[n_out] != 6.5f) {
        TEST_FAIL("H=%d BS=%d n=%d: wrote past [n_head, n_slots]", H, BS, n_slots);
        bad++;
    }
    /* Walk the table: block bi holds slots bi * BS .. bi * BS + BS - 1, head h's tile
     * of pool block blocks[bi] starting at (blocks[bi] * H + h) * BS. */
    for (int32_t h = 0; h < H; h++) {
        int32_t s = 0;
        for (int32_t bi = 0; bi < nb; bi++) {
            const int64_t tile = ((int64_t)blocks[bi] * H + h) * BS;
            for (int32_t o = 0; o < BS && s < n_slots; o++, s++) {
                const int64_t out = (int64_t)h * n_slots + s;
                if (pos_out[out] == pos[tile + o] &&
                    memcmp(&score_out[out], &score[tile + o], sizeof(float)) == 0)
                    continue;
                if (bad++ < 5)
                    TEST_FAIL(
                        "H=%d BS=%d n=%d: head %d slot %d = (%d, %g), expected (%d, %g)", H,
                        BS, n_slots, h, s, pos_out[out], score_out[out], pos[tile + o],
                        score[tile + o]);
            }
        }
        EXPECT_EQ(s, n_slots);
    }
    free(v), free(pos), free(score), free(blocks), free(pos_out), free(score_out);
    return bad;
}

TEST(gather_state_matches_a_walk_of_the_block_table)
{
    /* n_slots 0, below, at and past block multiples; block sizes 1, 16, 64 and 5. */
    uint64_t st = 47;
    for (int r = 0; r < 300; r++) {
        const int32_t BS = kb_block_sizes[r % 4], H = 1 + dc_int(&st, 9);
        const int32_t n = r % 11 == 0   ? 0
                          : r % 11 == 1 ? BS * (1 + dc_int(&st, 4))
                                        : 1 + dc_int(&st, 400);
        EXPECT_EQ(check_gather(&st, H, BS, n), 0);
    }
    EXPECT_EQ(check_gather(&st, 32, 16, 544), 0); /* OPT-6.7B, a 544-token prompt */
}

int main(void)
{
    RUN(init_blocks_frees_listed_blocks_only);
    RUN(int8_init_blocks_clears_bytes_and_value_scales);
    RUN(gather_state_matches_a_walk_of_the_block_table);
    return test_done();
}
