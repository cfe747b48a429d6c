/*
 * http_testlib.c - the HTTP parser tests' driver (http_testlib.h).
 */
#include "http_testlib.h"

#include <stdlib.h>
#include <string.h>

uint64_t rng_state;

void result_init(struct result *res)
{
    memset(res, 0, sizeof *res);
    res->streaming = -1;
}

void result_free(struct result *res)
{
    for (int i = 0; i < res->n; i++)
        http_request_free(res->reqs[i]);
    res->n = 0;
}

void take_all(struct http_parser *p, struct result *res)
{
    struct http_request *r;
    while ((r = http_parser_take(p)) != NULL) {
        if (res->n < MAX_REQS) {
            if (r->body_streamed) {
                if (res->streaming >= 0) res->bad_events++; /* the last one never ended */
                res->streaming = res->n;
            }
            res->reqs[res->n++] = r;
        } else {
            http_request_free(r);
        }
    }
}

static void result_data(void *ctx, const char *data, size_t len)
{
    struct result *res = ctx;
    if (res->streaming < 0 || len == 0) {
        res->bad_events++;
        return;
    }
    struct http_request *r = res->reqs[res->streaming];
    r->body = xrealloc(r->body, r->body_len + len + 1);
    memcpy(r->body + r->body_len, data, len);
    r->body_len += len;
    r->body[r->body_len] = '\0';
}

static void result_end(void *ctx)
{
    struct result *res = ctx;
    if (res->streaming < 0) {
        res->bad_events++;
        return;
    }
    res->ended[res->streaming] = true;
    res->streaming = -1;
}

const struct http_body_sink result_sink = {result_data, result_end, NULL};

uint32_t rng_next(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

void parse_steps(const char *s, size_t len, const struct http_limits *lim, size_t step,
                 struct result *res)
{
    result_init(res);
    struct http_parser *p = http_parser_create(lim);
    struct http_body_sink sink = result_sink;
    sink.ctx = res;
    http_parser_set_body_sink(p, &sink);
    size_t off = 0;
    while (off < len) {
        size_t n = step ? step : 1 + rng_next() % 64;
        if (n > len - off) n = len - off;
        /* The piece is copied to its own heap buffer and freed right after the
         * feed: under ASan any pointer kept into it is caught. */
        char *piece = malloc(n);
        memcpy(piece, s + off, n);
        size_t used = 0;
        int st = http_parser_feed(p, piece, n, &used);
        free(piece);
        if (http_parser_take_continue(p)) res->continues = true;
        take_all(p, res);
        if (st) {
            res->status = st;
            break;
        }
        off += used;
    }
    take_all(p, res);
    http_parser_destroy(p);
}

void parse(const char *s, struct result *res)
{
    struct http_limits lim = http_limits_default();
    parse_steps(s, strlen(s), &lim, SIZE_MAX, res);
}

int parse_status(const char *s)
{
    struct result res;
    parse(s, &res);
    result_free(&res);
    return res.status;
}

int parse_status_lim(const char *s, const struct http_limits *lim, size_t step)
{
    struct result res;
    parse_steps(s, strlen(s), lim, step, &res);
    result_free(&res);
    return res.status;
}

char *dump(const struct result *res)
{
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    len += (size_t)snprintf(out + len, cap - len, "status=%d n=%d\n", res->status, res->n);
    for (int i = 0; i < res->n && len < cap; i++) {
        const struct http_request *r = res->reqs[i];
        len += (size_t)snprintf(
            out + len, cap - len, "%s %s path=%s query=%s %d.%d ka=%d ec=%d%s%s\n",
            r->method, r->target, r->path, r->query ? r->query : "(null)", r->http_major,
            r->http_minor, r->keep_alive, r->expect_continue,
            r->body_streamed ? " streamed" : "", res->ended[i] ? " ended" : "");
        for (int32_t h = 0; h < r->n_headers && len < cap; h++)
            len += (size_t)snprintf(out + len, cap - len, "  [%s]=[%s]\n",
                                    r->headers[h].name, r->headers[h].value);
        if (len < cap)
            len += (size_t)snprintf(out + len, cap - len, "  body %zu [%.*s]\n",
                                    r->body_len, (int)r->body_len, r->body ? r->body : "");
    }
    return out;
}

const char post_json[] = "POST /v1/completions HTTP/1.1\r\n"
                         "Host: localhost:8000\r\n"
                         "Content-Type: application/json\r\n"
                         "Content-Length: 44\r\n"
                         "\r\n"
                         "{\"model\":\"opt\",\"prompt\":\"hi\",\"max_tokens\":4}";

/* Three requests back to back: a GET, a chunked POST with extensions and a
 * trailer, and a Content-Length POST that closes the connection. */
const char pipeline3[] = "GET /v1/models HTTP/1.1\r\n"
                         "Host: a\r\n"
                         "\r\n"
                         "POST /v1/completions?stream=1 HTTP/1.1\r\n"
                         "Host: a\r\n"
                         "Transfer-Encoding: chunked\r\n"
                         "\r\n"
                         "4;name=val\r\nWiki\r\n"
                         "5;flag\r\npedia\r\n"
                         "E;q=\"quoted; x\"\r\n in\r\n\r\nchunks.\r\n"
                         "0\r\n"
                         "X-Trailer: t\r\n"
                         "\r\n"
                         "POST /x HTTP/1.1\r\n"
                         "Host: a\r\n"
                         "Content-Length: 3\r\n"
                         "Connection: close\r\n"
                         "\r\n"
                         "abc";
