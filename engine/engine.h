/*
 * engine.h - the engine thread: the model, the KV pool and the scheduler behind two
 * mailboxes (DESIGN section 2).
 *
 * engine_create starts a thread that loads the model, sizes and allocates the KV
 * pool and creates the scheduler (engine_core_open, the set-up every driver shares);
 * it then serves. Other threads talk to it only through messages: engine_submit /
 * engine_cancel / engine_shutdown go to the inbox, and events (struct req_event)
 * come back through the outbox, drained with engine_take_events. The engine sleeps on the inbox when nothing is running, and
 * calls notify() when the outbox goes from empty to non-empty and when its state
 * changes, so a libuv loop wakes once per batch of news (notify = uv_async_send).
 *
 * States: LOADING -> READY -> STOPPED, or LOADING -> FAILED. Requests submitted
 * while LOADING wait in the inbox and run once READY (or get error events if the
 * load fails). A request submitted after engine_shutdown, or to a FAILED engine,
 * gets one error event (seq -1, finish ERROR); a request is never lost and never
 * left without a finishing event.
 *
 * Owns: the model, its backend, the KV pool, the scheduler and every request it was
 * given, until the request's last event is emitted.
 * Thread: the functions below may be called from any thread unless stated; the
 * model, pool and scheduler are touched only by the engine thread.
 */
#ifndef H2O_ENGINE_H
#define H2O_ENGINE_H

#include "engine_core.h"
#include "kv_budget.h"
#include "model.h"
#include "req.h"
#include "sched.h"

#include <stdbool.h>
#include <stdint.h>

struct engine;

struct engine_opts {
    const char *model;            /* checkpoint folder or "dummy:NAME" (copied) */
    struct model_opts model_opts; /* dtype, threads, dummy seed */
    int32_t block_size;           /* KV slots per block; default 16 */
    /*
     * KV pool size in bytes (K, V and the H2O slot state, all layers). 0 = the
     * default: min(4 GiB, 25% of physical memory) - vLLM's CPU backend also reserves
     * 4 GiB - and never more blocks than max_num_seqs sequences at the full context
     * length (sched.max_model_len, else the model's) could use, so a tiny model does
     * not pin gigabytes it can never fill.
     * A backend with be_ops.kv_capacity (a device) replaces the first term by it.
     * The rule is engine_core_pool_blocks, which run-batch and the tools share.
     */
    int64_t kv_cache_bytes;
    int32_t kv_blocks;            /* > 0: exactly this many blocks (overrides bytes) */
    struct sched_opts sched;      /* defaults: 256 sequences, 2048 tokens per step */
    /* The KV policy for requests that name none (the server passes it to req_new);
     * the engine only keeps it. Default: h2o, 0.1 heavy + 0.1 recent. */
    struct kv_spec kv_default;
};

enum engine_state {
    ENGINE_LOADING = 0, /* the engine thread is loading the model and the pool */
    ENGINE_READY,       /* serving */
    ENGINE_FAILED,      /* loading failed: engine_error says why; the thread exits */
    ENGINE_STOPPED,     /* shut down: every request got its last event; the thread exits */
};

/*
 * The engine's set-up as engine_core_open takes it: everything up to the scheduler,
 * from o's model, model options, pool size and scheduler options. emit and
 * emit_arg are left NULL for the caller (run-batch drives its own scheduler with the
 * options serve has). out->model points into *o. Thread: any.
 */
void engine_opts_core(const struct engine_opts *o, struct engine_core_opts *out);

/* Defaults as documented in struct engine_opts; model = "dummy:opt-125m".
 * Thread: any. */
void engine_opts_default(struct engine_opts *o);

/*
 * Start the engine thread; it loads o->model in the background. Returns 0 and the
 * engine in *out (state LOADING at first), or ENG_EINVAL (message set) for options
 * that are wrong before anything is loaded (no model, block_size < 1, negative sizes).
 * Load failures do not fail this call: they show as state FAILED.
 * notify(notify_arg) is called when the outbox goes from empty to non-empty and when
 * the state changes. It runs on the engine thread, or on a thread inside
 * engine_submit (a refused request's error event), so it must be thread-safe and
 * cheap and must not call back into the engine except engine_state (uv_async_send
 * is the intended notify). It may be NULL (poll instead). It must stay callable
 * until engine_destroy returns.
 * Owns: *out (engine_destroy); copies *o. Thread: any.
 */
int engine_create(struct engine **out, const struct engine_opts *o, void (*notify)(void *arg),
                  void *notify_arg);

/*
 * Shut down, wait for the engine thread and free everything: requests still waiting
 * or running are cancelled, and undelivered events and unprocessed messages are
 * freed. Safe while loading (the load finishes or fails first, then the thread
 * exits). No other thread may use the engine once this is called. NULL is fine.
 * Thread: any but the engine thread (from notify would deadlock).
 */
void engine_destroy(struct engine *e);

/*
 * Ask the engine to stop: every request in flight gets a finishing event
 * (cancelled), then the state becomes STOPPED and notify runs. Later submits get
 * error events. Idempotent; does not wait. A graceful drain: stop submitting, wait
 * for the running requests' last events, then engine_shutdown (or engine_destroy).
 * Thread: any.
 */
void engine_shutdown(struct engine *e);

/* The current state (see enum engine_state). Thread: any. */
enum engine_state engine_state(struct engine *e);

/* Why loading failed ("model dummy:nope: ..."), or "" unless FAILED. The string
 * lives as long as the engine. Thread: any. */
const char *engine_error(struct engine *e);

/* A static name for a state ("loading", "ready", "failed", "stopped"). Thread: any. */
const char *engine_state_name(enum engine_state s);

/*
 * The loaded model's configuration (cfg->name is the model's name), or NULL while
 * LOADING or when FAILED. A copy: valid until engine_destroy, even after STOPPED.
 * Thread: any.
 */
const struct opt_config *engine_model_config(struct engine *e);

/*
 * Hand a request to the engine. Owns: r, from now on (also on refusal). r->id must
 * be unique among the caller's live requests; r->t_submit is set to time_now() if 0.
 * Every request ends in exactly one finishing event per sequence (finish != NONE),
 * or one error event with seq -1. Never blocks on the engine thread.
 * Thread: any.
 */
void engine_submit(struct engine *e, struct req *r);

/* Cancel request `id` wherever it is; each of its live sequences gets a finishing
 * event (cancelled). Unknown or finished ids are ignored. Thread: any. */
void engine_cancel(struct engine *e, uint64_t id);

/*
 * Detach every pending event, oldest first: a list of struct req_event linked
 * through their first member (node), or NULL. Events of one sequence are in order.
 * Owns: the caller owns the list (req_event_free each). Thread: any (one consumer).
 */
struct req_node *engine_take_events(struct engine *e);

/*
 * A snapshot of the scheduler's counters (zeros until READY; the last values once
 * STOPPED), published by the engine thread after every step. Thread: any.
 */
void engine_get_stats(struct engine *e, struct sched_stats *out);

#endif
