/*
 * test_http_stream.c - streamed request bodies in the HTTP/1.1 request layer
 * (server/http.c): a POST to the upload path is handed over when its head is
 * complete and its body goes to the body sink piece by piece. The body must come out
 * the same however the bytes are cut (Content-Length and chunked), the feed must stop
 * after the head until the request is taken, the limits (413 up front and as a
 * chunked body grows), 100-continue, pipelining, Connection: close and the other
 * paths' buffering must hold as for buffered bodies. Run under ASan in CI: the body
 * pieces must not be kept, and a parser destroyed mid-body must leak nothing.
 */
#include "http_testlib.h"

/* Limits with the upload path /up: 64 bytes for other bodies, 1000 for uploads. */
static struct http_limits up_limits(void)
{
    struct http_limits lim = http_limits_default();
    lim.max_body_bytes = 64;
    lim.upload_path = "/up";
    lim.max_upload_bytes = 1000;
    return lim;
}

/* A body of n bytes of a repeating pattern with CRs and LFs in it. */
static char *pattern(size_t n)
{
    char *b = xmalloc(n + 1);
    for (size_t i = 0; i < n; i++)
        b[i] = "0123456789abcdef\r\n--x"[i % 21];
    b[n] = '\0';
    return b;
}

/* The request text: an upload of `body` (chunked in pieces of `chunk` bytes when
 * chunk > 0), then a GET. Caller frees. */
static char *upload_then_get(const char *body, size_t chunk, const char *extra_head)
{
    size_t n = strlen(body), cap = 3 * n + 512, len = 0;
    char *s = xmalloc(cap);
    len += (size_t)snprintf(s + len, cap - len, "POST /up?x=1 HTTP/1.1\r\nHost: h\r\n%s",
                            extra_head);
    if (chunk == 0) {
        len +=
            (size_t)snprintf(s + len, cap - len, "Content-Length: %zu\r\n\r\n%s", n, body);
    } else {
        len += (size_t)snprintf(s + len, cap - len, "Transfer-Encoding: chunked\r\n\r\n");
        for (size_t off = 0; off < n; off += chunk) {
            size_t k = n - off < chunk ? n - off : chunk;
            len += (size_t)snprintf(s + len, cap - len, "%zx;e=1\r\n%.*s\r\n", k, (int)k,
                                    body + off);
        }
        len += (size_t)snprintf(s + len, cap - len, "0\r\nX-Trailer: t\r\n\r\n");
    }
    snprintf(s + len, cap - len, "GET /next HTTP/1.1\r\nHost: h\r\n\r\n");
    return s;
}

/* Parse `s` whole, at every split point, one byte at a time and in random pieces:
 * every parse must dump as `want`. */
static void same_at_every_split(const char *s, const struct http_limits *lim,
                                const char *want)
{
    size_t len = strlen(s);
    struct result res;
    parse_steps(s, len, lim, SIZE_MAX, &res);
    char *got = dump(&res);
    if (strcmp(got, want) != 0) TEST_FAIL("whole:\n%s", got);
    EXPECT_EQ(res.bad_events, 0);
    free(got);
    result_free(&res);
    for (size_t cut = 1; cut < len; cut++) {
        /* Two pieces: the parse_steps driver with the first piece `cut` long. */
        struct http_parser *p = http_parser_create(lim);
        struct http_body_sink sink = result_sink;
        sink.ctx = &res;
        result_init(&res);
        http_parser_set_body_sink(p, &sink);
        size_t off = 0, used = 0;
        for (int piece = 0; piece < 2 && !res.status; piece++) {
            size_t end = piece == 0 ? cut : len;
            while (off < end && !res.status) {
                char *copy = xmalloc(end - off);
                memcpy(copy, s + off, end - off);
                res.status = http_parser_feed(p, copy, end - off, &used);
                free(copy);
                take_all(p, &res);
                if (used == 0 && off < end) break; /* nothing queued to take: stuck */
                off += used;
            }
        }
        EXPECT_EQ(off, len);
        http_parser_destroy(p);
        got = dump(&res);
        if (strcmp(got, want) != 0) TEST_FAIL("cut at %zu:\n%s", cut, got);
        EXPECT_EQ(res.bad_events, 0);
        free(got);
        result_free(&res);
    }
    for (int trial = 0; trial < 101; trial++) {
        rng_state = 77 + (uint64_t)trial;
        parse_steps(s, len, lim, trial == 0 ? 1 : 0, &res);
        got = dump(&res);
        if (strcmp(got, want) != 0) TEST_FAIL("trial %d:\n%s", trial, got);
        EXPECT_EQ(res.bad_events, 0);
        free(got);
        result_free(&res);
    }
}

TEST(streamed_body_same_at_every_split)
{
    struct http_limits lim = up_limits();
    char *body = pattern(300); /* over max_body_bytes: only an upload may carry it */
    for (size_t chunk = 0; chunk <= 64; chunk += 64) {
        char *s = upload_then_get(body, chunk, "");
        struct result res;
        parse_steps(s, strlen(s), &lim, SIZE_MAX, &res);
        EXPECT_EQ(res.status, 0);
        EXPECT_EQ(res.n, 2);
        if (res.n == 2) {
            struct http_request *r = res.reqs[0];
            EXPECT(r->body_streamed && res.ended[0]);
            EXPECT_STR(r->path, "/up");
            EXPECT_STR(r->query, "x=1");
            EXPECT_EQ(r->body_len, 300);
            EXPECT_STR(r->body, body);
            EXPECT(http_request_header(r, "x-trailer") == NULL);
            EXPECT(!res.reqs[1]->body_streamed);
            EXPECT_STR(res.reqs[1]->path, "/next");
        }
        char *want = dump(&res);
        result_free(&res);
        same_at_every_split(s, &lim, want);
        free(want);
        free(s);
    }
    free(body);
}

TEST(feed_stops_after_the_head_until_taken)
{
    struct http_limits lim = up_limits();
    const char *head = "POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n";
    char s[256];
    snprintf(s, sizeof s,
             "GET /a HTTP/1.1\r\nHost: h\r\n\r\n%s0123456789"
             "GET /b HTTP/1.1\r\nHost: h\r\n\r\n",
             head);
    struct http_parser *p = http_parser_create(&lim);
    struct result res;
    result_init(&res);
    struct http_body_sink sink = result_sink;
    sink.ctx = &res;
    http_parser_set_body_sink(p, &sink);
    size_t used, first = strlen("GET /a HTTP/1.1\r\nHost: h\r\n\r\n") + strlen(head);
    EXPECT_EQ(http_parser_feed(p, s, strlen(s), &used), 0);
    EXPECT_EQ(used, first); /* the GET, then the upload's head: not one body byte */
    EXPECT(!http_parser_idle(p));
    EXPECT_EQ(http_parser_feed(p, s + used, strlen(s) - used, &used), 0);
    EXPECT_EQ(used, 0); /* still not taken */
    take_all(p, &res);
    EXPECT_EQ(res.n, 2);
    if (res.n == 2) {
        EXPECT_STR(res.reqs[0]->path, "/a");
        EXPECT(res.reqs[1]->body_streamed && res.reqs[1]->body == NULL);
    }
    /* Taken: the body flows to the sink, and the next request queues after it. */
    EXPECT_EQ(http_parser_feed(p, s + first, strlen(s) - first, &used), 0);
    EXPECT_EQ(used, strlen(s) - first);
    EXPECT(http_parser_idle(p));
    take_all(p, &res);
    EXPECT_EQ(res.n, 3);
    if (res.n == 3) {
        EXPECT(res.ended[1]);
        EXPECT_STR(res.reqs[1]->body, "0123456789");
        EXPECT_STR(res.reqs[2]->path, "/b");
    }
    EXPECT_EQ(res.bad_events, 0);
    http_parser_destroy(p);
    result_free(&res);
}

TEST(only_non_empty_uploads_stream)
{
    struct http_limits lim = up_limits();
    static const struct {
        const char *req;
        bool streamed;
    } cases[] = {
        {"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", true},
        {"POST /up HTTP/1.0\r\nContent-Length: 1\r\n\r\nx", true},
        {"POST http://h/up HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", true},
        {"POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         true},
        /* Nothing would feed the parser to end an empty body: buffered. */
        {"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", false},
        {"POST /up HTTP/1.1\r\nHost: h\r\n\r\n", false},
        /* Another method or path. */
        {"PUT /up HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", false},
        {"POST /up/x HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", false},
        {"POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", false},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct result res;
        parse_steps(cases[i].req, strlen(cases[i].req), &lim, SIZE_MAX, &res);
        EXPECT_EQ(res.status, 0);
        EXPECT_EQ(res.n, 1);
        if (res.n == 1 && res.reqs[0]->body_streamed != cases[i].streamed)
            TEST_FAIL("case %zu: body_streamed %d", i, res.reqs[0]->body_streamed);
        if (res.n == 1 && cases[i].streamed) EXPECT(res.ended[0]);
        result_free(&res);
    }
    /* Without the upload path nothing streams, and a sink-less parser drops a
     * streamed body and goes on. */
    struct result res;
    parse("POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nx", &res);
    EXPECT(res.n == 1 && !res.reqs[0]->body_streamed);
    result_free(&res);
    struct http_parser *p = http_parser_create(&lim);
    const char *s = "POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
                    "GET /n HTTP/1.1\r\nHost: h\r\n\r\n";
    size_t used, off = 0;
    result_init(&res);
    for (int i = 0; i < 3; i++) {
        EXPECT_EQ(http_parser_feed(p, s + off, strlen(s) - off, &used), 0);
        off += used;
        take_all(p, &res);
    }
    EXPECT_EQ(off, strlen(s));
    EXPECT_EQ(res.n, 2);
    http_parser_destroy(p);
    result_free(&res);
}

TEST(upload_limits_413)
{
    struct http_limits lim = up_limits();
    /* From Content-Length, before the request is handed over. */
    struct result res;
    const char *big = "POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 1001\r\n\r\n";
    parse_steps(big, strlen(big), &lim, SIZE_MAX, &res);
    EXPECT_EQ(res.status, 413);
    EXPECT_EQ(res.n, 0);
    result_free(&res);
    EXPECT_EQ(parse_status_lim(
                  "POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n", &lim, 1),
              0);
    /* The other paths keep max_body_bytes. */
    EXPECT_EQ(
        parse_status_lim("POST /other HTTP/1.1\r\nHost: h\r\nContent-Length: 65\r\n\r\n",
                         &lim, SIZE_MAX),
        413);
    /* Chunked: the request was handed over and its body began; the chunk that would
     * pass the limit is refused before its bytes, and the body never ends. */
    size_t steps[] = {1, 3, 100, SIZE_MAX};
    char *body = pattern(1000);
    char *s = upload_then_get(body, 100, "");
    for (size_t i = 0; i < ARRAY_LEN(steps); i++)
        EXPECT_EQ(parse_status_lim(s, &lim, steps[i]), 0);
    free(s);
    free(body);
    body = pattern(1001);
    s = upload_then_get(body, 100, "");
    for (size_t i = 0; i < ARRAY_LEN(steps); i++) {
        parse_steps(s, strlen(s), &lim, steps[i], &res);
        EXPECT_EQ(res.status, 413);
        EXPECT_EQ(res.n, 1);
        if (res.n == 1) {
            EXPECT(res.reqs[0]->body_streamed && !res.ended[0]);
            EXPECT_EQ(res.reqs[0]->body_len, 1000); /* the chunks that fitted */
        }
        result_free(&res);
    }
    free(s);
    free(body);
}

TEST(streamed_body_errors_after_the_take)
{
    struct http_limits lim = up_limits();
    static const struct {
        const char *req;
        int status;
    } cases[] = {
        {"POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: "
         "chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
         400},
        {"POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
        {"POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n"
         "T1: a\r\nT2: b\r\nT3: c\r\nT4: d\r\n\r\n",
         431},
    };
    lim.max_headers = 3;
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        for (size_t step = 1; step <= 1000; step += 999) {
            struct result res;
            parse_steps(cases[i].req, strlen(cases[i].req), &lim, step, &res);
            EXPECT_EQ(res.status, cases[i].status);
            EXPECT_EQ(res.n, 1);
            if (res.n == 1) EXPECT(res.reqs[0]->body_streamed && !res.ended[0]);
            result_free(&res);
        }
    }
}

TEST(expect_100_continue_after_the_take)
{
    struct http_limits lim = up_limits();
    const char *head = "POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
                       "Expect: 100-continue\r\n\r\n";
    struct http_parser *p = http_parser_create(&lim);
    size_t used;
    EXPECT_EQ(http_parser_feed(p, head, strlen(head), &used), 0);
    EXPECT_EQ(used, strlen(head));
    /* Not before the request is taken: its taker may refuse it instead. */
    EXPECT(!http_parser_take_continue(p));
    struct http_request *r = http_parser_take(p);
    EXPECT(r && r->body_streamed && r->expect_continue);
    EXPECT(http_parser_take_continue(p));
    EXPECT(!http_parser_take_continue(p)); /* once */
    EXPECT_EQ(http_parser_feed(p, "hello", 5, &used), 0);
    EXPECT(!http_parser_take_continue(p));
    EXPECT(http_parser_idle(p));
    http_request_free(r);
    http_parser_destroy(p);

    /* The head and body bytes in one read, or body bytes fed while the request
     * waits to be taken: the client is sending, no 100 is due. */
    char buf[256];
    snprintf(buf, sizeof buf, "%sh", head);
    p = http_parser_create(&lim);
    EXPECT_EQ(http_parser_feed(p, buf, strlen(buf), &used), 0);
    EXPECT_EQ(used, strlen(head));
    r = http_parser_take(p);
    EXPECT(!http_parser_take_continue(p));
    http_request_free(r);
    http_parser_destroy(p);
    p = http_parser_create(&lim);
    EXPECT_EQ(http_parser_feed(p, head, strlen(head), &used), 0);
    EXPECT_EQ(http_parser_feed(p, "h", 1, &used), 0);
    EXPECT_EQ(used, 0);
    r = http_parser_take(p);
    EXPECT(!http_parser_take_continue(p));
    http_request_free(r);
    http_parser_destroy(p);
}

TEST(connection_close_after_an_upload)
{
    struct http_limits lim = up_limits();
    struct result res;
    const char *s =
        "POST /up HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Length: 3\r\n"
        "\r\nabcGET /never HTTP/1.1\r\nHost: h\r\n\r\n";
    for (size_t step = 1; step <= 1000; step += 999) {
        parse_steps(s, strlen(s), &lim, step, &res);
        EXPECT_EQ(res.status, 0);
        EXPECT_EQ(res.n, 1);
        if (res.n == 1) {
            EXPECT(!res.reqs[0]->keep_alive && res.ended[0]);
            EXPECT_STR(res.reqs[0]->body, "abc");
        }
        result_free(&res);
    }
}

TEST(destroy_mid_body)
{
    /* ASan's leak check is the assertion: the parser holds nothing of a streamed
     * request, taken or not. */
    struct http_limits lim = up_limits();
    const char *s = "POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc";
    size_t used;
    struct http_parser *p = http_parser_create(&lim);
    EXPECT_EQ(http_parser_feed(p, s, strlen(s), &used), 0);
    http_parser_destroy(p); /* queued, not taken */
    p = http_parser_create(&lim);
    EXPECT_EQ(http_parser_feed(p, s, strlen(s), &used), 0);
    struct http_request *r = http_parser_take(p);
    EXPECT_EQ(http_parser_feed(p, s + used, strlen(s) - used, &used), 0);
    EXPECT(!http_parser_idle(p));
    http_parser_destroy(p); /* mid-body */
    http_request_free(r);
}

int main(void)
{
    RUN(streamed_body_same_at_every_split);
    RUN(feed_stops_after_the_head_until_taken);
    RUN(only_non_empty_uploads_stream);
    RUN(upload_limits_413);
    RUN(streamed_body_errors_after_the_take);
    RUN(expect_100_continue_after_the_take);
    RUN(connection_close_after_an_upload);
    RUN(destroy_mid_body);
    return test_done();
}
