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

int bench_args_size(const char *s, int64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0)) return -1;
    double unit = 1;
    switch (*end) {
    case 'k':
    case 'K':
        unit = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        unit = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        unit = 1024.0 * 1024 * 1024;
        end++;
        break;
    default: break;
    }
    if (*end || v * unit > 9.0e18) return -1;
    *out = (int64_t)(v * unit);
    return 0;
}
