/*
 * test_http.c - the HTTP/1.1 request layer (server/http.c) as a specification.
 *
 * Requests go in as bytes, whole or cut anywhere (every split point, one byte at a
 * time, random piece sizes): the result must not depend on where reads end. Each
 * error status the server sends before closing has its cases, including the
 * request-smuggling shapes, and the llhttp behaviours this layer relies on are
 * pinned so that a new llhttp that changes them fails here first.
 * Run under ASan in CI: the requests must own their memory and nothing may leak.
 */
#include "http_testlib.h"

/* ---- requests ---- */

TEST(simple_get)
{
    struct result res;
    parse("GET /v1/models HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n", &res);
    EXPECT_EQ(res.status, 0);
    EXPECT_EQ(res.n, 1);
    if (res.n == 1) {
        struct http_request *r = res.reqs[0];
        EXPECT_STR(r->method, "GET");
        EXPECT_STR(r->target, "/v1/models");
        EXPECT_STR(r->path, "/v1/models");
        EXPECT(r->query == NULL);
        EXPECT_EQ(r->http_major, 1);
        EXPECT_EQ(r->http_minor, 1);
        EXPECT(r->keep_alive);
        EXPECT(!r->expect_continue);
        EXPECT(r->body == NULL);
        EXPECT_EQ(r->body_len, 0);
        EXPECT_EQ(r->n_headers, 2);
        EXPECT_STR(http_request_header(r, "host"), "localhost");
        EXPECT_STR(http_request_header(r, "accept"), "*/*");
        EXPECT(http_request_header(r, "content-length") == NULL);
    }
    result_free(&res);
}

TEST(target_split_into_path_and_query)
{
    static const struct {
        const char *line, *path, *query;
    } cases[] = {
        {"GET /v1/completions?a=1&b=%20 HTTP/1.1", "/v1/completions", "a=1&b=%20"},
        {"GET /p? HTTP/1.1", "/p", ""},
        {"GET /p?q#frag HTTP/1.1", "/p", "q"},
        {"GET /p#frag HTTP/1.1", "/p", NULL},
        {"GET /a%2Fb HTTP/1.1", "/a%2Fb", NULL}, /* not decoded */
        {"GET http://h:80/x/y?z HTTP/1.1", "/x/y", "z"},
        {"GET http://h HTTP/1.1", "/", NULL},
        {"GET http://h?k=v HTTP/1.1", "/", "k=v"},
        {"OPTIONS * HTTP/1.1", "*", NULL},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s\r\nHost: h\r\n\r\n", cases[i].line);
        struct result res;
        parse(buf, &res);
        EXPECT_EQ(res.status, 0);
        EXPECT_EQ(res.n, 1);
        if (res.n == 1) {
            EXPECT_STR(res.reqs[0]->path, cases[i].path);
            if (cases[i].query)
                EXPECT_STR(res.reqs[0]->query, cases[i].query);
            else
                EXPECT(res.reqs[0]->query == NULL);
        }
        result_free(&res);
    }
}

TEST(header_names_lowercased_values_trimmed)
{
    struct result res;
    parse("GET / HTTP/1.1\r\n"
          "X-Custom-THING:   v  a \t \r\n"
          "Empty:\r\n"
          "Dup: one\r\n"
          "dup: two\r\n"
          "Host: h\r\n"
          "\r\n",
          &res);
    EXPECT_EQ(res.status, 0);
    EXPECT_EQ(res.n, 1);
    if (res.n == 1) {
        struct http_request *r = res.reqs[0];
        EXPECT_EQ(r->n_headers, 5);
        EXPECT_STR(r->headers[0].name, "x-custom-thing");
        EXPECT_STR(r->headers[0].value, "v  a");
        EXPECT_STR(http_request_header(r, "empty"), "");
        /* Duplicates stay, in order; the lookup gives the first. */
        EXPECT_STR(r->headers[2].name, "dup");
        EXPECT_STR(r->headers[3].value, "two");
        EXPECT_STR(http_request_header(r, "dup"), "one");
    }
    result_free(&res);
}

TEST(post_body_same_at_every_split)
{
    size_t len = strlen(post_json);
    struct http_limits lim = http_limits_default();
    struct result whole;
    parse_steps(post_json, len, &lim, SIZE_MAX, &whole);
    EXPECT_EQ(whole.status, 0);
    EXPECT_EQ(whole.n, 1);
    if (whole.n == 1) {
        EXPECT_EQ(whole.reqs[0]->body_len, 44);
        EXPECT_STR(whole.reqs[0]->body,
                   "{\"model\":\"opt\",\"prompt\":\"hi\",\"max_tokens\":4}");
        EXPECT_STR(http_request_header(whole.reqs[0], "content-type"), "application/json");
    }
    char *want = dump(&whole);
    result_free(&whole);

    /* Two pieces cut at every byte. */
    for (size_t cut = 1; cut < len; cut++) {
        struct http_parser *p = http_parser_create(&lim);
        struct result res = {0};
        size_t used;
        res.status = http_parser_feed(p, post_json, cut, &used);
        EXPECT_EQ(used, cut);
        if (!res.status)
            res.status = http_parser_feed(p, post_json + cut, len - cut, &used);
        take_all(p, &res);
        http_parser_destroy(p);
        char *got = dump(&res);
        if (strcmp(got, want) != 0) TEST_FAIL("cut at %zu:\n%s", cut, got);
        free(got);
        result_free(&res);
    }
    /* One byte at a time, and random pieces. */
    for (int trial = 0; trial < 101; trial++) {
        struct result res;
        rng_state = (uint64_t)trial;
        parse_steps(post_json, len, &lim, trial == 0 ? 1 : 0, &res);
        char *got = dump(&res);
        if (strcmp(got, want) != 0) TEST_FAIL("trial %d:\n%s", trial, got);
        free(got);
        result_free(&res);
    }
    free(want);
}

TEST(chunked_body_with_extensions_and_trailers)
{
    struct result res;
    parse("POST /c HTTP/1.1\r\nHost: h\r\n"
          "Transfer-Encoding: chunked\r\n"
          "\r\n"
          "4;name=val\r\nWiki\r\n"
          "5;flag\r\npedia\r\n"
          "E;q=\"quoted; x\"\r\n in\r\n\r\nchunks.\r\n"
          "0;last=1\r\n"
          "X-Trailer: t\r\n"
          "Another: u\r\n"
          "\r\n",
          &res);
    EXPECT_EQ(res.status, 0);
    EXPECT_EQ(res.n, 1);
    if (res.n == 1) {
        struct http_request *r = res.reqs[0];
        EXPECT_EQ(r->body_len, 23);
        EXPECT_STR(r->body, "Wikipedia in\r\n\r\nchunks.");
        /* Trailers are not merged into the header section. */
        EXPECT_EQ(r->n_headers, 2);
        EXPECT(http_request_header(r, "x-trailer") == NULL);
        EXPECT_STR(http_request_header(r, "transfer-encoding"), "chunked");
    }
    result_free(&res);
    /* Leading zeros in a chunk size, upper-case hex, "Chunked" in any case. */
    parse("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: "
          "Chunked\r\n\r\n000A\r\n0123456789\r\n0\r\n\r\n",
          &res);
    EXPECT_EQ(res.status, 0);
    EXPECT_EQ(res.n, 1);
    if (res.n == 1) EXPECT_STR(res.reqs[0]->body, "0123456789");
    result_free(&res);
}

TEST(pipelined_requests_in_order_at_every_split)
{
    size_t len = strlen(pipeline3);
    struct http_limits lim = http_limits_default();
    struct result whole;
    parse_steps(pipeline3, len, &lim, SIZE_MAX, &whole);
    EXPECT_EQ(whole.status, 0);
    EXPECT_EQ(whole.n, 3);
    if (whole.n == 3) {
        EXPECT_STR(whole.reqs[0]->method, "GET");
        EXPECT_STR(whole.reqs[0]->path, "/v1/models");
        EXPECT(whole.reqs[0]->keep_alive);
        EXPECT_STR(whole.reqs[1]->method, "POST");
        EXPECT_STR(whole.reqs[1]->query, "stream=1");
        EXPECT_STR(whole.reqs[1]->body, "Wikipedia in\r\n\r\nchunks.");
        EXPECT(whole.reqs[1]->keep_alive);
        EXPECT_STR(whole.reqs[2]->path, "/x");
        EXPECT_STR(whole.reqs[2]->body, "abc");
        EXPECT(!whole.reqs[2]->keep_alive);
    }
    char *want = dump(&whole);
    result_free(&whole);

    for (size_t cut = 1; cut < len; cut++) {
        struct http_parser *p = http_parser_create(&lim);
        struct result res = {0};
        size_t used;
        res.status = http_parser_feed(p, pipeline3, cut, &used);
        if (!res.status)
            res.status = http_parser_feed(p, pipeline3 + cut, len - cut, &used);
        take_all(p, &res);
        http_parser_destroy(p);
        char *got = dump(&res);
        if (strcmp(got, want) != 0) TEST_FAIL("cut at %zu:\n%s", cut, got);
        free(got);
        result_free(&res);
    }
    for (int trial = 0; trial < 200; trial++) {
        struct result res;
        rng_state = 1000 + (uint64_t)trial;
        parse_steps(pipeline3, len, &lim, trial == 0 ? 1 : 0, &res);
        char *got = dump(&res);
        if (strcmp(got, want) != 0) TEST_FAIL("trial %d:\n%s", trial, got);
        free(got);
        result_free(&res);
    }
    free(want);
}

TEST(keep_alive_defaults)
{
    static const struct {
        const char *req;
        bool keep_alive;
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost: h\r\n\r\n", true},
        {"GET / HTTP/1.0\r\n\r\n", false},
        {"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", false},
        {"GET / HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n", false},
        {"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true},
        {"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true},
        {"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n", true},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct result res;
        parse(cases[i].req, &res);
        EXPECT_EQ(res.status, 0);
        EXPECT_EQ(res.n, 1);
        if (res.n == 1 && res.reqs[0]->keep_alive != cases[i].keep_alive)
            TEST_FAIL("case %zu: keep_alive %d", i, res.reqs[0]->keep_alive);
        result_free(&res);
    }
}

TEST(connection_close_swallows_the_rest)
{
    /* Nothing after a closing request is answered, so nothing is parsed: not the
     * next request, not garbage (llhttp's own behaviour in its default mode). */
    const char *s = "GET /1 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n";
    struct http_limits lim = http_limits_default();
    struct http_parser *p = http_parser_create(&lim);
    size_t used = 0;
    EXPECT_EQ(http_parser_feed(p, s, strlen(s), &used), 0);
    EXPECT_EQ(used, strlen(s));
    EXPECT_EQ(http_parser_feed(p, "\x01\x02garbage", 9, &used), 0);
    EXPECT_EQ(used, 9);
    struct http_request *r = http_parser_take(p);
    EXPECT(r != NULL);
    if (r) EXPECT_STR(r->path, "/1");
    http_request_free(r);
    EXPECT(http_parser_take(p) == NULL);
    http_parser_destroy(p);

    /* CONNECT is a tunnel: the request is handed over, closing, and what follows
     * is not HTTP. */
    struct result res;
    parse("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n\x16\x03\x01",
          &res);
    EXPECT_EQ(res.status, 0);
    EXPECT_EQ(res.n, 1);
    if (res.n == 1) {
        EXPECT_STR(res.reqs[0]->method, "CONNECT");
        EXPECT_STR(res.reqs[0]->path, "example.com:443");
        EXPECT(!res.reqs[0]->keep_alive);
    }
    result_free(&res);
}

TEST(upgrade_is_ignored)
{
    /* The server may ignore Upgrade (RFC 9110 7.8): the request is ordinary and
     * the connection goes on in HTTP/1.1. */
    struct result res;
    parse("GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
          "POST /h2c HTTP/1.1\r\nHost: h\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n"
          "HTTP2-Settings: AAMAAABkAAQAAP__\r\nContent-Length: 2\r\n\r\nhi"
          "GET /next HTTP/1.1\r\nHost: h\r\n\r\n",
          &res);
    EXPECT_EQ(res.status, 0);
    EXPECT_EQ(res.n, 3);
    if (res.n == 3) {
        EXPECT_STR(res.reqs[0]->path, "/ws");
        EXPECT_STR(res.reqs[1]->body, "hi");
        EXPECT_STR(res.reqs[2]->path, "/next");
        EXPECT(res.reqs[2]->keep_alive);
    }
    result_free(&res);
}

TEST(expect_100_continue)
{
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
                       "Expect: 100-continue\r\n\r\n";
    struct http_limits lim = http_limits_default();
    struct http_parser *p = http_parser_create(&lim);
    size_t used;
    EXPECT_EQ(http_parser_feed(p, head, strlen(head), &used), 0);
    EXPECT(!http_parser_idle(p));
    EXPECT(http_parser_take_continue(p));
    EXPECT(!http_parser_take_continue(p)); /* once */
    EXPECT(http_parser_take(p) == NULL);
    EXPECT_EQ(http_parser_feed(p, "hello", 5, &used), 0);
    EXPECT(!http_parser_take_continue(p));
    struct http_request *r = http_parser_take(p);
    EXPECT(r != NULL);
    if (r) {
        EXPECT(r->expect_continue);
        EXPECT_STR(r->body, "hello");
    }
    http_request_free(r);
    http_parser_destroy(p);

    /* The head and the first body byte in one read: the client is already sending,
     * no 100 is due. */
    struct result res;
    char buf[256];
    snprintf(buf, sizeof buf, "%sh", head);
    struct http_limits l2 = http_limits_default();
    parse_steps(buf, strlen(buf), &l2, SIZE_MAX, &res);
    EXPECT(!res.continues);
    result_free(&res);
    /* No body: nothing to continue. Chunked: yes. */
    parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nExpect: 100-continue\r\n\r\n", &res);
    EXPECT_EQ(res.n, 1);
    EXPECT(!res.continues);
    result_free(&res);
    parse("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nExpect: 100-Continue\r\n\r\n",
          &res);
    EXPECT(res.continues);
    result_free(&res);
    /* An expectation this server cannot meet. */
    EXPECT_EQ(
        parse_status("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nExpect: 200-ok\r\n\r\nx"),
        417);
    /* HTTP/1.0 has no Expect: ignored, whatever its value. */
    parse("POST / HTTP/1.0\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n", &res);
    EXPECT_EQ(res.status, 0);
    EXPECT(!res.continues);
    result_free(&res);
    EXPECT_EQ(parse_status("POST / HTTP/1.0\r\nContent-Length: 1\r\nExpect: nope\r\n\r\nx"),
              0);
    /* Too big: the final status instead of a 100, before any body byte. */
    EXPECT_EQ(parse_status("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 999999999999\r\n"
                           "Expect: 100-continue\r\n\r\n"),
              413);
}

/* ---- responses ---- */

TEST(format_head)
{
    char buf[512];
    size_t n = http_format_head(buf, sizeof buf, 200, "application/json", 17, true, NULL);
    EXPECT_STR(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    "Content-Length: 17\r\nConnection: keep-alive\r\n\r\n");
    EXPECT_EQ(n, strlen(buf));
    http_format_head(buf, sizeof buf, 200, "text/event-stream", -1, true,
                     "Cache-Control: no-cache\r\n");
    EXPECT_STR(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n"
                    "Cache-Control: no-cache\r\n\r\n");
    http_format_head(buf, sizeof buf, 200, "text/event-stream", -2, false, NULL);
    EXPECT_STR(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    "Connection: close\r\n\r\n");
    http_format_head(buf, sizeof buf, 429, NULL, 0, true, "Retry-After: 1\r\n");
    EXPECT_STR(buf, "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\n"
                    "Connection: keep-alive\r\nRetry-After: 1\r\n\r\n");
    /* No framing header where RFC 9110 forbids one. */
    http_format_head(buf, sizeof buf, 204, NULL, 0, true, NULL);
    EXPECT_STR(buf, "HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\n\r\n");
    /* Too small: snprintf's contract (full length back, NUL-terminated prefix). */
    char small[16];
    n = http_format_head(small, sizeof small, 404, "application/json", 5, false, NULL);
    EXPECT(n >= sizeof small);
    EXPECT_STR(small, "HTTP/1.1 404 No");
    EXPECT_EQ(http_format_head(NULL, 0, 404, "application/json", 5, false, NULL), n);

    EXPECT_STR(http_status_reason(413), "Content Too Large");
    EXPECT_STR(http_status_reason(431), "Request Header Fields Too Large");
    EXPECT_STR(http_status_reason(505), "HTTP Version Not Supported");
    EXPECT_STR(http_status_reason(799), "Unknown");
}

TEST(format_chunks)
{
    char buf[20];
    EXPECT_EQ(http_format_chunk_head(buf, 1), 3);
    EXPECT_STR(buf, "1\r\n");
    EXPECT_EQ(http_format_chunk_head(buf, 255), 4);
    EXPECT_STR(buf, "ff\r\n");
    EXPECT_EQ(http_format_chunk_head(buf, SIZE_MAX), 18);
    EXPECT_STR(buf, "ffffffffffffffff\r\n");
    EXPECT_STR(http_chunk_last, "0\r\n\r\n");
}

TEST(formatted_chunks_parse_back)
{
    /* A chunked body framed by the response helpers, read back by this parser as a
     * request body: the framing round-trips. */
    char msg[1024];
    size_t n = (size_t)snprintf(msg, sizeof msg,
                                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
    const char *parts[] = {"data: {}\n\n", "x", "data: [DONE]\n\n"};
    for (size_t i = 0; i < ARRAY_LEN(parts); i++) {
        n += http_format_chunk_head(msg + n, strlen(parts[i]));
        n += (size_t)snprintf(msg + n, sizeof msg - n, "%s\r\n", parts[i]);
    }
    snprintf(msg + n, sizeof msg - n, "%s", http_chunk_last);
    struct result res;
    parse(msg, &res);
    EXPECT_EQ(res.status, 0);
    EXPECT_EQ(res.n, 1);
    if (res.n == 1) EXPECT_STR(res.reqs[0]->body, "data: {}\n\nxdata: [DONE]\n\n");
    result_free(&res);
}

int main(void)
{
    RUN(simple_get);
    RUN(target_split_into_path_and_query);
    RUN(header_names_lowercased_values_trimmed);
    RUN(post_body_same_at_every_split);
    RUN(chunked_body_with_extensions_and_trailers);
    RUN(pipelined_requests_in_order_at_every_split);
    RUN(keep_alive_defaults);
    RUN(connection_close_swallows_the_rest);
    RUN(upgrade_is_ignored);
    RUN(expect_100_continue);
    RUN(format_head);
    RUN(format_chunks);
    RUN(formatted_chunks_parse_back);
    return test_done();
}
