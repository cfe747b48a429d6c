/*
 * srv.c - the server's loop: listener, engine bridge, signals, drain, registry.
 *
 * The engine thread pokes `wake` (uv_async_send, the only call another thread
 * makes here) when its outbox goes from empty to non-empty; the callback drains the
 * whole outbox and hands each event to its exchange, dropping events whose request
 * id is no longer registered (the client went away). SIGINT / SIGTERM stop
 * accepting, let in-flight work finish for up to shutdown_grace_s, then cancel the
 * rest and close every handle so the loop ends on its own.
 */
#include "srv.h"

#include "err.h"
#include "jobstore.h"
#include "model.h"
#include "sched.h"
#include "tokenizer.h"
#include "util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- registry: engine request id -> exchange ---- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static void reg_grow(struct srv *s)
{
    struct srv_reg_slot *old = s->reg;
    int32_t old_cap = s->reg_cap;
    s->reg_cap = old_cap ? 2 * old_cap : 1024;
    s->reg = xcalloc((size_t)s->reg_cap, sizeof *s->reg);
    s->reg_n = 0;
    for (int32_t i = 0; i < old_cap; i++)
        if (old[i].id) srv_reg_put(s, old[i].id, old[i].x);
    free(old);
}

void srv_reg_put(struct srv *s, uint64_t id, struct exch *x)
{
    CHECK(id != 0);
    if (2 * (s->reg_n + 1) > s->reg_cap) reg_grow(s);
    uint32_t mask = (uint32_t)s->reg_cap - 1;
    for (uint32_t i = (uint32_t)mix(id) & mask;; i = (i + 1) & mask)
        if (!s->reg[i].id) {
            s->reg[i].id = id;
            s->reg[i].x = x;
            s->reg_n++;
            return;
        }
}

struct exch *srv_reg_get(struct srv *s, uint64_t id)
{
    if (!s->reg_cap) return NULL;
    uint32_t mask = (uint32_t)s->reg_cap - 1;
    for (uint32_t i = (uint32_t)mix(id) & mask; s->reg[i].id; i = (i + 1) & mask)
        if (s->reg[i].id == id) return s->reg[i].x;
    return NULL;
}

void srv_reg_del(struct srv *s, uint64_t id)
{
    if (!s->reg_cap) return;
    uint32_t mask = (uint32_t)s->reg_cap - 1;
    uint32_t i = (uint32_t)mix(id) & mask;
    while (s->reg[i].id && s->reg[i].id != id) i = (i + 1) & mask;
    if (!s->reg[i].id) return;
    s->reg[i].id = 0;
    s->reg_n--;
    /* Re-insert the rest of the cluster so lookups never stop at the new hole. */
    for (i = (i + 1) & mask; s->reg[i].id; i = (i + 1) & mask) {
        struct srv_reg_slot e = s->reg[i];
        s->reg[i].id = 0;
        s->reg_n--;
        srv_reg_put(s, e.id, e.x);
    }
}

/* ---- metrics ---- */

/* Bucket bounds in seconds, shared by the three histograms. */
const double srv_hist_bounds[SRV_HIST_BUCKETS] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                  0.5, 1, 2.5, 5, 10, 30, 60};

void srv_hist_add(struct srv_hist *h, double v)
{
    h->sum += v;
    h->count++;
    for (int i = 0; i < SRV_HIST_BUCKETS; i++)
        if (v <= srv_hist_bounds[i]) {
            h->bucket[i]++;
            break;
        }
}

/* ---- the engine bridge ---- */

static void close_cb_noop(uv_handle_t *h)
{
    (void)h;
}

static void start_drain(struct srv *s);

static void on_wake(uv_async_t *a)
{
    struct srv *s = a->data;
    if (!s->eng) return;
    struct req_node *list = engine_take_events(s->eng);
    while (list) {
        struct req_event *ev = (struct req_event *)list;
        list = list->next;
        if (ev->req_id & SRV_BATCH_ID_BIT) {
            batchrun_event(s->br, ev);
        } else {
            struct exch *x = srv_reg_get(s, ev->req_id);
            if (x) router_event(x, ev);
        }
        req_event_free(ev);
    }
    /* Finished batch requests made room: hand the engine more. */
    batchrun_feed(s->br);
    if (engine_state(s->eng) == ENGINE_FAILED && s->exit_code == 0) {
        /* A server that cannot serve its model must not look alive: it exits
         * non-zero with the reason, as vLLM does, so that systemd or Kubernetes see
         * it. The drain lets the requests that waited for the model get their 503
         * (the engine's error events) first. */
        log_error("the model failed to load: %s", engine_error(s->eng));
        s->exit_code = 1;
        start_drain(s);
    }
}

/* Called by the engine thread: the only cross-thread call into the loop. */
static void engine_notify(void *arg)
{
    uv_async_send(arg);
}

/* ---- shutdown ---- */

static void stop_everything(struct srv *s)
{
    while (s->conns) conn_close(s->conns);
    batchrun_stop(s->br);
    if (!uv_is_closing((uv_handle_t *)&s->tick)) uv_close((uv_handle_t *)&s->tick, close_cb_noop);
    if (!uv_is_closing((uv_handle_t *)&s->sig_int)) uv_close((uv_handle_t *)&s->sig_int, close_cb_noop);
    if (!uv_is_closing((uv_handle_t *)&s->sig_term))
        uv_close((uv_handle_t *)&s->sig_term, close_cb_noop);
    /* Stop the engine (every request left is cancelled; the thread is joined), and
     * only then close the handle it pokes. */
    engine_destroy(s->eng);
    s->eng = NULL;
    if (!uv_is_closing((uv_handle_t *)&s->wake)) uv_close((uv_handle_t *)&s->wake, close_cb_noop);
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

/* Cancel every request the registry holds. Each cancelled sequence gets its finishing
 * event, and router_event ends its response properly: a last chunk with a
 * finish_reason and [DONE] for a stream, the whole body for the rest. */
static void cancel_registered(struct srv *s)
{
    for (int32_t i = 0; i < s->reg_cap; i++)
        if (s->reg[i].id) engine_cancel(s->eng, s->reg[i].id);
}

static void on_tick(uv_timer_t *t)
{
    struct srv *s = t->data;
    conn_sweep(s);
    batchrun_tick(s->br);
    if (!s->draining) return;
    /* Busy: an engine request is registered, an exchange is unanswered, or answered
     * bytes are still on their way out (closing now would drop them). */
    bool busy = s->reg_n > 0;
    for (struct conn *c = s->conns; c && !busy; c = c->next)
        busy = c->head != NULL || c->wq_bytes > 0;
    const uint64_t now = uv_now(s->loop);
    if (!busy) {
        stop_everything(s);
    } else if (now >= s->drain_deadline && !s->drain_cancelled) {
        log_warn("drain deadline: cancelling the %d engine requests still running", s->reg_n);
        cancel_registered(s);
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
    conn_accept(s);
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

int srv_run(const struct cfg *cfg)
{
    struct srv *s = xcalloc(1, sizeof *s);
    s->cfg = cfg;
    s->next_id = 1;
    s->started = (int64_t)time(NULL);
    cfg_fingerprint(cfg, s->fingerprint, sizeof s->fingerprint);
    s->loop = uv_default_loop();
    signal(SIGPIPE, SIG_IGN); /* a client closing mid-write is an error code, not death */

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
    /* The job store first: it recovers interrupted batches, and a data dir another
     * server holds is a reason not to start at all. */
    if (jobstore_open(&s->js, cfg->data_dir)) {
        log_error("data dir %s: %s", cfg->data_dir, err_msg());
        s->exit_code = 1;
        goto out_early;
    }

    uv_async_init(s->loop, &s->wake, on_wake);
    s->wake.data = s;
    struct engine_opts eo;
    cfg_engine_opts(cfg, &eo);
    if (engine_create(&s->eng, &eo, engine_notify, &s->wake)) {
        log_error("%s", err_msg());
        s->exit_code = 1;
        goto out;
    }
    if (listen_on(s)) {
        s->exit_code = 1;
        goto out;
    }
    s->br = batchrun_create(s);
    uv_signal_init(s->loop, &s->sig_int);
    uv_signal_init(s->loop, &s->sig_term);
    s->sig_int.data = s->sig_term.data = s;
    uv_signal_start(&s->sig_int, on_signal, SIGINT);
    uv_signal_start(&s->sig_term, on_signal, SIGTERM);
    uv_timer_init(s->loop, &s->tick);
    s->tick.data = s;
    uv_timer_start(&s->tick, on_tick, 250, 250);

    uv_run(s->loop, UV_RUN_DEFAULT);
out:
    /* Everything but the wake handle is closed; stop the engine, then drop it. */
    if (s->eng) engine_destroy(s->eng);
    if (!uv_is_closing((uv_handle_t *)&s->wake)) uv_close((uv_handle_t *)&s->wake, close_cb_noop);
    if (s->listener.loop && !uv_is_closing((uv_handle_t *)&s->listener))
        uv_close((uv_handle_t *)&s->listener, close_cb_noop);
    uv_run(s->loop, UV_RUN_DEFAULT);
    batchrun_destroy(s->br);
    uv_loop_close(s->loop);
out_early:
    jobstore_close(s->js);
    int code = s->exit_code;
    tokenizer_destroy(s->tok);
    free(s->model_id);
    free(s->metrics_label);
    free(s->reg);
    free(s);
    return code;
}
