/*
 * http_testlib.h - what the HTTP layer's tests share: feeding bytes whole or cut
 * anywhere and collecting the requests, status helpers, and two request fixtures.
 */
#ifndef H2O_TEST_HTTP_TESTLIB_H
#define H2O_TEST_HTTP_TESTLIB_H

#include "http.h"
#include "test.h"
#include "util.h"

#include <stdint.h>

/* ---- harness ---- */

#define MAX_REQS 64

struct result {
    int status;
    int n;
    struct http_request *reqs[MAX_REQS];
    bool continues; /* take_continue was true after some feed */
    /* Streamed bodies (http_limits.upload_path): the sink appends each to its taken
     * request's body, so a dump shows it like a buffered one. */
    int streaming;        /* index of the request whose body streams, or -1 */
    bool ended[MAX_REQS]; /* the sink's end came for that streamed request */
    int bad_events;       /* sink calls with no streamed request taken */
};

/* The sink parse_steps gives its parser; ctx is the result. */
extern const struct http_body_sink result_sink;

/* An empty result (no streamed request taken yet). */
void result_init(struct result *res);

void result_free(struct result *res);

void take_all(struct http_parser *p, struct result *res);

/* The state of rng_next; a test seeds it per trial. */
extern uint64_t rng_state;

uint32_t rng_next(void);

/*
 * Feed `len` bytes to a fresh parser in pieces: `step` bytes each, or random sizes
 * 1..64 when step is 0, or all at once when step >= len. A piece the parser does
 * not fully consume (backpressure) is fed again after taking the queued requests,
 * the way a connection resumes reading. Streamed bodies go to result_sink.
 */
void parse_steps(const char *s, size_t len, const struct http_limits *lim, size_t step,
                 struct result *res);

void parse(const char *s, struct result *res);

int parse_status(const char *s);

int parse_status_lim(const char *s, const struct http_limits *lim, size_t step);

/* A canonical text of the requests and status, to compare parses; a streamed
 * request's line ends with " streamed" and, when its body ended, " ended". Caller
 * frees. */
char *dump(const struct result *res);

/* ---- fixtures ---- */

/* One POST /v1/completions with a JSON body. */
extern const char post_json[];
/* Three pipelined requests: a GET, a chunked POST with extensions and a trailer, and
 * a POST that closes the connection. */
extern const char pipeline3[];

#endif
