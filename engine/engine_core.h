/*
 * engine_core.h - the set-up every driver of the model shares: load the model, size
 * and allocate the KV pool, create the scheduler.
 *
 * The engine thread (engine.c), `h2oserve generate` (generate.c), run-batch, the
 * benchmarks and the quality loop all need the same chain, model -> KV pool ->
 * scheduler, in that order. engine_core_open is that chain written once, with the
 * one rule that sizes the pool (engine_core_pool_blocks). A caller that needs less
 * says how far to go (engine_core_opts.upto) and may bring a model it already has
 * (engine_core_opts.shared_model), so that each step lives in one place even for a
 * benchmark that only wants a pool on its model.
 *
 * Owns: struct engine_core owns what engine_core_open built: the scheduler, the pool
 * and the model unless it was shared. The K/V memory itself is the backend's
 * (kv_alloc replaces whatever pool the backend had).
 * Thread: the thread that owns the model's backend (the engine thread, or a tool's
 * only thread); engine_core_pool_blocks and engine_core_check run on any.
 */
#ifndef H2O_ENGINE_CORE_H
#define H2O_ENGINE_CORE_H

#include "kv_pool.h"
#include "model.h"
#include "sched.h"

#include <stdbool.h>
#include <stdint.h>

/* How far engine_core_open goes; each part includes the ones before it. */
enum engine_core_part {
    ENGINE_CORE_MODEL = 0, /* the model and its backend only */
    ENGINE_CORE_POOL,      /* and a KV pool allocated on the backend */
    ENGINE_CORE_SCHED,     /* and a scheduler over the two */
};

struct engine_core_opts {
    enum engine_core_part upto;
    /* The model: loaded from `model` (checkpoint folder or "dummy:NAME") with
     * model_opts, or, when shared_model is set, that one (the caller's: it must
     * outlive the core, which never frees it; model and model_opts are then unread).
     * Loading for a scheduler fills model_opts.max_step_tokens / max_step_rows
     * where they are 0 from `sched`, so a device backend keeps the workspace of this
     * scheduler's steps out of its KV pool. */
    const char *model;
    struct model_opts model_opts;
    struct model *shared_model;
    /* The pool (POOL and up), sized by engine_core_pool_blocks: kv_blocks > 0 is
     * exactly that many blocks; else kv_cache_bytes > 0 is that many bytes; else the
     * default rule (see engine_core_pool_blocks). */
    int32_t block_size;           /* KV slots per block, >= 1 */
    int64_t kv_cache_bytes;
    int32_t kv_blocks;
    /* The scheduler (SCHED). Its max_num_seqs and max_model_len also bound the
     * default pool, whatever `upto` is. */
    struct sched_opts sched;
    sched_emit_fn emit;           /* the scheduler's events go here (SCHED) */
    void *emit_arg;
};

struct engine_core {
    struct model *m;              /* always set */
    struct kv_pool pool;          /* POOL and up; pool.n_blocks is its size */
    struct sched *sched;          /* SCHED; NULL below it */
    bool owns_model;              /* m was loaded here: engine_core_close frees it */
    bool pool_inited;
};

/*
 * The bytes the default KV pool may take for model m: a device backend's
 * kv_capacity (its memory after weights and workspace), else
 * min(4 GiB, a quarter of physical memory) - vLLM's CPU backend also reserves
 * 4 GiB. Thread: the model's (a device backend is asked).
 */
int64_t engine_core_kv_capacity(const struct model *m);

/*
 * The pool's size in blocks for options o on model m, the one sizing rule:
 * - o->kv_blocks > 0: exactly that many;
 * - o->kv_cache_bytes > 0: that many bytes' worth;
 * - else the default: no more than o->sched.max_num_seqs sequences of the full
 *   context (sched.max_model_len, else the model's max_pos) can use, out of
 *   engine_core_kv_capacity(m) - so a tiny model does not pin gigabytes it can never
 *   fill, and a device pool never asks for more than the device has left.
 * Returns 0 with the count in *out, ENG_ENOMEM (message set) when the bytes hold no
 * block, or ENG_EINVAL (message set) for a max_model_len past the model's.
 * Thread: the model's (as engine_core_kv_capacity).
 */
int engine_core_pool_blocks(const struct engine_core_opts *o, const struct model *m,
                            int32_t *out);

/*
 * Check what can be checked before anything is loaded: a model to load or a shared
 * one, block_size >= 1 (POOL and up), no negative size. Returns 0 or ENG_EINVAL with
 * a message ("engine: ..."). engine_core_open runs it too. Thread: any.
 */
int engine_core_check(const struct engine_core_opts *o);

/*
 * Build the core up to o->upto: load the model (or take o->shared_model), size the
 * pool (engine_core_pool_blocks), allocate it on the backend and initialise its
 * block list, create the scheduler. Returns 0 and the core in *out, or an engine
 * error with its message (err_msg); on error *out is NULL and whatever was built is
 * freed again (never the shared model).
 * Owns: *out (engine_core_close); o is not kept, but o->model only needs to live
 * through the call. Thread: the one that will own the backend.
 */
int engine_core_open(const struct engine_core_opts *o, struct engine_core **out);

/*
 * Free the scheduler (requests still in it are cancelled silently), the pool and,
 * unless shared, the model. Sequences the caller ran on the pool itself must be
 * gone (kv_seq_deinit) first: the pool is checked to have every block free.
 * NULL is fine. Thread: the backend's owner.
 */
void engine_core_close(struct engine_core *c);

#endif
