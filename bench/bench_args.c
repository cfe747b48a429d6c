/*
 * bench_args.c - command-line helpers the benchmark programs share.
 * Thread: any.
 */
#include "bench_args.h"

#include <stdlib.h>

int bench_args_int_list(const char *s, int32_t *out, int max)
{
    int n = 0;
    char *end;
    while (*s && n < max) {
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0) return -1;
        out[n++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}
