/*
 * bench_probe.h - the streaming-read probe that bench_cpu and bench_attn compare
 * decode attention with: the machine's read bandwidth, measured in the same run.
 * Thread: the caller's; the read runs on omp_get_max_threads() OpenMP threads.
 */
#ifndef H2O_BENCH_PROBE_H
#define H2O_BENCH_PROBE_H

#include <stdint.h>

/* GB/s of one read of buf [n] (n a multiple of 8) by every OpenMP thread, each
 * summing its static share a cache line at a time (gcc then keeps the loads wide and
 * independent, as the attention kernels' are). The sum is added to *sink, so that the
 * caller can check that no read was dropped. */
double bench_probe_read(const uint64_t *buf, int64_t n, uint64_t *sink);

#endif
