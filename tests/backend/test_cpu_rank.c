/*
 * test_cpu_rank.c - one rank of the CPU backend (engine/cpu/cpu_rank.c): its
 * scratch, sized for the OpenMP team of the forward that uses it.
 */
#include "test.h"

#include "backend_cpu.h"
#include "batch.h"
#include "kv_pool.h"
#include "kv_seq.h"
#include "model.h"
#include "rnd.h"
#include "util.h"

#define NSEQ 8
#define BS 16

/*
 * The CPU backend sized its attention scratch for omp_get_max_threads() when the
 * scratch last grew, but the thread count is the calling thread's OpenMP setting,
 * which a later backend_cpu_create (another model, n_threads > 0) changes. The next
 * forward of the first model, with no bigger sequence to trigger a regrow, then ran
 * its attention tasks on threads whose scratch rows were never allocated: a heap
 * overflow (AddressSanitizer reports it; without it, silent corruption).
 */
TEST(scratch_rows_follow_thread_count)
{
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = DTYPE_F32;
    mo.n_threads = 1;
    struct model *a = NULL, *b = NULL;
    CHECK(model_load(&a, "dummy:tiny", &mo) == 0);
    CHECK(a->be.ops->kv_alloc(a->be.ctx, 64, BS) == 0);
    struct kv_pool pool;
    kv_pool_init(&pool, 64, BS);
    const int32_t V = a->cfg.vocab_size, P = 40;
    struct batch bt;
    batch_init(&bt);
    int32_t tokens[P];
    uint64_t seed = 5;
    for (int32_t t = 0; t < P; t++)
        tokens[t] = lcg_range(&seed, 4, V - 1);
    struct kv_seq kv[NSEQ];
    struct batch_item items[NSEQ];
    float *first = xmalloc((size_t)V * sizeof *first);
    for (int32_t round = 0; round < 2; round++) {
        for (int32_t i = 0; i < NSEQ; i++) {
            kv_seq_init(&kv[i]);
            items[i] = (struct batch_item){.kv = &kv[i], .tokens = tokens, .n_tok = P};
        }
        /* Round 0 on one thread; round 1 after another model asked for 8. */
        CHECK(batch_run(&bt, &a->be, &pool, V, items, round == 0 ? 1 : NSEQ) == 0);
        if (round == 0) {
            memcpy(first, bt.logits, (size_t)V * sizeof *first);
            mo.n_threads = 8;
            CHECK(model_load(&b, "dummy:tiny", &mo) == 0);
        } else {
            for (int32_t i = 0; i < NSEQ; i++)
                if (memcmp(first, bt.logits + (int64_t)items[i].logits_row * V,
                           (size_t)V * sizeof *first) != 0)
                    TEST_FAIL("seq %d: logits differ from the same prompt's first run", i);
        }
        for (int32_t i = 0; i < (round == 0 ? 1 : NSEQ); i++)
            kv_seq_deinit(&kv[i], &pool);
    }
    free(first);
    batch_deinit(&bt);
    EXPECT_EQ(pool.n_free, pool.n_blocks);
    kv_pool_deinit(&pool);
    model_destroy(b);
    model_destroy(a);
}

int main(void)
{
    RUN(scratch_rows_follow_thread_count);
    return test_done();
}
