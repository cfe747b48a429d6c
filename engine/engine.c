/*
 * engine.c - the engine thread and its mailboxes (see engine.h).
 *
 * Owns: the engine thread; through it the engine core (engine_core.h: the model and
 * backend, the KV pool and the scheduler), which only that thread touches. The
 * inbox holds struct engine_msg (SUBMIT / CANCEL / SHUTDOWN); the outbox holds
 * struct req_event.
 *
 * Invariants:
 * - A message is pushed to the inbox only under e->mu while e->accepting is true,
 *   and engine_shutdown clears accepting and pushes SHUTDOWN in the same critical
 *   section, so SHUTDOWN is the last message the engine thread ever receives and
 *   every SUBMIT before it is handled (run, or cancelled by the shutdown).
 * - After accepting turns false, a submit is refused on the submitter's thread with
 *   an error event pushed straight to the outbox: no request waits for a thread that
 *   is gone.
 * - The events of one loop iteration are collected locally and pushed to the outbox
 *   in one go; notify runs only when that push finds the outbox empty (or when the
 *   state changes).
 * - The engine thread sleeps on the inbox only when the scheduler is idle.
 */
#include "engine.h"

#include "engine_core.h"
#include "err.h"
#include "mailbox.h"
#include "util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum engine_msg_kind {
    ENGINE_MSG_SUBMIT,
    ENGINE_MSG_CANCEL,
    ENGINE_MSG_SHUTDOWN,
};

struct engine_msg {
    struct req_node node; /* first member: the inbox links messages through it */
    enum engine_msg_kind kind;
    uint64_t id;          /* CANCEL */
    struct req *req;      /* SUBMIT, owned by the message until handled */
};

struct engine {
    /* Fixed at creation. */
    struct engine_opts o;
    char *model_name;     /* o.model points here */
    void (*notify)(void *arg);
    void *notify_arg;
    pthread_t thread;
    struct mailbox inbox;  /* struct engine_msg */
    struct mailbox outbox; /* struct req_event */

    /* Guarded by mu: what other threads may read or change. */
    pthread_mutex_t mu;
    enum engine_state state;
    bool accepting;       /* submits and cancels go to the inbox */
    char err[512];        /* set with state FAILED, then fixed */
    int err_code;         /* the load's error code, with err */
    struct opt_config cfg; /* set before state becomes READY, then fixed */
    struct sched_stats stats;

    /* Engine thread only. */
    struct engine_core *core; /* NULL until loaded, and again once unloaded */
    struct sched *sched;      /* core->sched */
    struct req_node *ev_head, *ev_tail; /* this iteration's events, not yet in outbox */
};

/* ---- Options. ---- */

void engine_opts_default(struct engine_opts *o)
{
    memset(o, 0, sizeof *o);
    o->model = MODEL_DEFAULT;
    model_opts_default(&o->model_opts);
    o->block_size = 16;
    o->kv_cache_bytes = 0;
    o->kv_blocks = 0;
    /* vLLM's defaults: 256 sequences; 2048 tokens per step keeps a step's latency
     * (and so every running sequence's inter-token latency) bounded while a long
     * prompt is prefilled in chunks. */
    o->sched.max_num_seqs = 256;
    o->sched.max_batched_tokens = 2048;
    kv_budget_spec_default(&o->kv_default);
}

const char *engine_state_name(enum engine_state s)
{
    switch (s) {
    case ENGINE_LOADING: return "loading";
    case ENGINE_READY: return "ready";
    case ENGINE_FAILED: return "failed";
    case ENGINE_STOPPED: return "stopped";
    }
    return "unknown";
}

/* ---- Helpers shared by both sides. ---- */

static void engine_notify(struct engine *e)
{
    if (e->notify) e->notify(e->notify_arg);
}

/* The single event of a request that never ran. */
static struct req_event *error_event(uint64_t id, int code, const char *msg)
{
    struct req_event *ev = xcalloc(1, sizeof *ev);
    ev->req_id = id;
    ev->seq = -1;
    ev->token = -1;
    ev->finish = REQ_FINISH_ERROR;
    ev->error = xstrdup(msg);
    ev->error_code = code;
    ev->text = xstrdup("");
    return ev;
}

/* Push a chain of events to the outbox; notify on the empty -> non-empty edge. */
static void outbox_push(struct engine *e, struct req_node *first, struct req_node *last)
{
    if (mailbox_push_list(&e->outbox, first, last)) engine_notify(e);
}

static void set_state(struct engine *e, enum engine_state s)
{
    pthread_mutex_lock(&e->mu);
    e->state = s;
    pthread_mutex_unlock(&e->mu);
    engine_notify(e);
}

/* ---- The engine thread. ---- */

/* sched_emit_fn: collect the event; flush_events hands the batch to the outbox. */
static void engine_emit(void *arg, struct req_event *ev)
{
    struct engine *e = arg;
    ev->node.next = NULL;
    if (e->ev_tail)
        e->ev_tail->next = &ev->node;
    else
        e->ev_head = &ev->node;
    e->ev_tail = &ev->node;
}

static void flush_events(struct engine *e)
{
    if (!e->ev_head) return;
    struct req_node *first = e->ev_head, *last = e->ev_tail;
    e->ev_head = e->ev_tail = NULL;
    outbox_push(e, first, last);
}

static void publish_stats(struct engine *e)
{
    struct sched_stats st;
    sched_get_stats(e->sched, &st);
    pthread_mutex_lock(&e->mu);
    e->stats = st;
    pthread_mutex_unlock(&e->mu);
}

void engine_opts_core(const struct engine_opts *o, struct engine_core_opts *out)
{
    *out = (struct engine_core_opts){
        .upto = ENGINE_CORE_SCHED,
        .model = o->model,
        .model_opts = o->model_opts,
        .block_size = o->block_size,
        .kv_cache_bytes = o->kv_cache_bytes,
        .kv_blocks = o->kv_blocks,
        .sched = o->sched,
    };
}

/* Load the model, allocate the pool, create the scheduler (engine_core_open). */
static int engine_load(struct engine *e)
{
    struct engine_core_opts co;
    engine_opts_core(&e->o, &co);
    co.emit = engine_emit;
    co.emit_arg = e;
    int err = engine_core_open(&co, &e->core);
    if (err) return err;
    e->sched = e->core->sched;
    const struct model *m = e->core->m;
    const int32_t n_blocks = e->core->pool.n_blocks;
    const double mib =
        (double)backend_kv_block_bytes(&m->be, e->o.block_size) * n_blocks / (1 << 20);
    log_info("engine: %s (%s, %s) loaded in %.2f s; KV pool %d blocks of %d tokens "
             "(%.1f MiB, KV cache %s)",
             m->cfg.name, backend_name(&m->be), dtype_name(m->dtype), m->load_seconds,
             n_blocks, e->o.block_size, mib, dtype_name(m->kv_dtype));
    return 0;
}

/* Free what engine_load made, on the thread that owns the backend. */
static void engine_unload(struct engine *e)
{
    /* The scheduler is empty by now; it would cancel silently otherwise. */
    engine_core_close(e->core);
    e->core = NULL;
    e->sched = NULL;
}

/* Handle one batch of inbox messages. Returns true once SHUTDOWN was seen. */
static bool handle_messages(struct engine *e, struct req_node *list)
{
    bool stopping = false;
    while (list) {
        struct engine_msg *msg = (struct engine_msg *)list;
        list = list->next;
        switch (msg->kind) {
        case ENGINE_MSG_SUBMIT:
            /* Unreachable after SHUTDOWN (see the invariants), but never drop one. */
            if (stopping) {
                engine_emit(e, error_event(msg->req->id, ENG_EUNAVAILABLE,
                                           "the engine is shutting down"));
                req_free(msg->req);
            } else {
                sched_add(e->sched, msg->req); /* owns it now */
            }
            break;
        case ENGINE_MSG_CANCEL:
            if (!stopping) sched_cancel(e->sched, msg->id);
            break;
        case ENGINE_MSG_SHUTDOWN:
            if (!stopping) sched_cancel_all(e->sched);
            stopping = true;
            break;
        }
        free(msg);
    }
    return stopping;
}

/* Loading failed: refuse every SUBMIT that was queued meanwhile. */
static void refuse_messages(struct engine *e, struct req_node *list, int code)
{
    char msg[600];
    snprintf(msg, sizeof msg, "the model failed to load: %s", e->err);
    while (list) {
        struct engine_msg *m = (struct engine_msg *)list;
        list = list->next;
        if (m->kind == ENGINE_MSG_SUBMIT) {
            engine_emit(e, error_event(m->req->id, code, msg));
            req_free(m->req);
        }
        free(m);
    }
}

static void *engine_main(void *arg)
{
    struct engine *e = arg;
    err_clear();
    int err = engine_load(e);
    if (err) {
        pthread_mutex_lock(&e->mu);
        snprintf(e->err, sizeof e->err, "%s", err_msg());
        e->err_code = err;
        e->state = ENGINE_FAILED;
        e->accepting = false; /* from now on submitters refuse requests themselves */
        pthread_mutex_unlock(&e->mu);
        log_error("engine: cannot load %s: %s", e->o.model, e->err);
        engine_unload(e);
        /* Nothing reaches the inbox any more: what is there is all there will be. */
        refuse_messages(e, mailbox_take_all(&e->inbox), err);
        flush_events(e);
        engine_notify(e); /* the state changed */
        return NULL;
    }
    pthread_mutex_lock(&e->mu);
    e->cfg = e->core->m->cfg;
    pthread_mutex_unlock(&e->mu);
    publish_stats(e);
    set_state(e, ENGINE_READY);

    bool stopping = false;
    while (!stopping) {
        /* Sleep only when there is nothing to run: the inbox is the only source of
         * work, so an idle engine costs no CPU. */
        struct req_node *msgs = sched_idle(e->sched) ? mailbox_wait_all(&e->inbox, -1)
                                                     : mailbox_take_all(&e->inbox);
        stopping = handle_messages(e, msgs);
        if (!stopping && !sched_idle(e->sched)) {
            int n = sched_step(e->sched);
            if (n < 0) {
                log_error("engine: step failed: %s", err_msg());
            } else if (n == 0 && !sched_idle(e->sched)) {
                /* Work that cannot progress (nothing admissible): do not spin; a
                 * message (cancel, shutdown) may change that, so wait briefly. */
                publish_stats(e);
                flush_events(e);
                struct req_node *more = mailbox_wait_all(&e->inbox, 0.001);
                stopping = handle_messages(e, more);
            }
        }
        publish_stats(e); /* first, so a consumer with the last events sees them */
        flush_events(e);
    }
    /* SHUTDOWN: every request got its cancelled event in handle_messages. */
    CHECK(sched_idle(e->sched));
    publish_stats(e);
    flush_events(e);
    engine_unload(e);
    set_state(e, ENGINE_STOPPED);
    return NULL;
}

/* ---- The other threads' side. ---- */

int engine_create(struct engine **out, const struct engine_opts *o, void (*notify)(void *arg),
                  void *notify_arg)
{
    *out = NULL;
    /* Wrong options fail here, on the caller's thread, not as a FAILED load. */
    struct engine_core_opts co;
    engine_opts_core(o, &co);
    int err = engine_core_check(&co);
    if (err) return err;
    struct engine *e = xcalloc(1, sizeof *e);
    e->o = *o;
    e->model_name = xstrdup(o->model);
    e->o.model = e->model_name;
    e->notify = notify;
    e->notify_arg = notify_arg;
    mailbox_init(&e->inbox);
    mailbox_init(&e->outbox);
    CHECK(pthread_mutex_init(&e->mu, NULL) == 0);
    e->state = ENGINE_LOADING;
    e->accepting = true;
    int rc = pthread_create(&e->thread, NULL, engine_main, e);
    if (rc != 0) {
        mailbox_deinit(&e->inbox);
        mailbox_deinit(&e->outbox);
        pthread_mutex_destroy(&e->mu);
        free(e->model_name);
        free(e);
        return err_set(ENG_ENOMEM, "engine: cannot start the engine thread: %s", strerror(rc));
    }
    *out = e;
    return 0;
}

static void free_messages(struct req_node *list)
{
    while (list) {
        struct engine_msg *m = (struct engine_msg *)list;
        list = list->next;
        if (m->kind == ENGINE_MSG_SUBMIT) req_free(m->req);
        free(m);
    }
}

void engine_destroy(struct engine *e)
{
    if (!e) return;
    engine_shutdown(e);
    pthread_join(e->thread, NULL);
    /* The thread drained the inbox before it left; this is belt and braces. */
    free_messages(mailbox_take_all(&e->inbox));
    for (struct req_node *n = mailbox_take_all(&e->outbox); n;) {
        struct req_node *next = n->next;
        req_event_free((struct req_event *)n);
        n = next;
    }
    mailbox_deinit(&e->inbox);
    mailbox_deinit(&e->outbox);
    pthread_mutex_destroy(&e->mu);
    free(e->model_name);
    free(e);
}

void engine_shutdown(struct engine *e)
{
    pthread_mutex_lock(&e->mu);
    if (e->accepting) {
        e->accepting = false;
        struct engine_msg *m = xcalloc(1, sizeof *m);
        m->kind = ENGINE_MSG_SHUTDOWN;
        mailbox_push(&e->inbox, &m->node);
    }
    pthread_mutex_unlock(&e->mu);
}

enum engine_state engine_state(struct engine *e)
{
    pthread_mutex_lock(&e->mu);
    enum engine_state s = e->state;
    pthread_mutex_unlock(&e->mu);
    return s;
}

const char *engine_error(struct engine *e)
{
    /* e->err is written once, before FAILED is published, and never again. */
    return engine_state(e) == ENGINE_FAILED ? e->err : "";
}

const struct opt_config *engine_model_config(struct engine *e)
{
    enum engine_state s = engine_state(e);
    return s == ENGINE_READY || s == ENGINE_STOPPED ? &e->cfg : NULL;
}

void engine_submit(struct engine *e, struct req *r)
{
    CHECK(r != NULL);
    if (r->t_submit == 0) r->t_submit = time_now();
    struct engine_msg *m = xcalloc(1, sizeof *m);
    m->kind = ENGINE_MSG_SUBMIT;
    m->req = r;
    pthread_mutex_lock(&e->mu);
    const bool accepted = e->accepting;
    if (accepted) mailbox_push(&e->inbox, &m->node);
    const enum engine_state state = e->state;
    pthread_mutex_unlock(&e->mu);
    if (accepted) return;
    /* Refused: answer on this thread, since the engine thread is gone or going. */
    char msg[600];
    int code = ENG_EUNAVAILABLE;
    if (state == ENGINE_FAILED) {
        snprintf(msg, sizeof msg, "the model failed to load: %s", e->err);
        code = e->err_code;
    } else {
        snprintf(msg, sizeof msg, "the engine is shutting down");
    }
    struct req_event *ev = error_event(r->id, code, msg);
    req_free(r);
    free(m);
    outbox_push(e, &ev->node, &ev->node);
}

void engine_cancel(struct engine *e, uint64_t id)
{
    struct engine_msg *m = xcalloc(1, sizeof *m);
    m->kind = ENGINE_MSG_CANCEL;
    m->id = id;
    pthread_mutex_lock(&e->mu);
    const bool accepted = e->accepting;
    if (accepted) mailbox_push(&e->inbox, &m->node);
    pthread_mutex_unlock(&e->mu);
    /* A stopped engine has no request left to cancel. */
    if (!accepted) free(m);
}

struct req_node *engine_take_events(struct engine *e)
{
    return mailbox_take_all(&e->outbox);
}

void engine_get_stats(struct engine *e, struct sched_stats *out)
{
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    pthread_mutex_unlock(&e->mu);
}
