/*
 * generate.c - run a set of prompts to completion on the scheduler, synchronously.
 *
 * The caller's thread drives sched_step until every request is done and collects
 * the events into one result per prompt. The pool and scheduler come from
 * engine_core_open on the caller's model, sized for these prompts. This is `h2oserve generate`; the server
 * drives the same scheduler from the engine thread instead.
 */
#include "generate.h"

#include "engine_core.h"
#include "err.h"
#include "req.h"
#include "sched.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

void generate_opts_default(struct gen_opts *o)
{
    o->max_batched_tokens = 2048;
    o->block_size = 16;
    o->kv_blocks = 0;
    o->max_num_seqs = 0;
}

struct gen_collect {
    struct gen_result *res;
    int32_t n;
    int err;
    char *err_msg;
};

static void append(struct gen_result *r, const char *p, size_t n)
{
    r->text = xrealloc(r->text, r->text_len + n + 1);
    memcpy(r->text + r->text_len, p, n);
    r->text_len += n;
    r->text[r->text_len] = '\0';
}

static void collect(void *arg, struct req_event *ev)
{
    struct gen_collect *c = arg;
    CHECK(ev->req_id < (uint64_t)c->n);
    struct gen_result *r = &c->res[ev->req_id];
    if (ev->finish == REQ_FINISH_ERROR) {
        if (!c->err) {
            c->err = ev->error_code ? ev->error_code : ENG_EINVAL;
            c->err_msg = xstrdup(ev->error ? ev->error : "error");
        }
        req_event_free(ev);
        return;
    }
    if (ev->token >= 0) {
        r->tokens = xrealloc(r->tokens, (size_t)(r->n_tokens + 1) * sizeof *r->tokens);
        r->tokens[r->n_tokens++] = ev->token;
    }
    append(r, ev->text ? ev->text : "", ev->text_len);
    r->prompt_tokens = ev->prompt_tokens;
    r->kv_evicted = ev->kv_evicted;
    r->kv_evicted_tokens = ev->kv_evicted_tokens;
    r->kv_blocks_max = MAX(r->kv_blocks_max, ev->kv_blocks);
    if (ev->finish != REQ_FINISH_NONE)
        r->finish = ev->finish == REQ_FINISH_STOP ? GEN_FINISH_STOP : GEN_FINISH_LENGTH;
    req_event_free(ev);
}

/* A scheduler request from a generate request (copies everything it points to). */
static struct req *to_req(const struct gen_request *g, uint64_t id)
{
    struct req *r = req_new(id, &g->kv);
    if (g->prompt) {
        r->prompt = xstrndup(g->prompt, g->prompt_len);
        r->prompt_len = g->prompt_len;
    } else {
        r->prompt_ids = xmalloc((size_t)MAX(g->n_prompt_ids, 1) * sizeof *r->prompt_ids);
        memcpy(r->prompt_ids, g->prompt_ids, (size_t)g->n_prompt_ids * sizeof *r->prompt_ids);
        r->n_prompt_ids = g->n_prompt_ids;
    }
    r->max_tokens = g->max_tokens;
    r->sp = g->sp;
    if (g->sp.n_bias > 0) {
        r->bias_ids = xmalloc((size_t)g->sp.n_bias * sizeof *r->bias_ids);
        r->bias_vals = xmalloc((size_t)g->sp.n_bias * sizeof *r->bias_vals);
        memcpy(r->bias_ids, g->sp.bias_ids, (size_t)g->sp.n_bias * sizeof *r->bias_ids);
        memcpy(r->bias_vals, g->sp.bias_vals, (size_t)g->sp.n_bias * sizeof *r->bias_vals);
        r->sp.bias_ids = r->bias_ids;
        r->sp.bias_vals = r->bias_vals;
    }
    r->seed = g->seed;
    for (int32_t i = 0; i < g->n_stops && i < REQ_MAX_STOPS; i++) r->stops[r->n_stops++] = xstrdup(g->stops[i]);
    r->ignore_eos = g->ignore_eos;
    return r;
}

int generate_run(struct model *m, const struct gen_opts *o, const struct gen_request *reqs,
                 int32_t n_reqs, struct gen_result *results)
{
    memset(results, 0, (size_t)n_reqs * sizeof *results);
    /* Without a pool size, enough for every prompt at once with the full policy:
     * a prompt has at most one token per byte plus BOS. */
    int64_t need = 0;
    for (int32_t i = 0; i < n_reqs; i++) {
        int64_t p = reqs[i].prompt ? (int64_t)reqs[i].prompt_len + 1 : reqs[i].n_prompt_ids;
        need += CEIL_DIV(p + reqs[i].max_tokens, o->block_size);
    }
    struct gen_collect c = {.res = results, .n = n_reqs};
    const struct engine_core_opts co = {
        .upto = ENGINE_CORE_SCHED,
        .shared_model = m,
        .block_size = o->block_size,
        .kv_blocks = o->kv_blocks > 0 ? o->kv_blocks : (int32_t)MAX(need, 1),
        .sched = {
            .max_num_seqs = o->max_num_seqs > 0
                                ? o->max_num_seqs
                                : MAX(1, MIN(MAX(n_reqs, 1), o->max_batched_tokens - 1)),
            .max_batched_tokens = o->max_batched_tokens,
        },
        .emit = collect,
        .emit_arg = &c,
    };
    struct engine_core *core;
    int err = engine_core_open(&co, &core);
    if (err) return err;
    struct sched *s = core->sched;
    for (int32_t i = 0; i < n_reqs; i++) sched_add(s, to_req(&reqs[i], (uint64_t)i));
    while (!c.err && !sched_idle(s)) {
        int n = sched_step(s);
        if (n < 0) err = n;
    }
    engine_core_close(core); /* checks that the scheduler gave back every block */
    if (c.err) {
        err = err_set(c.err, "%s", c.err_msg);
        free(c.err_msg);
    }
    if (err) {
        for (int32_t i = 0; i < n_reqs; i++) generate_result_free(&results[i]);
        return err;
    }
    for (int32_t i = 0; i < n_reqs; i++) {
        struct gen_result *r = &results[i];
        if (!r->text) append(r, "", 0);
        /* The budget as the scheduler resolved it, and the slots per head it ended
         * with (the last sampled token is never written to the cache). */
        kv_budget_resolve(&reqs[i].kv, r->prompt_tokens, reqs[i].max_tokens, &r->budget);
        int64_t cached = MAX((int64_t)r->prompt_tokens + r->n_tokens - 1, 0);
        r->kv_slots = (int32_t)MIN(cached, (int64_t)kv_budget_slots(&r->budget));
    }
    return 0;
}

void generate_result_free(struct gen_result *r)
{
    free(r->text);
    free(r->tokens);
    memset(r, 0, sizeof *r);
}
