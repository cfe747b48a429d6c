/*
 * cfg_engine.c - what the engine gets from a struct cfg: struct engine_opts (the
 * model, backend, KV pool and scheduler options), the default KV spec, and the
 * system_fingerprint of the configuration (see cfg.h).
 *
 * Owns: nothing. Thread: any (no mutable state).
 */
#include "cfg.h"

#include "model.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

void cfg_kv_spec(const struct cfg *c, struct kv_spec *s)
{
    kv_budget_spec_default(s);
    s->policy = c->kv_policy;
    s->heavy_ratio = (float)c->h2o_heavy_ratio;
    s->recent_ratio = (float)c->h2o_recent_ratio;
    s->heavy = c->h2o_heavy;
    s->recent = c->h2o_recent;
    s->min_budget = c->kv_min_budget;
}

void cfg_fingerprint(const struct cfg *c, char *buf, size_t len)
{
    struct engine_opts eo;
    cfg_engine_opts(c, &eo);
    const struct kv_spec *k = &eo.kv_default;
    enum be_device device;
    enum dtype dtype;
    model_resolve_backend(&eo.model_opts, &device, &dtype); /* what auto comes to here */
    /* The KV dtype changes the outputs (int8 is lossy): it is part of the fingerprint;
     * auto adds nothing, so fingerprints of configurations without it stay as they
     * were. */
    char kvd[16] = "";
    if (c->kv_cache_dtype != CFG_KV_DTYPE_AUTO)
        snprintf(kvd, sizeof kvd, "|kv%d", (int)c->kv_cache_dtype);
    char what[4096];
    snprintf(what, sizeof what, "%s|%s|%d|%d|%d|%llu|%d|%d|%.9g|%.9g|%d|%d|%d%s",
             H2O_VERSION, c->model, (int)device, (int)dtype, eo.model_opts.tensor_parallel,
             (unsigned long long)eo.model_opts.dummy_seed, eo.block_size, (int)k->policy,
             k->heavy_ratio, k->recent_ratio, k->heavy, k->recent, k->min_budget, kvd);
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)what; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    snprintf(buf, len, "fp_%010llx", (unsigned long long)(h >> 24));
}

enum dtype cfg_kv_dtype(const struct cfg *c)
{
    struct engine_opts eo;
    cfg_engine_opts(c, &eo);
    return model_kv_dtype(&eo.model_opts);
}

void cfg_engine_opts(const struct cfg *c, struct engine_opts *o)
{
    engine_opts_default(o);
    o->model = c->model;
    /* auto keeps model_opts_default's choice (bf16 where the CPU has it); a dtype
     * asked for is marked, so that a backend that cannot compute in it says so. */
    if (c->dtype == CFG_DTYPE_FP32)
        o->model_opts.dtype = DTYPE_F32;
    else if (c->dtype == CFG_DTYPE_BF16)
        o->model_opts.dtype = DTYPE_BF16;
    else if (c->dtype == CFG_DTYPE_FP16)
        o->model_opts.dtype = DTYPE_F16;
    o->model_opts.dtype_set = c->dtype != CFG_DTYPE_AUTO;
    /* auto leaves kv_dtype_set false: the backend stores K/V in its compute dtype. */
    o->model_opts.kv_dtype_set = c->kv_cache_dtype != CFG_KV_DTYPE_AUTO;
    o->model_opts.kv_dtype = c->kv_cache_dtype == CFG_KV_DTYPE_FP32   ? DTYPE_F32
                             : c->kv_cache_dtype == CFG_KV_DTYPE_BF16 ? DTYPE_BF16
                             : c->kv_cache_dtype == CFG_KV_DTYPE_INT8
                                 ? DTYPE_I8
                                 : o->model_opts.kv_dtype;
    o->model_opts.n_threads = c->threads;
    o->model_opts.tensor_parallel = c->tensor_parallel;
    o->model_opts.device = c->device;
    o->model_opts.gpu_memory_utilization = (float)c->gpu_memory_utilization;
    o->model_opts.dummy_seed = (uint64_t)c->dummy_seed;
    o->block_size = c->block_size;
    o->kv_cache_bytes = c->kv_cache_bytes;
    o->kv_blocks = c->kv_cache_blocks;
    o->sched.max_num_seqs = c->max_num_seqs;
    o->sched.max_batched_tokens = c->max_batched_tokens;
    o->sched.batch_prompt_tokens = c->batch_prompt_tokens;
    o->sched.max_model_len = c->max_model_len;
    cfg_kv_spec(c, &o->kv_default);
}
