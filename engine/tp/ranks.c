/*
 * ranks.c - the tensor-parallel rank threads (see ranks.h).
 *
 * One mutex guards the job; a generation counter tells the workers a new job is
 * there (a worker runs each generation once, so spurious wake-ups are harmless), and
 * a count of finished workers tells rank 0 the job is done.
 */
#include "ranks.h"

#include "err.h"
#include "util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct ranks_worker {
    struct ranks *pool;
    int32_t rank;
    pthread_t thread;
};

struct ranks {
    int32_t n;
    struct ranks_worker *workers; /* [n], entries 1.. used */
    int32_t n_started;            /* workers 1..n_started are running */
    ranks_fn init;
    void *init_arg;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;    /* bumped once per job */
    int32_t n_done;  /* workers finished with job gen */
    bool quit;
    ranks_fn fn;
    void *arg;
};

static void *worker_main(void *p)
{
    struct ranks_worker *w = p;
    struct ranks *r = w->pool;
    if (r->init) r->init(r->init_arg, w->rank);
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (r->gen == seen && !r->quit) pthread_cond_wait(&r->go, &r->mu);
        if (r->quit) {
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
        seen = r->gen;
        ranks_fn fn = r->fn;
        void *arg = r->arg;
        pthread_mutex_unlock(&r->mu);
        fn(arg, w->rank);
        pthread_mutex_lock(&r->mu);
        if (++r->n_done == r->n - 1) pthread_cond_signal(&r->done);
        pthread_mutex_unlock(&r->mu);
    }
}

int ranks_create(struct ranks **out, int32_t n, ranks_fn init, void *init_arg)
{
    CHECK(n >= 1);
    struct ranks *r = xcalloc(1, sizeof *r);
    r->n = n;
    r->init = init;
    r->init_arg = init_arg;
    r->workers = xcalloc((size_t)n, sizeof *r->workers);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->go, NULL);
    pthread_cond_init(&r->done, NULL);
    for (int32_t i = 1; i < n; i++) {
        r->workers[i] = (struct ranks_worker){.pool = r, .rank = i};
        if (pthread_create(&r->workers[i].thread, NULL, worker_main, &r->workers[i])) {
            ranks_destroy(r);
            return err_set(ENG_ENOMEM, "tensor parallelism: cannot start rank %d's thread", i);
        }
        r->n_started = i;
    }
    *out = r;
    return 0;
}

int32_t ranks_size(const struct ranks *r)
{
    return r->n;
}

void ranks_run(struct ranks *r, ranks_fn fn, void *arg)
{
    if (r->n > 1) {
        pthread_mutex_lock(&r->mu);
        r->fn = fn;
        r->arg = arg;
        r->n_done = 0;
        r->gen++;
        pthread_cond_broadcast(&r->go);
        pthread_mutex_unlock(&r->mu);
    }
    fn(arg, 0);
    if (r->n > 1) {
        pthread_mutex_lock(&r->mu);
        while (r->n_done < r->n - 1) pthread_cond_wait(&r->done, &r->mu);
        pthread_mutex_unlock(&r->mu);
    }
}

void ranks_destroy(struct ranks *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->quit = true;
    pthread_cond_broadcast(&r->go);
    pthread_mutex_unlock(&r->mu);
    for (int32_t i = 1; i <= r->n_started; i++) pthread_join(r->workers[i].thread, NULL);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->go);
    pthread_cond_destroy(&r->done);
    free(r->workers);
    free(r);
}
