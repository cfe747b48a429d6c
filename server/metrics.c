/*
 * metrics.c - recording into the server's histograms (see metrics.h); api_admin.c
 * renders them.
 * Thread: loop.
 */
#include "metrics.h"

const double metrics_hist_bounds[METRICS_HIST_BUCKETS] = {
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

void metrics_hist_add(struct metrics_hist *h, double v)
{
    h->sum += v;
    h->count++;
    for (int i = 0; i < METRICS_HIST_BUCKETS; i++)
        if (v <= metrics_hist_bounds[i]) {
            h->bucket[i]++;
            break;
        }
}
