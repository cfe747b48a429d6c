/*
 * test_engine_core.c - the one set-up (engine/engine_core.c) and its KV sizing rule
 * on dummy:tiny (fp32, CPU backend).
 *
 * The rule as engine_core_pool_blocks states it: kv_blocks wins, then kv_cache_bytes,
 * else min(capacity / block bytes, max_num_seqs * ceil(context / block_size)), where
 * the capacity is a device backend's kv_capacity when it has one. The device is
 * played by the CPU backend with a kv_capacity entry added to a copy of its table,
 * so the cap by device memory is tested without a GPU. Then engine_core_open builds
 * only what `upto` asks for, never frees a shared model, and undoes a failed step.
 */
#include "test.h"

#include "engine_core.h"
#include "err.h"
#include "util.h"

/* The fake device's free memory, in bytes (read by fake_kv_capacity). */
static size_t fake_capacity;

static size_t fake_kv_capacity(void *ctx)
{
    (void)ctx;
    return fake_capacity;
}

static struct model *load_tiny(void)
{
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = DTYPE_F32;
    mo.n_threads = 2;
    struct model *m = NULL;
    if (model_load(&m, "dummy:tiny", &mo)) {
        printf("# model_load: %s\n", err_msg());
        return NULL;
    }
    return m;
}

/* Pool options on a shared model: the default rule unless a test sets a size. */
static struct engine_core_opts pool_opts(struct model *m)
{
    return (struct engine_core_opts){
        .upto = ENGINE_CORE_POOL,
        .shared_model = m,
        .block_size = 16,
        .sched = {.max_num_seqs = 8, .max_batched_tokens = 64},
    };
}

static int32_t blocks_of(const struct engine_core_opts *o, const struct model *m)
{
    int32_t n = -1;
    if (engine_core_pool_blocks(o, m, &n)) printf("# pool_blocks: %s\n", err_msg());
    return n;
}

TEST(explicit_sizes)
{
    /* kv_blocks is exact and wins over bytes; bytes give whole blocks only. */
    struct model *m = load_tiny();
    if (!m) {
        TEST_FAIL("no model");
        return;
    }
    struct engine_core_opts o = pool_opts(m);
    const int64_t bb = (int64_t)m->be.ops->kv_block_bytes(m->be.ctx, o.block_size);
    o.kv_cache_bytes = 5 * bb + bb / 2;
    EXPECT_EQ(blocks_of(&o, m), 5);
    o.kv_blocks = 3;
    EXPECT_EQ(blocks_of(&o, m), 3);
    /* Fewer bytes than one block: ENG_ENOMEM, with the sizes in the message. */
    o.kv_blocks = 0;
    o.kv_cache_bytes = bb - 1;
    int32_t n = -1;
    EXPECT_EQ(engine_core_pool_blocks(&o, m, &n), ENG_ENOMEM);
    EXPECT(strstr(err_msg(), "holds no block") != NULL);
    model_destroy(m);
}

TEST(default_is_what_the_sequences_can_use)
{
    /* On the host (no kv_capacity) 4 GiB or a quarter of RAM is far more than
     * 8 sequences of dummy:tiny's context need: they set the size. With
     * max_model_len the context is that, not the model's. */
    struct model *m = load_tiny();
    if (!m) {
        TEST_FAIL("no model");
        return;
    }
    struct engine_core_opts o = pool_opts(m);
    EXPECT(m->be.ops->kv_capacity == NULL);
    EXPECT_EQ(blocks_of(&o, m), 8 * CEIL_DIV(m->cfg.max_pos, 16));
    o.sched.max_model_len = 100;
    EXPECT_EQ(blocks_of(&o, m), 8 * CEIL_DIV(100, 16));
    /* A context past the model's is refused, as the scheduler refuses it. */
    o.sched.max_model_len = m->cfg.max_pos + 1;
    int32_t n = -1;
    EXPECT_EQ(engine_core_pool_blocks(&o, m, &n), ENG_EINVAL);
    model_destroy(m);
}

TEST(default_is_capped_by_device_capacity)
{
    /* A device with room for 10.5 blocks gets a pool of 10, however many sequences
     * could use more; with more room than they can use, their need wins again. */
    struct model *m = load_tiny();
    if (!m) {
        TEST_FAIL("no model");
        return;
    }
    struct be_ops dev = *m->be.ops;
    dev.kv_capacity = fake_kv_capacity;
    const struct be_ops *host = m->be.ops;
    m->be.ops = &dev;
    struct engine_core_opts o = pool_opts(m);
    const size_t bb = dev.kv_block_bytes(m->be.ctx, o.block_size);
    const int32_t useful = 8 * CEIL_DIV(m->cfg.max_pos, 16);
    fake_capacity = 10 * bb + bb / 2;
    EXPECT_EQ(engine_core_kv_capacity(m), (int64_t)fake_capacity);
    EXPECT_EQ(blocks_of(&o, m), 10);
    fake_capacity = (size_t)(useful + 7) * bb;
    EXPECT_EQ(blocks_of(&o, m), useful);
    /* A device with less than a block left: loading fails rather than asking the
     * backend for a pool it cannot hold. */
    fake_capacity = bb - 1;
    struct engine_core *c = (struct engine_core *)1;
    EXPECT_EQ(engine_core_open(&o, &c), ENG_ENOMEM);
    EXPECT(c == NULL);
    /* And the pool engine_core_open allocates is the capped one. */
    fake_capacity = 6 * bb;
    EXPECT_EQ(engine_core_open(&o, &c), 0);
    if (c) {
        EXPECT_EQ(c->pool.n_blocks, 6);
        EXPECT_EQ(c->pool.n_free, 6);
        EXPECT_EQ(c->pool.block_size, 16);
    }
    engine_core_close(c);
    m->be.ops = host;
    model_destroy(m);
}

static void no_events(void *arg, struct req_event *ev)
{
    (void)arg;
    req_event_free(ev);
}

TEST(upto_builds_only_what_is_asked)
{
    /* MODEL loads and owns the model only; SCHED on a shared model adds a pool and
     * a scheduler, and closing it leaves the model usable. */
    struct engine_core_opts o = {.upto = ENGINE_CORE_MODEL, .model = "dummy:tiny"};
    model_opts_default(&o.model_opts);
    o.model_opts.dtype = DTYPE_F32;
    struct engine_core *base = NULL;
    EXPECT_EQ(engine_core_open(&o, &base), 0);
    if (!base) {
        TEST_FAIL("open: %s", err_msg());
        return;
    }
    EXPECT(base->m != NULL);
    EXPECT(base->owns_model);
    EXPECT(!base->pool_inited);
    EXPECT(base->sched == NULL);

    struct engine_core_opts so = pool_opts(base->m);
    so.upto = ENGINE_CORE_SCHED;
    so.kv_blocks = 4;
    so.emit = no_events;
    for (int round = 0; round < 2; round++) { /* a second pool replaces the first */
        struct engine_core *c = NULL;
        EXPECT_EQ(engine_core_open(&so, &c), 0);
        if (!c) {
        TEST_FAIL("open: %s", err_msg());
        return;
    }
        EXPECT(c->m == base->m);
        EXPECT(!c->owns_model);
        EXPECT_EQ(c->pool.n_blocks, 4);
        EXPECT(c->sched != NULL && sched_idle(c->sched));
        engine_core_close(c);
    }
    engine_core_close(base); /* frees the model once: the shared cores did not */
}

TEST(errors_leave_nothing)
{
    /* Wrong options fail before loading; a missing model and a bad scheduler fail
     * in the step at fault, with *out NULL and what was built freed (ASan in CI). */
    struct engine_core_opts o = {.upto = ENGINE_CORE_POOL, .model = "", .block_size = 16};
    struct engine_core *c = (struct engine_core *)1;
    EXPECT_EQ(engine_core_open(&o, &c), ENG_EINVAL);
    EXPECT(c == NULL);
    EXPECT(strstr(err_msg(), "no model") != NULL);
    o.model = "dummy:tiny";
    o.block_size = 0;
    EXPECT_EQ(engine_core_check(&o), ENG_EINVAL);
    o.block_size = 16;
    o.kv_blocks = -1;
    EXPECT_EQ(engine_core_check(&o), ENG_EINVAL);
    o.kv_blocks = 0;
    EXPECT_EQ(engine_core_check(&o), 0);
    o.model = "dummy:nope";
    EXPECT(engine_core_open(&o, &c) != 0);
    EXPECT(c == NULL);

    /* max_batched_tokens must exceed max_num_seqs: the scheduler refuses, and the
     * model and pool loaded before it are freed again. */
    struct engine_core_opts s = {.upto = ENGINE_CORE_SCHED, .model = "dummy:tiny",
                                 .block_size = 16, .kv_blocks = 4,
                                 .sched = {.max_num_seqs = 8, .max_batched_tokens = 8},
                                 .emit = no_events};
    model_opts_default(&s.model_opts);
    s.model_opts.dtype = DTYPE_F32;
    EXPECT_EQ(engine_core_open(&s, &c), ENG_EINVAL);
    EXPECT(c == NULL);
    EXPECT(strstr(err_msg(), "max_batched_tokens") != NULL);
}

int main(void)
{
    RUN(explicit_sizes);
    RUN(default_is_what_the_sequences_can_use);
    RUN(default_is_capped_by_device_capacity);
    RUN(upto_builds_only_what_is_asked);
    RUN(errors_leave_nothing);
    return test_done();
}
