/*
 * conn.h - client connections and the exchanges (request -> response) they carry.
 *
 * Owns (struct conn): its socket, its HTTP parser, its unconsumed input and its
 * queue of exchanges; responses are written in request order (pipelining), so an
 * exchange that finishes before the ones ahead of it keeps its bytes until they are
 * done. An exchange owns its request, its buffered bytes and an open file body;
 * what a handler hangs on it (ctx) is the handler's, freed by its dispose callback.
 * A file upload's body is streamed (http.h): its exchange starts when the request's
 * head is complete, and the body reaches the handler piece by piece through the
 * exchange's body callbacks, so it is never whole in memory.
 * Invariant: an exchange stays valid until the call that holds it returns (they are
 * freed in the socket's close callback or once written, never under a caller).
 * Thread: loop only.
 */
#ifndef H2O_SERVER_CONN_H
#define H2O_SERVER_CONN_H

#include "api_error.h"
#include "http.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct srv;
struct conn;

/* One request and its response. */
struct exch {
    struct exch *next;         /* the connection's queue, oldest first */
    struct conn *c;
    struct http_request *req;
    int status;                /* response status once decided */
    char *out;                 /* response bytes not yet handed to the socket: those
                                  from out_off on (all of them until x is the head) */
    size_t out_len, out_cap, out_off;
    size_t out_piled;          /* appended while x was the head and out was not yet
                                  drained: past write_queue_max_bytes, a slow client */
    bool done;                 /* the handler has given the whole response (it may
                                  still be in out or in the file) */
    bool is_head;              /* first in the queue: writes go straight out */
    bool chunked;              /* streaming with chunked transfer encoding */
    bool keep_alive;           /* the response head said keep-alive (else close after) */
    bool head_only;            /* a HEAD request: the response has no body */
    double t_start;            /* when the request was complete (latency, metrics) */
    /* What the handler keeps across loop iterations (a completion's engine
     * requests), or NULL. dispose runs when the exchange is freed, answered or not,
     * and releases ctx; it may set log_note first. */
    void *ctx;
    void (*dispose)(struct exch *x);
    char *log_note;            /* --log-requests: what the request line adds (the
                                  completion's id, tokens and KV policy), or NULL */
    /* A streamed body (req->body_streamed) arrives after the handler ran. The
     * handler either answers at once (the rest of the body is then read and
     * dropped) or sets these before it returns: body_data for each piece (valid
     * during the call), then exactly one of body_end (the body is complete) or
     * body_abort (it never will be: the client left, the connection timed out or
     * the drain ended, or its framing was bad and the connection answers that
     * itself). body_abort releases what the body held and answers nothing. None is
     * called once x is answered. */
    void (*body_data)(struct exch *x, const char *data, size_t len);
    void (*body_end)(struct exch *x);
    void (*body_abort)(struct exch *x);
    bool body_open;            /* the streamed body is still arriving */
    bool await_continue;       /* the client holds that body back for a 100 Continue
                                  not sent: an answer now ends the connection */
    /* A body sent from a stream (conn_respond_file): */
    FILE *file; /* ours, and file_left bytes of it are unsent; or NULL */
    int64_t file_left;
};

/* What a connection does with each complete request (the router). */
typedef void (*conn_handler_fn)(struct exch *x);

struct conn {
    uv_tcp_t tcp;
    struct srv *s;
    conn_handler_fn handle;
    struct conn *prev, *next;
    struct http_parser *parser;
    struct exch *head, *tail;
    int32_t n_exch;
    char *pending;             /* bytes read but not yet consumed by the parser */
    size_t pending_len;
    size_t wq_bytes;           /* bytes handed to uv_write and not yet written */
    size_t buffered;           /* bytes in the exchanges' out, not yet handed to
                                  uv_write; past write_queue_max_bytes the
                                  connection reads no more requests */
    uint64_t last_active;      /* uv_now() of the last read or write */
    uint64_t last_written;     /* uv_now() of the last completed write, or of the
                                  first queued one when nothing was pending */
    uint64_t req_started;      /* uv_now() when the partial request buffered began */
    struct exch *body_x;       /* the exchange whose streamed body is arriving, until
                                  its end; NULL once that exchange was sent and freed */
    bool in_body;              /* the parser is inside a streamed body (body_x's, or
                                  the body of one already answered and freed) */
    bool reading, closing, close_after_write;
    bool failed;               /* a protocol error was answered: never parse again */
    bool consuming;            /* inside consume (it is not re-entered) */
};

/* Accept a connection on s's listener; each complete request on it goes to
 * `handle`, and each file upload (a streamed body) as soon as its head is complete.
 * Thread: loop. */
void conn_accept(struct srv *s, conn_handler_fn handle);

/* Close: unlinked from the server at once; its exchanges (disposed, so their
 * engine requests are cancelled) are freed in the close callback, so an exchange a
 * caller holds stays valid until that caller returns. Safe twice. Thread: loop. */
void conn_close(struct conn *c);

/* Close idle keep-alive connections and those past the drain. Thread: loop. */
void conn_sweep(struct srv *s);

/* Append response bytes for x (copied): written now if x is at the head of its
 * connection's queue, else kept until it is. A large piece goes out 256 KiB at a
 * time as the client reads it. Thread: loop. */
void conn_write(struct exch *x, const char *data, size_t len);

/* The response of x is complete (after its last conn_write). x may be freed before
 * this returns. Thread: loop. */
void conn_finish(struct exch *x);

/* A whole response with a body (JSON unless content_type says otherwise); x may be
 * freed before this returns. Thread: loop. */
void conn_respond(struct exch *x, int status, const char *content_type, const char *body,
                  size_t len, const char *extra_headers);

/* A whole response whose body is the next `len` bytes of stream `f` (taken: closed
 * when sent or when the connection goes): a file on disk, or a job store's body
 * (jobstore_file_open). The body goes out as the client reads it, a chunk at a
 * time, so a file of any size costs little memory. Thread: loop. */
void conn_respond_file(struct exch *x, int status, const char *content_type, FILE *f,
                       int64_t len);

/* An OpenAI error response for e (clears e). Thread: loop. */
void conn_error(struct exch *x, struct api_error *e);

/* Start a streamed response: chunked, or for an HTTP/1.0 client unframed and
 * ended by closing the connection. Then conn_chunk for each piece and
 * conn_stream_end (which finishes x, like conn_finish). Thread: loop. */
void conn_stream_start(struct exch *x, int status, const char *content_type);
void conn_chunk(struct exch *x, const char *data, size_t len);
void conn_stream_end(struct exch *x);

#endif
