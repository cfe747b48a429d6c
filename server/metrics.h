/*
 * metrics.h - the server's own counters and latency histograms, as /metrics shows
 * them (the engine's counters come from engine_get_stats instead).
 *
 * Owns: nothing but the numbers, which live inside struct srv.
 * Invariant: a histogram's buckets are per bucket here (each observation counts in
 * the first bucket it fits); /metrics makes them cumulative when it renders them.
 * Thread: loop only (nothing here is shared with the engine thread).
 */
#ifndef H2O_SERVER_METRICS_H
#define H2O_SERVER_METRICS_H

#include <stdint.h>

#define METRICS_HIST_BUCKETS 14

/* Bucket bounds in seconds, shared by every histogram. */
extern const double metrics_hist_bounds[METRICS_HIST_BUCKETS];

struct metrics_hist {
    double sum;
    int64_t count;
    int64_t bucket[METRICS_HIST_BUCKETS]; /* cumulative at render time, not here */
};

struct metrics {
    int64_t requests_total, finished[5]; /* by enum req_finish, as the owners heard
                                            them (the bridge counts the orphans') */
    int64_t http_errors[6];              /* 4xx by 400,401,404,405,413,429 ... */
    int64_t rejected_queue_full;         /* completions refused with 429 (--max-queue) */
    struct metrics_hist ttft, itl, e2e, queue;
};

/* Record one observation `v` (seconds) in h. Thread: loop. */
void metrics_hist_add(struct metrics_hist *h, double v);

#endif
