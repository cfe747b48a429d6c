/*
 * loadgen_http.h - the load generator's HTTP/1.1 client: a pool of keep-alive
 * connections to one server on one libuv loop, responses parsed by llhttp.
 *
 * Owns: the connections (idle and busy) and their read buffers; not the calls, whose
 * memory belongs to the caller until their on_done has run.
 * Invariant: a connection carries at most one call at a time (no pipelining), so a
 * pool never holds more connections than the caller has calls in flight.
 * Thread: the loop's only.
 */
#ifndef H2O_LOADGEN_HTTP_H
#define H2O_LOADGEN_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct lg_call;

/* Body bytes as they arrive (chunked encoding already removed); t_ns is uv_hrtime()
 * at the read that delivered them. */
typedef void (*lg_body_cb)(struct lg_call *call, const char *data, size_t len,
                           uint64_t t_ns);
/* Runs exactly once per submitted call. call->err is "" on a complete response (any
 * status, see call->status), else it says what went wrong (connect, write, read,
 * parse, timeout). The call may be submitted again from inside this callback. */
typedef void (*lg_done_cb)(struct lg_call *call);

struct lg_call {
    /* Set by the caller; method, path and body are borrowed until on_done. */
    const char *method, *path;
    const char *body;
    size_t body_len;
    uint64_t timeout_ms;  /* 0 = none; covers connect, send and the whole response */
    lg_body_cb on_body;
    lg_done_cb on_done;
    void *user;
    /* Set by the client. */
    int status;           /* HTTP status, 0 until the headers are in */
    char err[160];
};

struct lg_client;

/* Create a client for `host:port` (a numeric address or a name, resolved once, here,
 * blocking); extra_headers ("Name: value\r\n"..., may be NULL) go into every request.
 * Returns NULL and writes a message to errbuf when the address does not resolve. */
struct lg_client *loadgen_http_create(uv_loop_t *loop, const char *host, int port,
                                      const char *extra_headers, char *errbuf,
                                      size_t errlen);

/* Send `call` on an idle connection, or on a new one. Never fails synchronously:
 * every error reaches call->on_done, from a later loop iteration. */
void loadgen_http_submit(struct lg_client *cl, struct lg_call *call);

/* Close the idle connections and free the client once every connection has closed.
 * Call it when no call is in flight; the loop then runs out of handles and returns. */
void loadgen_http_destroy(struct lg_client *cl);

/* Connections opened so far (for the report: keep-alive keeps it near the
 * concurrency). */
int64_t loadgen_http_n_connects(const struct lg_client *cl);

#endif
