/*
 * sched.c - continuous batching with KV reservations (see sched.h): the requests'
 * side - checking and queueing them, admission, reservations, the fork after the
 * prompt, finishing and cancelling. The step itself is sched_step.c.
 *
 * A request is admitted when its peak KV footprint fits the blocks nobody has
 * reserved: max(prompt blocks, n * decode blocks), where decode blocks is
 * ceil(min(P + max_tokens, B) / block_size) (every token for the full policy).
 * The prompt is prefilled by sequence 0 alone; when its last chunk is done the H2O
 * selection compacts it, the reservation shrinks to n * decode blocks, and n - 1
 * more sequences are forked by copying the blocks. Each finishing sequence returns
 * its decode share. Because no sequence ever holds more than its share, a forward
 * never runs out of blocks.
 *
 * Owns: the waiting queues, the running list and every request in them (struct
 * sreq, with its sequences and their KV block tables).
 * Invariant: blocks held by live sequences + pool->n_free == pool->n_blocks, each
 * request holds no more than it reserved, and reserved_total <= n_blocks
 * (sched_check_invariants, after every step).
 * Thread: the scheduler's owner.
 */
#include "sched_impl.h"

#include "err.h"
#include "kv_pool.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int32_t sched_max_step_rows(const struct sched_opts *o)
{
    return (int32_t)MIN((int64_t)o->max_batched_tokens,
                        (int64_t)o->max_num_seqs + SCHED_PROMPT_LOGIT_ROWS);
}

int sched_context_len(int32_t max_model_len, const struct opt_config *cfg, int32_t *out)
{
    if (max_model_len < 0 || max_model_len > cfg->max_pos)
        return err_set(ENG_EINVAL,
                       "max_model_len %d is more than %s supports: its context length "
                       "(max_position_embeddings) is %d tokens; use at most %d, or 0 for the "
                       "model's own",
                       max_model_len, cfg->name, cfg->max_pos, cfg->max_pos);
    *out = max_model_len > 0 ? max_model_len : cfg->max_pos;
    return 0;
}

struct sched *sched_create(struct model *m, struct kv_pool *pool, const struct sched_opts *o,
                           sched_emit_fn emit, void *emit_arg)
{
    int32_t ctx_len;
    if (sched_context_len(o->max_model_len, &m->cfg, &ctx_len)) return NULL;
    if (o->max_num_seqs < 1 || o->max_batched_tokens <= o->max_num_seqs) {
        err_set(ENG_EINVAL, "max_batched_tokens (%d) must exceed max_num_seqs (%d) >= 1, so "
                            "every step has room for prompt tokens",
                o->max_batched_tokens, o->max_num_seqs);
        return NULL;
    }
    if (o->batch_prompt_tokens < 0) {
        err_set(ENG_EINVAL, "batch_prompt_tokens (%d) must be >= 0", o->batch_prompt_tokens);
        return NULL;
    }
    struct sched *s = xcalloc(1, sizeof *s);
    s->m = m;
    s->pool = pool;
    s->o = *o;
    s->o.max_model_len = ctx_len; /* resolved: the limit sched_add checks */
    if (s->o.batch_prompt_tokens == 0 || s->o.batch_prompt_tokens > o->max_batched_tokens)
        s->o.batch_prompt_tokens = o->max_batched_tokens; /* no cap of its own */
    s->emit = emit;
    s->emit_arg = emit_arg;
    batch_init(&s->batch);
    sampler_scratch_init(&s->scratch);
    s->row = xmalloc((size_t)m->cfg.vocab_size * sizeof *s->row);
    s->st.blocks_total = pool->n_blocks;
    return s;
}

struct req_event *sched_event_new(const struct sreq *q, int32_t seq)
{
    struct req_event *ev = xcalloc(1, sizeof *ev);
    ev->req_id = q->r->id;
    ev->seq = seq;
    ev->token = -1;
    ev->prompt_tokens = q->n_prompt;
    ev->queue_s = -1;
    ev->kv_budget = q->budget;
    return ev;
}

/* Sequence sq's eviction counts on event ev: summed over layers and heads, and per
 * (layer, head), which is exact because every head of a sequence evicts as many
 * tokens as the others (the same budget, one victim per step once full). */
void sched_event_evicted(const struct sched *s, const struct sseq *sq, struct req_event *ev)
{
    ev->kv_evicted = sq->kv.n_evicted;
    ev->kv_evicted_tokens =
        sq->kv.n_evicted / ((int64_t)s->m->cfg.n_layer * s->m->cfg.n_kv_head);
}

/* The one event of a request that cannot run. Frees the request. */
static void fail_request(struct sched *s, struct req *r, int code, const char *msg)
{
    struct req_event *ev = xcalloc(1, sizeof *ev);
    ev->req_id = r->id;
    ev->seq = -1;
    ev->token = -1;
    ev->finish = REQ_FINISH_ERROR;
    ev->error = xstrdup(msg);
    ev->error_code = code;
    s->emit(s->emit_arg, ev);
    req_free(r);
}

/* A finishing event for sequence i that produced no token (cancel, max_tokens 0). */
void sched_emit_finish(struct sched *s, struct sreq *q, int32_t i, enum req_finish f)
{
    struct req_event *ev = sched_event_new(q, i);
    ev->finish = f;
    ev->text = xstrdup("");
    if (q->seqs && q->seqs[i].live) {
        const struct sseq *sq = &q->seqs[i];
        ev->completion_tokens = sq->n_ids - q->n_prompt;
        sched_event_evicted(s, sq, ev);
        ev->text_offset = detok_emitted_len(&sq->dt);
    }
    s->emit(s->emit_arg, ev);
}

static void seq_free(struct sched *s, struct sseq *sq)
{
    if (!sq->ids) return;
    kv_seq_deinit(&sq->kv, s->pool);
    detok_deinit(&sq->dt);
    free(sq->ids);
    sq->ids = NULL;
    sq->live = false;
}

static void sreq_free(struct sched *s, struct sreq *q)
{
    if (q->seqs)
        for (int32_t i = 0; i < q->r->n; i++) seq_free(s, &q->seqs[i]);
    free(q->seqs);
    req_free(q->r);
    free(q);
}

static void seq_start(struct sched *s, struct sreq *q, int32_t i, const int32_t *prompt)
{
    struct sseq *sq = &q->seqs[i];
    const struct req *r = q->r;
    sq->req = q;
    sq->index = i;
    sq->ids = xmalloc((size_t)(q->n_prompt + r->max_tokens + 1) * sizeof *sq->ids);
    memcpy(sq->ids, prompt, (size_t)q->n_prompt * sizeof *sq->ids);
    sq->n_ids = q->n_prompt;
    kv_seq_init(&sq->kv);
    kv_seq_set_budget(&sq->kv, &q->budget);
    rng_seed(&sq->rng, r->seed + (uint64_t)i);
    detok_init(&sq->dt, s->m->tok, (const char *const *)r->stops, r->n_stops);
    sq->live = true;
    q->n_live++;
}

void sched_add(struct sched *s, struct req *r)
{
    const struct opt_config *cfg = &s->m->cfg;
    int32_t *ids = NULL, n = 0;
    if (r->prompt) {
        if (tokenizer_encode(s->m->tok, r->prompt, r->prompt_len, true, &ids, &n)) {
            fail_request(s, r, ENG_EINVAL, err_msg());
            return;
        }
    } else {
        n = r->prompt_ids ? r->n_prompt_ids : 0; /* neither text nor ids: empty */
        ids = xmalloc((size_t)MAX(n, 1) * sizeof *ids);
        if (n > 0) memcpy(ids, r->prompt_ids, (size_t)n * sizeof *ids);
        for (int32_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= cfg->vocab_size) {
                char msg[128];
                snprintf(msg, sizeof msg, "prompt token %d is not in the vocabulary", ids[i]);
                free(ids);
                fail_request(s, r, ENG_EINVAL, msg);
                return;
            }
    }
    char msg[256];
    struct kv_budget budget;
    int err = 0;
    if (n == 0) {
        err = ENG_EINVAL;
        snprintf(msg, sizeof msg, "the prompt is empty");
    } else if (r->n < 1 || r->max_tokens < 0) {
        err = ENG_EINVAL;
        snprintf(msg, sizeof msg, "n must be >= 1 and max_tokens >= 0");
    } else if ((int64_t)n + r->max_tokens > s->o.max_model_len) {
        err = ENG_EINVAL;
        snprintf(msg, sizeof msg, "this model's maximum context length is %d tokens, but the "
                                  "prompt (%d) plus max_tokens (%d) needs %d",
                 s->o.max_model_len, n, r->max_tokens, n + r->max_tokens);
    } else if ((err = kv_budget_resolve(&r->kv, n, r->max_tokens, &budget))) {
        snprintf(msg, sizeof msg, "%s", err_msg());
    }
    if (err) {
        free(ids);
        fail_request(s, r, err, msg);
        return;
    }
    struct sreq *q = xcalloc(1, sizeof *q);
    q->r = r;
    q->n_prompt = n;
    q->budget = budget;
    const int32_t bs = s->pool->block_size;
    const int64_t dec_slots = MIN((int64_t)n + r->max_tokens, (int64_t)kv_budget_slots(&budget));
    q->prompt_blocks = CEIL_DIV(n, bs);
    q->dec_blocks = (int32_t)CEIL_DIV(dec_slots, bs);
    const int64_t need = MAX((int64_t)q->prompt_blocks, (int64_t)r->n * q->dec_blocks);
    if (need > s->pool->n_blocks || r->n > s->o.max_num_seqs) {
        free(ids);
        free(q);
        snprintf(msg, sizeof msg, "the request needs %lld KV blocks and %d sequences; the "
                                  "engine has %d blocks and runs at most %d sequences",
                 (long long)need, r->n, s->pool->n_blocks, s->o.max_num_seqs);
        fail_request(s, r, ENG_ENOSPC, msg);
        return;
    }
    q->seqs = xcalloc((size_t)r->n, sizeof *q->seqs);
    /* Sequence 0 carries the prompt ids from now on; it starts at admission. */
    q->seqs[0].ids = ids;
    if (r->max_tokens == 0 && !r->prompt_logprobs) {
        /* Nothing to generate or score: every sequence finishes at once (length). */
        for (int32_t i = 0; i < r->n; i++) sched_emit_finish(s, q, i, REQ_FINISH_LENGTH);
        free(ids);
        q->seqs[0].ids = NULL;
        sreq_free(s, q);
        return;
    }
    const int p = r->prio == REQ_PRIO_BATCH;
    if (s->wait_tail[p]) s->wait_tail[p]->next = q;
    else s->wait_head[p] = q;
    s->wait_tail[p] = q;
    s->n_waiting++;
}

static void running_remove(struct sched *s, struct sreq *q)
{
    for (int32_t i = 0; i < s->n_running; i++)
        if (s->running[i] == q) {
            memmove(s->running + i, s->running + i + 1,
                    (size_t)(s->n_running - i - 1) * sizeof *s->running);
            s->n_running--;
            return;
        }
    CHECK(!"request not running");
}

/* Drop a running request: free every sequence and its reservation. */
void sched_drop_running(struct sched *s, struct sreq *q)
{
    s->reserved_total -= q->reserved;
    s->n_seqs_reserved -= q->seqs_reserved;
    running_remove(s, q);
    sreq_free(s, q);
}

void sched_cancel(struct sched *s, uint64_t id)
{
    for (int p = 0; p < 2; p++) {
        for (struct sreq **pp = &s->wait_head[p]; *pp; pp = &(*pp)->next) {
            struct sreq *q = *pp;
            if (q->r->id != id) continue;
            *pp = q->next;
            if (s->wait_tail[p] == q) {
                s->wait_tail[p] = NULL;
                for (struct sreq *t = s->wait_head[p]; t; t = t->next) s->wait_tail[p] = t;
            }
            s->n_waiting--;
            for (int32_t i = 0; i < q->r->n; i++)
                sched_emit_finish(s, q, i, REQ_FINISH_CANCELLED);
            free(q->seqs[0].ids); /* the prompt, never started */
            q->seqs[0].ids = NULL;
            sreq_free(s, q);
            return;
        }
    }
    for (int32_t k = 0; k < s->n_running; k++) {
        struct sreq *q = s->running[k];
        if (q->r->id != id) continue;
        /* Sequences not forked yet (prompt unfinished) finish too: each of the n
         * completions the client expects gets exactly one finishing event. */
        for (int32_t i = 0; i < q->r->n; i++)
            if (q->seqs[i].live || !q->prefilled)
                sched_emit_finish(s, q, i, REQ_FINISH_CANCELLED);
        sched_drop_running(s, q);
        return;
    }
}

void sched_cancel_all(struct sched *s)
{
    while (s->n_running > 0) sched_cancel(s, s->running[0]->r->id);
    for (int p = 0; p < 2; p++)
        while (s->wait_head[p]) sched_cancel(s, s->wait_head[p]->r->id);
}

void sched_destroy(struct sched *s)
{
    if (!s) return;
    while (s->n_running > 0) sched_drop_running(s, s->running[0]);
    for (int p = 0; p < 2; p++)
        while (s->wait_head[p]) {
            struct sreq *q = s->wait_head[p];
            s->wait_head[p] = q->next;
            free(q->seqs[0].ids);
            q->seqs[0].ids = NULL;
            sreq_free(s, q);
        }
    free(s->running);
    free(s->items);
    free(s->owner);
    free(s->row);
    batch_deinit(&s->batch);
    sampler_scratch_deinit(&s->scratch);
    free(s->pending);
    free(s->ev_kv);
    free(s->ev_t);
    free(s->srows);
    free(s->souts);
    free(s->add_ids);
    free(s->add_vals);
    free(s);
}

bool sched_idle(const struct sched *s)
{
    return s->n_running == 0 && s->n_waiting == 0;
}

/* The blocks a request reserves at admission: its peak footprint. */
static int32_t admit_need(const struct sreq *q)
{
    return MAX(q->prompt_blocks, q->r->n * q->dec_blocks);
}

bool sched_admit_fits(const struct sched *s, const struct sreq *q)
{
    return s->reserved_total + admit_need(q) <= s->pool->n_blocks &&
           s->n_seqs_reserved + q->r->n <= s->o.max_num_seqs;
}

/* Admit the head of the highest waiting class if it fits (and, unless
 * `batch_too`, only if that class is interactive); false when it does not. */
bool sched_admit_one(struct sched *s, bool batch_too)
{
    const int p = s->wait_head[0] ? 0 : 1;
    struct sreq *q = s->wait_head[p];
    if (!q || (p == 1 && !batch_too)) return false;
    const int32_t need = admit_need(q);
    if (!sched_admit_fits(s, q)) return false; /* strict FCFS: nobody overtakes the head */
    s->wait_head[p] = q->next;
    if (!s->wait_head[p]) s->wait_tail[p] = NULL;
    q->next = NULL;
    s->n_waiting--;
    if (s->n_running == s->cap_running) {
        s->cap_running = MAX(16, 2 * s->cap_running);
        s->running = xrealloc(s->running, (size_t)s->cap_running * sizeof *s->running);
    }
    s->running[s->n_running++] = q;
    q->reserved = need;
    q->seqs_reserved = q->r->n;
    q->t_admit = time_now();
    s->reserved_total += need;
    s->n_seqs_reserved += q->r->n;
    int32_t *prompt = q->seqs[0].ids;
    q->seqs[0].ids = NULL;
    seq_start(s, q, 0, prompt);
    free(prompt);
    return true;
}

/* The prompt is in the cache: H2O selection, shrink the reservation, fork. */
void sched_finish_prompt(struct sched *s, struct sreq *q)
{
    struct sseq *s0 = &q->seqs[0];
    kv_seq_finish_prefill(&s0->kv, s->pool, &s->m->be, &s->m->cfg);
    s->st.tokens_evicted += s0->kv.n_evicted;
    q->prefilled = true;
    const int32_t share = q->r->n * q->dec_blocks;
    CHECK(share <= q->reserved);
    s->reserved_total -= q->reserved - share;
    q->reserved = share;
    for (int32_t i = 1; i < q->r->n; i++) {
        struct sseq *sq = &q->seqs[i];
        seq_start(s, q, i, s0->ids);
        sq->n_cached = s0->n_cached;
        /* As many blocks as sequence 0 holds (after compaction that can be one more
         * than its slots need: B = n_slots + 1). Reserved above, so they exist. */
        CHECK(kv_seq_grow(&sq->kv, s->pool, &s->m->be,
                          s0->kv.n_blocks * s->pool->block_size) == 0);
        CHECK(sq->kv.n_blocks == s0->kv.n_blocks);
        backend_kv_copy_blocks(&s->m->be, s0->kv.blocks, sq->kv.blocks, s0->kv.n_blocks);
        sq->kv.n_slots = s0->kv.n_slots;
        sq->kv.n_evicted = s0->kv.n_evicted;
        sq->kv.prefilled = true; /* a fork's next token is a decode token too */
    }
}

/* A sequence finished: give back its blocks and its share of the reservation. */
void sched_seq_finish(struct sched *s, struct sseq *sq)
{
    struct sreq *q = sq->req;
    seq_free(s, sq);
    q->n_live--;
    q->reserved -= q->dec_blocks;
    s->reserved_total -= q->dec_blocks;
    q->seqs_reserved--;
    s->n_seqs_reserved--;
    if (q->n_live == 0) {
        CHECK(q->reserved == 0 && q->seqs_reserved == 0);
        running_remove(s, q);
        sreq_free(s, q);
    }
}

void sched_check_invariants(const struct sched *s)
{
    int32_t held = 0;
    for (int32_t k = 0; k < s->n_running; k++) {
        const struct sreq *q = s->running[k];
        int32_t q_held = 0;
        for (int32_t i = 0; i < q->r->n; i++) {
            const struct sseq *sq = &q->seqs[i];
            if (!sq->live) continue;
            q_held += sq->kv.n_blocks;
            /* The H2O memory bound: after the prompt, never more than ceil(B / bs). */
            if (q->prefilled && q->budget.policy != KV_POLICY_FULL)
                CHECK(sq->kv.n_blocks <=
                      CEIL_DIV(kv_budget_slots(&q->budget), s->pool->block_size));
        }
        CHECK(q_held <= q->reserved);
        held += q_held;
    }
    CHECK(s->pool->n_free + held == s->pool->n_blocks);
    CHECK(s->reserved_total <= s->pool->n_blocks);
}

void sched_get_stats(const struct sched *s, struct sched_stats *out)
{
    *out = s->st;
    out->n_waiting = s->n_waiting;
    out->n_running = s->n_running;
    out->blocks_total = s->pool->n_blocks;
    out->blocks_used = s->pool->n_blocks - s->pool->n_free;
    out->blocks_reserved = s->reserved_total;
    int32_t n = 0;
    for (int32_t k = 0; k < s->n_running; k++) n += s->running[k]->n_live;
    out->n_seqs = n;
}
