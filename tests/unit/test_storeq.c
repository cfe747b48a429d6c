/*
 * test_storeq.c - the serial queue of store work (server/storeq.c) on a real libuv
 * loop, in both modes: jobs complete in submission order, one at a time, done after
 * work on the loop's thread, never inside storeq_submit; pooled work runs off the
 * loop's thread; a job submitted from a done callback runs after those queued; a
 * closed inline queue runs what is left at once.
 */
#include "test.h"

#include "storeq.h"
#include "util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define N_JOBS 12

struct tjob {
    struct storeq_job q; /* first: a storeq_job pointer is a tjob pointer */
    struct storeq *queue;
    int id;
    bool worked;
    bool work_on_loop;
    int resubmit;        /* done: submit one more job with this id (0: none) */
};

static pthread_t loop_thread;
static atomic_int running;  /* works running now */
static atomic_int max_running;
static int done_order[2 * N_JOBS], n_done;
static int work_order[2 * N_JOBS];
static atomic_int n_work;
static int bad_done; /* done before work, or off the loop's thread */
static struct jobstore *const fake_store = (struct jobstore *)0x1234;

static void work(struct jobstore *js, struct storeq_job *q)
{
    struct tjob *j = (struct tjob *)q;
    EXPECT(js == fake_store);
    int now = atomic_fetch_add(&running, 1) + 1;
    int seen = atomic_load(&max_running);
    while (now > seen && !atomic_compare_exchange_weak(&max_running, &seen, now)) {
    }
    j->work_on_loop = pthread_equal(pthread_self(), loop_thread);
    nanosleep(&(struct timespec){0, 2 * 1000 * 1000}, NULL); /* overlap, if allowed */
    work_order[atomic_fetch_add(&n_work, 1)] = j->id;
    j->worked = true;
    atomic_fetch_sub(&running, 1);
}

static void done(struct storeq_job *q);

static struct tjob *tjob_new(struct storeq *queue, int id)
{
    struct tjob *j = xcalloc(1, sizeof *j);
    j->q.work = work;
    j->q.done = done;
    j->queue = queue;
    j->id = id;
    return j;
}

static void done(struct storeq_job *q)
{
    struct tjob *j = (struct tjob *)q;
    if (!j->worked || !pthread_equal(pthread_self(), loop_thread) || q->work_s <= 0)
        bad_done++;
    done_order[n_done++] = j->id;
    if (j->resubmit) storeq_submit(j->queue, &tjob_new(j->queue, j->resubmit)->q);
    free(j);
}

static void reset(void)
{
    n_done = 0;
    bad_done = 0;
    atomic_store(&n_work, 0);
    atomic_store(&running, 0);
    atomic_store(&max_running, 0);
    loop_thread = pthread_self();
}

/* Submit N_JOBS (the second also submits job 100 from its done), run the loop. */
static void run_queue(bool pooled)
{
    reset();
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct storeq *q = storeq_create(&loop, fake_store, pooled);
    struct tjob *jobs[N_JOBS];
    for (int i = 0; i < N_JOBS; i++) {
        jobs[i] = tjob_new(q, i + 1);
        if (i == 1) jobs[i]->resubmit = 100;
        storeq_submit(q, &jobs[i]->q);
        EXPECT_EQ(n_done, 0); /* never inside submit */
    }
    EXPECT_EQ(storeq_pending(q), N_JOBS);
    /* A pooled job's work may already run on the pool; an inline one's not yet. */
    if (!pooled) EXPECT_EQ(atomic_load(&n_work), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    EXPECT_EQ(storeq_pending(q), 0);
    storeq_close(q);
    uv_run(&loop, UV_RUN_DEFAULT);
    storeq_destroy(q);
    EXPECT_EQ(uv_loop_close(&loop), 0);
    EXPECT_EQ(n_done, N_JOBS + 1);
    for (int i = 0; i < N_JOBS; i++) EXPECT_EQ(done_order[i], i + 1);
    EXPECT_EQ(done_order[N_JOBS], 100); /* after every job queued before it */
    for (int i = 0; i <= N_JOBS; i++) EXPECT_EQ(work_order[i], done_order[i]);
    EXPECT_EQ(atomic_load(&max_running), 1);
    EXPECT_EQ(bad_done, 0);
}

TEST(inline_jobs_run_in_order_on_the_loop)
{
    run_queue(false);
}

/* Pooled: the same order and one-at-a-time, with work off the loop's thread. */
static bool any_work_on_loop;

static void work_thread_check(struct jobstore *js, struct storeq_job *q)
{
    work(js, q);
    if (((struct tjob *)q)->work_on_loop) any_work_on_loop = true;
}

TEST(pooled_jobs_run_in_order_one_at_a_time_off_the_loop)
{
    run_queue(true);
    /* Again, watching where each work ran. */
    reset();
    any_work_on_loop = false;
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct storeq *q = storeq_create(&loop, fake_store, true);
    for (int i = 0; i < 4; i++) {
        struct tjob *j = tjob_new(q, i + 1);
        j->q.work = work_thread_check;
        storeq_submit(q, &j->q);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    storeq_close(q);
    storeq_destroy(q);
    EXPECT_EQ(uv_loop_close(&loop), 0);
    EXPECT_EQ(n_done, 4);
    EXPECT(!any_work_on_loop);
}

TEST(a_closed_inline_queue_runs_what_is_left_at_once)
{
    reset();
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct storeq *q = storeq_create(&loop, fake_store, false);
    for (int i = 0; i < 3; i++) storeq_submit(q, &tjob_new(q, i + 1)->q);
    EXPECT_EQ(n_done, 0);
    storeq_close(q); /* the loop will not run these: close does */
    EXPECT_EQ(n_done, 3);
    storeq_submit(q, &tjob_new(q, 4)->q); /* after close: at once */
    EXPECT_EQ(n_done, 4);
    EXPECT_EQ(storeq_pending(q), 0);
    uv_run(&loop, UV_RUN_DEFAULT); /* the timer's close callback */
    storeq_destroy(q);
    EXPECT_EQ(uv_loop_close(&loop), 0);
    for (int i = 0; i < 4; i++) EXPECT_EQ(done_order[i], i + 1);
    EXPECT_EQ(bad_done, 0);
}

int main(void)
{
    RUN(inline_jobs_run_in_order_on_the_loop);
    RUN(pooled_jobs_run_in_order_one_at_a_time_off_the_loop);
    RUN(a_closed_inline_queue_runs_what_is_left_at_once);
    return test_done();
}
