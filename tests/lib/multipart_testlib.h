/*
 * multipart_testlib.h - what the multipart parsers' tests share (test_multipart.c
 * for the whole-body parser, test_multipart_stream.c for the streaming one): the
 * boundary of their bodies, a body of many parts, and the random mutations their
 * robustness cases apply to a valid body.
 */
#ifndef H2O_TEST_MULTIPART_TESTLIB_H
#define H2O_TEST_MULTIPART_TESTLIB_H

#include <stddef.h>
#include <stdint.h>

#define MP_B "a3f1c0de9b8e4d7f8a6b5c4d3e2f1a0b"
#define MP_CT "multipart/form-data; boundary=" MP_B

/* The state of mp_rng (xorshift64*: deterministic, so a failure reproduces). */
extern uint64_t mp_rng_state;

uint64_t mp_rng(void);

/* A body of n parts named p0, p1, ... holding "0", "1", ... (heap; *len its
 * length). */
char *mp_many_parts(int n, size_t *len);

/*
 * Apply 1 to 8 random mutations to buf[0, *len) (room for cap bytes), with the bytes
 * and pieces the parsers care about: flip a byte, delete a run, insert a piece
 * (CRLF, dashes, the boundary, quotes, a NUL, header words), truncate, or repeat a
 * slice (which repeats parts and headers).
 */
void mp_mutate(char *buf, size_t *len, size_t cap);

#endif
