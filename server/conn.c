/*
 * conn.c - one client connection: reading into the HTTP parser, the queue of
 * exchanges, ordered writes, limits and timeouts.
 *
 * Owns: the socket, the parser, unconsumed input, and the exchanges until their
 * responses are written; all of them are freed in the socket's close callback (as
 * libuv wants for the handle, and so that no caller sees its exchange vanish).
 * Invariants: only the head exchange writes to the socket; the others buffer. At
 * most CONN_MAX_EXCH exchanges are open, and at most write_queue_max_bytes are
 * buffered in them: past either the connection stops reading (pipelining
 * backpressure) until the head drains. A body goes to libuv a piece at a time,
 * the next piece when the client has taken the last, so libuv never holds more
 * than write_queue_max_bytes unsent for a response however large. A client is
 * judged slow by its progress: no write completing for the idle timeout, or a
 * stream that piles more than write_queue_max_bytes on a socket it does not
 * drain.
 * A streamed body (a file upload) goes from the parser to its exchange's body
 * callbacks as it is read; its exchange is the last one open (the parser reads
 * nothing after it until the body ends), and the timeouts, the drain and a closing
 * connection end it with body_abort.
 * Nothing here calls up into the routes: each request goes to the handler that
 * conn_accept was given, and what a handler hangs on an exchange is released
 * through the exchange's dispose callback.
 * Why one file of about 720 lines: reading, the exchange queue and writing share
 * one struct conn whose limits (CONN_MAX_EXCH, write_queue_max_bytes) tie them
 * together: a write decides when reading resumes, and a streamed body's answer
 * decides whether the connection reads on; split, each half would need the other's
 * statics through a header.
 * Thread: loop.
 */
#include "conn.h"

#include "srv.h"

#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONN_MAX_EXCH 16
/* A body (in memory or in a file) goes out OUT_CHUNK bytes at a time (less under a
 * smaller write_queue_max_bytes), and only while the chunk fits under that limit
 * with what libuv still holds unsent: a 200 MB download costs a few chunks of
 * memory and never reads the disk faster than the client reads the socket, and a
 * 15 MB completion body reaches a client that reads it at full speed, however
 * large it is against the limit. At most OUT_BURST chunks per call, so one fast
 * client cannot hold the loop for a whole body; the write callbacks carry on. */
#define OUT_CHUNK (256 * 1024)
#define OUT_BURST 4

struct wreq {
    uv_write_t w;
    struct conn *c;
    size_t len;
    char data[];
};

/* With --log-requests, one line for the exchange that is being freed: method, path,
 * status (or "-" when the client left before the answer), its log_note and the
 * latency. */
static void log_exchange(const struct exch *x)
{
    if (!x->c->s->cfg->log_requests || !x->req) return;
    char status[8] = "-";
    if (x->status) snprintf(status, sizeof status, "%d", x->status);
    log_info("request %s %s %s%s%s %.1f ms", x->req->method, x->req->path, status,
             x->log_note ? " " : "", x->log_note ? x->log_note : "",
             (uv_hrtime() * 1e-9 - x->t_start) * 1e3);
}

static void free_exch(struct exch *x)
{
    if (x->c->body_x == x) x->c->body_x = NULL; /* the rest of its body is dropped */
    if (x->body_open && !x->done && x->body_abort) x->body_abort(x);
    x->body_open = false;
    if (x->file) fclose(x->file);
    /* The handler's state goes first: an unfinished completion notes what it did,
     * for the log line, and cancels its engine requests. */
    if (x->dispose) x->dispose(x);
    log_exchange(x);
    free(x->log_note);
    http_request_free(x->req);
    free(x->out);
    free(x);
}

/* The exchanges, the parser and the input are freed here, in the close callback,
 * and not in conn_close: conn_close runs under callers that still use their
 * exchange (a write that finds a slow client, a protocol error mid-dispatch), and
 * an exchange must outlive every call that holds it. Engine requests are cancelled
 * here too, within the same loop iteration. */
static void on_close(uv_handle_t *h)
{
    struct conn *c = h->data;
    while (c->head) {
        struct exch *x = c->head;
        c->head = x->next;
        free_exch(x);
    }
    http_parser_destroy(c->parser);
    free(c->pending);
    free(c);
}

void conn_close(struct conn *c)
{
    if (c->closing) return;
    c->closing = true;
    struct srv *s = c->s;
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    s->n_conns--;
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

static void pump(struct exch *x);
static void advance(struct conn *c);

static void on_written(uv_write_t *w, int status)
{
    struct wreq *r = (struct wreq *)w;
    struct conn *c = r->c;
    c->wq_bytes -= r->len;
    c->last_written = uv_now(c->s->loop);
    free(r);
    if (c->closing) return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    c->last_active = uv_now(c->s->loop);
    if (c->close_after_write) {
        /* After a "Connection: close" response its successors never write. */
        if (c->wq_bytes == 0) conn_close(c);
        return;
    }
    /* The head's body goes on; a head sent whole lets the next one write, and a
     * drained connection reads again (advance). */
    if (c->head && c->head->is_head) pump(c->head);
    advance(c);
}

static void sock_write(struct conn *c, const char *data, size_t len)
{
    if (c->closing || len == 0) return;
    struct wreq *r = xmalloc(sizeof *r + len);
    r->c = c;
    r->len = len;
    memcpy(r->data, data, len);
    uv_buf_t b = uv_buf_init(r->data, (unsigned)len);
    const size_t before = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
    if (c->wq_bytes == 0) c->last_written = uv_now(c->s->loop); /* the wait starts now */
    c->wq_bytes += len;
    if (uv_write(&r->w, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
        c->wq_bytes -= len;
        free(r);
        conn_close(c);
        return;
    }
    /* uv_write hands the socket what it takes at once; libuv's queue holds only what
     * the client has not read yet. wq_bytes would also count bytes already sent
     * (their callbacks run later), so a fast reader would look slow. Bodies come
     * here in pieces that fit under the limit (pump), so what passes it is a
     * stream's chunks piling up on a client that does not read: it is dropped
     * rather than buffered without bound. A write to a client that had read
     * everything before it is never slowness; the idle timeout catches a client
     * that then reads nothing. */
    size_t unsent = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
    if (before > 0 && unsent > (size_t)c->s->cfg->write_queue_max_bytes) {
        log_warn("closing a connection with %zu unsent bytes (slow client)", unsent);
        conn_close(c);
    }
}

static size_t write_limit(const struct conn *c)
{
    return (size_t)c->s->cfg->write_queue_max_bytes;
}

/* Stop reading requests: the exchanges or their buffered bytes are at the limit. */
static void stop_reading(struct conn *c)
{
    if (!c->reading) return;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
}

void conn_write(struct exch *x, const char *data, size_t len)
{
    struct conn *c = x->c;
    if (c->closing || len == 0) return;
    const bool queued = x->out_off < x->out_len;
    /* A small piece at the head with nothing before it goes straight out (a
     * stream's chunks, a response head); anything else waits in out. */
    if (x->is_head && !queued && !x->file && len <= OUT_CHUNK) {
        sock_write(c, data, len);
        return;
    }
    if (x->out_len + len > x->out_cap) {
        x->out_cap = MAX(x->out_len + len, 2 * x->out_cap + 256);
        x->out = xrealloc(x->out, x->out_cap);
    }
    memcpy(x->out + x->out_len, data, len);
    x->out_len += len;
    c->buffered += len;
    if (!x->is_head) {
        /* Behind the head: bounded by reading no more requests (consume). */
        if (c->buffered > write_limit(c)) stop_reading(c);
        return;
    }
    /* More piled on the head's body while the client has not taken what waited: a
     * stream outrunning its reader. One piece (a whole body, or what an exchange
     * buffered before it reached the head) is not slowness. */
    if (queued) x->out_piled += len;
    if (x->out_piled > write_limit(c)) {
        log_warn("closing a connection with %zu unsent bytes (slow client)",
                 x->out_len - x->out_off);
        conn_close(c);
        return;
    }
    pump(x);
}

static void read_more(struct conn *c);

/* Whether x is finished and every byte of it was handed to the socket. */
static bool exch_sent(const struct exch *x)
{
    return x->done && x->out_off == x->out_len && !x->file;
}

/* Pop sent exchanges off the head and let the next one write what it has; read
 * again when the exchanges and their bytes are under the limits. */
static void advance(struct conn *c)
{
    while (c->head && exch_sent(c->head) && !c->closing) {
        struct exch *x = c->head;
        const bool keep = x->keep_alive; /* what its head told the client */
        c->head = x->next;
        if (!c->head) c->tail = NULL;
        c->n_exch--;
        free_exch(x);
        if (!keep) {
            /* The response said "Connection: close": finish writing, then close. */
            c->close_after_write = true;
            if (c->wq_bytes == 0) conn_close(c);
            return;
        }
        if (c->head) {
            c->head->is_head = true;
            pump(c->head);
        }
    }
    if (!c->closing && !c->reading && c->n_exch < CONN_MAX_EXCH && c->buffered <= write_limit(c))
        read_more(c);
}

void conn_finish(struct exch *x)
{
    x->done = true;
    if (x->is_head) advance(x->c);
}

/* Hand the head exchange's body to the socket: what waits in out, then the file,
 * a chunk at a time while the chunk fits under the limit with what libuv holds
 * unsent (on_written resumes). A file's chunks must also fit with the writes whose
 * callbacks have not run: a write the socket took at once keeps its copy until its
 * callback, in the next loop iteration, and every callback pumps again, so against a
 * client that reads as fast as the file is read (a download from PostgreSQL) the
 * copies of a whole file piled up. Bytes from out are not held back so: their copies
 * are of bytes already in memory, and a stream's backlog must drain at the old pace
 * or the chunks it adds meanwhile would pass for a slow client's. A read error after
 * the head promised Content-Length leaves no way to tell the client but closing the
 * connection. */
static void pump(struct exch *x)
{
    struct conn *c = x->c;
    uv_stream_t *st = (uv_stream_t *)&c->tcp;
    const size_t limit = write_limit(c);
    const size_t chunk = MIN((size_t)OUT_CHUNK, limit);
    char *buf = NULL;
    for (int i = 0; i < OUT_BURST && !c->closing; i++) {
        const bool mem = x->out_off < x->out_len;
        if (!mem && !(x->file && x->file_left > 0)) break;
        if (uv_stream_get_write_queue_size(st) + chunk > limit) break;
        if (!mem && c->wq_bytes + chunk > limit) break;
        if (mem) {
            size_t n = MIN(chunk, x->out_len - x->out_off);
            x->out_off += n;
            c->buffered -= n;
            sock_write(c, x->out + x->out_off - n, n);
            continue;
        }
        if (!buf) buf = xmalloc(chunk);
        size_t want = (size_t)MIN(x->file_left, (int64_t)chunk);
        const size_t n = fread(buf, 1, want, x->file);
        if (n == 0) {
            log_error("reading a file body: %s",
                      ferror(x->file) ? strerror(errno) : "file shrank");
            conn_close(c);
            break;
        }
        x->file_left -= (int64_t)n;
        sock_write(c, buf, n);
    }
    free(buf);
    if (c->closing) return;
    if (x->out && x->out_off == x->out_len) {
        free(x->out); /* a big body's memory goes as soon as it is out */
        x->out = NULL;
        x->out_len = x->out_cap = x->out_off = x->out_piled = 0;
    }
    if (x->file && x->file_left == 0) {
        fclose(x->file);
        x->file = NULL;
    }
}

/* Read no more requests: the parser is left where it is and never fed again. */
static void stop_parsing(struct conn *c)
{
    c->failed = true;
    stop_reading(c);
    free(c->pending);
    c->pending = NULL;
    c->pending_len = 0;
}

/* Whether x's response may keep the connection. One that answers a request whose
 * body the client still holds back for our 100 Continue cannot: the client may
 * never send that body, so nothing after the head could be told apart from the next
 * request. The connection then reads no more. */
static bool response_keeps(struct exch *x)
{
    if (x->await_continue) {
        x->await_continue = false;
        stop_parsing(x->c);
        return false;
    }
    return x->req->keep_alive && !x->c->s->draining;
}

/* Format a response head and queue it. The head is formatted again on the heap
 * when it does not fit the stack buffer (a long CORS origin), rather than sent cut
 * short: http_format_head returns the length it needed, like snprintf. */
static void write_head(struct exch *x, int status, const char *content_type,
                       int64_t content_length, const char *extra)
{
    char buf[1024];
    size_t n = http_format_head(buf, sizeof buf, status, content_type, content_length,
                                x->keep_alive, extra);
    if (n < sizeof buf) {
        conn_write(x, buf, n);
        return;
    }
    char *big = xmalloc(n + 1);
    http_format_head(big, n + 1, status, content_type, content_length, x->keep_alive, extra);
    conn_write(x, big, n);
    free(big);
}

/* extra_headers plus the CORS header when configured (caller frees). */
static char *extra_with_cors(const struct conn *c, const char *extra)
{
    const char *origin = c->s->cfg->cors_allow_origin;
    if (!extra) extra = "";
    if (!origin) return xstrdup(extra);
    size_t n = strlen(extra) + strlen(origin) + 64;
    char *out = xmalloc(n);
    snprintf(out, n, "%sAccess-Control-Allow-Origin: %s\r\n", extra, origin);
    return out;
}

void conn_respond(struct exch *x, int status, const char *content_type, const char *body,
                  size_t len, const char *extra_headers)
{
    char *extra = extra_with_cors(x->c, extra_headers);
    x->keep_alive = response_keeps(x);
    x->status = status;
    write_head(x, status, content_type ? content_type : "application/json", (int64_t)len, extra);
    free(extra);
    if (!x->head_only) conn_write(x, body, len);
    conn_finish(x);
}

void conn_respond_file(struct exch *x, int status, const char *content_type, FILE *f,
                       int64_t len)
{
    char *extra = extra_with_cors(x->c, NULL);
    x->keep_alive = response_keeps(x);
    x->status = status;
    write_head(x, status, content_type, len, extra);
    free(extra);
    if (len == 0 || x->head_only) {
        fclose(f);
        conn_finish(x);
        return;
    }
    x->file = f;
    x->file_left = len;
    /* Finished as far as the handler goes; the exchange is sent once the file is
     * (pump, now at the head, else when advance() makes it the head). */
    if (x->is_head) pump(x);
    conn_finish(x);
}

void conn_error(struct exch *x, struct api_error *e)
{
    size_t len;
    char *body = api_error_json(e, &len);
    const char *extra = NULL;
    char buf[64];
    if (e->status == 429 || e->status == 503) {
        snprintf(buf, sizeof buf, "Retry-After: 1\r\n");
        extra = buf;
    } else if (e->status == 401) {
        extra = "WWW-Authenticate: Bearer\r\n";
    }
    conn_respond(x, e->status, "application/json", body, len, extra);
    free(body);
    api_error_clear(e);
}

void conn_stream_start(struct exch *x, int status, const char *content_type)
{
    /* HTTP/1.0 has no chunked encoding: the body then ends when the connection
     * closes, so that response can never keep the connection. */
    x->chunked = !(x->req->http_major == 1 && x->req->http_minor == 0);
    x->keep_alive = response_keeps(x) && x->chunked;
    x->status = status;
    char *extra = extra_with_cors(x->c, "Cache-Control: no-cache\r\n");
    write_head(x, status, content_type, x->chunked ? -1 : -2, extra);
    free(extra);
}

void conn_chunk(struct exch *x, const char *data, size_t len)
{
    if (len == 0) return; /* a zero-length chunk would end the body */
    if (!x->chunked) {
        conn_write(x, data, len);
        return;
    }
    char h[20];
    size_t hl = http_format_chunk_head(h, len);
    conn_write(x, h, hl);
    conn_write(x, data, len);
    conn_write(x, "\r\n", 2);
}

void conn_stream_end(struct exch *x)
{
    if (x->chunked) conn_write(x, http_chunk_last, strlen(http_chunk_last));
    conn_finish(x);
}

/* Answer a protocol error (400, 413, 431, ...) and close after it is written. The
 * parser's error is sticky, so the connection never reads or parses again: a
 * second feed would queue a second answer, and reading on would buffer whatever
 * the client sends while requests ahead of the error are still running. */
static void protocol_error(struct conn *c, int status)
{
    stop_parsing(c);
    struct exch *x = NULL;
    if (c->in_body) {
        /* The error is in a streamed body, whose request has its exchange already:
         * the error is that request's answer. One answered before (and perhaps sent
         * and freed) keeps its answer, and the connection closes after it. */
        x = c->body_x;
        c->body_x = NULL;
        c->in_body = false;
        if (x && x->done) {
            x->keep_alive = false; /* advance closes once it is sent */
            return;
        }
        if (!x) {
            if (c->wq_bytes == 0) conn_close(c);
            else c->close_after_write = true;
            return;
        }
        x->body_open = false;
        if (x->body_abort) x->body_abort(x);
        x->req->keep_alive = false;
    } else {
        x = xcalloc(1, sizeof *x);
        x->c = c;
        x->req = xcalloc(1, sizeof *x->req); /* keep_alive false: closes after the write */
        if (c->tail) c->tail->next = x;
        else c->head = x;
        c->tail = x;
        c->n_exch++;
        x->is_head = c->head == x;
    }
    struct api_error e = {0};
    api_error_set(&e, status, API_ERR_INVALID, NULL, NULL, "%s", http_status_reason(status));
    conn_error(x, &e);
}

/* The parser's body sink: a streamed body's pieces go to its exchange until that
 * exchange is answered, and are dropped after (the body is read to its end so that
 * the connection can carry the next request). A closing connection takes no more:
 * its exchanges get body_abort in the close callback. */
static void on_body_data(void *ctx, const char *data, size_t len)
{
    struct conn *c = ctx;
    struct exch *x = c->body_x;
    if (!x || c->closing) return;
    x->await_continue = false; /* the client is sending */
    if (!x->done && x->body_data) x->body_data(x, data, len);
}

static void on_body_end(void *ctx)
{
    struct conn *c = ctx;
    struct exch *x = c->body_x;
    c->body_x = NULL;
    c->in_body = false;
    if (!x || c->closing) return;
    x->body_open = false;
    x->await_continue = false;
    if (!x->done && x->body_end) x->body_end(x);
}

/* A streamed request's handler has run. Unless it answered, it takes the body
 * (body_end is set), and a client that waits for a 100 Continue gets one now,
 * when nothing is ahead of it (as for a buffered body, the 100 would otherwise come
 * after responses the client reads first). */
static void body_started(struct conn *c)
{
    struct exch *x = c->body_x;
    if (!x || x->done || c->closing) return;
    CHECK(x->body_end != NULL); /* a handler of a streamed request must take its body */
    if (x->await_continue && x->is_head) {
        x->await_continue = false;
        sock_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    }
}

/* Queue a parsed request and hand it to the connection's handler. */
static void start_exchange(struct conn *c, struct http_request *r)
{
    struct exch *x = xcalloc(1, sizeof *x);
    x->c = c;
    x->req = r;
    x->t_start = uv_hrtime() * 1e-9;
    if (c->tail) c->tail->next = x;
    else c->head = x;
    c->tail = x;
    c->n_exch++;
    x->is_head = c->head == x;
    /* x may be freed by the time the handler returns (answered and sent): what
     * follows reads it through c->body_x, which free_exch clears. */
    const bool streamed = r->body_streamed;
    if (streamed) {
        c->body_x = x;
        c->in_body = true;
        x->body_open = true;
        /* Known before the handler runs: an answer it gives now replaces the 100. */
        x->await_continue = http_parser_take_continue(c->parser);
    }
    c->handle(x);
    if (streamed) body_started(c);
}

static void consume_input(struct conn *c)
{
    const size_t limit = write_limit(c);
    while (!c->closing && !c->failed) {
        /* Requests the parser completed start while the answers buffered behind the
         * head are under the limit; the rest wait in the parser's queue (advance ->
         * read_more takes them when the head drains). A request answered at once
         * passes the limit before the next one starts. */
        struct http_request *r;
        while (!c->closing && c->buffered <= limit && (r = http_parser_take(c->parser)))
            start_exchange(c, r);
        if (c->closing || !c->pending_len || c->n_exch >= CONN_MAX_EXCH || c->buffered > limit)
            return;
        size_t used = 0;
        int status = http_parser_feed(c->parser, c->pending, c->pending_len, &used);
        if (status) used = 0; /* meaningless after an error */
        memmove(c->pending, c->pending + used, c->pending_len - used);
        c->pending_len -= used;
        /* 100 Continue belongs to the request being parsed, which is behind every
         * queued one: send it only when nothing is queued ahead (else the client
         * sends its body after its own timeout, as RFC 9110 allows). */
        if (http_parser_take_continue(c->parser) && !c->head)
            sock_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
        if (status) {
            /* The requests before the error are answered first, the error last. */
            while (!c->closing && (r = http_parser_take(c->parser))) start_exchange(c, r);
            if (!c->closing) protocol_error(c, status);
            return;
        }
        if (used == 0 && !http_parser_queued(c->parser)) return; /* needs more bytes */
    }
}

/* Feed pending input to the parser and start exchanges for complete requests. A
 * request answered at once finishes inside the handler, and finishing calls
 * back here (advance -> read_more): that nested call returns at once and the loop
 * of the outer one goes on, so the stack does not grow with every pipelined
 * request. */
static void consume(struct conn *c)
{
    if (c->consuming) return;
    c->consuming = true;
    consume_input(c);
    c->consuming = false;
    if (c->n_exch >= CONN_MAX_EXCH || c->buffered > write_limit(c)) stop_reading(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct conn *c = h->data;
    /* Read straight onto the end of the pending bytes. */
    c->pending = xrealloc(c->pending, c->pending_len + 65536);
    *buf = uv_buf_init(c->pending + c->pending_len, 65536);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    struct conn *c = st->data;
    if (n < 0) {
        conn_close(c); /* EOF or error: cancels what the client was waiting for */
        return;
    }
    if (n == 0) return;
    const bool was_idle = http_parser_idle(c->parser) && c->pending_len == 0;
    c->pending_len += (size_t)n;
    c->last_active = uv_now(c->s->loop);
    if (was_idle) c->req_started = c->last_active;
    consume(c);
}

static void read_more(struct conn *c)
{
    if (c->pending_len || http_parser_queued(c->parser)) consume(c);
    if (c->closing || c->failed || c->n_exch >= CONN_MAX_EXCH || c->reading ||
        c->buffered > write_limit(c))
        return;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = true;
}

/* The connection other than `except` that is idle between requests (no exchange,
 * nothing unsent, no partial request) and has been so the longest, or NULL. */
static struct conn *oldest_idle(struct srv *s, const struct conn *except)
{
    struct conn *best = NULL;
    for (struct conn *c = s->conns; c; c = c->next) {
        if (c == except || c->closing || c->head || c->wq_bytes || c->pending_len) continue;
        if (!c->parser || !http_parser_idle(c->parser)) continue;
        if (!best || c->last_active < best->last_active) best = c;
    }
    return best;
}

void conn_accept(struct srv *s, conn_handler_fn handle)
{
    struct conn *c = xcalloc(1, sizeof *c);
    c->s = s;
    c->handle = handle;
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&c->tcp) < 0) {
        uv_close((uv_handle_t *)&c->tcp, on_close);
        return;
    }
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    if (s->n_conns > s->cfg->max_connections) {
        /* Room is made by closing the idle keep-alive connection quiet the longest
         * (as nginx reuses its connections): it has nothing under way and its client
         * reconnects when it needs to. With none idle, the new one is refused. */
        struct conn *old = oldest_idle(s, c);
        if (!old) {
            log_warn("connection limit %d reached: closing a new one",
                     s->cfg->max_connections);
            conn_close(c);
            return;
        }
        conn_close(old);
    }
    uv_tcp_nodelay(&c->tcp, 1);
    struct http_limits lim = http_limits_default();
    lim.max_body_bytes = (size_t)s->cfg->max_body_bytes;
    lim.max_header_bytes = (size_t)s->cfg->max_header_bytes;
    /* File uploads: the file plus room for the multipart framing around it, streamed
     * to the handler (files_upload.h) rather than held. */
    lim.upload_path = "/v1/files";
    lim.max_upload_bytes = (size_t)s->cfg->max_file_bytes + 64 * 1024;
    c->parser = http_parser_create(&lim);
    http_parser_set_body_sink(c->parser,
                              &(struct http_body_sink){on_body_data, on_body_end, c});
    c->last_active = uv_now(s->loop);
    read_more(c);
}

void conn_sweep(struct srv *s)
{
    const uint64_t now = uv_now(s->loop);
    const uint64_t idle_ms = (uint64_t)s->cfg->idle_timeout_s * 1000;
    /* Clients are judged by the time since their last progress, and a loop that was
     * busy past a tick (answers of megabytes are built on it) ran no write callbacks
     * or reads meanwhile, and may have stamped a write with its stale clock: after
     * such a gap the I/O catches up first, and the next tick judges. */
    const uint64_t gap = now - s->last_sweep;
    s->last_sweep = now;
    if (gap > 2 * SRV_TICK_MS) return;
    for (struct conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        bool quiet = !c->head && c->wq_bytes == 0;
        bool partial = c->parser && (!http_parser_idle(c->parser) || c->pending_len > 0);
        /* Idle keep-alive connections are closed, and so are clients that take longer
         * than the idle timeout to send one request, however steadily they trickle
         * it (slowloris). A connection waiting on its own long generation is busy,
         * not idle. */
        if (idle_ms && quiet && !partial && now - c->last_active > idle_ms) conn_close(c);
        /* A client that stops reading a response (a download it never drains stays
         * under the write-queue limit) is closed once no write has completed for
         * the idle timeout. */
        else if (idle_ms && c->wq_bytes > 0 && now - c->last_written > idle_ms) conn_close(c);
        /* A streamed upload is under the same deadline, answered or not. */
        else if (idle_ms && (quiet || c->in_body) && partial &&
                 now - c->req_started > idle_ms)
            conn_close(c);
        else if (s->draining && quiet && !partial) conn_close(c);
    }
}
