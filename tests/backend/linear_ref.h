/*
 * linear_ref.h - the reference of the CPU linear kernels' tests (test_cpu_amx.c,
 * test_cpu_avx2.c): y [m, n] against x [m, k] w^T + b summed in double, ReLU if
 * relu, within 1e-6 of the sum of the terms' magnitudes (plus 1e-6): more than fp32
 * sums of k exact or once-rounded products lose on these sizes, far less than a
 * wrong term. x and w hold the values the kernel multiplies (the caller rounds them
 * to its input dtype). Reports the first three misses; returns how many there were.
 * Header-only (static inline). Thread: the test's.
 */
#ifndef H2O_TEST_LINEAR_REF_H
#define H2O_TEST_LINEAR_REF_H

#include "test.h"

#include <stdbool.h>
#include <stdint.h>

static inline int linear_ref_check(const float *y, const float *x, const float *w,
                                   const float *b, int64_t m, int64_t n, int64_t k,
                                   bool relu)
{
    int bad = 0;
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < n; j++) {
            double acc = b[j], mag = fabs(b[j]);
            for (int64_t i = 0; i < k; i++) {
                const double t = (double)x[r * k + i] * w[j * k + i];
                acc += t;
                mag += fabs(t);
            }
            if (relu && acc < 0) acc = 0;
            if (fabs(y[r * n + j] - acc) > 1e-6 * mag + 1e-6 && bad++ < 3)
                TEST_FAIL("n %lld k %lld: y[%lld][%lld] = %.9g, expected %.9g",
                          (long long)n, (long long)k, (long long)r, (long long)j,
                          y[r * n + j], acc);
        }
    return bad;
}

#endif
