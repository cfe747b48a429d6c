/*
 * srv.h - the HTTP server: one libuv loop, its connections, and the exchanges
 * (request -> response) they carry. Internal to server/.
 *
 * Owns (struct srv): the listener, the engine, the loop-side tokenizer and model
 * facts, every connection, the registry from engine request ids to exchanges, and
 * the metrics. A connection owns its socket, its HTTP parser and its queue of
 * exchanges; responses are written in request order (pipelining), so an exchange
 * that finishes before the ones ahead of it keeps its bytes until they are done.
 * Invariants: an engine request id is in the registry iff its exchange is alive;
 * events for ids not in the registry (client gone) are dropped.
 * Thread: loop only, except the async handle the engine pokes.
 */
#ifndef H2O_SRV_H
#define H2O_SRV_H

#include "cfg.h"
#include "engine.h"
#include "http.h"
#include "json.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct srv;
struct conn;
struct jobstore;
struct batchrun;

/* One request and its response. */
struct exch {
    struct exch *next;         /* the connection's queue, oldest first */
    struct conn *c;
    struct http_request *req;
    int status;                /* response status once decided */
    char *out;                 /* response bytes waiting for their turn */
    size_t out_len, out_cap;
    bool done;                 /* the whole response is in out or written */
    bool is_head;              /* first in the queue: writes go straight out */
    bool chunked;              /* streaming with chunked transfer encoding */
    bool keep_alive;           /* the response head said keep-alive (else close after) */
    bool head_only;            /* a HEAD request: the response has no body */
    /* An engine-backed request (completions): */
    struct cmpl_params *params;
    struct cmpl_resp *resp;
    char id[40];               /* the response id ("cmpl-..."), "" before */
    uint64_t base_id;          /* engine ids base_id .. base_id + n_prompts - 1 */
    int32_t n_prompts;
    int32_t n_live;            /* engine requests not finished yet */
    double t_start, t_first, t_last; /* for TTFT, ITL and e2e metrics */
    char *log_note;            /* --log-requests: what the request line adds (the
                                  completion's id, tokens and KV policy), or NULL */
    /* A body sent from a file (exch_respond_file): */
    bool file_open;            /* file_fd is ours and file_left bytes are unsent */
    int file_fd;
    int64_t file_left;
};

struct conn {
    uv_tcp_t tcp;
    struct srv *s;
    struct conn *prev, *next;
    struct http_parser *parser;
    struct exch *head, *tail;
    int32_t n_exch;
    char *pending;             /* bytes read but not yet consumed by the parser */
    size_t pending_len;
    size_t wq_bytes;           /* bytes handed to uv_write and not yet written */
    uint64_t last_active;      /* uv_now() of the last read or write */
    uint64_t last_written;     /* uv_now() of the last completed write, or of the
                                  first queued one when nothing was pending */
    uint64_t req_started;      /* uv_now() when the partial request buffered began */
    bool reading, closing, close_after_write;
    bool failed;               /* a protocol error was answered: never parse again */
    bool consuming;            /* inside consume (it is not re-entered) */
};

/* Server-side metrics (the engine's counters come from engine_get_stats). */
#define SRV_HIST_BUCKETS 14
struct srv_hist {
    double sum;
    int64_t count;
    int64_t bucket[SRV_HIST_BUCKETS]; /* cumulative at render time, not here */
};

struct srv_metrics {
    int64_t requests_total, finished[5]; /* by enum req_finish */
    int64_t http_errors[6];              /* 4xx by 400,401,404,405,413,429 ... */
    struct srv_hist ttft, itl, e2e, queue;
};

struct srv_reg_slot {
    uint64_t id;       /* 0 = empty (ids start at 1) */
    struct exch *x;
};

struct srv {
    uv_loop_t *loop;
    const struct cfg *cfg;
    uv_tcp_t listener;
    uv_async_t wake;
    uv_signal_t sig_int, sig_term;
    uv_timer_t tick;
    struct engine *eng;
    struct tokenizer *tok;
    struct opt_config mcfg;
    int32_t max_model_len;     /* the context length: cfg's max_model_len, else mcfg's */
    char *model_id;
    char *metrics_label;       /* model_name="..." for /metrics, made on first use */
    struct conn *conns;
    int32_t n_conns;
    struct srv_reg_slot *reg;  /* open addressing, linear probing, power of two */
    int32_t reg_cap, reg_n;
    uint64_t next_id;
    int64_t started;           /* Unix time the server started: /v1/models' created */
    char fingerprint[24];      /* system_fingerprint (cfg_fingerprint) */
    bool draining;
    bool drain_cancelled;      /* the grace period ended: what ran was cancelled */
    uint64_t drain_deadline;   /* uv_now() ms: the grace period's end, then the
                                  flush's (SRV_DRAIN_FLUSH_MS after the cancel) */
    int bound_port;
    struct srv_metrics m;
    struct jobstore *js;       /* the Files + Batches store under --data-dir */
    struct batchrun *br;       /* the batch runner, feeding the engine from js */
    int exit_code;
};

/* After the grace period the running requests are cancelled, and their connections
 * get this long to send the final chunk or body before they are closed. */
#define SRV_DRAIN_FLUSH_MS 5000

/* Engine request ids with this bit set belong to the batch runner (its own map);
 * the rest are the registry's. */
#define SRV_BATCH_ID_BIT (1ull << 62)

/* ---- srv.c ---- */

/*
 * Run the server until SIGINT / SIGTERM and the drain finish. Prints
 * "listening on http://HOST:PORT" on stderr once bound (tests read the port from
 * there when --port 0). Returns the process exit code. Thread: main.
 */
int srv_run(const struct cfg *cfg);

/* Registry of engine ids. Thread: loop. */
void srv_reg_put(struct srv *s, uint64_t id, struct exch *x);
struct exch *srv_reg_get(struct srv *s, uint64_t id);
void srv_reg_del(struct srv *s, uint64_t id);

/* Record a finished completion in the metrics. Thread: loop. */
void srv_hist_add(struct srv_hist *h, double v);

/* ---- conn.c ---- */

/* Accept a connection on the listener. Thread: loop. */
void conn_accept(struct srv *s);

/* Close: unlinked from the server at once; its exchanges (and their engine
 * requests, cancelled) are freed in the close callback, so an exchange a caller
 * holds stays valid until that caller returns. Safe twice. Thread: loop. */
void conn_close(struct conn *c);

/* Append response bytes for x: written now if x is at the head of its
 * connection's queue, else kept until it is. Thread: loop. */
void exch_write(struct exch *x, const char *data, size_t len);

/* The response of x is complete (after its last exch_write). Thread: loop. */
void exch_finish(struct exch *x);

/* A whole response with a body (JSON unless content_type says otherwise). */
void exch_respond(struct exch *x, int status, const char *content_type, const char *body,
                  size_t len, const char *extra_headers);

/* A whole response whose body is the next `len` bytes of `fd` (taken: closed when
 * sent or when the connection goes). The body goes out as the client reads it, a
 * chunk at a time, so a file of any size costs little memory. Thread: loop. */
void exch_respond_file(struct exch *x, int status, const char *content_type, int fd,
                       int64_t len);

/* An OpenAI error response for e (clears e). */
void exch_error(struct exch *x, struct api_error *e);

/* Start a streamed response: chunked, or for an HTTP/1.0 client unframed and
 * ended by closing the connection. Then exch_chunk for each piece and
 * exch_stream_end (which finishes x, like exch_finish). */
void exch_stream_start(struct exch *x, int status, const char *content_type);
void exch_chunk(struct exch *x, const char *data, size_t len);
void exch_stream_end(struct exch *x);

/* Close idle keep-alive connections and those past the drain. Thread: loop. */
void conn_sweep(struct srv *s);

/* ---- reply.c: small response helpers shared by the route handlers ---- */

/* An OpenAI error response: status, optional error code, a message made of fmt
 * with one %s argument (NULL arg reads as ""). Thread: loop. */
void reply_error(struct exch *x, int status, const char *code, const char *fmt,
                 const char *arg);

/* A 200 JSON response of obj, which this frees. Thread: loop. */
void reply_json(struct exch *x, cJSON *obj);

/* The error response for a failed job store call: ENG_ENOTFOUND 404 and
 * ENG_EINVAL 400 with err_msg(); anything else is logged and answered 500 without
 * the details. Thread: loop. */
void reply_store_error(struct exch *x, int err);

/* 405 unless the method is `method`; true when it is. Thread: loop. */
bool reply_method_is(struct exch *x, const char *method);

/* ---- query.c: the query string of list endpoints ---- */

/*
 * The value of query parameter `name` in x's request, percent-decoded ('+' is a
 * space) into buf. Returns 1 when present, 0 when absent, -1 when malformed or
 * longer than size - 1. Thread: loop.
 */
int query_get(const struct exch *x, const char *name, char *buf, size_t size);

/* The list parameters OpenAI's list endpoints share. */
struct query_list {
    int limit;              /* default_limit unless given */
    char after[64];         /* "" when absent */
    bool ascending;         /* order=asc; default desc (newest first) */
};

/* Parse limit (1..max_limit), after and order; on a bad value answer 400 and
 * return -1. Thread: loop. */
int query_list_params(struct exch *x, int default_limit, int max_limit, struct query_list *q);

/* Whether `id` (len bytes, from a path or a cursor) can be a store id: 1 to
 * JOBSTORE_ID_MAX - 1 characters of [A-Za-z0-9_-]. Anything else names nothing,
 * and is never looked up or echoed. Thread: any. */
bool query_id_ok(const char *id, size_t len);

/* ---- api_files.c ---- */

/* /v1/files and below (`rest` is the path after "/v1/files": "", "/{id}",
 * "/{id}/content"). Thread: loop. */
void files_route(struct exch *x, const char *rest);

/* ---- api_batches.c ---- */

/* /v1/batches and below (`rest` as for files_route). Thread: loop. */
void batches_route(struct exch *x, const char *rest);

/* ---- api_vllm.c: vLLM's endpoints outside /v1 ---- */

/* POST /tokenize, POST /detokenize, GET /version: answers x and returns true when
 * x's path is one of them, else returns false and leaves x alone. No API key (vLLM
 * guards /v1 only); they work while the model loads. Thread: loop. */
bool vllm_route(struct exch *x);

/* ---- api_chat.c ---- */

/* POST /v1/chat/completions (after the API key check): 400, the model has no chat
 * template. Thread: loop. */
void chat_route(struct exch *x);

/* ---- batchrun.c: the batch runner ---- */

/*
 * The runner of Batches API jobs: validates new batches off the loop thread, feeds
 * in_progress batches' requests to the engine at batch priority (at most
 * cfg->batch_max_in_flight engine requests at once; a line is never split, so one
 * line of many prompts may pass the bound), records each result through the job
 * store, finalizes, expires and cancels. Created after the store is open; resumes
 * every unfinished batch it finds there. Owns its own engine id map (ids with
 * SRV_BATCH_ID_BIT). NULL is a no-op for every call but create. Thread: loop.
 */
struct batchrun *batchrun_create(struct srv *s);
void batchrun_destroy(struct batchrun *br);

/* An engine event for a batch id (the caller frees ev). */
void batchrun_event(struct batchrun *br, struct req_event *ev);

/* Hand the engine more requests if there is room (after events, or a new batch). */
void batchrun_feed(struct batchrun *br);

/* Periodic: expiry, finishing cancels, feeding once the engine is ready. */
void batchrun_tick(struct batchrun *br);

/* A batch was just created in `validating`: validate its input file. */
void batchrun_validate(struct batchrun *br, const char *batch_id);

/* A batch was just moved to `cancelling`: stop its requests; it becomes cancelled
 * on the next tick. */
void batchrun_cancel(struct batchrun *br, const char *batch_id);

/* Batches running (in_progress, tracked) and engine requests in flight, for
 * /metrics. Zeros for NULL. */
void batchrun_stats(const struct batchrun *br, int32_t *batches, int32_t *requests);

/* Draining: cancel every batch request in flight and submit no more (what was not
 * recorded runs again after a restart). */
void batchrun_stop(struct batchrun *br);

/* ---- router.c ---- */

/* The served model as the completions parser sees it (pointers into s). Thread: loop. */
struct api_model;
void router_api_model(const struct srv *s, struct api_model *m);

/* Handle one complete request. Thread: loop. */
void router_dispatch(struct exch *x);

/* Engine events for x (already looked up by id). Thread: loop. */
void router_event(struct exch *x, struct req_event *ev);

/* The exchange is going away before the engine finished (client gone): cancel
 * its engine requests and free its completion state. Thread: loop. */
void router_abort(struct exch *x);

/* With --log-requests, one line for the exchange that is being freed: method, path,
 * status (or "-" when the client left before the answer), its log_note and the
 * latency. Thread: loop. */
void router_log(const struct exch *x);

#endif
