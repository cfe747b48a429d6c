/*
 * storeq.c - the serial queue of job store work (storeq.h).
 *
 * One job at a time: the head of the list is the running job (pooled: its work is
 * on the thread pool; inline: a zero timer runs it on the loop's next iteration).
 * When it is done the next one starts. The pool gives no order between two
 * uv_queue_work calls, so the queue never hands it a second job before the first
 * is done; that is also what keeps the store to one user at a time.
 *
 * Owns: the list of queued jobs (not the jobs' memory, see storeq.h) and, in
 * inline mode, the timer. Thread: loop.
 */
#include "storeq.h"

#include "util.h"

#include <stdlib.h>

struct storeq {
    uv_loop_t *loop;
    struct jobstore *js;
    bool pooled;
    bool closed;                    /* storeq_close: no more deferring */
    bool draining;                  /* inline and closed: drain_now is running */
    bool timer_closed;              /* inline: the timer's close callback ran */
    struct storeq_job *head, *tail; /* head: running (once started) */
    bool running;                   /* head's work is under way */
    int32_t n;
    uv_work_t work;                 /* pooled: the head's work */
    uv_timer_t timer;               /* inline: runs the head at the next iteration */
};

static void run_work(struct storeq *q, struct storeq_job *j)
{
    const double t0 = time_now();
    j->work(q->js, j);
    j->work_s = time_now() - t0;
}

static void start(struct storeq *q);

/* Unlink the head (its work is done) and return it. */
static struct storeq_job *pop(struct storeq *q)
{
    struct storeq_job *j = q->head;
    q->head = j->next;
    if (!q->head) q->tail = NULL;
    q->running = false;
    q->n--;
    j->next = NULL;
    return j;
}

/* The head's work is done: start the next, then hand it back (done may submit
 * more, which queue behind the one just started). */
static void finish_head(struct storeq *q)
{
    struct storeq_job *j = pop(q);
    start(q);
    j->done(j);
}

static void pool_work(uv_work_t *w)
{
    struct storeq *q = w->data;
    run_work(q, q->head); /* the loop does not touch head while running */
}

static void pool_done(uv_work_t *w, int status)
{
    (void)status; /* uv_cancel is never called: the work always ran */
    finish_head(w->data);
}

static void timer_cb(uv_timer_t *t)
{
    struct storeq *q = t->data;
    run_work(q, q->head);
    finish_head(q);
}

/* A closed inline queue: run everything queued now, in order, work then done;
 * jobs submitted by those done callbacks join the end (no recursion). */
static void drain_now(struct storeq *q)
{
    if (q->draining) return;
    q->draining = true;
    while (q->head) {
        q->running = true;
        run_work(q, q->head);
        struct storeq_job *j = pop(q);
        j->done(j);
    }
    q->draining = false;
}

/* Start the head if it is not running yet. */
static void start(struct storeq *q)
{
    if (!q->head || q->running) return;
    if (!q->pooled && q->closed) {
        drain_now(q);
        return;
    }
    q->running = true;
    if (q->pooled) {
        q->work.data = q;
        int err = uv_queue_work(q->loop, &q->work, pool_work, pool_done);
        CHECK(err == 0); /* only fails for a NULL callback */
    } else {
        uv_timer_start(&q->timer, timer_cb, 0, 0);
    }
}

struct storeq *storeq_create(uv_loop_t *loop, struct jobstore *js, bool pooled)
{
    struct storeq *q = xcalloc(1, sizeof *q);
    q->loop = loop;
    q->js = js;
    q->pooled = pooled;
    if (!pooled) {
        uv_timer_init(loop, &q->timer);
        q->timer.data = q;
    }
    return q;
}

void storeq_submit(struct storeq *q, struct storeq_job *j)
{
    CHECK(j->work && j->done);
    j->next = NULL;
    j->work_s = 0;
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    q->n++;
    start(q);
}

int32_t storeq_pending(const struct storeq *q)
{
    return q ? q->n : 0;
}

static void timer_close_cb(uv_handle_t *h)
{
    struct storeq *q = h->data;
    q->timer_closed = true;
}

void storeq_close(struct storeq *q)
{
    if (!q || q->closed) return;
    q->closed = true;
    if (q->pooled) return; /* a running job completes through the loop */
    uv_timer_stop(&q->timer); /* the head, if armed, runs in drain_now instead */
    q->running = false;
    drain_now(q);
    uv_close((uv_handle_t *)&q->timer, timer_close_cb);
}

void storeq_destroy(struct storeq *q)
{
    if (!q) return;
    CHECK(q->n == 0 && !q->running);
    CHECK(q->pooled || q->timer_closed); /* storeq_close, then a loop run */
    free(q);
}
