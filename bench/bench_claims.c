/*
 * bench_claims.c - how fast a job store hands out and takes back batch work: the
 * claim rate a database sustains with replicas draining one batch, without the
 * engine (issue 22).
 *
 * For each thread count, a fresh batch of `requests` requests is stored, then that
 * many threads, each with a store handle of its own (a replica's runner), loop:
 * claim up to `chunk` requests (jobstore_batch_claim), record a result line for
 * each in one call (jobstore_batch_append_results), until nothing is left. Every
 * result must land once; the run fails otherwise. What it prints, per run:
 * requests/s, claims/s, and the store time per request split into claim and commit.
 * Thread counts take turns round after round (--rounds), so a machine whose speed
 * drifts drifts for all of them.
 *
 * SQLite allows one handle per data dir: there, one thread only.
 *
 * Usage: bench_claims --job-store URI|DIR [--threads 1,2,4] [--requests 2000]
 *                     [--chunk 16] [--rounds 2]
 */
#include "jobstore.h"

#include "err.h"
#include "util.h"

#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct worker {
    pthread_t th;
    const char *where, *batch_id;
    struct jobstore *use; /* SQLite: the one handle; else NULL, open one */
    int chunk;
    char owner[32];
    int64_t lines, claims;
    double claim_s, commit_s;
    int err;
    char msg[256];
};

static void *work(void *arg)
{
    struct worker *w = arg;
    struct jobstore *js = w->use;
    if (!js && (w->err = jobstore_open(&js, w->where))) {
        snprintf(w->msg, sizeof w->msg, "%s", err_msg());
        return NULL;
    }
    struct jobstore_result *rs = xcalloc((size_t)w->chunk, sizeof *rs);
    char **text = xcalloc((size_t)w->chunk, sizeof *text);
    for (;;) {
        struct jobstore_request *reqs;
        int n;
        double t0 = now_s();
        w->err = jobstore_batch_claim(js, w->batch_id, w->owner, 60, w->chunk, &reqs, &n);
        double t1 = now_s();
        w->claim_s += t1 - t0;
        if (w->err || n == 0) break;
        w->claims++;
        for (int i = 0; i < n; i++) {
            /* A result line of a realistic size (a short completion's). */
            char *line = xmalloc(512);
            snprintf(line, 512,
                     "{\"id\":\"batch_req_%s\",\"custom_id\":\"%s\",\"response\":{"
                     "\"status_code\":200,\"request_id\":\"cmpl-x\",\"body\":{\"object\":"
                     "\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" a short "
                     "answer of a few words\",\"finish_reason\":\"length\"}],\"usage\":{"
                     "\"prompt_tokens\":12,\"completion_tokens\":16}}},\"error\":null}",
                     w->owner, reqs[i].custom_id);
            text[i] = line;
            rs[i] = (struct jobstore_result){reqs[i].custom_id, true, line};
        }
        w->err = jobstore_batch_append_results(js, w->batch_id, rs, n);
        w->commit_s += now_s() - t1;
        for (int i = 0; i < n; i++) free(text[i]);
        jobstore_requests_free(reqs, n);
        if (w->err) break;
        w->lines += n;
    }
    if (w->err) snprintf(w->msg, sizeof w->msg, "%s", err_msg());
    free(rs);
    free(text);
    if (!w->use) jobstore_close(js);
    return NULL;
}

/* A fresh in_progress batch of n requests in js; its id in id. */
static int make_batch(struct jobstore *js, int n, char id[JOBSTORE_ID_MAX])
{
    struct jobstore_file f;
    int err = jobstore_file_create(js, "bench.jsonl", "batch", "{}\n", 3, &f);
    if (err) return err;
    struct jobstore_batch b;
    err = jobstore_batch_create(js, f.id, "/v1/completions", "24h", NULL, 0, &b);
    jobstore_file_deinit(&f);
    if (err) return err;
    snprintf(id, JOBSTORE_ID_MAX, "%s", b.id);
    jobstore_batch_deinit(&b);
    struct jobstore_request *reqs = xcalloc((size_t)n, sizeof *reqs);
    for (int i = 0; i < n; i++) {
        char cid[32];
        snprintf(cid, sizeof cid, "r%d", i);
        reqs[i].line = i + 1;
        reqs[i].custom_id = xstrdup(cid);
        reqs[i].body = xstrdup("{\"custom_id\":\"x\",\"method\":\"POST\",\"url\":\"/v1/"
                               "completions\",\"body\":{\"model\":\"m\",\"prompt\":\"hi\"}}");
    }
    err = jobstore_batch_add_requests(js, id, reqs, n);
    jobstore_requests_free(reqs, n);
    if (!err) err = jobstore_batch_set_status(js, id, JOBSTORE_IN_PROGRESS, NULL);
    return err;
}

static int run(struct jobstore *js, const char *where, int threads, int requests, int chunk,
               int round)
{
    char id[JOBSTORE_ID_MAX];
    int err = make_batch(js, requests, id);
    if (err) {
        fprintf(stderr, "bench_claims: %s\n", err_msg());
        return 1;
    }
    struct worker *w = xcalloc((size_t)threads, sizeof *w);
    const double t0 = now_s();
    for (int i = 0; i < threads; i++) {
        w[i] = (struct worker){.where = where, .batch_id = id, .chunk = chunk,
                               .use = jobstore_shared(js) ? NULL : js};
        snprintf(w[i].owner, sizeof w[i].owner, "bench%d", i);
        pthread_create(&w[i].th, NULL, work, &w[i]);
    }
    int64_t lines = 0, claims = 0;
    double claim_s = 0, commit_s = 0;
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(w[i].th, NULL);
        if (w[i].err) {
            fprintf(stderr, "bench_claims: thread %d: %s\n", i, w[i].msg);
            failed = 1;
        }
        lines += w[i].lines;
        claims += w[i].claims;
        claim_s += w[i].claim_s;
        commit_s += w[i].commit_s;
    }
    const double wall = now_s() - t0;
    free(w);
    struct jobstore_batch b;
    if (!failed && (jobstore_batch_get(js, id, &b) || b.completed != requests)) {
        fprintf(stderr, "bench_claims: %lld of %d results recorded\n", (long long)lines,
                requests);
        failed = 1;
    }
    if (!failed) jobstore_batch_deinit(&b);
    if (failed) return 1;
    printf("claims: %s threads %d chunk %d requests %d round %d: %.0f requests/s, %.0f "
           "claims/s, store time %.3f ms/request (claim %.3f + commit %.3f), %.1f requests "
           "a claim\n",
           jobstore_backend(js), threads, chunk, requests, round, (double)lines / wall,
           (double)claims / wall, 1e3 * (claim_s + commit_s) / (double)lines,
           1e3 * claim_s / (double)lines, 1e3 * commit_s / (double)lines,
           (double)lines / (double)(claims ? claims : 1));
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    const char *where = NULL, *threads_arg = "1,2,4";
    int requests = 2000, chunk = 16, rounds = 2;
    static const struct option opts[] = {
        {"job-store", required_argument, 0, 's'}, {"threads", required_argument, 0, 't'},
        {"requests", required_argument, 0, 'n'},  {"chunk", required_argument, 0, 'c'},
        {"rounds", required_argument, 0, 'r'},    {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 's': where = optarg; break;
        case 't': threads_arg = optarg; break;
        case 'n': requests = atoi(optarg); break;
        case 'c': chunk = atoi(optarg); break;
        case 'r': rounds = atoi(optarg); break;
        default:
            fprintf(ch == 'h' ? stdout : stderr,
                    "usage: bench_claims --job-store URI|DIR [--threads 1,2,4] "
                    "[--requests 2000] [--chunk 16] [--rounds 2]\n");
            return ch == 'h' ? 0 : 2;
        }
    }
    int threads[16], n_threads = 0;
    for (const char *p = threads_arg; *p && n_threads < 16;) {
        threads[n_threads++] = atoi(p);
        p += strcspn(p, ",");
        if (*p) p++;
    }
    if (!where || requests < 1 || chunk < 1 || rounds < 1 || n_threads == 0) {
        fprintf(stderr, "bench_claims: --job-store is required; counts must be positive\n");
        return 2;
    }
    struct jobstore *js;
    if (jobstore_open(&js, where)) {
        fprintf(stderr, "bench_claims: %s\n", err_msg());
        return 1;
    }
    for (int i = 0; i < n_threads; i++)
        if (threads[i] < 1 || (threads[i] > 1 && !jobstore_shared(js))) {
            fprintf(stderr, "bench_claims: --threads %d: %s\n", threads[i],
                    threads[i] < 1 ? "must be positive"
                                   : "SQLite has one handle per data dir; use 1");
            jobstore_close(js);
            return 2;
        }
    /* SQLite's data dir is locked by the handle that makes the batches: its one
     * worker uses that handle; PostgreSQL's workers open their own. */
    int rc = 0;
    for (int r = 1; r <= rounds && !rc; r++)
        for (int i = 0; i < n_threads && !rc; i++)
            rc = run(js, where, threads[i], requests, chunk, r);
    jobstore_close(js);
    return rc;
}
