/*
 * test.h - a tiny TAP test harness.
 *
 * A test file defines functions with TEST(name) and lists them in main with
 * RUN(name). Each RUN prints "ok N - name" or "not ok N - name"; a failed
 * EXPECT* marks the current test failed and goes on, so one run shows every broken
 * expectation. meson reads the TAP stream (protocol: 'tap').
 * Tests find their data (tests/data) through H2O_TEST_DATA (set by meson).
 * The counters live in tests/lib/test.c, so that the shared harnesses of tests/lib
 * (compiled once, into a library) fail the test that calls them: every test program
 * links that library (test_dep in tests/meson.build).
 */
#ifndef H2O_TEST_H
#define H2O_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tests run and failed so far; whether the current one has failed. Thread: the main
 * test thread only (EXPECT is not thread-safe). */
extern int test_n_run, test_n_failed, test_cur_failed;

#define TEST(name) static void test_##name(void)

#define RUN(name)                                                                       \
    do {                                                                                \
        test_cur_failed = 0;                                                            \
        test_##name();                                                                  \
        test_n_run++;                                                                   \
        if (test_cur_failed) test_n_failed++;                                           \
        printf("%s %d - %s\n", test_cur_failed ? "not ok" : "ok", test_n_run, #name);  \
        fflush(stdout);                                                                 \
    } while (0)

#define TEST_FAIL(...)                                                                  \
    do {                                                                                \
        printf("# %s:%d: ", __FILE__, __LINE__);                                        \
        printf(__VA_ARGS__);                                                            \
        printf("\n");                                                                   \
        test_cur_failed = 1;                                                            \
    } while (0)

#define EXPECT(cond)                                                                    \
    do {                                                                                \
        if (!(cond)) TEST_FAIL("expected %s", #cond);                                   \
    } while (0)

#define EXPECT_EQ(a, b)                                                                 \
    do {                                                                                \
        long long ea_ = (long long)(a), eb_ = (long long)(b);                           \
        if (ea_ != eb_) TEST_FAIL("%s == %lld, expected %s == %lld", #a, ea_, #b, eb_); \
    } while (0)

#define EXPECT_STR(a, b)                                                                \
    do {                                                                                \
        const char *ea_ = (a), *eb_ = (b);                                              \
        if (!ea_ || !eb_ || strcmp(ea_, eb_) != 0)                                      \
            TEST_FAIL("%s == \"%s\", expected \"%s\"", #a, ea_ ? ea_ : "(null)",        \
                      eb_ ? eb_ : "(null)");                                            \
    } while (0)

#define EXPECT_NEAR(a, b, tol)                                                          \
    do {                                                                                \
        double ea_ = (double)(a), eb_ = (double)(b);                                    \
        if (!(fabs(ea_ - eb_) <= (tol)))                                                \
            TEST_FAIL("%s == %g, expected %g (tol %g)", #a, ea_, eb_, (double)(tol));   \
    } while (0)

/* Print the TAP plan and return the exit status for main. */
static inline int test_done(void)
{
    printf("1..%d\n", test_n_run);
    return test_n_failed ? 1 : 0;
}

/* A path under tests/data. Static buffer. */
static inline const char *test_data(const char *rel)
{
    static char buf[4096];
    const char *dir = getenv("H2O_TEST_DATA");
    snprintf(buf, sizeof buf, "%s/%s", dir ? dir : "tests/data", rel);
    return buf;
}

#endif
