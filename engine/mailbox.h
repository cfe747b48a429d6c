/*
 * mailbox.h - a thread-safe FIFO of intrusive list nodes (mutex + condvar).
 *
 * The inbox (loop -> engine) and the outbox (engine -> loop) are mailboxes
 * (DESIGN section 2). Producers push; one consumer takes the whole list at once,
 * either without blocking (the loop, woken by uv_async_send) or sleeping on the
 * condvar (the engine, when it has nothing to run).
 *
 * The wake-up rule: a push reports whether the mailbox went from empty to non-empty,
 * and only then does the producer wake the consumer (one uv_async_send, one
 * notify). Every such transition is followed by exactly one take that empties the
 * mailbox, so a consumer that drains the whole list on each wake-up never misses a
 * message and is never woken for nothing.
 *
 * Owns: nothing it carries. A node belongs to the mailbox from push until a take
 * hands it (and the rest of the list) to the taker; mailbox_deinit does not free
 * nodes still queued (the owner drains first, since only it knows their type).
 * Invariant: head == NULL iff tail == NULL; the list is in push order.
 * Thread: any, for every function except init/deinit (owner, with no other users).
 */
#ifndef H2O_MAILBOX_H
#define H2O_MAILBOX_H

#include "req.h"

#include <pthread.h>
#include <stdbool.h>

struct mailbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* signalled on empty -> non-empty and on close */
    struct req_node *head; /* oldest */
    struct req_node *tail; /* newest */
    bool closed;
};

/* Set up an empty, open mailbox. Caller-owned struct. Thread: owner. */
void mailbox_init(struct mailbox *mb);

/* Release the mutex and condvar. Nodes still queued are not freed: only the owner
 * knows their type, so it takes and frees them first. Thread: owner, once no other
 * thread uses the mailbox. */
void mailbox_deinit(struct mailbox *mb);

/*
 * Append one node (its next pointer is overwritten). Owns: node, from now on.
 * Returns true when the mailbox was empty before this push: the caller then wakes
 * the consumer, once. Pushing to a closed mailbox is allowed (the node is queued).
 * Thread: any.
 */
bool mailbox_push(struct mailbox *mb, struct req_node *node);

/*
 * Append a chain first..last (linked through next; last->next is overwritten) in
 * one critical section, so a consumer sees all of it or none of it. Returns true on
 * the empty -> non-empty transition, like mailbox_push. first == NULL is a no-op
 * that returns false. Owns: the chain, from now on. Thread: any.
 */
bool mailbox_push_list(struct mailbox *mb, struct req_node *first, struct req_node *last);

/*
 * Detach the whole list, oldest first (NULL when empty); never blocks.
 * Owns: the caller owns the returned nodes. Thread: any (meant for one consumer).
 */
struct req_node *mailbox_take_all(struct mailbox *mb);

/*
 * Like mailbox_take_all, but first sleep until the mailbox is non-empty, it is
 * closed, or timeout_s seconds pass (timeout_s < 0: no timeout; 0: do not sleep).
 * Returns NULL on timeout or when closed and empty.
 * Owns: the caller owns the returned nodes. Thread: any (meant for one consumer).
 */
struct req_node *mailbox_wait_all(struct mailbox *mb, double timeout_s);

/* Close: wake every waiter; from now on mailbox_wait_all never sleeps. Pushes are
 * still accepted, so nothing a producer hands over is lost. Thread: any. */
void mailbox_close(struct mailbox *mb);

/* Whether mailbox_close was called. Thread: any. */
bool mailbox_is_closed(struct mailbox *mb);

#endif
