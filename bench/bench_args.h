/*
 * bench_args.h - command-line helpers the benchmark programs share.
 * Thread: any.
 */
#ifndef H2O_BENCH_ARGS_H
#define H2O_BENCH_ARGS_H

#include <stdint.h>

/* Parse "128,512,..." (positive integers) into out[0..max). Returns the count, or -1
 * for anything else (a zero, a sign, trailing junk). */
int bench_args_int_list(const char *s, int32_t *out, int max);

/* Parse a byte size: a number with an optional K, M or G suffix (powers of 1024),
 * "512M", "1.5G", "4096". Returns 0, or -1 for anything else. */
int bench_args_size(const char *s, int64_t *out);

#endif
