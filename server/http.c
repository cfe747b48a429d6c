/*
 * http.c - the HTTP/1.1 request parser around llhttp, and response framing.
 *
 * Owns: the llhttp state of one connection, the head of the request being read (in
 * `head`, a byte buffer of NUL-separated strings, until the header section ends),
 * that request once built (`req`, until its body ends) and the queue of complete
 * requests not yet taken. A streamed request (an upload: http.h) is queued as soon as
 * its head is built, and this file keeps no pointer to it: its body is counted here
 * (body_len) and handed to the sink piece by piece, never held.
 *
 * Positions: llhttp hands out pointers into the buffer being executed, valid only
 * inside the callback. Every piece is copied at once, and its place in the whole
 * stream (`pos` + offset in the buffer) is what the limits are counted on: the
 * header section is "bytes since the request line began", which also counts the
 * whitespace llhttp skips without a callback, and a header value whose pieces are
 * not contiguous in the stream was folded (obs-fold).
 *
 * Invariants: status != 0 means dead (llhttp is never run again); n_queued <=
 * max_pipelined; queued_body_bytes < 2 * max_body_bytes (the queue stops growing once
 * it reaches max_body_bytes, and one more body is at most that: an upload's larger
 * body is streamed, never queued); head.len < max_header_bytes + a few NULs; in
 * PHASE_BODY and PHASE_TRAILER, req != NULL exactly when the body is not streamed;
 * stream_queued means the streamed request is the queue's last and nothing more is
 * parsed until it is taken.
 * Why one file of about 870 lines: the llhttp callbacks, the span copying and the
 * limits all work on one struct http_parser and its invariants above, which only
 * hold if nothing outside this file touches it; the response framing at the end
 * (about 100 lines) would leave the parser alone still over 600. The libFuzzer
 * target builds this file on its own (tests/fuzz), so its seam is the file.
 * Thread: loop.
 */
#include "http.h"

#include "util.h"

#include <llhttp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Where the parser is inside the current request. */
enum phase {
    PHASE_IDLE,    /* between requests: nothing of the next one seen yet */
    PHASE_HEAD,    /* request line and header fields */
    PHASE_BODY,    /* head complete, request built, reading the body */
    PHASE_TRAILER, /* the last chunk seen, reading the trailer section */
};

/* Which kind of llhttp span the last piece belonged to, while it is still open. */
enum span {
    SPAN_NONE,
    SPAN_METHOD,
    SPAN_URL,
    SPAN_FIELD,
    SPAN_VALUE,
};

struct byte_buf {
    char *p;
    size_t len, cap;
};

/* A header field while the head is read: offsets of NUL-terminated strings in
 * `head`, since the buffer moves as it grows. */
struct field_ref {
    size_t name_off, value_off;
};

struct http_parser {
    llhttp_t ll; /* ll.data points back here */
    struct http_limits lim;
    int status;  /* sticky error status, 0 while healthy */
    bool closed; /* a request ended the connection: the rest of the stream is dropped */
    enum phase phase;

    uint64_t pos; /* stream offset of `base`, the buffer llhttp is executing */
    const char *base;
    uint64_t start; /* stream offset where the request line (PHASE_HEAD) or the
                       trailer section (PHASE_TRAILER) began */
    bool start_set; /* start is known (the first byte has been reported) */

    struct byte_buf head;          /* method\0 target\0 name\0 value\0 ... of the head */
    size_t method_off, target_off; /* SIZE_MAX until the span opens */
    struct field_ref *fields;
    int32_t n_fields, cap_fields;
    enum span span;    /* the open span, whose bytes are the tail of `head` */
    uint64_t span_end; /* stream offset just past the open span's last piece */
    int32_t n_trailers;
    size_t ext_bytes; /* chunk extension bytes of this body */

    struct http_request *req; /* the request whose body is being read (not streamed) */
    size_t body_len;          /* bytes of the body read so far (either way) */
    size_t body_cap;          /* allocated bytes of req->body */
    size_t body_total;        /* Content-Length, or 0 when chunked */
    size_t body_limit;        /* this request's: max_body_bytes, or max_upload_bytes */
    bool want_continue;       /* see http_parser_take_continue */

    struct http_body_sink sink; /* where streamed bodies go (data NULL: dropped) */
    bool streaming;             /* the body being read goes to the sink */
    bool stream_queued;         /* the streamed request waits in the queue */
    bool stream_keep_alive;     /* that request's keep_alive */

    struct http_request *q_head, *q_tail; /* complete, oldest first */
    int32_t n_queued;
    size_t queued_body_bytes;
};

/* A head buffer this large is freed between requests rather than kept for the next
 * one, so an idle keep-alive connection holds little memory. */
#define HEAD_KEEP_BYTES 4096

struct http_limits http_limits_default(void)
{
    return (struct http_limits){
        .max_header_bytes = 16 * 1024,
        .max_body_bytes = 32 * 1024 * 1024,
        .max_headers = 100,
        .max_pipelined = 16,
    };
}

/* ---- small helpers ---- */

static void buf_append(struct byte_buf *b, const char *s, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
}

/* RFC 9110 tchar: the characters of a token (a header name, a transfer coding). */
static bool is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static char ascii_lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static uint64_t stream_pos(const struct http_parser *p, const char *at)
{
    return p->pos + (uint64_t)(at - p->base);
}

/* Record the first error and tell llhttp to stop: -1 from any callback is an error
 * (HPE_USER or HPE_CB_*), and feed reports `status` rather than llhttp's errno. */
static int fail(struct http_parser *p, int status)
{
    if (!p->status) p->status = status;
    return -1;
}

static struct http_parser *parser_of(llhttp_t *ll)
{
    return ll->data;
}

/* ---- the head: spans copied piece by piece ---- */

/* Open a span of `kind` at the end of `head` unless it is the one already open. */
static int span_open(struct http_parser *p, enum span kind)
{
    if (p->span == kind) return 0;
    p->span = kind;
    switch (kind) {
    case SPAN_METHOD: p->method_off = p->head.len; break;
    case SPAN_URL: p->target_off = p->head.len; break;
    case SPAN_FIELD:
        if (p->n_fields >= p->lim.max_headers) return fail(p, 431);
        if (p->n_fields == p->cap_fields) {
            p->cap_fields = p->cap_fields ? 2 * p->cap_fields : 16;
            p->fields = xrealloc(p->fields, (size_t)p->cap_fields * sizeof *p->fields);
        }
        p->fields[p->n_fields].name_off = p->head.len;
        p->fields[p->n_fields].value_off = SIZE_MAX;
        p->n_fields++;
        break;
    case SPAN_VALUE:
        /* llhttp gives one value per name; a second one would be a fold that
         * llhttp reported after closing the first (it does not today). */
        if (p->n_fields == 0 || p->fields[p->n_fields - 1].value_off != SIZE_MAX)
            return fail(p, 400);
        p->fields[p->n_fields - 1].value_off = p->head.len;
        break;
    case SPAN_NONE: break;
    }
    return 0;
}

/* One piece of a head span: count it against the header limit, then copy it. */
static int span_piece(struct http_parser *p, enum span kind, const char *at, size_t n)
{
    uint64_t at_pos = stream_pos(p, at);
    if (!p->start_set) {
        /* The method's first byte starts the request line; llhttp has only skipped
         * empty lines before it, which RFC 9112 lets a server ignore. */
        p->start = at_pos;
        p->start_set = true;
    }
    if (at_pos + n - p->start > p->lim.max_header_bytes) return fail(p, 431);
    if (p->span == kind) {
        /* A value continues only where the last piece ended (a piece ends early only
         * at the end of a feed). A gap is a line fold, which llhttp's default mode
         * joins; RFC 9112 lets a server reject it instead, and folding has served
         * request smuggling, so it is a 400. */
        if (kind == SPAN_VALUE && at_pos != p->span_end) return fail(p, 400);
    } else if (span_open(p, kind)) {
        return -1;
    }
    buf_append(&p->head, at, n);
    p->span_end = at_pos + n;
    return 0;
}

/* The end of a span: NUL-terminate it (an empty span never saw a piece). */
static int span_close(struct http_parser *p, enum span kind)
{
    if (span_open(p, kind)) return -1;
    if (kind == SPAN_VALUE) {
        /* llhttp drops the spaces before a value but keeps those after it. */
        size_t off = p->fields[p->n_fields - 1].value_off;
        while (p->head.len > off && is_ows(p->head.p[p->head.len - 1]))
            p->head.len--;
    }
    buf_append(&p->head, "", 1);
    p->span = SPAN_NONE;
    return 0;
}

/* A piece of the trailer section: counted, not kept (RFC 9110 6.5.1: trailers must
 * not be merged into the header section by a server that does not know them). */
static int trailer_piece(struct http_parser *p, enum span kind, const char *at, size_t n)
{
    uint64_t at_pos = stream_pos(p, at);
    if (!p->start_set) {
        p->start = at_pos;
        p->start_set = true;
    }
    if (at_pos + n - p->start > p->lim.max_header_bytes) return fail(p, 431);
    if (kind == SPAN_FIELD && p->span != SPAN_FIELD) {
        if (++p->n_trailers > p->lim.max_headers) return fail(p, 431);
    }
    p->span = kind;
    return 0;
}

/* ---- llhttp callbacks ---- */

static int on_message_begin(llhttp_t *ll)
{
    struct http_parser *p = parser_of(ll);
    p->phase = PHASE_HEAD;
    p->start_set = false;
    p->head.len = 0;
    p->method_off = p->target_off = SIZE_MAX;
    p->n_fields = 0;
    p->span = SPAN_NONE;
    p->n_trailers = 0;
    p->ext_bytes = 0;
    return 0;
}

static int on_method(llhttp_t *ll, const char *at, size_t n)
{
    return span_piece(parser_of(ll), SPAN_METHOD, at, n);
}

static int on_method_complete(llhttp_t *ll)
{
    return span_close(parser_of(ll), SPAN_METHOD);
}

static int on_url(llhttp_t *ll, const char *at, size_t n)
{
    return span_piece(parser_of(ll), SPAN_URL, at, n);
}

static int on_url_complete(llhttp_t *ll)
{
    return span_close(parser_of(ll), SPAN_URL);
}

static bool version_supported(llhttp_t *ll)
{
    return ll->http_major == 1 && (ll->http_minor == 0 || ll->http_minor == 1);
}

/* Reject HTTP/2.0 (the one other version llhttp parses) before its headers. */
static int on_version_complete(llhttp_t *ll)
{
    return version_supported(ll) ? 0 : fail(parser_of(ll), 505);
}

static int on_header_field(llhttp_t *ll, const char *at, size_t n)
{
    struct http_parser *p = parser_of(ll);
    if (p->phase == PHASE_TRAILER) return trailer_piece(p, SPAN_FIELD, at, n);
    return span_piece(p, SPAN_FIELD, at, n);
}

static int on_header_field_complete(llhttp_t *ll)
{
    struct http_parser *p = parser_of(ll);
    if (p->phase == PHASE_TRAILER) return 0;
    return span_close(p, SPAN_FIELD);
}

static int on_header_value(llhttp_t *ll, const char *at, size_t n)
{
    struct http_parser *p = parser_of(ll);
    if (p->phase == PHASE_TRAILER) return trailer_piece(p, SPAN_VALUE, at, n);
    return span_piece(p, SPAN_VALUE, at, n);
}

static int on_header_value_complete(llhttp_t *ll)
{
    struct http_parser *p = parser_of(ll);
    if (p->phase == PHASE_TRAILER) return 0;
    return span_close(p, SPAN_VALUE);
}

static const char *head_str(const struct http_parser *p, size_t off)
{
    return off == SIZE_MAX ? "" : p->head.p + off;
}

/* Transfer-Encoding: only "chunked" is supported. llhttp has already refused
 * chunked twice or not last (400) and Content-Length beside it; what it lets
 * through is a chain ending in chunked ("gzip, chunked"), one without chunked at
 * all (it would fail that later) and an empty value (it would read no body, and
 * the body would be parsed as the next request). Returns 0 or a status. */
static int check_transfer_encoding(const struct http_parser *p)
{
    int n_chunked = 0;
    for (int32_t i = 0; i < p->n_fields; i++) {
        if (strcasecmp(head_str(p, p->fields[i].name_off), "transfer-encoding") != 0)
            continue;
        const char *s = head_str(p, p->fields[i].value_off);
        while (*s) {
            /* One list element: skip separators and spaces, then read to ','. */
            while (*s == ',' || is_ows(*s))
                s++;
            const char *e = s;
            while (*e && *e != ',')
                e++;
            size_t n = (size_t)(e - s);
            while (n && is_ows(s[n - 1]))
                n--;
            if (n == 7 && strncasecmp(s, "chunked", 7) == 0)
                n_chunked++;
            else if (n)
                return 501; /* gzip, deflate, compress, or a coding with parameters */
            s = e;
        }
    }
    return n_chunked == 1 ? 0 : 400;
}

/* Build the request from the head: one block holding the struct, the header array
 * and every string (path and query as copies split off the target). */
static struct http_request *build_request(const struct http_parser *p)
{
    const char *target = head_str(p, p->target_off);
    size_t tlen = strlen(target);
    size_t n = (size_t)p->n_fields;
    /* text: the head as read, then "path\0query\0" (at most tlen + 3 with a "/"
     * made up for "http://host"), then a NUL for spans that never opened. */
    size_t text_len = p->head.len + tlen + 4;
    struct http_request *r =
        xcalloc(1, sizeof *r + n * sizeof(struct http_header) + text_len);
    r->headers = (struct http_header *)(r + 1);
    r->n_headers = p->n_fields;
    char *text = (char *)(r->headers + n);
    if (p->head.len) memcpy(text, p->head.p, p->head.len);
    char *empty = text + text_len - 1;
    r->method = p->method_off == SIZE_MAX ? empty : text + p->method_off;
    r->target = p->target_off == SIZE_MAX ? empty : text + p->target_off;
    for (size_t i = 0; i < n; i++) {
        char *name = text + p->fields[i].name_off;
        for (char *c = name; *c; c++)
            *c = ascii_lower(*c);
        r->headers[i].name = name;
        r->headers[i].value =
            p->fields[i].value_off == SIZE_MAX ? empty : text + p->fields[i].value_off;
    }

    /* origin-form "/p?q", absolute-form "http://h/p?q", asterisk-form "*",
     * authority-form "h:443" (CONNECT): the path starts at the first '/' after any
     * "scheme://authority"; a fragment is never sent by clients but llhttp accepts
     * one, so it is cut off. */
    const char *s = target;
    const char *scheme_end = strstr(target, "://");
    bool absolute = target[0] != '/' && scheme_end != NULL;
    if (absolute) s = scheme_end + 3 + strcspn(scheme_end + 3, "/?#");
    size_t path_len = strcspn(s, "?#");
    char *out = text + p->head.len;
    r->path = out;
    if (absolute && path_len == 0) *out++ = '/';
    memcpy(out, s, path_len);
    out += path_len;
    *out++ = '\0';
    if (s[path_len] == '?') {
        const char *q = s + path_len + 1;
        size_t q_len = strcspn(q, "#");
        r->query = out;
        memcpy(out, q, q_len);
        out[q_len] = '\0';
    }
    return r;
}

/* Append a request to the queue of those ready to be taken. */
static void queue_push(struct http_parser *p, struct http_request *r)
{
    if (p->q_tail)
        p->q_tail->next = r;
    else
        p->q_head = r;
    p->q_tail = r;
    p->n_queued++;
    p->queued_body_bytes += r->body_len;
}

static int on_headers_complete(llhttp_t *ll)
{
    struct http_parser *p = parser_of(ll);
    /* HTTP/0.9 ("GET /" with no version) reaches here without a version callback. */
    if (!version_supported(ll)) return fail(p, 505);

    bool expect_continue = false, has_te = false;
    int32_t n_host = 0;
    for (int32_t i = 0; i < p->n_fields; i++) {
        const char *name = head_str(p, p->fields[i].name_off);
        /* llhttp checks the characters of a name but lets through an empty one and
         * whitespace before the colon ("Host : x"), which RFC 9112 says a server
         * must reject with 400: proxies disagree on what such a name means. */
        if (!*name) return fail(p, 400);
        for (const char *c = name; *c; c++)
            if (!is_tchar((unsigned char)*c)) return fail(p, 400);
        if (strcasecmp(name, "transfer-encoding") == 0) has_te = true;
        if (strcasecmp(name, "host") == 0) n_host++;
        if (strcasecmp(name, "expect") == 0 && ll->http_minor == 1) {
            /* HTTP/1.0 has no Expect (RFC 9110 10.1.1: ignore it there). */
            if (strcasecmp(head_str(p, p->fields[i].value_off), "100-continue") != 0)
                return fail(p, 417);
            expect_continue = true;
        }
    }

    bool chunked = ll->flags & F_CHUNKED;
    bool has_length = ll->flags & F_CONTENT_LENGTH;
    if (has_te) {
        /* Both framings at once is the classic smuggling request; llhttp refuses it
         * already, this keeps the rule independent of its lenient flags. The header
         * is looked at whatever llhttp's flags say: it does not flag an empty one. */
        if (has_length) return fail(p, 400);
        int st = check_transfer_encoding(p);
        if (st) return fail(p, st);
    }
    struct http_request *r = build_request(p);
    /* An upload route may take more than other requests. */
    const bool upload = p->lim.upload_path && ll->method == HTTP_POST &&
                        !strcmp(r->path, p->lim.upload_path);
    p->body_limit = p->lim.max_body_bytes;
    if (upload) p->body_limit = MAX(p->lim.max_upload_bytes, p->lim.max_body_bytes);
    if (has_length && ll->content_length > p->body_limit) {
        http_request_free(r);
        return fail(p, 413);
    }
    /* RFC 9112 3.2: an HTTP/1.1 request without Host, and any request with two, is
     * a 400 (HTTP/1.0 had no Host; an empty value is allowed). After the framing
     * checks, whose answers (413, 501) say more. */
    if (n_host > 1 || (ll->http_minor == 1 && n_host == 0)) {
        http_request_free(r);
        return fail(p, 400);
    }
    r->http_major = ll->http_major;
    r->http_minor = ll->http_minor;
    r->expect_continue = expect_continue;
    /* After CONNECT the bytes are a tunnel's, not HTTP: nothing can follow it. */
    r->keep_alive = llhttp_should_keep_alive(ll) && ll->method != HTTP_CONNECT;
    const bool has_body = chunked || (has_length && ll->content_length);
    p->body_len = 0;
    p->body_cap = 0;
    p->body_total = has_length ? (size_t)ll->content_length : 0;
    p->phase = PHASE_BODY;
    p->want_continue = expect_continue && has_body;
    if (!(upload && has_body)) {
        p->req = r;
        return 0;
    }
    /* An upload is handed over now and its body streamed to the sink. An empty one
     * is not: nothing would feed the parser again to end it. Pausing here stops
     * llhttp right after the head, so the body waits (unconsumed) until the request
     * is taken and its taker has made ready for it. */
    r->body_streamed = true;
    p->streaming = true;
    p->stream_queued = true;
    p->stream_keep_alive = r->keep_alive;
    queue_push(p, r);
    return HPE_PAUSED;
}

static int on_chunk_header(llhttp_t *ll)
{
    struct http_parser *p = parser_of(ll);
    /* ll->content_length holds this chunk's size: refuse an oversized body before
     * its bytes arrive. */
    if (ll->content_length > p->body_limit - p->body_len) return fail(p, 413);
    if (ll->content_length == 0) {
        p->phase = PHASE_TRAILER;
        p->start_set = false;
        p->span = SPAN_NONE;
    }
    return 0;
}

/* Chunk extensions are parsed by llhttp and ignored here, but their length is
 * capped: a client could otherwise send an endless extension that costs CPU and
 * never completes a chunk (the cap Node.js adopted for CVE-2024-22019). */
static int on_chunk_extension(llhttp_t *ll, const char *at, size_t n)
{
    struct http_parser *p = parser_of(ll);
    (void)at;
    p->ext_bytes += n;
    return p->ext_bytes > p->lim.max_header_bytes ? fail(p, 413) : 0;
}

static int on_body(llhttp_t *ll, const char *at, size_t n)
{
    struct http_parser *p = parser_of(ll);
    if (n > p->body_limit - p->body_len) return fail(p, 413);
    p->want_continue = false;
    p->body_len += n;
    if (p->streaming) {
        if (p->sink.data) p->sink.data(p->sink.ctx, at, n);
        return 0;
    }
    struct http_request *r = p->req;
    if (r->body_len + n + 1 > p->body_cap) {
        /* Grow by doubling rather than trusting Content-Length up front, so a
         * client that announces 32 MiB and sends nothing holds no 32 MiB; but never
         * past the announced length (+1 for the NUL). */
        size_t cap = p->body_cap ? p->body_cap : 1024;
        while (cap < r->body_len + n + 1)
            cap *= 2;
        if (p->body_total && cap > p->body_total + 1) cap = p->body_total + 1;
        r->body = xrealloc(r->body, cap);
        p->body_cap = cap;
    }
    memcpy(r->body + r->body_len, at, n);
    r->body_len += n;
    return 0;
}

/* Backpressure: enough requests, or enough body bytes, wait to be taken. Counting
 * bytes too keeps a client that pipelines big bodies from parking max_pipelined
 * of them in one connection. */
static bool queue_full(const struct http_parser *p)
{
    return p->n_queued >= p->lim.max_pipelined ||
           p->queued_body_bytes >= p->lim.max_body_bytes;
}

static int on_message_complete(llhttp_t *ll)
{
    struct http_parser *p = parser_of(ll);
    bool keep_alive;
    if (p->streaming) {
        /* The request was taken before its body (the feed stops until it is). */
        CHECK(!p->stream_queued);
        p->streaming = false;
        keep_alive = p->stream_keep_alive;
        if (p->sink.end) p->sink.end(p->sink.ctx);
    } else {
        struct http_request *r = p->req;
        CHECK(r != NULL);
        p->req = NULL;
        if (r->body) r->body[r->body_len] = '\0';
        keep_alive = r->keep_alive;
        queue_push(p, r);
    }

    p->phase = PHASE_IDLE;
    p->want_continue = false;
    if (p->head.cap > HEAD_KEEP_BYTES) {
        free(p->head.p);
        p->head = (struct byte_buf){0};
    }
    if (!keep_alive) {
        /* llhttp drops what follows on its own (its "closed" state); stop here too
         * so the feed reports it consumed and never pauses for nothing. */
        p->closed = true;
        return 0;
    }
    /* Pausing in this callback stops llhttp right after the request's last byte,
     * which is where the next feed resumes. */
    return queue_full(p) ? HPE_PAUSED : 0;
}

static const llhttp_settings_t http_settings = {
    .on_message_begin = on_message_begin,
    .on_method = on_method,
    .on_method_complete = on_method_complete,
    .on_url = on_url,
    .on_url_complete = on_url_complete,
    .on_version_complete = on_version_complete,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_chunk_header = on_chunk_header,
    .on_chunk_extension_name = on_chunk_extension,
    .on_chunk_extension_value = on_chunk_extension,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- the parser ---- */

struct http_parser *http_parser_create(const struct http_limits *limits)
{
    CHECK(limits->max_header_bytes > 0 && limits->max_body_bytes > 0);
    CHECK(limits->max_headers > 0 && limits->max_pipelined > 0);
    struct http_parser *p = xcalloc(1, sizeof *p);
    p->lim = *limits;
    llhttp_init(&p->ll, HTTP_REQUEST, &http_settings);
    p->ll.data = p;
    p->phase = PHASE_IDLE;
    p->method_off = p->target_off = SIZE_MAX;
    return p;
}

void http_parser_set_body_sink(struct http_parser *p, const struct http_body_sink *sink)
{
    p->sink = *sink;
}

void http_parser_destroy(struct http_parser *p)
{
    if (!p) return;
    while (p->q_head) {
        struct http_request *r = p->q_head;
        p->q_head = r->next;
        http_request_free(r);
    }
    http_request_free(p->req);
    free(p->fields);
    free(p->head.p);
    free(p);
}

/* llhttp's errors that are not ours: a version llhttp itself refuses (HTTP/1.2,
 * HTTP/3.0) or the HTTP/2 connection preface is a 505; every other is malformed. */
static int status_of_errno(llhttp_errno_t e)
{
    switch (e) {
    case HPE_INVALID_VERSION:
    case HPE_PAUSED_H2_UPGRADE: return 505;
    default: return 400;
    }
}

int http_parser_feed(struct http_parser *p, const char *data, size_t len, size_t *consumed)
{
    *consumed = 0;
    if (p->status) return p->status;
    size_t off = 0;
    while (off < len && !p->closed && !queue_full(p) && !p->stream_queued) {
        p->base = data + off;
        llhttp_errno_t e = llhttp_execute(&p->ll, data + off, len - off);
        size_t used = len - off;
        if (e == HPE_PAUSED || e == HPE_PAUSED_UPGRADE)
            used = (size_t)(llhttp_get_error_pos(&p->ll) - (data + off));
        p->pos += used;
        off += used;
        if (p->status || (e != HPE_OK && e != HPE_PAUSED && e != HPE_PAUSED_UPGRADE)) {
            if (!p->status) p->status = status_of_errno(e);
            break;
        }
        /* The head (or trailer) limit counts bytes llhttp skips without a
         * callback too, such as a flood of spaces before a header value. */
        if ((p->phase == PHASE_HEAD || p->phase == PHASE_TRAILER) && p->start_set &&
            p->pos - p->start > p->lim.max_header_bytes) {
            p->status = 431;
            break;
        }
        if (e == HPE_PAUSED) {
            /* The queue is full (on_message_complete) or a streamed request waits
             * to be taken (on_headers_complete): resume now so the next feed simply
             * executes; the loop condition stops this one. */
            llhttp_resume(&p->ll);
        } else if (e == HPE_PAUSED_UPGRADE) {
            /* "Upgrade:" is a request the server may ignore (RFC 9110 7.8): go on
             * reading HTTP/1.1. CONNECT set closed instead, and the loop ends. */
            llhttp_resume_after_upgrade(&p->ll);
        }
    }
    if (p->status) return p->status;
    /* Bytes after a streamed request's head are its body on the way: the client is
     * sending, no 100 is due (as on_body decides for a buffered body). */
    if (p->stream_queued && off < len) p->want_continue = false;
    if (p->closed) off = len;
    *consumed = off;
    return 0;
}

struct http_request *http_parser_take(struct http_parser *p)
{
    struct http_request *r = p->q_head;
    if (!r) return NULL;
    p->q_head = r->next;
    if (!p->q_head) p->q_tail = NULL;
    p->n_queued--;
    p->queued_body_bytes -= r->body_len;
    r->next = NULL;
    if (r->body_streamed) p->stream_queued = false; /* it was the last */
    return r;
}

bool http_parser_take_continue(struct http_parser *p)
{
    /* A streamed request's 100 waits until it is taken (http.h). */
    if (p->stream_queued) return false;
    bool c = p->want_continue && !p->status;
    p->want_continue = false;
    return c;
}

bool http_parser_idle(const struct http_parser *p)
{
    return p->phase == PHASE_IDLE;
}

bool http_parser_queued(const struct http_parser *p)
{
    return p->q_head != NULL;
}

/* ---- requests ---- */

void http_request_free(struct http_request *r)
{
    if (!r) return;
    free(r->body);
    free(r); /* the struct, the header array and the strings are one block */
}

const char *http_request_header(const struct http_request *r, const char *lowercase_name)
{
    for (int32_t i = 0; i < r->n_headers; i++)
        if (strcmp(r->headers[i].name, lowercase_name) == 0) return r->headers[i].value;
    return NULL;
}

/* ---- responses ---- */

const char *http_status_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 426: return "Upgrade Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

/* An snprintf-like writer: counts everything, stores what fits. */
struct head_out {
    char *buf;
    size_t cap, len;
};

static void out_put(struct head_out *o, const char *s)
{
    size_t n = strlen(s);
    if (o->len < o->cap) memcpy(o->buf + o->len, s, MIN(n, o->cap - o->len));
    o->len += n;
}

size_t http_format_head(char *buf, size_t cap, int status, const char *content_type,
                        int64_t content_length, bool keep_alive, const char *extra_headers)
{
    CHECK(status >= 100 && status <= 999);
    CHECK(content_length >= -2);
    struct head_out o = {buf, cap, 0};
    char line[64];
    snprintf(line, sizeof line, "HTTP/1.1 %d ", status);
    out_put(&o, line);
    out_put(&o, http_status_reason(status));
    out_put(&o, "\r\n");
    if (content_type) {
        out_put(&o, "Content-Type: ");
        out_put(&o, content_type);
        out_put(&o, "\r\n");
    }
    bool no_body = status < 200 || status == 204 || status == 304;
    if (!no_body && content_length >= 0) {
        snprintf(line, sizeof line, "Content-Length: %lld\r\n", (long long)content_length);
        out_put(&o, line);
    } else if (!no_body && content_length == -1) {
        out_put(&o, "Transfer-Encoding: chunked\r\n");
    }
    out_put(&o, keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
    if (extra_headers) out_put(&o, extra_headers);
    out_put(&o, "\r\n");
    if (cap) buf[MIN(o.len, cap - 1)] = '\0';
    return o.len;
}

size_t http_format_chunk_head(char buf[static 20], size_t len)
{
    return (size_t)snprintf(buf, 20, "%zx\r\n", len);
}

const char http_chunk_last[] = "0\r\n\r\n";
