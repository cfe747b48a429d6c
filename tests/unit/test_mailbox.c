/*
 * test_mailbox.c - the inbox/outbox FIFO under contention.
 *
 * Several producer threads push numbered messages while one consumer, woken the way
 * the loop is woken by uv_async_send (a semaphore posted only when a push reports
 * the empty -> non-empty transition), drains the whole list at each wake-up. Every
 * message must arrive exactly once, in push order per producer, and every wake-up
 * must find something: the transitions the producers saw equal the non-empty takes.
 */
#include "test.h"

#include "mailbox.h"
#include "util.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

struct msg {
    struct req_node node; /* first member: a node pointer is a message pointer */
    int producer;
    int seq;
};

static struct msg *msg_new(int producer, int seq)
{
    struct msg *m = xcalloc(1, sizeof *m);
    m->producer = producer;
    m->seq = seq;
    return m;
}

static void free_list(struct req_node *n)
{
    while (n) {
        struct req_node *next = n->next;
        free(n);
        n = next;
    }
}

TEST(fifo_single_thread)
{
    struct mailbox mb;
    mailbox_init(&mb);
    EXPECT(mailbox_take_all(&mb) == NULL);
    EXPECT(mailbox_push(&mb, &msg_new(0, 0)->node));  /* empty -> non-empty */
    EXPECT(!mailbox_push(&mb, &msg_new(0, 1)->node)); /* already non-empty */
    EXPECT(!mailbox_push(&mb, &msg_new(0, 2)->node));
    struct req_node *list = mailbox_take_all(&mb);
    int i = 0;
    for (struct req_node *n = list; n; n = n->next) EXPECT_EQ(((struct msg *)n)->seq, i++);
    EXPECT_EQ(i, 3);
    free_list(list);
    EXPECT(mailbox_take_all(&mb) == NULL);
    /* Emptied by the take, so the next push is a transition again. */
    EXPECT(mailbox_push(&mb, &msg_new(0, 3)->node));
    free_list(mailbox_take_all(&mb));
    mailbox_deinit(&mb);
}

TEST(push_list_keeps_order)
{
    struct mailbox mb;
    mailbox_init(&mb);
    EXPECT(!mailbox_push_list(&mb, NULL, NULL));
    EXPECT(mailbox_push(&mb, &msg_new(0, 0)->node));
    struct msg *a = msg_new(0, 1), *b = msg_new(0, 2), *c = msg_new(0, 3);
    a->node.next = &b->node;
    b->node.next = &c->node;
    c->node.next = (struct req_node *)(uintptr_t)0x1; /* must be overwritten */
    EXPECT(!mailbox_push_list(&mb, &a->node, &c->node));
    EXPECT(!mailbox_push(&mb, &msg_new(0, 4)->node));
    struct req_node *list = mailbox_take_all(&mb);
    int i = 0;
    for (struct req_node *n = list; n; n = n->next) EXPECT_EQ(((struct msg *)n)->seq, i++);
    EXPECT_EQ(i, 5);
    free_list(list);
    mailbox_deinit(&mb);
}

TEST(wait_times_out_empty)
{
    struct mailbox mb;
    mailbox_init(&mb);
    double t0 = time_now();
    EXPECT(mailbox_wait_all(&mb, 0.05) == NULL);
    double dt = time_now() - t0;
    EXPECT(dt >= 0.045);
    EXPECT(dt < 2.0);
    /* A zero timeout is a poll. */
    t0 = time_now();
    EXPECT(mailbox_wait_all(&mb, 0) == NULL);
    EXPECT(time_now() - t0 < 0.5);
    /* A non-empty mailbox is returned at once, whatever the timeout. */
    mailbox_push(&mb, &msg_new(0, 7)->node);
    struct req_node *list = mailbox_wait_all(&mb, 10.0);
    EXPECT(list != NULL && list->next == NULL);
    free_list(list);
    mailbox_deinit(&mb);
}

struct delayed {
    struct mailbox *mb;
    double delay;
    bool close;
};

static void *push_later(void *arg)
{
    struct delayed *d = arg;
    struct timespec ts = {0, (long)(d->delay * 1e9)};
    nanosleep(&ts, NULL);
    if (d->close)
        mailbox_close(d->mb);
    else
        mailbox_push(d->mb, &msg_new(1, 42)->node);
    return NULL;
}

TEST(wait_forever_wakes_on_push_and_close)
{
    struct mailbox mb;
    mailbox_init(&mb);
    pthread_t th;
    struct delayed d = {&mb, 0.05, false};
    CHECK(pthread_create(&th, NULL, push_later, &d) == 0);
    struct req_node *list = mailbox_wait_all(&mb, -1);
    EXPECT(list != NULL);
    if (list) EXPECT_EQ(((struct msg *)list)->seq, 42);
    free_list(list);
    pthread_join(th, NULL);

    /* Close wakes a consumer sleeping with no timeout, and later waits never sleep. */
    EXPECT(!mailbox_is_closed(&mb));
    d.close = true;
    CHECK(pthread_create(&th, NULL, push_later, &d) == 0);
    EXPECT(mailbox_wait_all(&mb, -1) == NULL);
    pthread_join(th, NULL);
    EXPECT(mailbox_is_closed(&mb));
    double t0 = time_now();
    EXPECT(mailbox_wait_all(&mb, -1) == NULL);
    EXPECT(time_now() - t0 < 0.5);
    /* A closed mailbox still takes pushes: nothing handed over is lost. */
    EXPECT(mailbox_push(&mb, &msg_new(0, 1)->node));
    list = mailbox_wait_all(&mb, -1);
    EXPECT(list != NULL);
    free_list(list);
    mailbox_deinit(&mb);
}

#define N_PROD 6
#define N_MSG 20000

struct stress {
    struct mailbox mb;
    sem_t wake;                  /* stands in for uv_async_send */
    atomic_long transitions;     /* pushes that returned true */
};

struct prod_arg {
    struct stress *s;
    int id;
};

static void *producer(void *arg)
{
    struct prod_arg *pa = arg;
    for (int i = 0; i < N_MSG; i++) {
        /* Pause now and then, so the consumer often empties the mailbox and the
         * empty -> non-empty edge happens many times. */
        if (i % 500 == 499) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
        struct msg *m = msg_new(pa->id, i);
        /* Every few messages, push a chain of three in one go. */
        if (i % 7 == 0 && i + 2 < N_MSG) {
            struct msg *m1 = msg_new(pa->id, i + 1), *m2 = msg_new(pa->id, i + 2);
            m->node.next = &m1->node;
            m1->node.next = &m2->node;
            if (mailbox_push_list(&pa->s->mb, &m->node, &m2->node)) {
                atomic_fetch_add(&pa->s->transitions, 1);
                sem_post(&pa->s->wake);
            }
            i += 2;
            continue;
        }
        if (mailbox_push(&pa->s->mb, &m->node)) {
            atomic_fetch_add(&pa->s->transitions, 1);
            sem_post(&pa->s->wake);
        }
    }
    return NULL;
}

TEST(producers_consumer_exactly_once)
{
    struct stress s;
    mailbox_init(&s.mb);
    CHECK(sem_init(&s.wake, 0, 0) == 0);
    atomic_init(&s.transitions, 0);
    pthread_t th[N_PROD];
    struct prod_arg pa[N_PROD];
    for (int p = 0; p < N_PROD; p++) {
        pa[p] = (struct prod_arg){&s, p};
        CHECK(pthread_create(&th[p], NULL, producer, &pa[p]) == 0);
    }
    int next[N_PROD] = {0};
    long received = 0, wakeups = 0, empty_takes = 0, order_errors = 0;
    while (received < (long)N_PROD * N_MSG) {
        sem_wait(&s.wake);
        wakeups++;
        struct req_node *list = mailbox_take_all(&s.mb);
        if (!list) empty_takes++;
        for (struct req_node *n = list; n;) {
            struct msg *m = (struct msg *)n;
            if (m->producer < 0 || m->producer >= N_PROD || m->seq != next[m->producer])
                order_errors++;
            else
                next[m->producer]++;
            received++;
            n = n->next;
            free(m);
        }
    }
    for (int p = 0; p < N_PROD; p++) pthread_join(th[p], NULL);
    EXPECT_EQ(received, (long)N_PROD * N_MSG);
    EXPECT_EQ(order_errors, 0);
    for (int p = 0; p < N_PROD; p++) EXPECT_EQ(next[p], N_MSG);
    /* Each transition woke the consumer once, and each wake-up found messages. */
    EXPECT_EQ(empty_takes, 0);
    EXPECT_EQ(wakeups, atomic_load(&s.transitions));
    int pending = -1;
    sem_getvalue(&s.wake, &pending);
    EXPECT_EQ(pending, 0);
    EXPECT(mailbox_take_all(&s.mb) == NULL);
    printf("# %ld messages in %ld wake-ups\n", received, wakeups);
    sem_destroy(&s.wake);
    mailbox_deinit(&s.mb);
}

/* The engine's pattern: the consumer sleeps in mailbox_wait_all (with a timeout it
 * should never need) instead of a semaphore. */
TEST(producers_wait_all_consumer)
{
    struct stress s;
    mailbox_init(&s.mb);
    CHECK(sem_init(&s.wake, 0, 0) == 0);
    atomic_init(&s.transitions, 0);
    pthread_t th[N_PROD];
    struct prod_arg pa[N_PROD];
    for (int p = 0; p < N_PROD; p++) {
        pa[p] = (struct prod_arg){&s, p};
        CHECK(pthread_create(&th[p], NULL, producer, &pa[p]) == 0);
    }
    int next[N_PROD] = {0};
    long received = 0, takes = 0, order_errors = 0;
    while (received < (long)N_PROD * N_MSG) {
        struct req_node *list = mailbox_wait_all(&s.mb, 5.0);
        if (!list) break; /* a lost wake-up: report it below rather than hang */
        takes++;
        for (struct req_node *n = list; n;) {
            struct msg *m = (struct msg *)n;
            if (m->seq != next[m->producer])
                order_errors++;
            else
                next[m->producer]++;
            received++;
            n = n->next;
            free(m);
        }
    }
    for (int p = 0; p < N_PROD; p++) pthread_join(th[p], NULL);
    free_list(mailbox_take_all(&s.mb));
    EXPECT_EQ(received, (long)N_PROD * N_MSG);
    EXPECT_EQ(order_errors, 0);
    /* Every non-empty take followed exactly one transition. */
    EXPECT_EQ(takes, atomic_load(&s.transitions));
    sem_destroy(&s.wake);
    mailbox_deinit(&s.mb);
}

int main(void)
{
    RUN(fifo_single_thread);
    RUN(push_list_keeps_order);
    RUN(wait_times_out_empty);
    RUN(wait_forever_wakes_on_push_and_close);
    RUN(producers_consumer_exactly_once);
    RUN(producers_wait_all_consumer);
    return test_done();
}
