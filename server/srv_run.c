/*
 * srv_run.c - the server's life: set-up, the listener, signals, the tick, the drain
 * and the shutdown.
 *
 * The engine's events come in through the bridge (bridge.c), which hands each to
 * its owner; after every wake-up this file feeds the batch runner and notices a
 * model that failed to load. SIGINT / SIGTERM stop accepting, let in-flight work
 * finish for up to shutdown_grace_s, then cancel the rest and close every handle so
 * the loop ends on its own. The signal handlers stay until the very end: more
 * signals shorten the drain, never the clean stop of the engine and the store.
 * Owns: the struct srv it makes (see srv.h), from start to exit.
 * Thread: main, which runs the loop.
 */
#include "srv_run.h"

#include "batchrun.h"
#include "chat_tmpl.h"
#include "conn.h"
#include "router.h"
#include "srv.h"

#include "err.h"
#include "jobstore.h"
#include "model.h"
#include "sched.h"
#include "tokenizer.h"
#include "util.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* After the grace period the running requests are cancelled, and their connections
 * get this long to send the final chunk or body before they are closed. */
#define SRV_DRAIN_FLUSH_MS 5000

/* ---- after the engine's events ---- */

static void close_cb_noop(uv_handle_t *h)
{
    (void)h;
}

static void start_drain(struct srv *s);

/* The bridge's hook, once per wake-up, after the events went to their owners. */
static void after_events(void *arg)
{
    struct srv *s = arg;
    /* Finished batch requests made room: hand the engine more. */
    batchrun_feed(s->br);
    if (engine_state(s->bridge.eng) == ENGINE_FAILED && s->exit_code == 0) {
        /* A server that cannot serve its model must not look alive: it exits
         * non-zero with the reason, as vLLM does, so that systemd or Kubernetes see
         * it. The drain lets the requests that waited for the model get their 503
         * (the engine's error events) first. */
        log_error("the model failed to load: %s", engine_error(s->bridge.eng));
        s->exit_code = 1;
        start_drain(s);
    }
}

/* ---- shutdown ---- */

/* Whether stop_everything has run (it closes the tick, which nothing else does). */
static bool stopped(struct srv *s)
{
    return uv_is_closing((uv_handle_t *)&s->tick);
}

static void stop_everything(struct srv *s)
{
    if (stopped(s)) return;
    while (s->conns) conn_close(s->conns);
    batchrun_close(s->br); /* stops it too; its store work still queued runs now */
    uv_close((uv_handle_t *)&s->tick, close_cb_noop);
    /* The signal handlers stay installed to the end (srv_run closes them after the
     * loop): closed now, the next SIGTERM would find the default action and kill
     * the process in the middle of its clean stop. Unreferenced, they no longer
     * keep the loop running. */
    uv_unref((uv_handle_t *)&s->sig_int);
    uv_unref((uv_handle_t *)&s->sig_term);
    /* Stop the engine (every request left is cancelled; the thread is joined), and
     * only then close the handle it pokes. */
    bridge_stop(&s->bridge);
}

/* Close the signal handles, last thing before the exit. libuv puts the default
 * action back as it closes them, so the signals are ignored from then on (blocked
 * in between: one arriving in that gap would kill the process). */
static void close_signals(struct srv *s)
{
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    uv_close((uv_handle_t *)&s->sig_int, close_cb_noop);
    uv_close((uv_handle_t *)&s->sig_term, close_cb_noop);
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void start_drain(struct srv *s)
{
    if (s->draining) return;
    s->draining = true;
    s->drain_deadline = uv_now(s->loop) + (uint64_t)s->cfg->shutdown_grace_s * 1000;
    log_info("draining: no new connections; in-flight requests have %d s",
             s->cfg->shutdown_grace_s);
    /* Batch requests are not waited for: what is not recorded runs again after the
     * restart, so they are cancelled now rather than holding the drain open. */
    batchrun_stop(s->br);
    if (!uv_is_closing((uv_handle_t *)&s->listener))
        uv_close((uv_handle_t *)&s->listener, close_cb_noop);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct srv *s = h->data;
    if (stopped(s)) return; /* the clean stop is under way: nothing is left to cut */
    if (s->draining && s->drain_cancelled) {
        /* A third: the responses the cancel ended are not waited for either. */
        log_warn("signal %d again: closing every connection now", signum);
        stop_everything(s);
        return;
    }
    if (s->draining) {
        /* A second: the grace period ends now; the next tick cancels what runs, and
         * each response still ends with its finish (on_tick). */
        log_warn("second signal %d: cancelling what still runs", signum);
        s->drain_deadline = uv_now(s->loop);
    }
    start_drain(s);
}

static void on_tick(uv_timer_t *t)
{
    struct srv *s = t->data;
    conn_sweep(s);
    batchrun_tick(s->br);
    if (!s->draining) return;
    /* Busy: an engine request is registered, an exchange is unanswered, or answered
     * bytes are still on their way out (closing now would drop them). */
    bool busy = s->bridge.reg_n > 0;
    for (struct conn *c = s->conns; c && !busy; c = c->next)
        busy = c->head != NULL || c->wq_bytes > 0;
    const uint64_t now = uv_now(s->loop);
    if (!busy) {
        stop_everything(s);
    } else if (now >= s->drain_deadline && !s->drain_cancelled) {
        log_warn("drain deadline: cancelling the %d engine requests still running",
                 s->bridge.reg_n);
        /* Each cancelled sequence gets its finishing event, and its owner ends its
         * response properly: a last chunk with a finish_reason and [DONE] for a
         * stream, the whole body for the rest. */
        bridge_cancel_all(&s->bridge);
        s->drain_cancelled = true;
        s->drain_deadline = now + SRV_DRAIN_FLUSH_MS;
    } else if (now >= s->drain_deadline) {
        log_warn("drain: connections still busy %d ms after the cancel; closing them",
                 SRV_DRAIN_FLUSH_MS);
        stop_everything(s);
    }
}

static void on_connection(uv_stream_t *l, int status)
{
    struct srv *s = l->data;
    if (status < 0) {
        log_warn("accept: %s", uv_strerror(status));
        return;
    }
    conn_accept(s, router_dispatch);
}

static int listen_on(struct srv *s)
{
    struct sockaddr_storage addr;
    int err = strchr(s->cfg->host, ':')
                  ? uv_ip6_addr(s->cfg->host, s->cfg->port, (struct sockaddr_in6 *)&addr)
                  : uv_ip4_addr(s->cfg->host, s->cfg->port, (struct sockaddr_in *)&addr);
    if (err) {
        log_error("bad --host %s: %s", s->cfg->host, uv_strerror(err));
        return -1;
    }
    uv_tcp_init(s->loop, &s->listener);
    s->listener.data = s;
    err = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
    if (!err) err = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
    if (err) {
        log_error("cannot listen on %s:%d: %s", s->cfg->host, s->cfg->port, uv_strerror(err));
        return -1;
    }
    struct sockaddr_storage name;
    int len = sizeof name;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&name, &len);
    s->bound_port = ntohs(name.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&name)->sin6_port
                                                     : ((struct sockaddr_in *)&name)->sin_port);
    log_info("listening on http://%s:%d", s->cfg->host, s->bound_port);
    return 0;
}

/* The served model as the request parsers see it (pointers into s), made once:
 * nothing it is made of changes while the server runs. */
static void set_model(struct srv *s)
{
    struct api_model *m = &s->model;
    memset(m, 0, sizeof *m);
    m->id = s->model_id;
    m->max_model_len = s->max_model_len;
    m->vocab_size = s->mcfg.vocab_size;
    m->tok = s->tok;
    cfg_kv_spec(s->cfg, &m->kv_default);
    m->kv_dtype = dtype_name(cfg_kv_dtype(s->cfg));
    m->max_prompts = s->cfg->max_prompts_per_request;
    m->max_n = s->cfg->max_n;
    m->max_seqs = s->cfg->max_queue; /* prompts x max(n, best_of) in one request */
    s->chat = chat_tmpl_model(s->tmpl, m);
    m->chat = &s->chat;
}

int srv_run(const struct cfg *cfg)
{
    struct srv *s = xcalloc(1, sizeof *s);
    s->cfg = cfg;
    s->started = (int64_t)time(NULL);
    cfg_fingerprint(cfg, s->fingerprint, sizeof s->fingerprint);
    s->loop = uv_default_loop();
    signal(SIGPIPE, SIG_IGN); /* a client closing mid-write is an error code, not death */
    signal(SIGXFSZ, SIG_IGN); /* a write past RLIMIT_FSIZE is EFBIG (disk full), not death */

    /* The loop thread tokenizes and counts prompt tokens itself (the tokenizer is
     * read-only), so it needs the model's config and tokenizer, not its weights. */
    if (model_load_tokenizer(&s->tok, &s->mcfg, cfg->model)) {
        log_error("%s", err_msg());
        free(s);
        return 1;
    }
    /* A --max-model-len the model cannot run is refused here, before anything
     * listens (the engine would refuse it too, later and only in its log). */
    if (sched_context_len(cfg->max_model_len, &s->mcfg, &s->max_model_len)) {
        log_error("%s", err_msg());
        tokenizer_destroy(s->tok);
        free(s);
        return 1;
    }
    if (cfg->max_model_len > 0)
        log_info("max_model_len %d (the model's context is %d tokens)", s->max_model_len,
                 s->mcfg.max_pos);
    s->model_id = xstrdup(cfg->served_model_name ? cfg->served_model_name : cfg->model);
    if (chat_tmpl_open_model(cfg->model, cfg->chat_template, s->tok, &s->tmpl)) {
        log_error("%s", err_msg());
        tokenizer_destroy(s->tok);
        free(s->model_id);
        free(s);
        return 1;
    }
    set_model(s);
    /* The job store first: it recovers interrupted batches, and a data dir another
     * server holds is a reason not to start at all. A full one is not: completions
     * need no disk, and the batch runner opens the store once space is freed. */
    int js_err = jobstore_open(&s->js, srv_job_store(cfg));
    if (js_err == JOBSTORE_EFULL)
        log_warn("%s %s: %s; serving without Files and Batches until space is freed",
                 srv_job_store_kind(cfg), srv_job_store_name(cfg), err_msg());
    else if (js_err) {
        log_error("%s %s: %s", srv_job_store_kind(cfg), srv_job_store_name(cfg), err_msg());
        s->exit_code = 1;
        goto out_early;
    }

    bool signals_open = false;
    struct engine_opts eo;
    cfg_engine_opts(cfg, &eo);
    if (bridge_open(&s->bridge, s->loop, &eo, after_events, s)) {
        log_error("%s", err_msg());
        s->exit_code = 1;
        goto out;
    }
    if (listen_on(s)) {
        s->exit_code = 1;
        goto out;
    }
    if (batchrun_create(s, &s->br)) {
        log_error("%s %s: %s", srv_job_store_kind(cfg), srv_job_store_name(cfg), err_msg());
        s->exit_code = 1;
        goto out;
    }
    uv_signal_init(s->loop, &s->sig_int);
    uv_signal_init(s->loop, &s->sig_term);
    signals_open = true;
    s->sig_int.data = s->sig_term.data = s;
    uv_signal_start(&s->sig_int, on_signal, SIGINT);
    uv_signal_start(&s->sig_term, on_signal, SIGTERM);
    uv_timer_init(s->loop, &s->tick);
    s->tick.data = s;
    s->last_sweep = uv_now(s->loop);
    uv_timer_start(&s->tick, on_tick, SRV_TICK_MS, SRV_TICK_MS);

    uv_run(s->loop, UV_RUN_DEFAULT);
out:
    /* Everything but the bridge's wake handle is closed; stop the engine, then drop
     * the handle. */
    bridge_stop(&s->bridge);
    if (s->listener.loop && !uv_is_closing((uv_handle_t *)&s->listener))
        uv_close((uv_handle_t *)&s->listener, close_cb_noop);
    uv_run(s->loop, UV_RUN_DEFAULT);
    if (signals_open) {
        close_signals(s);
        uv_run(s->loop, UV_RUN_DEFAULT);
    }
    batchrun_destroy(s->br);
    uv_loop_close(s->loop);
out_early:
    jobstore_close(s->js);
    int code = s->exit_code;
    tokenizer_destroy(s->tok);
    chat_tmpl_free(s->tmpl);
    free(s->model_id);
    free(s->metrics_label);
    bridge_free(&s->bridge);
    free(s);
    return code;
}
