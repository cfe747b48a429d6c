/*
 * weights_testlib.h - helpers shared by the checkpoint reader tests: a growable byte
 * buffer, temporary folders removed at exit, and expectations on error messages.
 */
#ifndef H2O_WEIGHTS_TESTLIB_H
#define H2O_WEIGHTS_TESTLIB_H

#include "err.h"
#include "test.h"
#include "util.h"
#include "weights.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tbuf {
    uint8_t *p;
    size_t n, cap;
};

void tbuf_add(struct tbuf *b, const void *data, size_t n);

void tbuf_byte(struct tbuf *b, int v);

/* Append a little-endian integer of `n` bytes. */
void tbuf_le(struct tbuf *b, uint64_t v, int n);

void tbuf_printf(struct tbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The 8-byte length prefix and `hdr` of a safetensors file. */
void st_build_raw(struct tbuf *out, const char *hdr, size_t len);

/* A new empty folder under /tmp, removed by tdir_cleanup. */
const char *tdir_new(void);

void tdir_cleanup(void);

void tfile_write(const char *dir, const char *name, const void *data, size_t n);

/* The last error message contains both strings. */
#define EXPECT_MSG(a, b)                                                                   \
    do {                                                                                   \
        if (!strstr(err_msg(), (a)) || !strstr(err_msg(), (b)))                            \
            TEST_FAIL("message \"%s\" lacks \"%s\" or \"%s\"", err_msg(), (a), (b));       \
    } while (0)

/* weights_open(dir) fails with `code` and a message naming `a` and `b`. */
void expect_open_fails(const char *dir, int code, const char *a, const char *b, int line);

#define EXPECT_OPEN_FAILS(dir, code, a, b) expect_open_fails(dir, code, a, b, __LINE__)

#endif
