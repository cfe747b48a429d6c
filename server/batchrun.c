/*
 * batchrun.c - the runner behind the Batches API (see batchrun.h): validation, feeding
 * the engine, recording results, and the end states of a batch.
 *
 * Validation reads and checks the whole input file on libuv's thread pool
 * (batch_check.c; a 200 MB file must not stall the loop), then, back on the loop,
 * stores every request in one transaction and moves the batch to in_progress, or to
 * failed with the errors of every bad line. All or nothing: a batch never runs part
 * of a bad file.
 *
 * Feeding: in_progress batches, oldest first, hand their pending requests (a page
 * at a time from the store) to the engine at batch priority until
 * cfg->batch_max_in_flight engine requests are in flight. A result counts once the
 * store has appended and synced its line (jobstore_batch_append_result); nothing is
 * remembered here that the store does not know, so after a crash the store's
 * pending requests are exactly the ones to run again.
 *
 * A full disk: a result (or a validated batch's requests) that does not fit
 * (JOBSTORE_EFULL) stops only its batch, which goes to failed with an
 * insufficient_storage error once the store can record that (it gives back its
 * reserve for it; else a tick tries again each second). The store is intact, so
 * nothing else stops. A store too full to open at start-up is opened at a tick.
 *
 * Seeds: a request without one gets a seed derived from its batch and custom_id,
 * so a request that runs again after a restart samples the same tokens.
 *
 * Engine ids come from the server's bridge and are registered there, with the line
 * as context, from submit until the line is dropped; events reach the line through
 * that registry alone.
 *
 * Owns: the batches it tracks, the lines in flight (with their parsed request and
 * response assembly) and the validation jobs. Thread: loop.
 */
#include "batchrun.h"

#include "batch_check.h"
#include "batch_line.h"
#include "chat.h"
#include "cmpl_resp.h"
#include "jobstore.h"
#include "srv.h"

#include "err.h"
#include "util.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Requests fetched from the store at once. */
#define BR_PAGE 64
/* Requests one feed call looks at (started or refused), so that a batch of lines
 * the API refuses one by one cannot hold the loop; the next event or tick goes on. */
#define BR_FEED_MAX 256
/* Requests expired per store call (one append and one fsync per file each). */
#define BR_EXPIRE_PAGE 1024

struct br_batch;

/* A request line in flight: engine ids base_id .. base_id + n_prompts - 1, each
 * registered with the bridge (context: the line) until the line is dropped. */
struct br_line {
    struct batchrun *br;
    struct br_batch *b;
    char *custom_id;
    struct cmpl_params params;
    struct cmpl_resp *resp;
    uint64_t base_id;
    int32_t n_prompts;
    char request_id[JOBSTORE_ID_MAX];
};

/* A batch in in_progress (or cancelling, until the next tick). */
struct br_batch {
    struct br_batch *next;
    char id[JOBSTORE_ID_MAX];
    int64_t expires_at;
    int64_t cursor;                /* the last line handed out */
    struct jobstore_request *page; /* fetched and not yet handed out: [i_page, n_page) */
    int n_page, i_page;
    bool exhausted;                /* the store has no pending request past cursor */
    bool cancelling;
    bool full;                     /* a result did not fit on the disk: to be failed */
    int64_t full_retry_at;         /* when to try recording that failure again */
    char *full_cause;              /* err_msg() of that write, for the log */
    int32_t n_lines;               /* lines in flight */
};

struct batchrun {
    struct srv *s;
    struct br_batch *head;  /* oldest first */
    struct br_line **lines; /* in flight, by ascending base_id */
    int32_t n_lines, cap_lines;
    int32_t n_reqs;         /* engine requests in flight */
    int32_t n_checks;       /* validations on the thread pool */
    bool stopped;           /* draining: nothing more goes to the engine */
    atomic_bool checks_stop; /* draining: validations give up (read on the thread pool) */
    bool store_failed;      /* a result could not be recorded: stop until a restart */
    bool resumed;           /* the store was open and its batches resumed */
    uint64_t retry_at;      /* uv_now() of the next try to open a store that was full */
};

/* ---- tracking ---- */

static struct br_batch *track(struct batchrun *br, const struct jobstore_batch *jb)
{
    struct br_batch *b = xcalloc(1, sizeof *b);
    snprintf(b->id, sizeof b->id, "%s", jb->id);
    b->expires_at = jb->expires_at;
    struct br_batch **p = &br->head;
    while (*p) p = &(*p)->next;
    *p = b;
    return b;
}

static void untrack(struct batchrun *br, struct br_batch *b)
{
    for (struct br_batch **p = &br->head; *p; p = &(*p)->next)
        if (*p == b) {
            *p = b->next;
            break;
        }
    jobstore_requests_free(b->page, b->n_page);
    free(b->full_cause);
    free(b);
}

static struct br_batch *find_batch(struct batchrun *br, const char *id)
{
    for (struct br_batch *b = br->head; b; b = b->next)
        if (strcmp(b->id, id) == 0) return b;
    return NULL;
}

/* Returns 0, or the store's error (logged): the batch then stays as it was, and
 * the caller keeps it tracked so the next tick (or a restart) tries again. */
static int set_status(struct batchrun *br, const char *id, enum jobstore_status to,
                      const char *errors)
{
    int err = jobstore_batch_set_status(br->s->js, id, to, errors);
    if (err) log_error("batch %s: %s", id, err_msg());
    else log_info("batch %s: %s", id, jobstore_status_name(to));
    return err;
}

/* ---- lines in flight ---- */

/* The line holding engine id `id`, or -1. */
static int32_t find_line(const struct batchrun *br, uint64_t id)
{
    int32_t lo = 0, hi = br->n_lines - 1, at = -1;
    while (lo <= hi) { /* the last line with base_id <= id */
        int32_t mid = lo + (hi - lo) / 2;
        if (br->lines[mid]->base_id <= id) at = mid, lo = mid + 1;
        else hi = mid - 1;
    }
    if (at < 0 || id >= br->lines[at]->base_id + (uint64_t)br->lines[at]->n_prompts) return -1;
    return at;
}

/* Forget line k: its ids leave the bridge's registry (so late events are dropped),
 * and its engine requests are cancelled when `cancel`. */
static void drop_line(struct batchrun *br, int32_t k, bool cancel)
{
    struct br_line *l = br->lines[k];
    for (int32_t i = 0; i < l->n_prompts; i++)
        bridge_release(&br->s->bridge, l->base_id + (uint64_t)i, cancel);
    l->b->n_lines--;
    br->n_reqs -= l->n_prompts;
    memmove(&br->lines[k], &br->lines[k + 1], (size_t)(br->n_lines - k - 1) * sizeof *br->lines);
    br->n_lines--;
    cmpl_resp_destroy(l->resp);
    cmpl_params_free(&l->params);
    free(l->custom_id);
    free(l);
}

static void drop_batch_lines(struct batchrun *br, struct br_batch *b)
{
    for (int32_t k = br->n_lines - 1; k >= 0; k--)
        if (br->lines[k]->b == b) drop_line(br, k, true);
}

/* The store could not record a result: from here on nothing it was told can be
 * trusted until a restart re-reads the files, so everything stops. */
static void store_failed(struct batchrun *br)
{
    log_error("batch results can no longer be recorded; batches resume after a restart");
    br->store_failed = true;
    while (br->n_lines) drop_line(br, br->n_lines - 1, true);
}

/* The `errors` of a batch that failed for want of space (OpenAI's list of
 * {code, message, param, line}). Caller frees. */
static char *full_errors_json(void)
{
    cJSON *list = cJSON_CreateObject();
    cJSON_AddStringToObject(list, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(list, "data");
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "code", "insufficient_storage");
    cJSON_AddStringToObject(e, "message",
                            "The batch's results could not be written: the server has no "
                            "space left on device in its data directory. Results written "
                            "before that are in the output and error files; the requests "
                            "not answered did not run.");
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNullToObject(e, "line");
    cJSON_AddItemToArray(data, e);
    char *text = json_print(list, NULL);
    cJSON_Delete(list);
    return text;
}

/* Move batch `id` to failed with the insufficient_storage error, after settling the
 * results the store wrote but could not count (jobstore_batch_recover; a no-op when
 * there are none). The disk is full, so these writes may fail too: then the reserve
 * is given back and they are tried once more. Returns 0 or the store's error (the
 * caller tries again at a later tick; nothing is lost meanwhile). */
static int fail_full_batch(struct batchrun *br, const char *id, bool validating)
{
    struct jobstore *js = br->s->js;
    char *errors = full_errors_json();
    int err = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        err = validating ? 0 : jobstore_batch_recover(js, id);
        if (!err) err = jobstore_batch_set_status(js, id, JOBSTORE_FAILED, errors);
        if (err != JOBSTORE_EFULL || !jobstore_release_reserve(js)) break;
    }
    free(errors);
    if (err)
        log_error("batch %s: cannot record its failure yet: %s", id, err_msg());
    else
        log_error("batch %s: failed: no space left for its results", id);
    return err;
}

/* A result of b did not fit (JOBSTORE_EFULL): the store is intact and nothing was
 * counted twice, but b cannot go on, so it stops at once (its lines in flight are
 * cancelled; the caller must not touch them) and goes to failed, now or at a later
 * tick when even that did not fit. Other batches go on: each fails by itself when
 * its own writes do not fit, and runs to its end when they do. */
static void batch_full(struct batchrun *br, struct br_batch *b)
{
    if (!b->full) {
        b->full = true;
        b->full_cause = xstrdup(err_msg());
        log_error("batch %s: %s", b->id, b->full_cause);
    }
    drop_batch_lines(br, b);
    b->full_retry_at = (int64_t)time(NULL) + 1;
    if (!fail_full_batch(br, b->id, false)) untrack(br, b);
}

/* Record one result line of batch b (ok: output file, else error file). Returns
 * false when b is gone or stopped (the disk was full): its lines are then dropped. */
static bool record(struct batchrun *br, struct br_batch *b, const char *custom_id, bool ok,
                   const char *line)
{
    int err = jobstore_batch_append_result(br->s->js, b->id, custom_id, ok, line);
    if (!err) return true;
    if (err == JOBSTORE_EFULL) {
        batch_full(br, b);
        return false;
    }
    log_error("batch %s: %s", b->id, err_msg());
    if (err != ENG_EINVAL) store_failed(br); /* EINVAL: already answered, nothing lost */
    return true;
}

/* Error lines gathered to be recorded in one store call (one fsync, not one each). */
struct br_results {
    struct jobstore_result *r;
    int n, cap;
};

static void results_add_error(struct br_results *rs, const char *custom_id, int status,
                              cJSON *body, const char *code, const char *message)
{
    char id[JOBSTORE_ID_MAX];
    jobstore_new_id("batch_req_", id, sizeof id);
    if (rs->n == rs->cap) {
        rs->cap = MAX(16, 2 * rs->cap);
        rs->r = xrealloc(rs->r, (size_t)rs->cap * sizeof *rs->r);
    }
    rs->r[rs->n++] = (struct jobstore_result){
        .custom_id = xstrdup(custom_id),
        .ok = false,
        .line = batch_line_output(id, custom_id, status, NULL, body, code, message)};
}

/* Record the gathered lines of batch b and empty the buffer. Returns false when b
 * is gone or stopped (its results did not fit; see batch_full). */
static bool results_flush(struct batchrun *br, struct br_batch *b, struct br_results *rs)
{
    bool alive = true;
    if (rs->n && !br->store_failed) {
        int err = jobstore_batch_append_results(br->s->js, b->id, rs->r, rs->n);
        if (err == JOBSTORE_EFULL) {
            batch_full(br, b);
            alive = false;
        } else if (err) {
            log_error("batch %s: %s", b->id, err_msg());
            store_failed(br);
        }
    }
    for (int i = 0; i < rs->n; i++) {
        free((char *)rs->r[i].custom_id);
        free((char *)rs->r[i].line);
    }
    rs->n = 0;
    return alive;
}

static void results_free(struct br_results *rs)
{
    CHECK(rs->n == 0); /* flushed */
    free(rs->r);
}

static uint64_t seed_of(const char *batch_id, const char *custom_id)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over "batch_id\0custom_id" */
    for (const char *p = batch_id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h *= 1099511628211ull;
    for (const char *p = custom_id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

static void line_event(void *ctx, struct req_event *ev);

/* Parse request r of batch b and hand it to the engine, or add why not to `refused`. */
static void start_line(struct batchrun *br, struct br_batch *b, const struct jobstore_request *r,
                       struct br_results *refused)
{
    struct srv *s = br->s;
    struct batch_line_error le;
    char *cid = NULL;
    bool chat = false;
    /* Stored lines were checked against the batch's endpoint when it was created. */
    cJSON *body = batch_line_parse(r->body, strlen(r->body), NULL, NULL, &cid, &chat, &le);
    if (!body) { /* validated before it was stored: only a damaged store gets here */
        results_add_error(refused, r->custom_id, 0, NULL, le.code, le.message);
        free(cid);
        return;
    }
    free(cid);
    struct br_line *l = xcalloc(1, sizeof *l);
    l->br = br;
    l->b = b;
    l->custom_id = xstrdup(r->custom_id);
    struct api_error e = {0};
    int err = chat_parse_batch_body(body, chat, &s->chat, &l->params, &e);
    cJSON_Delete(body);
    if (err) { /* a request the API refuses: its error body is the response */
        results_add_error(refused, l->custom_id, e.status, api_error_object(&e), NULL, NULL);
        api_error_clear(&e);
        cmpl_params_free(&l->params);
        free(l->custom_id);
        free(l);
        return;
    }
    jobstore_new_id(chat ? "chatcmpl-" : "cmpl-", l->request_id, sizeof l->request_id);
    l->resp = cmpl_resp_create(&l->params, s->tok, l->request_id, (int64_t)time(NULL));
    cmpl_resp_set_fingerprint(l->resp, s->fingerprint);
    l->n_prompts = l->params.n_prompts;
    l->base_id = bridge_new_ids(&s->bridge, l->n_prompts);
    if (br->n_lines == br->cap_lines) {
        br->cap_lines = MAX(64, 2 * br->cap_lines);
        br->lines = xrealloc(br->lines, (size_t)br->cap_lines * sizeof *br->lines);
    }
    br->lines[br->n_lines++] = l; /* the bridge's ids only grow: the array stays sorted */
    b->n_lines++;
    br->n_reqs += l->n_prompts;
    const uint64_t seed =
        l->params.has_seed ? (uint64_t)l->params.seed : seed_of(b->id, l->custom_id);
    for (int32_t i = 0; i < l->n_prompts; i++) {
        struct req *q = cmpl_make_req(&l->params, i, l->base_id + (uint64_t)i,
                                      seed + (uint64_t)i * 1000003u);
        q->prio = REQ_PRIO_BATCH;
        bridge_submit(&s->bridge, q, line_event, l);
    }
}

/* Line k is answered (every prompt finished, or one failed): record it. */
static void finish_line(struct batchrun *br, int32_t k)
{
    struct br_line *l = br->lines[k];
    const struct api_error *err = cmpl_resp_error(l->resp);
    const bool failed = err != NULL;
    bool alive;
    if (err) {
        struct api_error e = {0};
        api_error_set(&e, err->status, err->type, err->param, err->code, "%s", err->message);
        struct br_results one = {0};
        results_add_error(&one, l->custom_id, e.status, api_error_object(&e), NULL, NULL);
        api_error_clear(&e);
        alive = results_flush(br, l->b, &one);
        results_free(&one);
    } else {
        size_t len;
        char *text = cmpl_resp_body(l->resp, &len);
        cJSON *body = cJSON_ParseWithLength(text, len);
        free(text);
        char id[JOBSTORE_ID_MAX];
        jobstore_new_id("batch_req_", id, sizeof id);
        char *line = batch_line_output(id, l->custom_id, 200, l->request_id, body, NULL, NULL);
        alive = record(br, l->b, l->custom_id, true, line);
        free(line);
    }
    /* Not alive: the batch stopped for want of space and dropped this line too. */
    if (alive && !br->store_failed)
        drop_line(br, k, failed); /* an error stops its other prompts */
}

/* An engine event for one of line l's ids (the bridge's callback: l is alive). */
static void line_event(void *ctx, struct req_event *ev)
{
    struct br_line *l = ctx;
    struct batchrun *br = l->br;
    const int32_t k = find_line(br, l->base_id);
    CHECK(k >= 0 && br->lines[k] == l); /* registered ids belong to tracked lines */
    if (ev->finish != REQ_FINISH_NONE) br->s->m.finished[ev->finish]++;
    const int32_t pi = (int32_t)(ev->req_id - l->base_id);
    free(cmpl_resp_event(l->resp, pi, ev, NULL)); /* not streaming: nothing to send */
    if (cmpl_resp_done(l->resp) || cmpl_resp_error(l->resp)) finish_line(br, k);
}

/* ---- feeding and the end of a batch ---- */

/* The next request of b to start, or NULL when none is left to hand out now. */
static const struct jobstore_request *next_request(struct batchrun *br, struct br_batch *b)
{
    if (b->i_page < b->n_page) return &b->page[b->i_page++];
    jobstore_requests_free(b->page, b->n_page);
    b->page = NULL;
    b->n_page = b->i_page = 0;
    if (b->exhausted) return NULL;
    if (jobstore_batch_pending(br->s->js, b->id, b->cursor, BR_PAGE, &b->page, &b->n_page)) {
        log_error("batch %s: %s", b->id, err_msg());
        return NULL;
    }
    if (b->n_page == 0) {
        b->exhausted = true;
        return NULL;
    }
    b->cursor = b->page[b->n_page - 1].line;
    return &b->page[b->i_page++];
}

static bool engine_ready(const struct batchrun *br)
{
    const struct srv *s = br->s;
    return !br->stopped && !br->store_failed && !s->draining && s->js && s->bridge.eng &&
           engine_state(s->bridge.eng) == ENGINE_READY;
}

void batchrun_feed(struct batchrun *br)
{
    if (!br || !engine_ready(br)) return;
    const int32_t max = br->s->cfg->batch_max_in_flight;
    int looked = 0;
    struct br_results refused = {0};
    for (struct br_batch *b = br->head, *next; b; b = next) {
        next = b->next;
        if (b->cancelling || b->full) continue;
        const struct jobstore_request *r;
        while (br->n_reqs < max && looked < BR_FEED_MAX && !br->store_failed &&
               (r = next_request(br, b))) {
            start_line(br, b, r, &refused);
            looked++;
        }
        if (!results_flush(br, b, &refused)) continue; /* b stopped: the disk is full */
        if (b->exhausted && b->n_lines == 0 && b->i_page == b->n_page && !br->store_failed) {
            /* A failed step leaves the batch tracked: the next feed tries again. */
            if (!set_status(br, b->id, JOBSTORE_FINALIZING, NULL) &&
                !set_status(br, b->id, JOBSTORE_COMPLETED, NULL))
                untrack(br, b);
        }
    }
    results_free(&refused);
}

/* Past its window: what did not run goes to the error file as batch_expired, a
 * page of lines per store call. */
static void expire(struct batchrun *br, struct br_batch *b)
{
    drop_batch_lines(br, b);
    int64_t after = 0;
    struct br_results lines = {0};
    while (!br->store_failed) {
        struct jobstore_request *rs;
        int n;
        if (jobstore_batch_pending(br->s->js, b->id, after, BR_EXPIRE_PAGE, &rs, &n) || n == 0)
            break;
        for (int i = 0; i < n; i++)
            results_add_error(&lines, rs[i].custom_id, 0, NULL, "batch_expired",
                              "This request could not be executed before the completion "
                              "window expired.");
        after = rs[n - 1].line;
        jobstore_requests_free(rs, n);
        if (!results_flush(br, b, &lines)) { /* b stopped (and maybe freed): no room */
            results_free(&lines);
            return;
        }
    }
    results_free(&lines);
    if (!br->store_failed && !set_status(br, b->id, JOBSTORE_EXPIRED, NULL)) untrack(br, b);
}

static bool open_store(struct batchrun *br);

void batchrun_tick(struct batchrun *br)
{
    if (!br) return;
    if (!br->resumed && !open_store(br)) return;
    const int64_t now = (int64_t)time(NULL);
    for (struct br_batch *b = br->head, *next; b; b = next) {
        next = b->next;
        if (b->full) {
            /* Its failure did not fit either: try again once a second. */
            if (now >= b->full_retry_at) {
                b->full_retry_at = now + 1;
                if (!fail_full_batch(br, b->id, false)) untrack(br, b);
            }
        } else if (b->cancelling) {
            /* Not while the store is failed: publishing its files now could publish
             * a tail the restart's recovery has not checked yet. */
            if (!br->store_failed && !set_status(br, b->id, JOBSTORE_CANCELLED, NULL))
                untrack(br, b);
        } else if (b->expires_at && now >= b->expires_at && !br->store_failed) {
            expire(br, b);
        }
    }
    batchrun_feed(br); /* the engine may have become ready since the last event */
}

void batchrun_cancel(struct batchrun *br, const char *batch_id)
{
    if (!br) return;
    struct br_batch *b = find_batch(br, batch_id);
    if (!b) return; /* still validating: check_done sees the status */
    drop_batch_lines(br, b);
    b->cancelling = true;
}

void batchrun_stats(const struct batchrun *br, int32_t *batches, int32_t *requests)
{
    *batches = *requests = 0;
    if (!br) return;
    for (const struct br_batch *b = br->head; b; b = b->next) ++*batches;
    *requests = br->n_reqs;
}

void batchrun_stop(struct batchrun *br)
{
    if (!br || br->stopped) return;
    br->stopped = true;
    atomic_store(&br->checks_stop, true);
    while (br->n_lines) drop_line(br, br->n_lines - 1, true);
}

/* ---- validation ---- */

/* A validation on the thread pool. */
struct br_check {
    uv_work_t work;
    struct batchrun *br;
    char batch_id[JOBSTORE_ID_MAX];
    struct batch_check chk;
};

static void check_work(uv_work_t *w)
{
    struct br_check *c = w->data;
    batch_check_file(&c->chk);
}

/* Loop: store the outcome, unless the batch was cancelled meanwhile. */
static void check_done(uv_work_t *w, int status)
{
    struct br_check *c = w->data;
    struct batchrun *br = c->br;
    br->n_checks--;
    struct jobstore *js = br->s->js;
    struct jobstore_batch b;
    if (status == 0 && !c->chk.abandoned && jobstore_batch_get(js, c->batch_id, &b) == 0) {
        if (b.status == JOBSTORE_CANCELLING) {
            set_status(br, b.id, JOBSTORE_CANCELLED, NULL);
        } else if (b.status == JOBSTORE_VALIDATING && c->chk.n_errors > 0) {
            char *text = batch_check_errors_json(&c->chk);
            set_status(br, b.id, JOBSTORE_FAILED, text);
            free(text);
        } else if (b.status == JOBSTORE_VALIDATING) {
            int err = jobstore_batch_add_requests(js, b.id, c->chk.reqs, c->chk.n_reqs);
            if (!err) err = set_status(br, b.id, JOBSTORE_IN_PROGRESS, NULL);
            if (!err) {
                track(br, &b);
                batchrun_feed(br);
            } else if (err == JOBSTORE_EFULL) {
                /* No room for its requests: it fails with the cause (or, if even that
                 * does not fit, stays validating and is validated again at a restart). */
                fail_full_batch(br, b.id, true);
            } else {
                /* The disk: leave it validating, so a restart validates it again. */
                log_error("batch %s: %s", b.id, err_msg());
            }
        }
        jobstore_batch_deinit(&b);
    }
    batch_check_deinit(&c->chk);
    free(c);
}

void batchrun_validate(struct batchrun *br, const char *batch_id)
{
    if (!br) return;
    struct srv *s = br->s;
    struct jobstore_batch b;
    if (jobstore_batch_get(s->js, batch_id, &b)) {
        log_error("batch %s: %s", batch_id, err_msg());
        return;
    }
    struct br_check *c = xcalloc(1, sizeof *c);
    c->br = br;
    c->work.data = c;
    snprintf(c->batch_id, sizeof c->batch_id, "%s", batch_id);
    c->chk.endpoint = xstrdup(b.endpoint);
    c->chk.model = xstrdup(s->model_id);
    c->chk.max_requests = s->cfg->batch_max_requests;
    c->chk.stop = &br->checks_stop;
    /* A stream of its own: the pool thread reads it while the loop keeps the store. */
    int64_t bytes;
    if (jobstore_file_open(s->js, b.input_file_id, &c->chk.in, &bytes))
        log_error("batch %s: %s", batch_id, err_msg());
    jobstore_batch_deinit(&b);
    br->n_checks++;
    int err = uv_queue_work(s->loop, &c->work, check_work, check_done);
    CHECK(err == 0); /* only fails for a NULL callback */
}

/* ---- life ---- */

/* Resume what the store holds (recovery has already reconciled the output files). */
static void resume(struct batchrun *br)
{
    struct srv *s = br->s;
    br->resumed = true;
    struct jobstore_batch *bs;
    int n;
    if (jobstore_unfinished_batches(s->js, &bs, &n)) {
        log_error("batches: %s", err_msg());
        return;
    }
    /* What a restart finds (recovery has already reconciled the output files): */
    for (int i = 0; i < n; i++) {
        struct jobstore_batch *b = &bs[i];
        switch (b->status) {
        case JOBSTORE_VALIDATING:
            if (b->total > 0) { /* its requests were stored: it was about to start */
                if (!set_status(br, b->id, JOBSTORE_IN_PROGRESS, NULL)) track(br, b);
            } else {
                batchrun_validate(br, b->id);
            }
            break;
        case JOBSTORE_IN_PROGRESS: track(br, b); break;
        case JOBSTORE_FINALIZING: set_status(br, b->id, JOBSTORE_COMPLETED, NULL); break;
        case JOBSTORE_CANCELLING: set_status(br, b->id, JOBSTORE_CANCELLED, NULL); break;
        default: break;
        }
    }
    if (n) log_info("resuming %d unfinished batch%s", n, n == 1 ? "" : "es");
    jobstore_batches_free(bs, n);
}

/* The server started with a data dir too full to open the store (srv_run.c serves
 * without it): try again once a second, and resume the batches once it opens.
 * Returns whether the store is open. */
static bool open_store(struct batchrun *br)
{
    struct srv *s = br->s;
    if (!s->js) {
        const uint64_t now = uv_now(s->loop);
        if (s->draining || now < br->retry_at) return false;
        br->retry_at = now + 1000;
        if (jobstore_open(&s->js, srv_job_store(s->cfg))) return false;
        log_info("%s %s: the job store is open; Files and Batches are served",
                 srv_job_store_kind(s->cfg), srv_job_store_name(s->cfg));
    }
    resume(br);
    return true;
}

struct batchrun *batchrun_create(struct srv *s)
{
    struct batchrun *br = xcalloc(1, sizeof *br);
    br->s = s;
    if (s->js) resume(br);
    return br;
}

void batchrun_destroy(struct batchrun *br)
{
    if (!br) return;
    CHECK(br->n_checks == 0); /* the loop ran until its work was done */
    while (br->n_lines) drop_line(br, br->n_lines - 1, false);
    while (br->head) untrack(br, br->head);
    free(br->lines);
    free(br);
}
