/*
 * http.h - the HTTP/1.1 request layer: bytes in, complete requests out; response
 * heads and chunk framing out.
 *
 * A pure module: no sockets, no libuv, no clock. The connection code (conn.c) feeds
 * whatever it read, takes the requests that completed, and writes what this module
 * formats; the unit tests and the libFuzzer target drive it the same way. llhttp
 * does the tokenizing in its default (non-lenient) mode; this layer adds the limits,
 * the framing rules llhttp leaves to the server (unsupported transfer codings,
 * Expect, versions other than 1.0/1.1) and copies everything out of llhttp's
 * buffers, so a request owes nothing to the bytes it was parsed from.
 *
 * Streamed bodies: a POST to the upload path (http_limits.upload_path) with a body
 * is handed over as soon as its head is complete (body_streamed), and its body then
 * goes, piece by piece as it is parsed, to the parser's body sink
 * (http_parser_set_body_sink) instead of into memory, so a file upload of any size
 * costs the parser nothing. Every other request is buffered whole, as before.
 *
 * Error statuses: http_parser_feed returns 0 or the HTTP status to answer before
 * closing the connection (400, 413, 417, 431, 501, 505). Those are HTTP statuses,
 * not the engine's negative codes, because the only thing a caller does with them
 * is send that status.
 *
 * Thread: loop. A parser and its requests belong to one connection; nothing here
 * is shared, so two connections may run on two threads if a caller ever wants that.
 */
#ifndef H2O_HTTP_H
#define H2O_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_header {
    char *name;  /* lowercased ASCII, validated as an RFC 9110 token */
    char *value; /* leading and trailing spaces and tabs removed; may be "" */
};

/*
 * One complete request, or a streamed one's head (body_streamed: its body follows
 * through the body sink). Every string is NUL-terminated and lives in one block with
 * the struct itself (the header array too); the body is a second allocation.
 * http_request_free releases both.
 */
struct http_request {
    struct http_request *next;   /* the parser's queue; free for the caller once taken */
    char *method;                /* "GET", "POST", ... as sent (llhttp checks the set) */
    char *target;                /* the request-target as sent: "/v1/models?x=1" */
    char *path;                  /* target without query and fragment, not decoded; for
                                    absolute-form "http://h/p" it is "/p" */
    char *query;                 /* after '?', without the fragment; NULL when no '?' */
    struct http_header *headers; /* in arrival order; duplicates are kept */
    int32_t n_headers;
    char *body;           /* body_len bytes plus a NUL (handy for text); NULL when empty
                             or streamed */
    size_t body_len;      /* after de-chunking; 0 when streamed */
    bool body_streamed;   /* taken before its body, which goes to the body sink */
    bool keep_alive;      /* the connection may carry another request after this one */
    bool expect_continue; /* sent "Expect: 100-continue" (HTTP/1.1 only) */
    int http_major, http_minor; /* 1.0 or 1.1: anything else was answered with 505 */
};

struct http_limits {
    size_t max_header_bytes; /* request line + header section (and, separately, a
                                chunked body's trailer section); more -> 431 */
    size_t max_body_bytes;   /* decoded body; more -> 413, from Content-Length before
                                any body byte arrives, or from chunk sizes; the chunk
                                extensions of one body are held to max_header_bytes */
    const char *upload_path; /* POSTs to exactly this path (NULL: none) may carry */
    size_t max_upload_bytes; /*   up to this much body instead (file uploads), and
                                  a non-empty one is streamed (body_streamed) */
    int32_t max_headers;     /* header fields (and trailer fields); more -> 431 */
    int32_t max_pipelined;   /* complete requests queued in the parser before feed
                                stops consuming (backpressure); feed also stops
                                once the queued bodies reach max_body_bytes, so a
                                connection holds at most about twice that */
};

/* 16 KiB of headers, 32 MiB of body, 100 header fields, 16 queued requests.
 * Thread: any. */
struct http_limits http_limits_default(void);

/* Release a request and everything it points to. NULL is a no-op. Owns: r.
 * Thread: any (a taken request is self-contained). */
void http_request_free(struct http_request *r);

/* The first header with this name (give it lowercased), or NULL. The pointer lives
 * as long as r. Thread: any. */
const char *http_request_header(const struct http_request *r, const char *lowercase_name);

struct http_parser;

/*
 * Where a streamed body goes (body_streamed). Both callbacks run inside
 * http_parser_feed, after the request was taken: data for each piece of the body as
 * it is parsed (de-chunked, len > 0; valid during the call only), then end once when
 * the body is complete (after a chunked body's trailer section). A body that never
 * completes gets no end: the feed returns an error status instead, or the caller
 * stops feeding; the caller knows which request that was.
 */
struct http_body_sink {
    void (*data)(void *ctx, const char *data, size_t len);
    void (*end)(void *ctx);
    void *ctx;
};

/* A parser for one connection's incoming byte stream. The limits are copied; each
 * must be positive (they come from configuration, so a bad one is a CHECK). Caller
 * owns the parser and destroys it. Thread: loop. */
struct http_parser *http_parser_create(const struct http_limits *limits);

/* Free the parser, the request it was reading and every request not yet taken.
 * NULL is a no-op. Thread: loop. */
void http_parser_destroy(struct http_parser *p);

/* Send streamed bodies to `sink` (copied); without one they are parsed and dropped.
 * Thread: loop. */
void http_parser_set_body_sink(struct http_parser *p, const struct http_body_sink *sink);

/*
 * Parse `len` bytes of the stream, which go on from the previous call's consumed
 * bytes: fields may be split anywhere, and several requests may sit back to back
 * (pipelining). Complete requests are queued for http_parser_take. Nothing points
 * into `data` afterwards.
 *
 * Sets *consumed to the bytes used. It is less than `len` only for backpressure:
 * when max_pipelined requests (or max_body_bytes of bodies) are queued the parser
 * stops right after the request that filled the queue; the caller stops reading,
 * takes requests, and feeds the rest of the bytes again later (a feed with the
 * queue full consumes nothing). The bound holds only if the caller takes a request
 * when it is ready to work on it, not all of them at once. The feed also stops right
 * after the head of a streamed request and consumes nothing more until that request
 * is taken, so its body goes to a sink whose owner knows the request; it then goes
 * on through the body, calling the sink, without any bound on the body's size but
 * the limits.
 * After a request that ends the connection (keep_alive false) the parser swallows
 * everything that follows, like llhttp does, since no one will answer it.
 *
 * Returns 0, or the status to send before closing: 400 malformed (bad syntax, bad
 * chunk size, a header name with whitespace before the colon, obs-fold, both
 * Content-Length and Transfer-Encoding, duplicate Content-Length, a bad
 * Content-Length), 413 body over the limit, 417 an Expect other than
 * 100-continue, 431 header section over the limits, 501 a transfer coding other
 * than chunked, 505 a version other than HTTP/1.0 and 1.1 (HTTP/2 prior knowledge
 * included). An error is sticky: every later feed returns it again, consuming
 * nothing. Requests completed before the error stay queued; *consumed is then
 * meaningless. An error inside a streamed body (400 bad chunk framing, 413 a chunked
 * body over max_upload_bytes, 431 its trailers) belongs to the streamed request
 * already taken.
 * Thread: loop.
 */
int http_parser_feed(struct http_parser *p, const char *data, size_t len, size_t *consumed);

/* The oldest complete request, or NULL. Caller owns it (http_request_free). Taking
 * one makes room in the queue, so a paused stream may be fed again. Thread: loop. */
struct http_request *http_parser_take(struct http_parser *p);

/*
 * True once per request, right after a feed that completed the head of an
 * HTTP/1.1 request with "Expect: 100-continue" and a body of which no byte has
 * arrived yet: the caller then writes "HTTP/1.1 100 Continue\r\n\r\n" (after the
 * responses to the requests queued before it, which come first on the wire), or a
 * final status instead. False once a body byte arrives: the client is sending
 * anyway. For a streamed request it is true only once that request was taken (and
 * before any of its body), so that the caller can look at the request before it
 * asks for the body. Thread: loop.
 */
bool http_parser_take_continue(struct http_parser *p);

/* True when no part of a request is buffered (queued complete requests do not
 * count). The idle keep-alive timeout applies only then; a half-sent request is
 * under the header or body timeout instead. Thread: loop. */
bool http_parser_idle(const struct http_parser *p);

/* True when complete requests wait to be taken (http_parser_take). Thread: loop. */
bool http_parser_queued(const struct http_parser *p);

/* The reason phrase for a status ("Not Found"), or "Unknown" for one this server
 * never sends. Static string. Thread: any. */
const char *http_status_reason(int status);

/*
 * Write a response head into buf: the status line (always HTTP/1.1), Content-Type
 * when content_type is not NULL, the framing, "Connection: keep-alive" or
 * "Connection: close", extra_headers verbatim (each line "Name: value\r\n", or
 * NULL), and the blank line. Framing: content_length >= 0 writes Content-Length;
 * -1 writes "Transfer-Encoding: chunked"; -2 writes neither (the body ends when
 * the connection closes: an HTTP/1.0 client streaming, which cannot read chunked).
 * 1xx, 204 and 304 never get a framing header (RFC 9110 forbids one).
 * Returns the head's length like snprintf: when it is >= cap the head did not fit
 * (buf then holds a NUL-terminated prefix) and the caller retries bigger.
 * Thread: any.
 */
size_t http_format_head(char *buf, size_t cap, int status, const char *content_type,
                        int64_t content_length, bool keep_alive, const char *extra_headers);

/* Write the head of one chunk of `len` bytes ("1a2b\r\n") and return its length
 * (at most 18; buf gets a NUL too). The chunk is then the data and "\r\n". A
 * zero-length chunk ends the body: send http_chunk_last instead. Thread: any. */
size_t http_format_chunk_head(char buf[static 20], size_t len);

/* The last chunk and an empty trailer section: "0\r\n\r\n" (5 bytes). */
extern const char http_chunk_last[];

#endif
