/*
 * mailbox.c - a thread-safe FIFO of intrusive list nodes (see mailbox.h).
 *
 * A head/tail singly linked list under one mutex. The condvar uses the monotonic
 * clock, so a wall-clock jump (NTP, the user changing the date) neither cuts a wait
 * short nor stretches it.
 * Invariant: head == NULL iff tail == NULL, and tail->next == NULL.
 */
#include "mailbox.h"

#include "util.h"

#include <errno.h>
#include <math.h>
#include <time.h>

void mailbox_init(struct mailbox *mb)
{
    pthread_condattr_t ca;
    CHECK(pthread_mutex_init(&mb->mu, NULL) == 0);
    CHECK(pthread_condattr_init(&ca) == 0);
    CHECK(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0);
    CHECK(pthread_cond_init(&mb->cv, &ca) == 0);
    pthread_condattr_destroy(&ca);
    mb->head = mb->tail = NULL;
    mb->closed = false;
}

void mailbox_deinit(struct mailbox *mb)
{
    pthread_cond_destroy(&mb->cv);
    pthread_mutex_destroy(&mb->mu);
    mb->head = mb->tail = NULL;
}

bool mailbox_push_list(struct mailbox *mb, struct req_node *first, struct req_node *last)
{
    if (!first) return false;
    CHECK(last != NULL);
    last->next = NULL;
    pthread_mutex_lock(&mb->mu);
    const bool was_empty = mb->head == NULL;
    if (was_empty)
        mb->head = first;
    else
        mb->tail->next = first;
    mb->tail = last;
    /* Only a consumer sleeping on an empty mailbox needs the signal; on a non-empty
     * one nobody waits (a waiter would have taken the list and left). */
    if (was_empty) pthread_cond_signal(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
    return was_empty;
}

bool mailbox_push(struct mailbox *mb, struct req_node *node)
{
    CHECK(node != NULL);
    return mailbox_push_list(mb, node, node);
}

/* Detach the list. Called with mb->mu held. */
static struct req_node *detach_locked(struct mailbox *mb)
{
    struct req_node *list = mb->head;
    mb->head = mb->tail = NULL;
    return list;
}

struct req_node *mailbox_take_all(struct mailbox *mb)
{
    pthread_mutex_lock(&mb->mu);
    struct req_node *list = detach_locked(mb);
    pthread_mutex_unlock(&mb->mu);
    return list;
}

/* now (CLOCK_MONOTONIC) + seconds, normalised. */
static struct timespec deadline_after(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    /* Clamp absurd timeouts (a day is plenty) so the sum cannot overflow time_t. */
    if (seconds > 86400.0) seconds = 86400.0;
    double whole = floor(seconds);
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)((seconds - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

struct req_node *mailbox_wait_all(struct mailbox *mb, double timeout_s)
{
    struct timespec deadline = {0};
    if (timeout_s > 0) deadline = deadline_after(timeout_s);
    pthread_mutex_lock(&mb->mu);
    /* Loop: condvars wake spuriously, and a wake-up may find the list already empty
     * if another taker got there first. */
    while (!mb->head && !mb->closed && timeout_s != 0) {
        if (timeout_s < 0) {
            pthread_cond_wait(&mb->cv, &mb->mu);
        } else if (pthread_cond_timedwait(&mb->cv, &mb->mu, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    struct req_node *list = detach_locked(mb);
    pthread_mutex_unlock(&mb->mu);
    return list;
}

void mailbox_close(struct mailbox *mb)
{
    pthread_mutex_lock(&mb->mu);
    mb->closed = true;
    pthread_cond_broadcast(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
}

bool mailbox_is_closed(struct mailbox *mb)
{
    pthread_mutex_lock(&mb->mu);
    bool closed = mb->closed;
    pthread_mutex_unlock(&mb->mu);
    return closed;
}
