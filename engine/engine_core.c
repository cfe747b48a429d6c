/*
 * engine_core.c - model -> KV pool -> scheduler, built once for every driver (see
 * engine_core.h).
 *
 * Owns: each struct engine_core it returns, until engine_core_close.
 * Invariant: pool_inited is true exactly when the backend has a pool of
 * pool.n_blocks blocks of pool.block_size from this core's kv_alloc; sched is set
 * only over that pool. engine_core_close therefore works on a core built halfway,
 * which is how engine_core_open undoes a failed step. Once the scheduler is
 * destroyed every block is free again (checked in engine_core_close).
 * Thread: the backend's owner (see engine_core.h).
 */
#include "engine_core.h"

#include "err.h"
#include "util.h"

#include <stdlib.h>
#include <unistd.h>

#define ENGINE_CORE_DEFAULT_KV_BYTES (4LL << 30)

int64_t engine_core_kv_capacity(const struct model *m)
{
    size_t cap;
    if (backend_kv_capacity(&m->be, &cap)) return (int64_t)MIN(cap, (size_t)INT64_MAX);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    int64_t bytes = ENGINE_CORE_DEFAULT_KV_BYTES;
    if (pages > 0 && page > 0) bytes = MIN(bytes, (int64_t)pages * page / 4);
    return bytes;
}

int engine_core_pool_blocks(const struct engine_core_opts *o, const struct model *m,
                            int32_t *out)
{
    const struct opt_config *cfg = &m->cfg;
    const int32_t bs = o->block_size;
    const size_t bb = backend_kv_block_bytes(&m->be, bs);
    CHECK(bb > 0);
    if (o->kv_blocks > 0) {
        *out = o->kv_blocks;
        return 0;
    }
    int64_t bytes = o->kv_cache_bytes;
    int64_t n;
    if (bytes > 0) {
        n = bytes / (int64_t)bb;
    } else {
        /* The default: no more than max_num_seqs full-context sequences can use, out
         * of the memory the pool lives in. The context is max_model_len where it is
         * set: no request may be longer. A device backend's pool is in device
         * memory, which host RAM says nothing about; its kv_capacity is what is left
         * there after the weights and workspace. */
        int32_t ctx_len;
        int err = sched_context_len(o->sched.max_model_len, cfg, &ctx_len);
        if (err) return err;
        const int64_t useful = (int64_t)MAX(o->sched.max_num_seqs, 1) *
                               CEIL_DIV((int64_t)ctx_len, bs);
        bytes = engine_core_kv_capacity(m);
        n = MIN(bytes / (int64_t)bb, useful);
    }
    if (n < 1)
        return err_set(ENG_ENOMEM, "a KV cache of %lld bytes holds no block: one block of %d "
                                   "tokens takes %zu bytes for %s",
                       (long long)bytes, bs, bb, cfg->name);
    *out = (int32_t)MIN(n, (int64_t)INT32_MAX);
    return 0;
}

int engine_core_check(const struct engine_core_opts *o)
{
    if (!o->shared_model && (!o->model || !o->model[0]))
        return err_set(ENG_EINVAL, "engine: no model given");
    if (o->upto >= ENGINE_CORE_POOL && o->block_size < 1)
        return err_set(ENG_EINVAL, "engine: block_size %d must be >= 1", o->block_size);
    if (o->kv_cache_bytes < 0 || o->kv_blocks < 0)
        return err_set(ENG_EINVAL, "engine: the KV cache size must not be negative");
    return 0;
}

int engine_core_open(const struct engine_core_opts *o, struct engine_core **out)
{
    *out = NULL;
    int err = engine_core_check(o);
    if (err) return err;
    struct engine_core *c = xcalloc(1, sizeof *c);
    if (o->shared_model) {
        c->m = o->shared_model;
    } else {
        /* A device backend keeps the step's workspace out of its KV pool: tell it how
         * large a step this scheduler makes. */
        struct model_opts mo = o->model_opts;
        if (o->upto >= ENGINE_CORE_SCHED) {
            if (mo.max_step_tokens == 0) mo.max_step_tokens = o->sched.max_batched_tokens;
            if (mo.max_step_rows == 0) mo.max_step_rows = sched_max_step_rows(&o->sched);
        }
        err = model_load(&c->m, o->model, &mo);
        if (err) goto fail;
        c->owns_model = true;
    }
    if (o->upto >= ENGINE_CORE_POOL) {
        int32_t n_blocks = 0;
        err = engine_core_pool_blocks(o, c->m, &n_blocks);
        if (err) goto fail;
        err = backend_kv_alloc(&c->m->be, n_blocks, o->block_size);
        if (err) goto fail;
        kv_pool_init(&c->pool, n_blocks, o->block_size);
        c->pool_inited = true;
    }
    if (o->upto >= ENGINE_CORE_SCHED) {
        c->sched = sched_create(c->m, &c->pool, &o->sched, o->emit, o->emit_arg);
        if (!c->sched) {
            err = ENG_EINVAL; /* message set by sched_create */
            goto fail;
        }
    }
    *out = c;
    return 0;
fail:
    engine_core_close(c); /* safe on a half-built core */
    return err;
}

void engine_core_close(struct engine_core *c)
{
    if (!c) return;
    sched_destroy(c->sched);
    /* With the scheduler gone no sequence may hold a block: one that still does was
     * leaked by the scheduler or by a caller that ran its own sequences. */
    if (c->pool_inited) CHECK(c->pool.n_free == c->pool.n_blocks);
    if (c->pool_inited) kv_pool_deinit(&c->pool);
    if (c->owns_model) model_destroy(c->m);
    free(c);
}
