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

/* Two Batch input lines, and the body the openai package (httpx) sends for
 * client.files.create(file=open("batch.jsonl","rb"), purpose="batch") with them:
 * the data field first, then the file with octet-stream. */
#define MP_JSONL                                                                           \
    "{\"custom_id\":\"r1\",\"method\":\"POST\",\"url\":\"/v1/completions\"}\n"             \
    "{\"custom_id\":\"r2\",\"method\":\"POST\",\"url\":\"/v1/completions\"}\n"
extern const char mp_openai_body[];

/* The state of mp_rng (xorshift64*: deterministic, so a failure reproduces). */
extern uint64_t mp_rng_state;

uint64_t mp_rng(void);

/* A body of n parts named p0, p1, ... holding "0", "1", ... (heap; *len its
 * length). */
char *mp_many_parts(int n, size_t *len);

/*
 * Copy body (len bytes) into buf (room for cap) and apply 1 to 8 random mutations
 * with the bytes and pieces the parsers care about: flip a byte, delete a run,
 * insert a piece (CRLF, dashes, the boundary, quotes, a NUL, header words),
 * truncate, or repeat a slice (which repeats parts and headers). Returns the
 * mutated length.
 */
size_t mp_mutated(char *buf, size_t cap, const char *body, size_t len);

#endif
