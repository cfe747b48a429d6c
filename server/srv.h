/*
 * srv.h - the state every loop-side part of the server shares: one struct srv,
 * made by srv_run (srv_run.c) and reached from an exchange as x->c->s. Data only;
 * each part's functions are in its own header (conn.h, bridge.h, router.h, ...).
 *
 * Owns (struct srv): the listener, the signal and tick handles, the bridge to the
 * engine, the loop-side tokenizer and model facts, every connection (conn.c links
 * and unlinks them), the metrics, the job store and the batch runner.
 * Invariant: draining never goes back to false; once it is true nothing new goes to
 * the engine and no connection is accepted.
 * Thread: loop only (the bridge's async handle is the engine thread's one way in).
 */
#ifndef H2O_SRV_H
#define H2O_SRV_H

#include "chat.h"
#include "cmpl.h"
#include "bridge.h"
#include "cfg.h"
#include "metrics.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* The period of the server's tick (idle sweep, drain checks, the batch runner). */
#define SRV_TICK_MS 250

struct conn;
struct jobstore;
struct batchrun;
struct chat_tmpl;

/* Where the job store is: the job_store URI when set (PostgreSQL), else the data dir
 * (SQLite). Thread: any. */
static inline const char *srv_job_store(const struct cfg *cfg)
{
    return cfg->job_store ? cfg->job_store : cfg->data_dir;
}

/* The store as messages name it, in two parts for "%s %s": "data dir" and DIR, or
 * "job store" and "(postgresql)", never the URI, which may carry a password.
 * Thread: any. */
static inline const char *srv_job_store_kind(const struct cfg *cfg)
{
    return cfg->job_store ? "job store" : "data dir";
}

static inline const char *srv_job_store_name(const struct cfg *cfg)
{
    return cfg->job_store ? "(postgresql)" : cfg->data_dir;
}

struct srv {
    uv_loop_t *loop;
    const struct cfg *cfg;
    uv_tcp_t listener;
    uv_signal_t sig_int, sig_term;
    uv_timer_t tick;           /* every SRV_TICK_MS: conn_sweep, the batch runner */
    uint64_t last_sweep;       /* uv_now() ms of conn_sweep's last look */
    struct bridge bridge;      /* the engine and every request in flight to it */
    struct tokenizer *tok;
    struct opt_config mcfg;
    int32_t max_model_len;     /* the context length: cfg's max_model_len, else mcfg's */
    struct api_model model;    /* the served model as the request parsers see it
                                  (pointers into this struct), made once at start */
    struct chat_model chat;    /* the same for chat requests: model, and the chat
                                  template's render (NULL: the model has none) */
    struct chat_tmpl *tmpl;    /* the chat template (chat_tmpl.h), or NULL */
    char *model_id;
    char *metrics_label;       /* model_name="..." for /metrics, made on first use */
    struct conn *conns;
    int32_t n_conns;
    int64_t started;           /* Unix time the server started: /v1/models' created */
    char fingerprint[24];      /* system_fingerprint (cfg_fingerprint) */
    bool draining;
    bool drain_cancelled;      /* the grace period ended: what ran was cancelled */
    uint64_t drain_deadline;   /* uv_now() ms: the grace period's end, then the
                                  flush's (after the cancel) */
    int bound_port;
    struct metrics m;
    struct jobstore *js;       /* the Files + Batches store under --data-dir */
    struct batchrun *br;       /* the batch runner, feeding the engine from js */
    int exit_code;
};

#endif
