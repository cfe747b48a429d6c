/*
 * bridge.c - the loop side of the thread boundary (see bridge.h).
 *
 * The engine thread pokes `wake` (uv_async_send) when its outbox goes from empty to
 * non-empty; on_wake drains the whole outbox and hands each event to the owner its
 * id was registered for, dropping events whose id has no owner any more. An event
 * is never looked at for what kind of owner it has: the registry alone decides.
 *
 * Before an event goes to its owner, the bridge does its own accounting on the
 * slot: the request's first event takes its sequences off `waiting` (the engine
 * has admitted or ended it), and a finishing event takes one sequence (an error
 * event with seq -1: all of them) off n_live. The owner counts the finishes it
 * hears (request_success_total); the bridge counts those of orphans, whose owner
 * is gone, so that each finished sequence is counted once, whoever heard it.
 * Thread: loop (and the engine thread's one uv_async_send).
 */
#include "bridge.h"

#include "util.h"

#include <stdlib.h>

/* ---- registry: engine request id -> owner ---- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static void reg_put(struct bridge *b, struct bridge_slot e);

static void reg_grow(struct bridge *b)
{
    struct bridge_slot *old = b->reg;
    int32_t old_cap = b->reg_cap;
    b->reg_cap = old_cap ? 2 * old_cap : 1024;
    b->reg = xcalloc((size_t)b->reg_cap, sizeof *b->reg);
    b->reg_n = 0;
    for (int32_t i = 0; i < old_cap; i++)
        if (old[i].id) reg_put(b, old[i]);
    free(old);
}

static void reg_put(struct bridge *b, struct bridge_slot e)
{
    CHECK(e.id != 0);
    if (2 * (b->reg_n + 1) > b->reg_cap) reg_grow(b);
    uint32_t mask = (uint32_t)b->reg_cap - 1;
    for (uint32_t i = (uint32_t)mix(e.id) & mask;; i = (i + 1) & mask)
        if (!b->reg[i].id) {
            b->reg[i] = e;
            b->reg_n++;
            return;
        }
}

/* The slot holding id, or NULL. */
static struct bridge_slot *reg_get(struct bridge *b, uint64_t id)
{
    if (!b->reg_cap) return NULL;
    uint32_t mask = (uint32_t)b->reg_cap - 1;
    for (uint32_t i = (uint32_t)mix(id) & mask; b->reg[i].id; i = (i + 1) & mask)
        if (b->reg[i].id == id) return &b->reg[i];
    return NULL;
}

static void reg_del(struct bridge *b, struct bridge_slot *slot)
{
    uint32_t mask = (uint32_t)b->reg_cap - 1;
    uint32_t i = (uint32_t)(slot - b->reg);
    b->reg[i].id = 0;
    b->reg_n--;
    /* Re-insert the rest of the cluster so lookups never stop at the new hole. */
    for (i = (i + 1) & mask; b->reg[i].id; i = (i + 1) & mask) {
        struct bridge_slot e = b->reg[i];
        b->reg[i].id = 0;
        b->reg_n--;
        reg_put(b, e);
    }
}

/* Delete slot; its sequences leave `waiting` if they were still there (only when
 * no event can come any more: the engine is gone). */
static void slot_forget(struct bridge *b, struct bridge_slot *slot)
{
    if (slot->waiting) b->waiting[slot->prio] -= slot->n_seqs;
    reg_del(b, slot);
}

/* ---- events ---- */

/* The bridge's own bookkeeping of one event, before its owner (if any) sees it.
 * Returns whether the slot is done with: an orphan whose last sequence finished. */
static bool slot_account(struct bridge *b, struct bridge_slot *slot, const struct req_event *ev)
{
    if (slot->waiting) {
        slot->waiting = false;
        b->waiting[slot->prio] -= slot->n_seqs;
    }
    if (ev->finish == REQ_FINISH_NONE) return false;
    slot->n_live = ev->seq < 0 ? 0 : slot->n_live - 1;
    if (slot->fn) return false; /* the owner counts it */
    b->orphan_finished[ev->finish]++;
    return slot->n_live <= 0;
}

static void on_wake(uv_async_t *a)
{
    struct bridge *b = a->data;
    if (!b->eng) return;
    struct req_node *list = engine_take_events(b->eng);
    while (list) {
        struct req_event *ev = (struct req_event *)list;
        list = list->next;
        /* Looked up again for every event: an owner may release ids (its own or,
         * by finishing, a whole request's) while it handles one. */
        struct bridge_slot *slot = reg_get(b, ev->req_id);
        if (slot && slot_account(b, slot, ev)) reg_del(b, slot);
        else if (slot && slot->fn) slot->fn(slot->ctx, ev);
        req_event_free(ev);
    }
    if (b->after) b->after(b->after_arg);
}

/* Called by the engine thread: the only cross-thread call into the loop. */
static void engine_notify(void *arg)
{
    uv_async_send(arg);
}

int bridge_open(struct bridge *b, uv_loop_t *loop, const struct engine_opts *eo,
                void (*after)(void *arg), void *arg)
{
    b->next_id = 1;
    b->after = after;
    b->after_arg = arg;
    uv_async_init(loop, &b->wake, on_wake);
    b->wake.data = b;
    return engine_create(&b->eng, eo, engine_notify, &b->wake) ? -1 : 0;
}

/* ---- requests ---- */

uint64_t bridge_new_ids(struct bridge *b, int32_t n)
{
    const uint64_t first = b->next_id;
    b->next_id += (uint64_t)n;
    return first;
}

void bridge_submit(struct bridge *b, struct req *r, bridge_event_fn fn, void *ctx)
{
    CHECK(b->eng != NULL && fn != NULL);
    const int prio = r->prio == REQ_PRIO_BATCH ? REQ_PRIO_BATCH : REQ_PRIO_INTERACTIVE;
    reg_put(b, (struct bridge_slot){.id = r->id, .fn = fn, .ctx = ctx, .n_seqs = r->n,
                                    .n_live = r->n, .waiting = true, .prio = (uint8_t)prio});
    b->waiting[prio] += r->n;
    if (b->waiting[REQ_PRIO_INTERACTIVE] > b->waiting_peak)
        b->waiting_peak = b->waiting[REQ_PRIO_INTERACTIVE];
    r->t_submit = time_now(); /* the engine measures queue time from here */
    engine_submit(b->eng, r);
}

bool bridge_release(struct bridge *b, uint64_t id, bool cancel)
{
    struct bridge_slot *slot = reg_get(b, id);
    if (!slot || !slot->fn) return false;
    if (slot->n_live > 0 && b->eng) {
        /* Its last events are still to come: keep it, ownerless, to count them. */
        slot->fn = NULL;
        slot->ctx = NULL;
    } else {
        slot_forget(b, slot);
    }
    if (cancel && b->eng) engine_cancel(b->eng, id); /* frees its KV blocks at once */
    return true;
}

int32_t bridge_waiting(const struct bridge *b, enum req_priority prio)
{
    return b->waiting[prio == REQ_PRIO_BATCH ? REQ_PRIO_BATCH : REQ_PRIO_INTERACTIVE];
}

void bridge_cancel_all(struct bridge *b)
{
    for (int32_t i = 0; b->eng && i < b->reg_cap; i++)
        if (b->reg[i].id) engine_cancel(b->eng, b->reg[i].id);
}

/* ---- life ---- */

static void close_cb_noop(uv_handle_t *h)
{
    (void)h;
}

void bridge_stop(struct bridge *b)
{
    /* The engine first: only once its thread is joined may the handle it pokes go. */
    engine_destroy(b->eng);
    b->eng = NULL;
    if (b->wake.loop && !uv_is_closing((uv_handle_t *)&b->wake))
        uv_close((uv_handle_t *)&b->wake, close_cb_noop);
}

void bridge_free(struct bridge *b)
{
    free(b->reg);
    b->reg = NULL;
    b->reg_cap = b->reg_n = 0;
}
