/*
 * sched_step.c - one scheduler step (sched_step, see sched.h): which tokens the
 * step carries, the forward, H2O eviction, sampling and the token events.
 *
 * A step takes every decoding sequence's newest token first, then prompt chunks of
 * admitted requests oldest first, then admits new requests (sched.c) while room is
 * left; interactive prompt work may leave the batch class out of a step
 * (pause_batch). After the forward every decode token's eviction runs at once, then
 * every pending row is sampled, on the device when the logits stayed there.
 *
 * Owns: nothing of its own; it fills the step's arrays in struct sched (items,
 * pending rows, eviction lists), which are empty again when sched_step returns.
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

    struct req_event *ev = sched_event_new(q, sq->index);
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
    /* Any of the model's EOS ids ends the sequence (Llama 3 Instruct has three): the
     * config's eos_token_id, and every one the tokenizer's files name. */
    bool eos = tok == s->m->cfg.eos_id || (s->m->tok && tokenizer_is_eos(s->m->tok, tok));
    if (eos && !r->ignore_eos) {
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
    sched_event_evicted(s, sq, ev);
    ev->kv_blocks = sq->kv.n_blocks;
    ev->kv_budget_blocks = q->budget.policy == KV_POLICY_FULL
                               ? 0
                               : CEIL_DIV(kv_budget_slots(&q->budget), s->pool->block_size);
    s->emit(s->emit_arg, ev);
    return fin != REQ_FINISH_NONE;
}

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
        if (seq_emit(s, s->pending[i].sq, &s->souts[i])) sched_seq_finish(s, s->pending[i].sq);
    s->n_pending = 0;
    return 0;
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
        struct req_event *ev = sched_event_new(q, 0);
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
    bool batch = false, prompt = s->wait_head[0] && sched_admit_fits(s, s->wait_head[0]);
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
        struct req_event *ev = sched_event_new(q, -1);
        ev->finish = REQ_FINISH_ERROR;
        ev->error = xstrdup(msg);
        ev->error_code = err;
        s->emit(s->emit_arg, ev);
        sched_drop_running(s, q);
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
    while (room.tokens > 0 && sched_admit_one(s, room.batch_prompt > 0))
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
        sched_finish_prompt(s, q);
        if (q->r->max_tokens == 0) {
            /* Only the prompt's scores were asked for (echo + logprobs): they went out
             * with the chunks, and nothing is sampled. seq_finish frees q with the
             * last sequence. */
            const int32_t n = q->r->n;
            for (int32_t j = 0; j < n; j++) {
                sched_emit_finish(s, q, j, REQ_FINISH_LENGTH);
                sched_seq_finish(s, &q->seqs[j]);
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
    sched_check_invariants(s);
    return n_tok;
}
