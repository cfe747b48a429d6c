/*
 * sched.c - continuous batching with KV reservations (see sched.h).
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
 * Over 600 lines on purpose: admission, prompt chunks, forks, sampling and the end
 * of a sequence are the stages of one sched_step over the same private state
 * (struct sched, sreq, sseq); apart, each would need that state in a shared header.
 */
#include "sched.h"

#include "batch.h"
#include "detok.h"
#include "err.h"
#include "kv_pool.h"
#include "kv_seq.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A step that carries interactive prompt work leaves batch sequences out (see
 * sched.h), but never more than this many steps in a row: the next step then runs
 * every batch sequence beside the interactive work, so a stream of interactive
 * prompts slows the batch down to one step in SCHED_BATCH_MAX_PAUSE + 1 at worst and
 * never stops it. Four steps are four full interactive prompts of
 * max_batched_tokens each. */
#define SCHED_BATCH_MAX_PAUSE 4

/* Prompt chunks of a request that scores its prompt (prompt_logprobs) need logits
 * for every token: each row is vocab floats (200 KiB for OPT), so such chunks get
 * at most this many rows per step, all such requests together. */
#define SCHED_PROMPT_LOGIT_ROWS 256

struct sseq {
    struct sreq *req;
    int32_t index;      /* 0..n-1 within the request */
    int32_t *ids;       /* [P + max_tokens] prompt, then generated tokens */
    int32_t n_ids;
    int32_t n_cached;   /* tokens whose K/V are in the cache */
    struct kv_seq kv;
    struct rng rng;
    struct detok dt;
    bool live;
};

struct sreq {
    struct req *r;
    struct sreq *next;      /* waiting queue link */
    int32_t n_prompt;
    struct kv_budget budget;
    int32_t prompt_blocks;  /* ceil(P / bs) */
    int32_t dec_blocks;     /* one sequence's share after the prompt */
    int32_t reserved;       /* blocks reserved for this request now */
    int32_t seqs_reserved;  /* sequences counted against max_num_seqs now */
    double t_admit;         /* time_now() at admission */
    struct sseq *seqs;      /* [r->n]; only seqs[0] is live until the prompt is done */
    int32_t n_live;
    bool prefilled;
};

struct sched {
    struct model *m;
    struct kv_pool *pool;
    struct sched_opts o;
    sched_emit_fn emit;
    void *emit_arg;
    struct sreq *wait_head[2], *wait_tail[2]; /* per priority class, FIFO */
    struct sreq **running;                    /* admission order */
    int32_t n_running, cap_running;
    int32_t n_waiting, n_seqs_reserved, reserved_total;
    int32_t batch_paused;   /* steps in a row that left the batch class out */
    struct batch batch;
    struct batch_item *items;
    struct sseq **owner;
    int32_t cap_items;
    struct sampler_scratch scratch;
    float *row;             /* [vocab] a logits row the sampler may modify */
    /* The step's sampling, done once every item is accounted for: which sequence
     * samples from which logits row, and (device sampling) the rows' descriptions. */
    struct pending {
        struct sseq *sq;
        int32_t row;
    } *pending;
    int32_t n_pending, cap_pending;
    struct kv_seq **ev_kv;  /* the step's decode sequences, for one eviction call */
    int32_t *ev_t;          /* and the position of the token each fed */
    int32_t n_ev, cap_ev;
    struct be_sample_row *srows;
    struct sample_out *souts;
    int32_t *add_ids;       /* steps 1-2 of every row, back to back */
    float *add_vals;
    int64_t cap_adds;
    struct sched_stats st;
};

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

static struct req_event *event_new(const struct sreq *q, int32_t seq)
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
static void event_evicted(const struct sched *s, const struct sseq *sq, struct req_event *ev)
{
    ev->kv_evicted = sq->kv.n_evicted;
    ev->kv_evicted_tokens = sq->kv.n_evicted / ((int64_t)s->m->cfg.n_layer * s->m->cfg.n_head);
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
static void emit_finish(struct sched *s, struct sreq *q, int32_t i, enum req_finish f)
{
    struct req_event *ev = event_new(q, i);
    ev->finish = f;
    ev->text = xstrdup("");
    if (q->seqs && q->seqs[i].live) {
        const struct sseq *sq = &q->seqs[i];
        ev->completion_tokens = sq->n_ids - q->n_prompt;
        event_evicted(s, sq, ev);
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
        for (int32_t i = 0; i < r->n; i++) emit_finish(s, q, i, REQ_FINISH_LENGTH);
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
static void drop_running(struct sched *s, struct sreq *q)
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
            for (int32_t i = 0; i < q->r->n; i++) emit_finish(s, q, i, REQ_FINISH_CANCELLED);
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
            if (q->seqs[i].live || !q->prefilled) emit_finish(s, q, i, REQ_FINISH_CANCELLED);
        drop_running(s, q);
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
    while (s->n_running > 0) drop_running(s, s->running[0]);
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

static void add_item(struct sched *s, struct sseq *sq, int32_t n_tok, bool all_logits,
                     int32_t *n_items)
{
    if (*n_items == s->cap_items) {
        s->cap_items = MAX(16, 2 * s->cap_items);
        s->items = xrealloc(s->items, (size_t)s->cap_items * sizeof *s->items);
        s->owner = xrealloc(s->owner, (size_t)s->cap_items * sizeof *s->owner);
    }
    s->items[*n_items] = (struct batch_item){
        .kv = &sq->kv, .tokens = sq->ids + sq->n_cached, .n_tok = n_tok, .pos0 = sq->n_cached,
        .all_logits = all_logits,
    };
    s->owner[(*n_items)++] = sq;
}

/* The blocks a request reserves at admission: its peak footprint. */
static int32_t admit_need(const struct sreq *q)
{
    return MAX(q->prompt_blocks, q->r->n * q->dec_blocks);
}

static bool admit_fits(const struct sched *s, const struct sreq *q)
{
    return s->reserved_total + admit_need(q) <= s->pool->n_blocks &&
           s->n_seqs_reserved + q->r->n <= s->o.max_num_seqs;
}

/* Admit the head of the highest waiting class if it fits (and, unless
 * `batch_too`, only if that class is interactive); false when it does not. */
static bool admit_one(struct sched *s, bool batch_too)
{
    const int p = s->wait_head[0] ? 0 : 1;
    struct sreq *q = s->wait_head[p];
    if (!q || (p == 1 && !batch_too)) return false;
    const int32_t need = admit_need(q);
    if (!admit_fits(s, q)) return false; /* strict FCFS: nobody overtakes the head */
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

/* Take sequence sq's next token, as the sampler chose it (*so), and emit its event.
 * Returns true when the sequence finished. */
static bool seq_emit(struct sched *s, struct sseq *sq, const struct sample_out *sout)
{
    struct sreq *q = sq->req;
    const struct req *r = q->r;
    const struct sample_out so = *sout;
    const int32_t n_gen = sq->n_ids - q->n_prompt;
    const int32_t tok = so.token;
    sq->ids[sq->n_ids++] = tok;
    s->st.generation_tokens++;

    struct req_event *ev = event_new(q, sq->index);
    ev->token = tok;
    if (sq->index == 0 && n_gen == 0 && r->t_submit > 0) ev->queue_s = q->t_admit - r->t_submit;
    ev->logprob = so.logprob;
    ev->n_top = so.n_top;
    memcpy(ev->top_ids, so.top_ids, sizeof ev->top_ids);
    memcpy(ev->top_logprobs, so.top_logprobs, sizeof ev->top_logprobs);
    ev->text_offset = detok_emitted_len(&sq->dt);

    enum req_finish fin = REQ_FINISH_NONE;
    char *delta = NULL;
    size_t len = 0;
    bool stopped = false;
    if (tok == s->m->cfg.eos_id && !r->ignore_eos) {
        fin = REQ_FINISH_STOP;
    } else {
        detok_push(&sq->dt, tok, &delta, &len, &stopped);
        if (stopped) fin = REQ_FINISH_STOP;
        else if (n_gen + 1 >= r->max_tokens) fin = REQ_FINISH_LENGTH;
    }
    /* Text held back (an incomplete character, a possible stop-string prefix) is
     * released when the sequence ends without a stop. */
    size_t cap = len + 1;
    ev->text = xmalloc(cap);
    memcpy(ev->text, delta ? delta : "", len);
    ev->text_len = len;
    if (fin != REQ_FINISH_NONE && !stopped) {
        char *tail;
        size_t tl;
        detok_flush(&sq->dt, &tail, &tl);
        ev->text = xrealloc(ev->text, len + tl + 1);
        memcpy(ev->text + len, tail, tl);
        ev->text_len = len + tl;
        if (detok_stopped(&sq->dt)) fin = REQ_FINISH_STOP;
    }
    ev->text[ev->text_len] = '\0';
    ev->finish = fin;
    ev->completion_tokens = sq->n_ids - q->n_prompt;
    event_evicted(s, sq, ev);
    ev->kv_blocks = sq->kv.n_blocks;
    ev->kv_budget_blocks = q->budget.policy == KV_POLICY_FULL
                               ? 0
                               : CEIL_DIV(kv_budget_slots(&q->budget), s->pool->block_size);
    s->emit(s->emit_arg, ev);
    return fin != REQ_FINISH_NONE;
}

static void seq_finish(struct sched *s, struct sseq *sq);

/* Sequence sq samples from logits row `row` of this step, once the step is done. */
static void pend(struct sched *s, struct sseq *sq, int32_t row)
{
    if (s->n_pending == s->cap_pending) {
        s->cap_pending = MAX(16, 2 * s->cap_pending);
        s->pending = xrealloc(s->pending, (size_t)s->cap_pending * sizeof *s->pending);
        s->srows = xrealloc(s->srows, (size_t)s->cap_pending * sizeof *s->srows);
        s->souts = xrealloc(s->souts, (size_t)s->cap_pending * sizeof *s->souts);
    }
    s->pending[s->n_pending++] = (struct pending){sq, row};
}

/*
 * The pending rows on the backend's device (be_ops.sample; the logits never left
 * it): the host does what needs the sequence's history and its random stream (the
 * step 1-2 additions, the one uniform draw), the device the rest (sampler.h).
 */
static int sample_on_device(struct sched *s)
{
    const int32_t V = s->m->cfg.vocab_size;
    int64_t need = 0;
    for (int32_t i = 0; i < s->n_pending; i++) {
        const struct sseq *sq = s->pending[i].sq;
        need += sq->req->r->sp.n_bias + (sq->n_ids - sq->req->n_prompt);
    }
    if (need > s->cap_adds) {
        s->cap_adds = MAX(need, 2 * s->cap_adds);
        s->add_ids = xrealloc(s->add_ids, (size_t)s->cap_adds * sizeof *s->add_ids);
        s->add_vals = xrealloc(s->add_vals, (size_t)s->cap_adds * sizeof *s->add_vals);
    }
    int64_t at = 0;
    for (int32_t i = 0; i < s->n_pending; i++) {
        struct sseq *sq = s->pending[i].sq;
        const struct sampler_params *p = &sq->req->r->sp;
        const int32_t n_gen = sq->n_ids - sq->req->n_prompt;
        const int32_t n_add = sampler_adjustments(p, V, sq->ids + sq->req->n_prompt, n_gen,
                                                  &s->scratch, s->add_ids + at, s->add_vals + at);
        s->srows[i] = (struct be_sample_row){
            .row = s->pending[i].row, .add_ids = s->add_ids + at, .add_vals = s->add_vals + at,
            .n_add = n_add, .temperature = p->temperature, .top_p = p->top_p, .top_k = p->top_k,
            .n_logprobs = p->n_logprobs,
            .u = sampler_is_greedy(p) ? 0.0 : rng_uniform(&sq->rng),
        };
        at += n_add;
    }
    return backend_sample(&s->m->be, s->srows, s->n_pending, s->souts);
}

/* Sample every pending row (on the device when the step's logits stayed there) and
 * emit the tokens in order. Returns 0 or the device's error. */
static int sample_pending(struct sched *s, bool on_device)
{
    const int32_t V = s->m->cfg.vocab_size;
    if (on_device) {
        int err = sample_on_device(s);
        if (err) return err;
    } else {
        for (int32_t i = 0; i < s->n_pending; i++) {
            struct sseq *sq = s->pending[i].sq;
            struct sreq *q = sq->req;
            /* The sampler edits its input: a copy of the row. */
            memcpy(s->row, s->batch.logits + (int64_t)s->pending[i].row * V,
                   (size_t)V * sizeof *s->row);
            sampler_sample(&q->r->sp, s->row, V, sq->ids + q->n_prompt, sq->n_ids - q->n_prompt,
                           &sq->rng, &s->scratch, &s->souts[i]);
        }
    }
    /* A request is freed by its last seq_finish; every pending entry of it comes
     * before that, as each live sequence has at most one. */
    for (int32_t i = 0; i < s->n_pending; i++)
        if (seq_emit(s, s->pending[i].sq, &s->souts[i])) seq_finish(s, s->pending[i].sq);
    s->n_pending = 0;
    return 0;
}

/* The prompt is in the cache: H2O selection, shrink the reservation, fork. */
static void finish_prompt(struct sched *s, struct sreq *q)
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
static void seq_finish(struct sched *s, struct sseq *sq)
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

static void check_invariants(const struct sched *s)
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

static bool is_batch(const struct sreq *q)
{
    return q->r->prio == REQ_PRIO_BATCH;
}

/* What is left of one step's room. */
struct step_room {
    int32_t tokens;       /* of max_batched_tokens */
    int32_t logit_rows;   /* full logit rows for scored prompt chunks */
    int32_t batch_prompt; /* prompt tokens of batch requests */
};

/* The next prompt chunk of sequence 0 of a request, within the step's room: tokens,
 * logit rows when it scores its prompt, batch prompt tokens when it is a batch
 * request. */
static void prompt_chunk(struct sched *s, struct sseq *s0, struct step_room *room,
                         int32_t *n_items)
{
    const struct sreq *q = s0->req;
    const bool score = q->r->prompt_logprobs, batch = is_batch(q);
    int32_t chunk = MIN(room->tokens, q->n_prompt - s0->n_cached);
    if (score) chunk = MIN(chunk, room->logit_rows);
    if (batch) chunk = MIN(chunk, room->batch_prompt);
    if (chunk <= 0) return; /* no room of its kind left: next step */
    add_item(s, s0, chunk, score, n_items);
    room->tokens -= chunk;
    if (score) room->logit_rows -= chunk;
    if (batch) room->batch_prompt -= chunk;
}

/* Prompt-token events for a scored prompt chunk: the row of position p predicts
 * prompt token p + 1 (the last prompt token's row predicts the first generated
 * token and is sampled as usual). */
static void emit_prompt_logprobs(struct sched *s, struct sseq *sq, const struct batch_item *it)
{
    struct sreq *q = sq->req;
    const int32_t V = s->m->cfg.vocab_size;
    const int32_t n_top = MAX(q->r->sp.n_logprobs, 0);
    for (int32_t t = 0; t < it->n_tok; t++) {
        const int32_t p = it->pos0 + t;
        if (p + 1 >= q->n_prompt) break;
        memcpy(s->row, s->batch.logits + (int64_t)(it->logits_row + t) * V,
               (size_t)V * sizeof *s->row);
        struct sample_out so;
        sampler_logprobs(s->row, V, sq->ids[p + 1], n_top, &s->scratch, &so);
        struct req_event *ev = event_new(q, 0);
        ev->token = sq->ids[p + 1];
        ev->prompt_pos = p + 1;
        ev->logprob = so.logprob;
        ev->n_top = so.n_top;
        memcpy(ev->top_ids, so.top_ids, sizeof ev->top_ids);
        memcpy(ev->top_logprobs, so.top_logprobs, sizeof ev->top_logprobs);
        ev->text = xstrdup("");
        s->emit(s->emit_arg, ev);
    }
}

/*
 * Whether this step leaves the batch class out: some batch request is running (so
 * there is something to leave out), an interactive request has prompt tokens to
 * prefill now (admitted with its prompt unfinished, or at the head of the queue and
 * fitting, so admitted this step), and the batch class has not sat out
 * SCHED_BATCH_MAX_PAUSE steps in a row already.
 */
static bool pause_batch(const struct sched *s)
{
    if (s->batch_paused >= SCHED_BATCH_MAX_PAUSE) return false;
    bool batch = false, prompt = s->wait_head[0] && admit_fits(s, s->wait_head[0]);
    for (int32_t k = 0; k < s->n_running; k++) {
        const struct sreq *q = s->running[k];
        if (is_batch(q)) batch = true;
        else if (!q->prefilled) prompt = true;
    }
    return batch && prompt;
}

/* The backend failed: every running request ends with the error. Returns err. */
static int fail_running(struct sched *s, int err)
{
    char msg[512];
    snprintf(msg, sizeof msg, "the backend failed: %s", err_msg());
    s->n_pending = 0;
    while (s->n_running > 0) {
        struct sreq *q = s->running[0];
        struct req_event *ev = event_new(q, -1);
        ev->finish = REQ_FINISH_ERROR;
        ev->error = xstrdup(msg);
        ev->error_code = err;
        s->emit(s->emit_arg, ev);
        drop_running(s, q);
    }
    return err;
}

int sched_step(struct sched *s)
{
    int32_t n_items = 0;
    /* 0. Interactive prompts first: a step with interactive prompt work runs no
     * batch sequence (they keep their blocks and state and go on next step). */
    const bool pause = pause_batch(s);
    s->batch_paused = pause ? s->batch_paused + 1 : 0;
    struct step_room room = {
        .tokens = s->o.max_batched_tokens,
        .logit_rows = SCHED_PROMPT_LOGIT_ROWS,
        .batch_prompt = pause ? 0 : s->o.batch_prompt_tokens,
    };
    /* 1. Every decoding sequence gives its newest token. */
    for (int32_t k = 0; k < s->n_running; k++) {
        struct sreq *q = s->running[k];
        if (!q->prefilled || (pause && is_batch(q))) continue;
        for (int32_t i = 0; i < q->r->n; i++)
            if (q->seqs[i].live) {
                add_item(s, &q->seqs[i], 1, false, &n_items);
                room.tokens--;
            }
    }
    CHECK(room.tokens > 0);
    /* 2. Prompt chunks of admitted requests, oldest first, then new admissions (a
     * batch request only while the step has batch prompt room). */
    for (int32_t k = 0; k < s->n_running && room.tokens > 0; k++) {
        struct sreq *q = s->running[k];
        if (!q->prefilled) prompt_chunk(s, &q->seqs[0], &room, &n_items);
    }
    while (room.tokens > 0 && admit_one(s, room.batch_prompt > 0))
        prompt_chunk(s, &s->running[s->n_running - 1]->seqs[0], &room, &n_items);
    if (n_items == 0) return 0;

    /* The logits stay on the device when the backend samples there and no item
     * needs its rows on the host (prompt logprobs). */
    bool on_device = backend_can_sample(&s->m->be);
    for (int32_t i = 0; i < n_items && on_device; i++) on_device = !s->items[i].all_logits;
    s->batch.device_logits = on_device;
    int err = batch_run(&s->batch, &s->m->be, s->pool, s->m->cfg.vocab_size, s->items, n_items);
    CHECK(err != ENG_ENOSPC); /* the reservations make this impossible */
    if (err) return fail_running(s, err);
    s->st.steps++;
    int32_t n_tok = 0;
    for (int32_t i = 0; i < n_items; i++) {
        struct sseq *sq = s->owner[i];
        struct sreq *q = sq->req;
        const bool decode = q->prefilled;
        const int32_t t = sq->n_cached;
        n_tok += s->items[i].n_tok;
        sq->n_cached += s->items[i].n_tok;
        /* The row to sample from: the item's last token (all_logits items have one
         * row per token). */
        const int32_t last_row = s->items[i].logits_row +
                                 (s->items[i].all_logits ? s->items[i].n_tok - 1 : 0);
        if (!decode && s->items[i].all_logits) emit_prompt_logprobs(s, sq, &s->items[i]);
        if (decode) {
            if (s->n_ev == s->cap_ev) {
                s->cap_ev = MAX(16, 2 * s->cap_ev);
                s->ev_kv = xrealloc(s->ev_kv, (size_t)s->cap_ev * sizeof *s->ev_kv);
                s->ev_t = xrealloc(s->ev_t, (size_t)s->cap_ev * sizeof *s->ev_t);
            }
            s->ev_kv[s->n_ev] = &sq->kv;
            s->ev_t[s->n_ev++] = t;
            pend(s, sq, last_row);
            continue;
        }
        s->st.prompt_tokens += s->items[i].n_tok;
        if (sq->n_cached < q->n_prompt) continue; /* more prompt to go */
        finish_prompt(s, q);
        if (q->r->max_tokens == 0) {
            /* Only the prompt's scores were asked for (echo + logprobs): they went out
             * with the chunks, and nothing is sampled. seq_finish frees q with the
             * last sequence. */
            const int32_t n = q->r->n;
            for (int32_t j = 0; j < n; j++) {
                emit_finish(s, q, j, REQ_FINISH_LENGTH);
                seq_finish(s, &q->seqs[j]);
            }
            continue;
        }
        /* Every sequence samples its first token from the prompt's last logits. */
        for (int32_t j = 0; j < q->r->n; j++) pend(s, &q->seqs[j], last_row);
    }
    /* H2O eviction for every decode token of the step at once (its heads spread over
     * the OpenMP threads), before any of those sequences can finish. */
    int64_t before = 0, after = 0;
    for (int32_t i = 0; i < s->n_ev; i++) before += s->ev_kv[i]->n_evicted;
    kv_seq_after_decode_many(s->ev_kv, s->ev_t, s->n_ev, &s->m->be, &s->m->cfg);
    for (int32_t i = 0; i < s->n_ev; i++) after += s->ev_kv[i]->n_evicted;
    s->st.tokens_evicted += after - before;
    s->n_ev = 0;
    err = sample_pending(s, on_device);
    if (err) return fail_running(s, err);
    check_invariants(s);
    return n_tok;
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
