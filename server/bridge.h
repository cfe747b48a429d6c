/*
 * bridge.h - the loop side of the loop/engine thread boundary: engine requests go
 * out through here (submit, cancel) and their events come back through here, each
 * to the part of the server that submitted it.
 *
 * Owns: the engine (created and stopped here), the async handle the engine pokes,
 * the id counter, and one registry from engine request id to its owner: a callback
 * and the context it gets (a completion's exchange, a batch line). Completions and
 * batch runs both register through it; nothing else tells their ids apart.
 * It also owns the loop's own count of what is in flight to the engine: the
 * sequences submitted and not seen admitted yet (the admission limit, --max-queue,
 * is checked against it: docs/api.md "Admission"), and the finishing events of ids
 * whose owner is gone.
 * Invariants: an id is owned (has a callback) iff its owner is alive (an owner
 * releases its ids before it goes away). A released id whose sequences have not all
 * finished stays in the registry as an orphan, without owner, until its last
 * finishing event: its events are dropped, but counted first (orphan_finished).
 * waiting[p] is the sum of n_seqs over the slots of priority p with no event seen
 * yet. Ids are never reused.
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
    bridge_event_fn fn;  /* NULL: an orphan (released before its last event) */
    void *ctx;
    int32_t n_seqs;    /* the request's sequences (req.n) */
    int32_t n_live;    /* of them, not finished yet (no finishing event seen) */
    bool waiting;      /* no event seen yet: counted in bridge.waiting[prio] */
    uint8_t prio;      /* enum req_priority */
};

struct bridge {
    uv_async_t wake;           /* poked by the engine when its outbox fills */
    struct engine *eng;        /* NULL before bridge_open succeeds and after stop */
    struct bridge_slot *reg;   /* open addressing, linear probing, power of two */
    int32_t reg_cap, reg_n;
    uint64_t next_id;
    void (*after)(void *arg);  /* after each wake's events were dispatched */
    void *after_arg;
    /* Sequences submitted whose request has had no event yet, by enum req_priority.
     * The first event of a request (a token, a prompt token, a finish) comes only
     * after the engine admitted it or ended it, so this never counts less than the
     * engine really has waiting (inbox included); it counts more by the requests
     * admitted whose first event has not reached the loop yet (about one step). */
    int32_t waiting[2];
    int32_t waiting_peak;        /* the most waiting[REQ_PRIO_INTERACTIVE] ever was */
    int64_t orphan_finished[5];  /* finishing events of orphans, by enum req_finish */
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
 * KV blocks at once). Its owner hears nothing more; while some of its sequences
 * have not finished, the id stays as an orphan whose finishing events the bridge
 * counts (orphan_finished) instead of the owner. Returns whether it was registered
 * with an owner; an id that is not is left alone. Thread: loop.
 */
bool bridge_release(struct bridge *b, uint64_t id, bool cancel);

/* Sequences of priority `prio` submitted and not seen admitted (see
 * bridge.waiting): an upper bound of what waits in the engine. Thread: loop. */
int32_t bridge_waiting(const struct bridge *b, enum req_priority prio);

/* Cancel every registered request (orphans too) but keep it registered: each gets its finishing
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
