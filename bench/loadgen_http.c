/*
 * loadgen_http.c - the load generator's HTTP/1.1 client (see loadgen_http.h).
 *
 * A connection is busy (it carries one call) or idle (on the client's idle list).
 * A call that ends with a complete response on a connection the server keeps alive
 * returns the connection to the idle list before its on_done runs, so the next call
 * submitted from on_done reuses it. Any error, a timeout, or a response that ends
 * the connection closes it: a half-read response cannot be resynchronised, and
 * closing is also how the server learns that a timed-out stream is no longer wanted
 * (it cancels the request and frees its KV blocks). A response can be parsed before
 * libuv runs the request's write callback (the write completes at once, the callback
 * waits for the next iteration's pending phase, the response may come in this
 * iteration's poll); the conn then waits for that callback before it goes idle, since
 * the next call would reuse its write request.
 * Thread: the loop's only.
 */
#include "loadgen_http.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llhttp.h>

#define LG_READ_BUF 65536

struct lg_conn {
    uv_tcp_t tcp;         /* data = this conn */
    uv_connect_t creq;
    uv_write_t wreq;
    uv_timer_t timer;     /* the call's timeout; data = this conn */
    llhttp_t parser;      /* data = this conn */
    struct lg_client *cl;
    struct lg_call *call; /* NULL while idle */
    struct lg_conn *next_idle;
    char *head;           /* the request line and headers being written */
    bool connected;
    bool closing;
    bool fail_pending;    /* call->err is set; the timer delivers it next iteration */
    bool complete;        /* the response's last byte has been parsed */
    bool writing;         /* wreq in use: the request's write has not called back */
    bool idle_pending;    /* call done and kept: goes idle when the write calls back */
    int n_open;           /* handles not yet closed (tcp, timer) */
    uint64_t t_read;      /* uv_hrtime() of the read being parsed */
    char rbuf[LG_READ_BUF];
};

struct lg_client {
    uv_loop_t *loop;
    struct sockaddr_storage addr;
    char host_hdr[300];
    char *extra_headers;
    llhttp_settings_t settings;
    struct lg_conn *idle;
    int64_t n_conns;      /* allocated, closing ones included */
    int64_t n_connects;
    bool destroying;
};

static void conn_finish(struct lg_conn *c);

static void client_maybe_free(struct lg_client *cl)
{
    if (cl->destroying && cl->n_conns == 0) {
        free(cl->extra_headers);
        free(cl);
    }
}

static void conn_on_close(uv_handle_t *h)
{
    struct lg_conn *c = h->data;
    if (--c->n_open > 0)
        return;
    struct lg_client *cl = c->cl;
    free(c->head);
    free(c);
    cl->n_conns--;
    client_maybe_free(cl);
}

/* Close both handles; the conn is freed when the second close callback runs. The
 * caller has already taken the conn off the idle list and finished its call. */
static void conn_close(struct lg_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, conn_on_close);
    uv_close((uv_handle_t *)&c->timer, conn_on_close);
}

static void idle_push(struct lg_client *cl, struct lg_conn *c)
{
    c->next_idle = cl->idle;
    cl->idle = c;
}

static void idle_remove(struct lg_client *cl, struct lg_conn *c)
{
    for (struct lg_conn **p = &cl->idle; *p; p = &(*p)->next_idle) {
        if (*p == c) {
            *p = c->next_idle;
            c->next_idle = NULL;
            return;
        }
    }
}

/* Fail the conn's call with a message (if it has one) and close the conn. */
static void conn_fail(struct lg_conn *c, const char *fmt, const char *detail)
{
    struct lg_call *call = c->call;
    if (call && !call->err[0])
        snprintf(call->err, sizeof call->err, fmt, detail);
    if (call) {
        conn_finish(c);
    } else {
        idle_remove(c->cl, c);
        c->idle_pending = false;
        conn_close(c);
    }
}

/* End the current call: keep the conn for the next call when the response completed
 * and the server keeps the connection, else close it; then run on_done. */
static void conn_finish(struct lg_conn *c)
{
    struct lg_call *call = c->call;
    c->call = NULL;
    uv_timer_stop(&c->timer);
    bool keep = !call->err[0] && c->complete && llhttp_should_keep_alive(&c->parser);
    if (keep && !c->cl->destroying) {
        llhttp_reset(&c->parser);
        c->complete = false;
        if (c->writing)
            c->idle_pending = true;
        else
            idle_push(c->cl, c);
    } else {
        conn_close(c);
    }
    call->on_done(call);
}

static int on_headers_complete(llhttp_t *p)
{
    struct lg_conn *c = p->data;
    c->call->status = p->status_code;
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
    struct lg_conn *c = p->data;
    if (c->call->on_body)
        c->call->on_body(c->call, at, len, c->t_read);
    return 0;
}

static int on_message_complete(llhttp_t *p)
{
    struct lg_conn *c = p->data;
    c->complete = true;
    return HPE_PAUSED;  /* nothing may follow: we never pipeline */
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct lg_conn *c = h->data;
    *buf = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct lg_conn *c = s->data;
    if (n == 0 || c->closing)
        return;
    if (n < 0) {
        /* EOF ends a response only when the server marked it close-delimited. */
        if (n == UV_EOF && c->call && c->call->status) {
            llhttp_finish(&c->parser);  /* runs on_message_complete if it was the end */
            if (c->complete) {
                conn_finish(c);
                return;
            }
        }
        conn_fail(c, "connection closed by the server: %s",
                  n == UV_EOF ? "end of stream before the response ended" : uv_strerror((int)n));
        return;
    }
    if (!c->call) {  /* bytes on an idle connection: the stream is out of step */
        conn_fail(c, "%s", "");
        return;
    }
    c->t_read = uv_hrtime();
    llhttp_errno_t e = llhttp_execute(&c->parser, buf->base, (size_t)n);
    if (e == HPE_PAUSED && c->complete) {
        const char *stop = llhttp_get_error_pos(&c->parser);
        if (stop != buf->base + n) {
            conn_fail(c, "%s", "bytes after the end of the response");
            return;
        }
        conn_finish(c);
    } else if (e != HPE_OK) {
        conn_fail(c, "bad HTTP response: %s", llhttp_get_error_reason(&c->parser));
    }
}

static void on_write(uv_write_t *w, int status)
{
    struct lg_conn *c = w->data;
    free(c->head);
    c->head = NULL;
    c->writing = false;
    if (c->closing)
        return;
    if (c->idle_pending) {  /* the response came first (see the top of the file) */
        c->idle_pending = false;
        if (status < 0 || c->cl->destroying)
            conn_close(c);
        else
            idle_push(c->cl, c);
        return;
    }
    if (status < 0 && c->call)
        conn_fail(c, "write failed: %s", uv_strerror(status));
}

/* Write the request of the conn's call; the response is read as it comes. */
static void conn_send(struct lg_conn *c)
{
    struct lg_call *call = c->call;
    struct lg_client *cl = c->cl;
    size_t cap = strlen(call->method) + strlen(call->path) + strlen(cl->host_hdr)
               + (cl->extra_headers ? strlen(cl->extra_headers) : 0) + 200;
    c->head = malloc(cap);
    if (!c->head) {
        conn_fail(c, "%s", "out of memory");
        return;
    }
    int len = snprintf(c->head, cap,
                       "%s %s HTTP/1.1\r\nHost: %s\r\n%s"
                       "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                       call->method, call->path, cl->host_hdr,
                       cl->extra_headers ? cl->extra_headers : "", call->body_len);
    uv_buf_t bufs[2] = {uv_buf_init(c->head, (unsigned)len),
                        uv_buf_init((char *)call->body, (unsigned)call->body_len)};
    c->wreq.data = c;
    c->writing = true;
    int err = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, bufs, call->body_len ? 2 : 1,
                       on_write);
    if (err) {
        free(c->head);
        c->head = NULL;
        c->writing = false;
        conn_fail(c, "write failed: %s", uv_strerror(err));
    }
}

static void on_connect(uv_connect_t *req, int status)
{
    struct lg_conn *c = req->data;
    if (c->closing)
        return;
    if (status < 0) {
        conn_fail(c, "cannot connect: %s", uv_strerror(status));
        return;
    }
    c->connected = true;
    uv_tcp_nodelay(&c->tcp, 1);
    int err = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (err) {
        conn_fail(c, "read failed: %s", uv_strerror(err));
        return;
    }
    conn_send(c);
}

static void on_timer(uv_timer_t *t)
{
    struct lg_conn *c = t->data;
    if (!c->call)
        return;
    if (c->fail_pending) {
        conn_fail(c, "%s", "");
        return;
    }
    char ms[32];
    snprintf(ms, sizeof ms, "%llu", (unsigned long long)c->call->timeout_ms);
    conn_fail(c, "timed out after %s ms", ms);
}

struct lg_client *loadgen_http_create(uv_loop_t *loop, const char *host, int port,
                                      const char *extra_headers, char *errbuf,
                                      size_t errlen)
{
    struct lg_client *cl = calloc(1, sizeof *cl);
    if (!cl) {
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    cl->loop = loop;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, portstr, &hints, &res);
    if (gai != 0 || !res) {
        snprintf(errbuf, errlen, "cannot resolve %s: %s", host, gai_strerror(gai));
        free(cl);
        return NULL;
    }
    memcpy(&cl->addr, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    snprintf(cl->host_hdr, sizeof cl->host_hdr, strchr(host, ':') ? "[%s]:%d" : "%s:%d",
             host, port);
    if (extra_headers)
        cl->extra_headers = strdup(extra_headers);
    llhttp_settings_init(&cl->settings);
    cl->settings.on_headers_complete = on_headers_complete;
    cl->settings.on_body = on_body;
    cl->settings.on_message_complete = on_message_complete;
    return cl;
}

void loadgen_http_submit(struct lg_client *cl, struct lg_call *call)
{
    call->status = 0;
    call->err[0] = '\0';
    struct lg_conn *c = cl->idle;
    if (c) {
        cl->idle = c->next_idle;
        c->next_idle = NULL;
        c->call = call;
        if (call->timeout_ms)
            uv_timer_start(&c->timer, on_timer, call->timeout_ms, 0);
        conn_send(c);
        return;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        /* Nowhere to defer the failure to: report it now (the only synchronous path). */
        snprintf(call->err, sizeof call->err, "out of memory");
        call->on_done(call);
        return;
    }
    c->cl = cl;
    c->call = call;
    cl->n_conns++;
    cl->n_connects++;
    uv_tcp_init(cl->loop, &c->tcp);
    uv_timer_init(cl->loop, &c->timer);
    c->n_open = 2;
    c->tcp.data = c->timer.data = c->creq.data = c;
    llhttp_init(&c->parser, HTTP_RESPONSE, &cl->settings);
    c->parser.data = c;
    if (call->timeout_ms)
        uv_timer_start(&c->timer, on_timer, call->timeout_ms, 0);
    int err = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&cl->addr,
                             on_connect);
    if (err) {
        snprintf(call->err, sizeof call->err, "cannot connect: %s", uv_strerror(err));
        c->fail_pending = true;
        uv_timer_start(&c->timer, on_timer, 0, 0);
    }
}

void loadgen_http_destroy(struct lg_client *cl)
{
    cl->destroying = true;
    while (cl->idle) {
        struct lg_conn *c = cl->idle;
        cl->idle = c->next_idle;
        conn_close(c);
    }
    client_maybe_free(cl);
}

int64_t loadgen_http_n_connects(const struct lg_client *cl)
{
    return cl->n_connects;
}
