/*
 * bench_probe.c - the streaming-read probe (bench_probe.h).
 */
#include "bench_probe.h"

#include "util.h"

double bench_probe_read(const uint64_t *buf, int64_t n, uint64_t *sink)
{
    uint64_t sum = 0;
    const double t0 = time_now();
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (int64_t i = 0; i < n; i += 8) {
        uint64_t line = 0;
        for (int k = 0; k < 8; k++)
            line += buf[i + k];
        sum += line;
    }
    const double t = time_now() - t0;
    *sink += sum;
    return (double)n * sizeof *buf / t * 1e-9;
}
