/*
 * test.c - the state of test.h's harness, shared by a test program's own file and
 * the tests/lib harnesses it calls: one set of counters, so that a TEST_FAIL inside
 * a harness marks the running test failed. Everything else of the harness is macros
 * and static inline functions in test.h.
 */
#include "test.h"

int test_n_run, test_n_failed, test_cur_failed;
