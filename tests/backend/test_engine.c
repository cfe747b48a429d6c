/*
 * test_engine.c - the engine thread end to end on dummy:tiny (fp32).
 *
 * The test thread plays the libuv loop: it submits and cancels from its own thread,
 * sleeps until notify fires, and drains the outbox with engine_take_events. Every
 * sequence must end in exactly one finishing event; with ignore_eos a sequence
 * yields exactly max_tokens tokens; greedy completions of a batch must equal the
 * same requests run alone; a cancel stops a long request mid-way; a model that does
 * not exist ends in FAILED with every request answered by an error event; destroy
 * with requests in flight frees everything (the suite runs under ASan in CI).
 */
#include "test.h"

#include "engine.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#define WAIT_S 300.0 /* generous: ASan and 2 busy cores */
#define MAX_REQ 64
#define MAX_SEQ 4
#define MAX_TOK 1100

/* ---- notify -> condvar, the way uv_async_send wakes the loop. ---- */

struct notifier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long count;
};

static void on_notify(void *arg)
{
    struct notifier *nt = arg;
    pthread_mutex_lock(&nt->mu);
    nt->count++;
    pthread_cond_signal(&nt->cv);
    pthread_mutex_unlock(&nt->mu);
}

static void notifier_init(struct notifier *nt)
{
    pthread_condattr_t ca;
    pthread_mutex_init(&nt->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&nt->cv, &ca);
    pthread_condattr_destroy(&ca);
    nt->count = 0;
}

static void notifier_deinit(struct notifier *nt)
{
    pthread_cond_destroy(&nt->cv);
    pthread_mutex_destroy(&nt->mu);
}

static long notifier_count(struct notifier *nt)
{
    pthread_mutex_lock(&nt->mu);
    long c = nt->count;
    pthread_mutex_unlock(&nt->mu);
    return c;
}

/* Sleep until the count moves past `seen` or `seconds` pass. */
static void notifier_wait(struct notifier *nt, long seen, double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)seconds;
    pthread_mutex_lock(&nt->mu);
    while (nt->count == seen)
        if (pthread_cond_timedwait(&nt->cv, &nt->mu, &ts) == ETIMEDOUT) break;
    pthread_mutex_unlock(&nt->mu);
}

/* ---- What the "loop" heard, per request id and sequence. ---- */

struct seqrec {
    int32_t tokens[MAX_TOK];
    int32_t n_tok;
    int n_finish;        /* finishing events: must end at exactly 1 */
    int n_after_finish;  /* events after the finishing one: must stay 0 */
    int n_bad_offset;    /* text_offset not where the previous delta ended */
    enum req_finish finish;
    int32_t completion_tokens;
    size_t text_len;
};

struct reqrec {
    int32_t n;           /* sequences expected */
    int n_error;         /* seq -1 error events */
    int error_code;
    char error[512];
    struct seqrec seq[MAX_SEQ];
};

struct world {
    struct notifier nt;
    struct engine *e;
    struct reqrec *rec; /* [MAX_REQ], indexed by request id */
    int n_bad_id;       /* events for ids nobody submitted */
};

static void record(struct world *w, struct req_event *ev)
{
    if (ev->req_id >= MAX_REQ || w->rec[ev->req_id].n == 0) {
        w->n_bad_id++;
        return;
    }
    struct reqrec *rr = &w->rec[ev->req_id];
    if (ev->seq < 0) {
        CHECK(ev->finish == REQ_FINISH_ERROR);
        rr->n_error++;
        rr->error_code = ev->error_code;
        snprintf(rr->error, sizeof rr->error, "%s", ev->error ? ev->error : "");
        return;
    }
    CHECK(ev->seq < rr->n && ev->seq < MAX_SEQ);
    struct seqrec *s = &rr->seq[ev->seq];
    if (s->n_finish) s->n_after_finish++;
    if (ev->text_offset != s->text_len) s->n_bad_offset++;
    s->text_len += ev->text_len;
    if (ev->token >= 0 && s->n_tok < MAX_TOK) s->tokens[s->n_tok++] = ev->token;
    if (ev->finish != REQ_FINISH_NONE) {
        s->n_finish++;
        s->finish = ev->finish;
        s->completion_tokens = ev->completion_tokens;
    }
}

static void drain(struct world *w)
{
    for (struct req_node *n = engine_take_events(w->e); n;) {
        struct req_node *next = n->next;
        record(w, (struct req_event *)n);
        req_event_free((struct req_event *)n);
        n = next;
    }
}

static bool req_done(const struct reqrec *rr)
{
    if (rr->n_error) return true;
    for (int32_t i = 0; i < rr->n; i++)
        if (!rr->seq[i].n_finish) return false;
    return true;
}

typedef bool (*pred_fn)(struct world *w, const void *arg);

/* The loop's life: drain, check, sleep until notify. Returns whether pred held
 * before WAIT_S passed. */
static bool wait_for(struct world *w, pred_fn pred, const void *arg)
{
    const double t_end = time_now() + WAIT_S;
    for (;;) {
        long seen = notifier_count(&w->nt);
        drain(w);
        if (pred(w, arg)) return true;
        if (time_now() > t_end) return false;
        notifier_wait(&w->nt, seen, 5.0);
    }
}

static bool pred_state_settled(struct world *w, const void *arg)
{
    (void)arg;
    return engine_state(w->e) != ENGINE_LOADING;
}

static bool pred_all_done(struct world *w, const void *arg)
{
    (void)arg;
    for (int i = 0; i < MAX_REQ; i++)
        if (w->rec[i].n && !req_done(&w->rec[i])) return false;
    return true;
}

/* arg: uint64_t id[2] = {request id, tokens wanted in sequence 0} */
static bool pred_tokens(struct world *w, const void *arg)
{
    const uint64_t *a = arg;
    const struct reqrec *rr = &w->rec[a[0]];
    return req_done(rr) || rr->seq[0].n_tok >= (int32_t)a[1];
}

static bool pred_stopped(struct world *w, const void *arg)
{
    (void)arg;
    return engine_state(w->e) == ENGINE_STOPPED && pred_all_done(w, NULL);
}

static void world_init(struct world *w)
{
    memset(w, 0, sizeof *w);
    notifier_init(&w->nt);
    w->rec = xcalloc(MAX_REQ, sizeof *w->rec);
}

static void world_deinit(struct world *w)
{
    engine_destroy(w->e);
    free(w->rec);
    notifier_deinit(&w->nt);
}

static void tiny_opts(struct engine_opts *o, const char *model, int32_t kv_blocks)
{
    engine_opts_default(o);
    o->model = model;
    o->model_opts.dtype = DTYPE_F32;
    o->model_opts.n_threads = 2;
    o->kv_blocks = kv_blocks;
    o->sched.max_num_seqs = 8;
    o->sched.max_batched_tokens = 64; /* several steps per prompt: chunked prefill */
}

static bool start(struct world *w, const char *model, int32_t kv_blocks)
{
    struct engine_opts o;
    tiny_opts(&o, model, kv_blocks);
    int err = engine_create(&w->e, &o, on_notify, &w->nt);
    EXPECT_EQ(err, 0);
    return err == 0;
}

static struct req *mkreq(struct world *w, uint64_t id, const char *prompt, int32_t max_tokens,
                         int32_t n)
{
    CHECK(id < MAX_REQ && n <= MAX_SEQ);
    struct kv_spec kv;
    kv_budget_spec_default(&kv); /* h2o 20%: long prompts evict */
    kv.min_budget = 0;    /* these prompts are short: under the floor none would */
    struct req *r = req_new(id, &kv);
    r->prompt = xstrdup(prompt);
    r->prompt_len = strlen(prompt);
    r->max_tokens = max_tokens;
    r->n = n;
    r->sp.temperature = 0;
    r->ignore_eos = true;
    memset(&w->rec[id], 0, sizeof w->rec[id]);
    w->rec[id].n = n;
    return r;
}

/* Every sequence of request id ended once, with `finish`, after `n_tok` tokens. */
static void expect_finished(struct world *w, uint64_t id, enum req_finish finish, int32_t n_tok)
{
    const struct reqrec *rr = &w->rec[id];
    EXPECT_EQ(rr->n_error, 0);
    if (rr->n_error) printf("# request %llu: %s\n", (unsigned long long)id, rr->error);
    for (int32_t i = 0; i < rr->n; i++) {
        const struct seqrec *s = &rr->seq[i];
        EXPECT_EQ(s->n_finish, 1);
        EXPECT_EQ(s->n_after_finish, 0);
        EXPECT_EQ(s->n_bad_offset, 0);
        EXPECT_EQ(s->finish, finish);
        EXPECT_EQ(s->completion_tokens, s->n_tok);
        if (n_tok >= 0) EXPECT_EQ(s->n_tok, n_tok);
    }
}

/* ---- Tests. ---- */

TEST(ready_and_idle_without_spinning)
{
    struct world w;
    world_init(&w);
    if (!start(&w, "dummy:tiny", 32)) return;
    EXPECT(wait_for(&w, pred_state_settled, NULL));
    EXPECT_EQ(engine_state(w.e), ENGINE_READY);
    EXPECT_STR(engine_error(w.e), "");
    const struct opt_config *cfg = engine_model_config(w.e);
    EXPECT(cfg != NULL);
    if (cfg) {
        EXPECT_STR(cfg->name, "dummy:tiny");
        EXPECT_EQ(cfg->vocab_size, 512);
    }
    struct sched_stats st;
    engine_get_stats(w.e, &st);
    EXPECT_EQ(st.blocks_total, 32);
    EXPECT_EQ(st.blocks_used, 0);
    /* An idle engine sleeps on its inbox: half a second costs almost no CPU. */
    struct timespec a, b;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
    struct timespec nap = {0, 500000000L};
    nanosleep(&nap, NULL);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
    double cpu = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    printf("# idle CPU: %.4f s over 0.5 s\n", cpu);
    EXPECT(cpu < 0.1);
    world_deinit(&w);
}

static const char *const prompts[] = {
    "The quick brown fox jumps over the lazy dog, again and again.",
    "Hello",
    "Paged attention keeps every sequence's KV cache in fixed-size blocks.",
    "H2O keeps heavy hitters and a recent window.",
    "0123456789 0123456789 0123456789 0123456789 0123456789 0123456789 01234",
    "a b c d e f g",
};
static const int32_t max_tok[] = {8, 20, 13, 17, 11, 20};
static const int32_t n_seq[] = {1, 2, 1, 2, 1, 1};
#define N_PROMPTS 6

TEST(batch_equals_solo_greedy)
{
    struct world w;
    world_init(&w);
    /* 12 blocks of 16: the long prompts need 5 while prefilling, so some requests
     * wait for others to finish (admission under a full pool). */
    if (!start(&w, "dummy:tiny", 12)) return;
    /* Submitted while the model may still be loading: they wait in the inbox. */
    for (int i = 0; i < N_PROMPTS; i++)
        engine_submit(w.e, mkreq(&w, (uint64_t)i + 1, prompts[i], max_tok[i], n_seq[i]));
    EXPECT(wait_for(&w, pred_all_done, NULL));
    EXPECT_EQ(w.n_bad_id, 0);
    struct reqrec *batch = xcalloc(N_PROMPTS, sizeof *batch);
    int64_t gen = 0;
    for (int i = 0; i < N_PROMPTS; i++) {
        expect_finished(&w, (uint64_t)i + 1, REQ_FINISH_LENGTH, max_tok[i]);
        batch[i] = w.rec[i + 1];
        gen += (int64_t)max_tok[i] * n_seq[i];
        /* Greedy: the n completions of one prompt are the same. */
        for (int32_t s = 1; s < n_seq[i]; s++)
            EXPECT(memcmp(batch[i].seq[0].tokens, batch[i].seq[s].tokens,
                          (size_t)max_tok[i] * sizeof(int32_t)) == 0);
    }
    /* Each request alone in the engine gives the same tokens. */
    for (int i = 0; i < N_PROMPTS; i++) {
        const uint64_t id = 10 + (uint64_t)i;
        engine_submit(w.e, mkreq(&w, id, prompts[i], max_tok[i], 1));
        EXPECT(wait_for(&w, pred_all_done, NULL));
        expect_finished(&w, id, REQ_FINISH_LENGTH, max_tok[i]);
        gen += max_tok[i];
        bool same = memcmp(w.rec[id].seq[0].tokens, batch[i].seq[0].tokens,
                           (size_t)max_tok[i] * sizeof(int32_t)) == 0;
        if (!same) TEST_FAIL("prompt %d: batched and solo greedy tokens differ", i);
    }
    /* Everything finished: the published stats show an empty pool. */
    struct sched_stats st;
    engine_get_stats(w.e, &st);
    EXPECT_EQ(st.blocks_used, 0);
    EXPECT_EQ(st.blocks_reserved, 0);
    EXPECT_EQ(st.n_running, 0);
    EXPECT_EQ(st.n_waiting, 0);
    EXPECT_EQ(st.n_seqs, 0);
    EXPECT_EQ(st.generation_tokens, gen);
    EXPECT(st.tokens_evicted > 0);
    free(batch);
    world_deinit(&w);
}

TEST(cancel_long_request)
{
    struct world w;
    world_init(&w);
    if (!start(&w, "dummy:tiny", 64)) return;
    EXPECT(wait_for(&w, pred_state_settled, NULL));
    engine_submit(w.e, mkreq(&w, 1, "Tell me a very long story.", 1000, 2));
    engine_submit(w.e, mkreq(&w, 2, "A short one.", 12, 1));
    uint64_t arg[2] = {1, 5};
    EXPECT(wait_for(&w, pred_tokens, arg));
    engine_cancel(w.e, 1);
    engine_cancel(w.e, 999); /* unknown: ignored */
    EXPECT(wait_for(&w, pred_all_done, NULL));
    EXPECT_EQ(w.n_bad_id, 0);
    expect_finished(&w, 1, REQ_FINISH_CANCELLED, -1);
    EXPECT(w.rec[1].seq[0].n_tok >= 5);
    EXPECT(w.rec[1].seq[0].n_tok < 1000);
    expect_finished(&w, 2, REQ_FINISH_LENGTH, 12);
    /* Cancelling a finished request is harmless. */
    engine_cancel(w.e, 1);
    engine_submit(w.e, mkreq(&w, 3, "After the cancel.", 9, 1));
    EXPECT(wait_for(&w, pred_all_done, NULL));
    expect_finished(&w, 3, REQ_FINISH_LENGTH, 9);
    struct sched_stats st;
    engine_get_stats(w.e, &st);
    EXPECT_EQ(st.blocks_used, 0);
    EXPECT_EQ(st.n_running, 0);
    world_deinit(&w);
}

TEST(missing_model_fails_and_answers)
{
    struct world w;
    world_init(&w);
    if (!start(&w, "/nonexistent/h2oserve-test-model", 0)) return;
    engine_submit(w.e, mkreq(&w, 1, "queued while loading", 8, 1));
    EXPECT(wait_for(&w, pred_state_settled, NULL));
    EXPECT_EQ(engine_state(w.e), ENGINE_FAILED);
    const char *msg = engine_error(w.e);
    printf("# engine_error: %s\n", msg);
    EXPECT(strstr(msg, "nonexistent") != NULL);
    EXPECT(engine_model_config(w.e) == NULL);
    engine_submit(w.e, mkreq(&w, 2, "after the failure", 8, 2));
    engine_cancel(w.e, 2);
    EXPECT(wait_for(&w, pred_all_done, NULL));
    for (uint64_t id = 1; id <= 2; id++) {
        EXPECT_EQ(w.rec[id].n_error, 1);
        EXPECT(w.rec[id].error_code < 0);
        EXPECT(strstr(w.rec[id].error, "nonexistent") != NULL);
        EXPECT_EQ(w.rec[id].seq[0].n_finish + w.rec[id].seq[0].n_tok, 0);
    }
    world_deinit(&w);
}

TEST(invalid_request_gets_error_event)
{
    struct world w;
    world_init(&w);
    if (!start(&w, "dummy:tiny", 16)) return;
    /* A token id outside the vocabulary. */
    struct req *r = mkreq(&w, 1, "x", 8, 1);
    free(r->prompt);
    r->prompt = NULL;
    r->prompt_len = 0;
    r->prompt_ids = xmalloc(2 * sizeof *r->prompt_ids);
    r->prompt_ids[0] = 5;
    r->prompt_ids[1] = 9999;
    r->n_prompt_ids = 2;
    engine_submit(w.e, r);
    engine_submit(w.e, mkreq(&w, 2, "far too long", 5000, 1)); /* beyond the context */
    engine_submit(w.e, mkreq(&w, 3, "fine", 4, 1));
    EXPECT(wait_for(&w, pred_all_done, NULL));
    EXPECT_EQ(w.rec[1].n_error, 1);
    EXPECT_EQ(w.rec[2].n_error, 1);
    expect_finished(&w, 3, REQ_FINISH_LENGTH, 4);
    world_deinit(&w);
}

TEST(shutdown_cancels_then_refuses)
{
    struct world w;
    world_init(&w);
    if (!start(&w, "dummy:tiny", 64)) return;
    engine_submit(w.e, mkreq(&w, 1, "running when the server stops", 1000, 2));
    engine_submit(w.e, mkreq(&w, 2, "also running", 1000, 1));
    uint64_t arg[2] = {1, 3};
    EXPECT(wait_for(&w, pred_tokens, arg));
    engine_shutdown(w.e);
    engine_shutdown(w.e); /* idempotent */
    engine_submit(w.e, mkreq(&w, 3, "too late", 8, 1));
    EXPECT(wait_for(&w, pred_stopped, NULL));
    expect_finished(&w, 1, REQ_FINISH_CANCELLED, -1);
    expect_finished(&w, 2, REQ_FINISH_CANCELLED, -1);
    EXPECT_EQ(w.rec[3].n_error, 1);
    EXPECT(strstr(w.rec[3].error, "shutting down") != NULL);
    const struct opt_config *cfg = engine_model_config(w.e);
    EXPECT(cfg != NULL && strcmp(cfg->name, "dummy:tiny") == 0);
    struct sched_stats st;
    engine_get_stats(w.e, &st);
    EXPECT_EQ(st.blocks_used, 0);
    world_deinit(&w);
}

TEST(destroy_in_flight_and_while_loading)
{
    /* Requests running and waiting, events undelivered: destroy frees it all. */
    struct world w;
    world_init(&w);
    if (!start(&w, "dummy:tiny", 8)) return;
    for (uint64_t id = 1; id <= 6; id++)
        engine_submit(w.e, mkreq(&w, id, "in flight at destroy time", 500, id % 2 ? 1 : 2));
    uint64_t arg[2] = {1, 2};
    EXPECT(wait_for(&w, pred_tokens, arg));
    engine_cancel(w.e, 2);
    world_deinit(&w);

    /* Destroyed at once, with a request queued behind the load. */
    world_init(&w);
    if (!start(&w, "dummy:tiny", 8)) return;
    engine_submit(w.e, mkreq(&w, 1, "never runs", 8, 1));
    world_deinit(&w);

    /* And a failing load. */
    world_init(&w);
    if (!start(&w, "dummy:no-such-size", 8)) return;
    engine_submit(w.e, mkreq(&w, 1, "never runs", 8, 1));
    world_deinit(&w);
}

TEST(pool_sizing)
{
    /* A byte budget smaller than one block fails loading with a clear message. */
    struct world w;
    world_init(&w);
    struct engine_opts o;
    tiny_opts(&o, "dummy:tiny", 0);
    o.kv_cache_bytes = 100;
    EXPECT_EQ(engine_create(&w.e, &o, on_notify, &w.nt), 0);
    EXPECT(wait_for(&w, pred_state_settled, NULL));
    EXPECT_EQ(engine_state(w.e), ENGINE_FAILED);
    printf("# engine_error: %s\n", engine_error(w.e));
    EXPECT(strstr(engine_error(w.e), "block") != NULL);
    world_deinit(&w);

    /* The default: capped by what max_num_seqs full-context sequences could use
     * (8 * 2048 / 16 = 1024 blocks for dummy:tiny), far below 4 GiB. */
    world_init(&w);
    tiny_opts(&o, "dummy:tiny", 0);
    EXPECT_EQ(engine_create(&w.e, &o, on_notify, &w.nt), 0);
    EXPECT(wait_for(&w, pred_state_settled, NULL));
    struct sched_stats st;
    engine_get_stats(w.e, &st);
    EXPECT_EQ(st.blocks_total, 1024);
    world_deinit(&w);

    /* Bad options fail at once, on the caller's thread. */
    tiny_opts(&o, "dummy:tiny", 0);
    o.block_size = 0;
    struct engine *e = (struct engine *)&o; /* overwritten with NULL */
    EXPECT(engine_create(&e, &o, NULL, NULL) < 0);
    EXPECT(e == NULL);
}

int main(void)
{
    RUN(ready_and_idle_without_spinning);
    RUN(batch_equals_solo_greedy);
    RUN(cancel_long_request);
    RUN(missing_model_fails_and_answers);
    RUN(invalid_request_gets_error_event);
    RUN(shutdown_cancels_then_refuses);
    RUN(destroy_in_flight_and_while_loading);
    RUN(pool_sizing);
    return test_done();
}
