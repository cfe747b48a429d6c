/*
 * bridge.h - the loop side of the loop/engine thread boundary: engine requests go
 * out through here (submit, cancel) and their events come back through here, each
 * to the part of the server that submitted it.
 *
 * Owns: the engine (created and stopped here), the async handle the engine pokes,
 * the id counter, and one registry from engine request id to its owner: a callback
 * and the context it gets (a completion's exchange, a batch line). Completions and
 * batch runs both register through it; nothing else tells their ids apart.
 * Invariants: an id is in the registry iff its owner is alive (an owner releases
 * its ids before it goes away); events for ids not in the registry (the client
 * went, the batch line was dropped) are dropped. Ids are never reused.
 * Thread: loop, except that the engine thread calls uv_async_send on `wake` (the
 * only cross-thread call into the loop; the engine's notify callback).
 */
#ifndef H2O_SERVER_BRIDGE_H
#define H2O_SERVER_BRIDGE_H

#include "engine.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* An engine event for an id the owner registered. The bridge frees ev after the
 * call; ctx is what the owner gave bridge_submit. */
typedef void (*bridge_event_fn)(void *ctx, struct req_event *ev);

struct bridge_slot {
    uint64_t id;       /* 0 = empty (ids start at 1) */
    bridge_event_fn fn;
    void *ctx;
};

struct bridge {
    uv_async_t wake;           /* poked by the engine when its outbox fills */
    struct engine *eng;        /* NULL before bridge_open succeeds and after stop */
    struct bridge_slot *reg;   /* open addressing, linear probing, power of two */
    int32_t reg_cap, reg_n;
    uint64_t next_id;
    void (*after)(void *arg);  /* after each wake's events were dispatched */
    void *after_arg;
};

/*
 * Set b up on `loop` and start the engine with `eo`. `after(arg)` runs on the loop
 * once per wake-up, after that wake's events went to their owners (the server
 * feeds batches and notices a failed model there). Returns 0, or -1 with err_msg()
 * set when the engine cannot start; b->wake is initialized either way, so
 * bridge_stop must run. Thread: loop.
 */
int bridge_open(struct bridge *b, uv_loop_t *loop, const struct engine_opts *eo,
                void (*after)(void *arg), void *arg);

/* Reserve `n` consecutive engine ids; returns the first. Thread: loop. */
uint64_t bridge_new_ids(struct bridge *b, int32_t n);

/*
 * Register r->id for (fn, ctx), stamp r's submit time (the engine measures
 * queue time from it) and hand r to the engine, which owns it from then on. The
 * engine must be running. Thread: loop.
 */
void bridge_submit(struct bridge *b, struct req *r, bridge_event_fn fn, void *ctx);

/*
 * Unregister `id`, and with `cancel` also cancel it in the engine (which frees its
 * KV blocks at once). Returns whether it was registered; an id not registered is
 * left alone. Thread: loop.
 */
bool bridge_release(struct bridge *b, uint64_t id, bool cancel);

/* Cancel every registered request but keep it registered: each gets its finishing
 * event, so its owner ends its response properly (the drain's deadline).
 * Thread: loop. */
void bridge_cancel_all(struct bridge *b);

/* Stop the engine (every request left is cancelled; its thread is joined), then
 * close the handle it poked. Registered ids stay until their owners release them.
 * Safe twice. Thread: loop. */
void bridge_stop(struct bridge *b);

/* Free the registry, once the loop has ended. Thread: loop. */
void bridge_free(struct bridge *b);

#endif
