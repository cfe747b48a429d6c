/*
 * engine_run.c - engine_run.h's step driver, its table of cases and the scheduler's path.
 */
#include "engine_run.h"

#include "test.h"

void eseq_init(struct eseq *e, int32_t P, int32_t H, int32_t R, bool full, uint64_t seed,
               int32_t vocab)
{
    memset(e, 0, sizeof *e);
    e->P = P;
    e->tokens[0] = 2;
    for (int32_t t = 1; t < P; t++)
        e->tokens[t] = 4 + (int32_t)(lcg(&seed) % (uint64_t)(vocab - 4));
    e->budget = (struct kv_budget){
        .policy = full ? KV_POLICY_FULL : KV_POLICY_H2O, .heavy = H, .recent = R};
    e->pol = (struct h2o_ref_policy){.full = full, .heavy = H, .recent = R};
    kv_seq_init(&e->kv);
    kv_seq_set_budget(&e->kv, &e->budget);
    e->logits = xmalloc((size_t)(STEPS + 1) * (size_t)vocab * sizeof(float));
}

void run_engine(struct model *m, struct kv_pool *pool, struct eseq *es, int32_t n,
                int32_t chunk)
{
    const int32_t V = m->cfg.vocab_size;
    struct batch b;
    batch_init(&b);
    struct batch_item items[MAX_SEQ];
    struct eseq *owner[MAX_SEQ];
    for (;;) {
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++) {
            struct eseq *e = &es[i];
            if (e->step >= STEPS) continue;
            int32_t take = e->n_cached < e->P ? MIN(chunk, e->P - e->n_cached) : 1;
            items[k] = (struct batch_item){.kv = &e->kv,
                                           .tokens = e->tokens + e->n_cached,
                                           .n_tok = take,
                                           .pos0 = e->n_cached};
            owner[k++] = e;
        }
        if (k == 0) break;
        CHECK(batch_run(&b, &m->be, pool, V, items, k) == 0);
        for (int32_t i = 0; i < k; i++) {
            struct eseq *e = owner[i];
            const bool decode = e->n_cached >= e->P;
            const int32_t t = e->n_cached;
            e->n_cached += items[i].n_tok;
            if (e->n_cached < e->P) continue;
            if (decode) {
                kv_seq_after_decode(&e->kv, &m->be, &m->cfg, t);
                e->step++;
            } else {
                kv_seq_finish_prefill(&e->kv, pool, &m->be, &m->cfg);
            }
            if (e->budget.policy != KV_POLICY_FULL) {
                int32_t bound = CEIL_DIV(kv_budget_slots(&e->budget), pool->block_size);
                if (e->kv.n_blocks > bound)
                    TEST_FAIL("holds %d blocks after its prompt, budget %d", e->kv.n_blocks,
                              bound);
            }
            const float *row = b.logits + (int64_t)items[i].logits_row * V;
            memcpy(e->logits + (int64_t)e->step * V, row, (size_t)V * sizeof(float));
            if (e->step < STEPS) e->tokens[e->P + e->step] = argmax(row, V);
        }
    }
    batch_deinit(&b);
}

void eseq_deinit(struct eseq *e, struct kv_pool *pool)
{
    kv_seq_deinit(&e->kv, pool);
    free(e->logits);
}

void erun_opts(struct model_opts *mo, enum be_device dev, int tp, bool device_state)
{
    model_opts_default(mo);
    mo->dtype = DTYPE_F32;
    mo->device = dev;
    mo->tensor_parallel = tp;
    mo->device_state = device_state;
}

struct model *erun_load(const char *name, const struct model_opts *mo)
{
    struct model *m = NULL;
    const char *path = strncmp(name, "dummy:", 6) == 0 ? name : test_data(name);
    if (model_load(&m, path, mo)) {
        printf("# model_load(%s, %s, tp %d%s): %s\n", path,
               mo->device == BE_DEVICE_CUDA ? "cuda" : "cpu", mo->tensor_parallel,
               mo->device_state ? ", device_state" : "", err_msg());
        return NULL;
    }
    if (m->be.ops->kv_alloc(m->be.ctx, ERUN_POOL_BLOCKS, ERUN_BS)) {
        printf("# kv_alloc(%s): %s\n", path, err_msg());
        model_destroy(m);
        return NULL;
    }
    return m;
}

bool erun_run(struct erun *r, const char *name, const struct model_opts *mo, int32_t chunk,
              uint64_t seed)
{
    r->m = erun_load(name, mo);
    if (!r->m) return false;
    kv_pool_init(&r->pool, ERUN_POOL_BLOCKS, ERUN_BS);
    for (int32_t c = 0; c < ERUN_CASES; c++)
        eseq_init(&r->es[c], erun_cases[c].P, erun_cases[c].H, erun_cases[c].R,
                  erun_cases[c].full, seed + (uint64_t)c, r->m->cfg.vocab_size);
    run_engine(r->m, &r->pool, r->es, ERUN_CASES, chunk);
    return true;
}

void erun_free(struct erun *r)
{
    if (!r->m) return;
    for (int32_t c = 0; c < ERUN_CASES; c++)
        eseq_deinit(&r->es[c], &r->pool);
    EXPECT_EQ(r->pool.n_free, r->pool.n_blocks);
    kv_pool_deinit(&r->pool);
    model_destroy(r->m);
    r->m = NULL;
}

void erun_requests(struct gen_request *rq, const char *const *prompts, int32_t n,
                   int32_t max_tokens, struct kv_spec kv)
{
    for (int32_t i = 0; i < n; i++) {
        rq[i] = (struct gen_request){.prompt = prompts[i],
                                     .prompt_len = strlen(prompts[i]),
                                     .max_tokens = max_tokens,
                                     .ignore_eos = true};
        sampler_params_default(&rq[i].sp);
        rq[i].sp.temperature = 0;
        rq[i].kv = kv;
    }
}

int erun_generate(struct model *m, const struct gen_request *rq, int32_t n,
                  struct gen_result *out)
{
    struct gen_opts go;
    generate_opts_default(&go);
    go.max_batched_tokens = 16;
    return generate_run(m, &go, rq, n, out);
}
