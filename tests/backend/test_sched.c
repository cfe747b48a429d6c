/*
 * test_sched.c - the scheduler (engine/sched.h) as a specification.
 *
 * Every test drives sched_create / sched_add / sched_step / sched_cancel /
 * sched_cancel_all / sched_destroy directly on dummy:tiny in fp32 and watches the
 * events it emits. An observer checks every event as it arrives, in every test:
 * events only for requests that were added; an error event (seq -1) is a request's
 * only event; no event after a sequence's finishing event, and none after
 * sched_cancel returned; text offsets add up; completion_tokens counts the token
 * events; with ignore_eos a sequence that ends by length has exactly max_tokens
 * tokens; every token event of an H2O sequence holds at most ceil(B / block_size)
 * blocks; a cancelled finish only comes out of sched_cancel. Each test ends with
 * every block back in the pool (pool.n_free == pool.n_blocks after sched_destroy,
 * stats blocks_used == blocks_reserved == 0 once idle) and the stats counters equal
 * to what was observed (generation_tokens == token events, steps == forwards).
 *
 * The tests, one per claim of sched.h and docs/kv-cache.md "Memory and admission":
 * first come first served within a class; interactive before batch; a long prompt
 * is not starved by a stream of short ones; a cancel frees blocks and reservations
 * at once, wherever the request is; every sequence ends with exactly one finishing
 * event, n > 1 forks are identical when greedy and seeded seed + i when sampling
 * (also when the compacted prompt holds one block more than its slots need);
 * requests that cannot run get one error event and leave the scheduler working;
 * the same pool holds 4.5x as many H2O 20% sequences of 512 + 512 tokens as full
 * ones; and a seeded stress run of 1000 random requests with random cancels.
 * The tests that found engine bugs say so where they are.
 */
#include "test.h"

#include "err.h"
#include "h2o.h"
#include "kv_pool.h"
#include "model.h"
#include "req.h"
#include "sched.h"
#include "util.h"

#include <stdarg.h>

#define BS 16        /* block size of every pool here */
#define MAXN 4       /* most sequences per request in these tests */
#define VOCAB 512    /* dummy:tiny */
#define MAX_POS 2048 /* dummy:tiny */

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* A uniform integer in [lo, hi]. */
static int32_t lcg_range(uint64_t *s, int32_t lo, int32_t hi)
{
    return lo + (int32_t)(lcg(s) % (uint64_t)(hi - lo + 1));
}

static uint64_t hash_mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* ---- What a test observes: every event, checked as it arrives. ---- */

struct seq_obs {
    int32_t n_tok; /* token events */
    int32_t n_fin; /* finishing events */
    enum req_finish fin;
    size_t text_len;     /* bytes of text so far */
    int32_t last_blocks; /* kv_blocks of the newest token event */
    uint64_t tok_hash, text_hash;
};

struct req_obs {
    bool added;
    bool expect_error; /* built to be rejected */
    bool cancelled;    /* sched_cancel returned for it */
    int32_t n, max_tokens, n_prompt;
    int32_t n_err; /* seq -1 events */
    int32_t n_events;
    int32_t n_fin;            /* finishing events over its sequences */
    int64_t add_step;         /* steps taken when it was added */
    int64_t first_token_step; /* the step of its first token, -1 before */
    int64_t finish_step;      /* the step of its last finishing event, -1 before */
    struct seq_obs seq[MAXN];
};

struct obs {
    struct req_obs *r;
    int32_t cap;  /* ids 0..cap-1 */
    int64_t step; /* sched_step calls so far; events of call k carry k */
    int64_t n_token_events;
    int64_t n_violations;
    uint64_t in_cancel; /* id + 1 while sched_cancel(id) runs, else 0 */
    bool in_cancel_all;
    int32_t n_decoding;    /* sequences with a token and no finish */
    int32_t max_kv_blocks; /* over token events */
    int32_t max_budget_blocks;
    int32_t *first_order, n_first;   /* ids in the order of their first token */
    int32_t *fin_order, n_fin_order; /* ids in the order their last sequence ended */
};

/* A broken expectation inside the event stream: reported (the first 20), counted. */
static void violation(struct obs *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void violation(struct obs *o, const char *fmt, ...)
{
    test_cur_failed = 1;
    if (o->n_violations++ >= 20) return;
    va_list ap;
    va_start(ap, fmt);
    printf("# step %lld: ", (long long)o->step);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static void on_event(void *arg, struct req_event *ev)
{
    struct obs *o = arg;
    const uint64_t id = ev->req_id;
    if (id >= (uint64_t)o->cap || !o->r[id].added) {
        violation(o, "event for request %llu, which was never added",
                  (unsigned long long)id);
        req_event_free(ev);
        return;
    }
    struct req_obs *q = &o->r[id];
    if (q->cancelled && o->in_cancel != id + 1)
        violation(o, "req %llu: an event after sched_cancel returned",
                  (unsigned long long)id);
    q->n_events++;
    if (ev->seq == -1) {
        q->n_err++;
        if (ev->finish != REQ_FINISH_ERROR || ev->token != -1 || !ev->error ||
            !ev->error[0] || ev->error_code == 0)
            violation(o,
                      "req %llu: a seq -1 event must be an error with a message and a code "
                      "(finish %s, token %d, code %d)",
                      (unsigned long long)id, req_finish_name(ev->finish), ev->token,
                      ev->error_code);
        if (q->n_events != 1)
            violation(o, "req %llu: its error event is not its only event",
                      (unsigned long long)id);
        if (!q->expect_error)
            violation(o, "req %llu: unexpected error: %s", (unsigned long long)id,
                      ev->error ? ev->error : "(null)");
        req_event_free(ev);
        return;
    }
    if (q->n_err)
        violation(o, "req %llu: an event after its error", (unsigned long long)id);
    if (ev->seq < 0 || ev->seq >= MIN(q->n, MAXN)) {
        violation(o, "req %llu: seq %d out of range (n %d)", (unsigned long long)id,
                  ev->seq, q->n);
        req_event_free(ev);
        return;
    }
    struct seq_obs *so = &q->seq[ev->seq];
    if (so->n_fin)
        violation(o, "req %llu seq %d: an event after its finishing event",
                  (unsigned long long)id, ev->seq);
    if (ev->text_offset != so->text_len)
        violation(o, "req %llu seq %d: text_offset %zu, but %zu bytes came before",
                  (unsigned long long)id, ev->seq, ev->text_offset, so->text_len);
    so->text_len += ev->text_len;
    if (ev->text_len) so->text_hash = hash_mix(so->text_hash, ev->text, ev->text_len);
    if (ev->token >= 0) {
        o->n_token_events++;
        if (so->n_tok == 0) o->n_decoding++;
        so->n_tok++;
        so->tok_hash = hash_mix(so->tok_hash ? so->tok_hash : 14695981039346656037ull,
                                &ev->token, sizeof ev->token);
        so->last_blocks = ev->kv_blocks;
        if (q->first_token_step < 0) {
            q->first_token_step = o->step;
            o->first_order[o->n_first++] = (int32_t)id;
        }
        if (ev->token >= VOCAB)
            violation(o, "req %llu: token %d is not in the vocabulary",
                      (unsigned long long)id, ev->token);
        if (ev->kv_budget_blocks > 0 && ev->kv_blocks > ev->kv_budget_blocks)
            violation(o, "req %llu seq %d: holds %d KV blocks, over its H2O budget of %d",
                      (unsigned long long)id, ev->seq, ev->kv_blocks, ev->kv_budget_blocks);
        if (ev->kv_budget_blocks == 0 && ev->kv_evicted != 0)
            violation(o, "req %llu seq %d: the full policy evicted %lld tokens",
                      (unsigned long long)id, ev->seq, (long long)ev->kv_evicted);
        o->max_kv_blocks = MAX(o->max_kv_blocks, ev->kv_blocks);
        o->max_budget_blocks = MAX(o->max_budget_blocks, ev->kv_budget_blocks);
        if (ev->finish == REQ_FINISH_NONE && so->n_tok >= q->max_tokens)
            violation(o, "req %llu seq %d: token %d of max_tokens %d does not finish",
                      (unsigned long long)id, ev->seq, so->n_tok, q->max_tokens);
    } else if (ev->finish == REQ_FINISH_NONE) {
        violation(o, "req %llu seq %d: an event with neither a token nor a finish",
                  (unsigned long long)id, ev->seq);
    }
    if (ev->completion_tokens != so->n_tok)
        violation(o, "req %llu seq %d: completion_tokens %d after %d token events",
                  (unsigned long long)id, ev->seq, ev->completion_tokens, so->n_tok);
    if (ev->finish != REQ_FINISH_NONE) {
        if (so->n_tok > 0) o->n_decoding--;
        so->n_fin++;
        so->fin = ev->finish;
        if (ev->prompt_tokens != q->n_prompt)
            violation(o, "req %llu seq %d: prompt_tokens %d, the prompt has %d",
                      (unsigned long long)id, ev->seq, ev->prompt_tokens, q->n_prompt);
        switch (ev->finish) {
        case REQ_FINISH_LENGTH:
            if (so->n_tok != q->max_tokens)
                violation(o, "req %llu seq %d: finished by length after %d of %d tokens",
                          (unsigned long long)id, ev->seq, so->n_tok, q->max_tokens);
            break;
        case REQ_FINISH_CANCELLED:
            if (o->in_cancel != id + 1 && !o->in_cancel_all)
                violation(o, "req %llu seq %d: cancelled outside sched_cancel",
                          (unsigned long long)id, ev->seq);
            break;
        default: /* ignore_eos and no stop strings: only length or cancel end a sequence */
            violation(o, "req %llu seq %d: finish %s", (unsigned long long)id, ev->seq,
                      req_finish_name(ev->finish));
        }
        if (++q->n_fin == q->n) {
            q->finish_step = o->step;
            o->fin_order[o->n_fin_order++] = (int32_t)id;
        }
    }
    req_event_free(ev);
}

/* ---- A scheduler on dummy:tiny with its pool and observer. ---- */

/* dummy:tiny in fp32 with a KV pool of n_blocks blocks of BS (test_model's job), on
 * one thread: its forwards take microseconds, so waking OpenMP threads for each of
 * the thousands of steps here costs 20x the work itself. */
static struct model *tiny_model(int32_t n_blocks)
{
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = DTYPE_F32;
    mo.n_threads = 1;
    struct model *m = NULL;
    if (model_load(&m, "dummy:tiny", &mo)) {
        TEST_FAIL("model_load(dummy:tiny): %s", err_msg());
        return NULL;
    }
    CHECK(m->be.ops->kv_alloc(m->be.ctx, n_blocks, BS) == 0);
    return m;
}

struct harness {
    struct model *m;
    struct kv_pool pool;
    struct sched *s;
    struct sched_opts so;
    struct obs o;
    int64_t n_forwards; /* sched_step calls that ran a forward */
    int32_t max_n_seqs; /* stats n_seqs, the most after any step */
};

static bool h_open(struct harness *h, int32_t n_blocks, int32_t max_num_seqs,
                   int32_t max_batched_tokens, int32_t n_ids)
{
    memset(h, 0, sizeof *h);
    h->m = tiny_model(n_blocks);
    if (!h->m) return false;
    kv_pool_init(&h->pool, n_blocks, BS);
    h->o.cap = n_ids;
    h->o.r = xcalloc((size_t)n_ids, sizeof *h->o.r);
    for (int32_t i = 0; i < n_ids; i++)
        h->o.r[i].first_token_step = h->o.r[i].finish_step = -1;
    h->o.first_order = xcalloc((size_t)n_ids, sizeof *h->o.first_order);
    h->o.fin_order = xcalloc((size_t)n_ids, sizeof *h->o.fin_order);
    h->so = (struct sched_opts){.max_num_seqs = max_num_seqs,
                                .max_batched_tokens = max_batched_tokens};
    h->s = sched_create(h->m, &h->pool, &h->so, on_event, &h->o);
    if (!h->s) {
        TEST_FAIL("sched_create: %s", err_msg());
        kv_pool_deinit(&h->pool);
        model_destroy(h->m);
        return false;
    }
    return true;
}

static struct sched_stats h_stats(const struct harness *h)
{
    struct sched_stats st;
    sched_get_stats(h->s, &st);
    return st;
}

/* Stats that must hold between any two calls. */
static void h_check_stats(struct harness *h)
{
    struct sched_stats st = h_stats(h);
    if (st.blocks_used != h->pool.n_blocks - h->pool.n_free ||
        st.blocks_total != h->pool.n_blocks || st.blocks_used > st.blocks_reserved ||
        st.blocks_reserved > st.blocks_total || st.n_seqs > h->so.max_num_seqs ||
        st.n_waiting < 0 || st.n_running < 0)
        violation(&h->o,
                  "inconsistent stats: used %d reserved %d total %d (pool %d free of %d) "
                  "seqs %d (max %d) waiting %d running %d",
                  st.blocks_used, st.blocks_reserved, st.blocks_total, h->pool.n_free,
                  h->pool.n_blocks, st.n_seqs, h->so.max_num_seqs, st.n_waiting,
                  st.n_running);
    if (st.generation_tokens != h->o.n_token_events)
        violation(&h->o, "stats generation_tokens %lld, token events %lld",
                  (long long)st.generation_tokens, (long long)h->o.n_token_events);
    h->max_n_seqs = MAX(h->max_n_seqs, st.n_seqs);
}

static int h_step(struct harness *h)
{
    h->o.step++;
    int n = sched_step(h->s);
    if (n < 0) TEST_FAIL("sched_step: %d (%s)", n, err_msg());
    if (n > h->so.max_batched_tokens)
        violation(&h->o, "a forward of %d tokens, max_batched_tokens %d", n,
                  h->so.max_batched_tokens);
    if (n > 0) h->n_forwards++;
    h_check_stats(h);
    return n;
}

/* Step until idle; every step of a busy scheduler must make progress. */
static int64_t h_run_idle(struct harness *h, int64_t max_steps)
{
    int64_t k = 0;
    while (!sched_idle(h->s)) {
        if (k == max_steps) {
            TEST_FAIL("still busy after %lld steps", (long long)max_steps);
            break;
        }
        if (h_step(h) <= 0) {
            TEST_FAIL("sched_step did no work while requests were waiting or running");
            break;
        }
        k++;
    }
    return k;
}

static void h_add(struct harness *h, struct req *r)
{
    CHECK(r->id < (uint64_t)h->o.cap && !h->o.r[r->id].added);
    struct req_obs *q = &h->o.r[r->id];
    q->added = true;
    q->n = r->n;
    q->max_tokens = r->max_tokens;
    if (!r->prompt) q->n_prompt = r->n_prompt_ids; /* text prompts: set by the test */
    q->add_step = h->o.step;
    sched_add(h->s, r);
    h_check_stats(h);
}

static void h_cancel(struct harness *h, uint64_t id)
{
    h->o.in_cancel = id + 1;
    sched_cancel(h->s, id);
    h->o.in_cancel = 0;
    if (id < (uint64_t)h->o.cap && h->o.r[id].added) h->o.r[id].cancelled = true;
    h_check_stats(h);
}

static void h_cancel_all(struct harness *h)
{
    h->o.in_cancel_all = true;
    sched_cancel_all(h->s);
    h->o.in_cancel_all = false;
    for (int32_t i = 0; i < h->o.cap; i++)
        if (h->o.r[i].added) h->o.r[i].cancelled = true;
    h_check_stats(h);
}

/* Every added request is answered: an error event alone, or one finishing event per
 * sequence. */
static void h_check_all_answered(struct harness *h)
{
    int32_t bad = 0;
    for (int32_t i = 0; i < h->o.cap; i++) {
        const struct req_obs *q = &h->o.r[i];
        if (!q->added) continue;
        bool ok;
        if (q->expect_error) {
            ok = q->n_err == 1 && q->n_events == 1;
        } else {
            ok = q->n_err == 0 && q->n_fin == q->n;
            for (int32_t k = 0; k < MIN(q->n, MAXN); k++)
                ok = ok && q->seq[k].n_fin == 1;
        }
        if (!ok && bad++ < 10)
            TEST_FAIL("req %d (n %d%s): %d error events, %d finishing events", i, q->n,
                      q->expect_error ? ", expected to fail" : "", q->n_err, q->n_fin);
    }
}

static void h_close(struct harness *h)
{
    if (!h->s) return;
    struct sched_stats st = h_stats(h);
    if (sched_idle(h->s)) {
        EXPECT_EQ(st.n_waiting, 0);
        EXPECT_EQ(st.n_running, 0);
        EXPECT_EQ(st.n_seqs, 0);
        EXPECT_EQ(st.blocks_used, 0);
        EXPECT_EQ(st.blocks_reserved, 0);
    }
    EXPECT_EQ(st.generation_tokens, h->o.n_token_events);
    EXPECT_EQ(st.steps, h->n_forwards);
    sched_destroy(h->s);
    h->s = NULL;
    EXPECT_EQ(h->pool.n_free, h->pool.n_blocks);
    kv_pool_deinit(&h->pool);
    model_destroy(h->m);
    free(h->o.r);
    free(h->o.first_order);
    free(h->o.fin_order);
}

/* ---- Requests. ---- */

static struct kv_spec spec_full(void)
{
    struct kv_spec k;
    kv_spec_default(&k);
    k.policy = KV_POLICY_FULL;
    return k;
}

static struct kv_spec spec_ratio(enum kv_policy p, float heavy, float recent)
{
    struct kv_spec k;
    kv_spec_default(&k);
    k.policy = p;
    k.heavy_ratio = heavy;
    k.recent_ratio = recent;
    return k;
}

static struct kv_spec spec_abs(enum kv_policy p, int32_t heavy, int32_t recent)
{
    struct kv_spec k;
    kv_spec_default(&k);
    k.policy = p;
    k.heavy = heavy;
    k.recent = recent;
    return k;
}

/* A greedy, ignore_eos request of P token ids in [4, 511] drawn from `seed`. */
static struct req *mkreq(uint64_t id, int32_t P, int32_t max_tokens, int32_t n,
                         enum req_priority prio, struct kv_spec kv, uint64_t seed)
{
    struct req *r = req_new(id, &kv);
    r->prompt_ids = xmalloc((size_t)MAX(P, 1) * sizeof *r->prompt_ids);
    for (int32_t i = 0; i < P; i++)
        r->prompt_ids[i] = lcg_range(&seed, 4, VOCAB - 1);
    r->n_prompt_ids = P;
    r->n = n;
    r->max_tokens = max_tokens;
    r->prio = prio;
    r->ignore_eos = true;
    r->sp.temperature = 0;
    return r;
}

/* Blocks one sequence of a request keeps after its prompt (sched.c's decode share,
 * from the public budget rules of h2o.h and docs/kv-cache.md). */
static int32_t decode_blocks(const struct kv_spec *kv, int32_t P, int32_t max_tokens)
{
    struct kv_budget b;
    CHECK(kv_budget_resolve(kv, P, max_tokens, &b) == 0);
    int64_t slots = (int64_t)P + max_tokens;
    if (b.policy != KV_POLICY_FULL) slots = MIN(slots, (int64_t)kv_budget_slots(&b));
    return (int32_t)CEIL_DIV(slots, BS);
}

/* What admission reserves: max(prompt blocks, n * decode blocks). */
static int32_t admit_blocks(const struct kv_spec *kv, int32_t P, int32_t max_tokens,
                            int32_t n)
{
    return MAX(CEIL_DIV(P, BS), n * decode_blocks(kv, P, max_tokens));
}

static void expect_order(const int32_t *got, const int32_t *want, int32_t n,
                         const char *what)
{
    for (int32_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            char g[256] = "", w[256] = "";
            for (int32_t k = 0; k < n; k++) {
                snprintf(g + strlen(g), sizeof g - strlen(g), " %d", got[k]);
                snprintf(w + strlen(w), sizeof w - strlen(w), " %d", want[k]);
            }
            TEST_FAIL("%s:%s, expected%s", what, g, w);
            return;
        }
}

/* ---- 1. First come, first served within a class. ---- */

/* One sequence at a time (max_num_seqs 1): prompts of decreasing length, so neither
 * shortest-first nor anything but submission order gives 1..5. */
TEST(fcfs_one_seq_at_a_time)
{
    struct harness h;
    if (!h_open(&h, 64, 1, 16, 8)) return;
    const int32_t P[5] = {40, 30, 20, 10, 5};
    for (int32_t i = 0; i < 5; i++)
        h_add(&h, mkreq((uint64_t)i + 1, P[i], 4, 1, REQ_PRIO_BATCH, spec_full(),
                        10 + (uint64_t)i));
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    const int32_t want[5] = {1, 2, 3, 4, 5};
    EXPECT_EQ(h.o.n_first, 5);
    EXPECT_EQ(h.o.n_fin_order, 5);
    expect_order(h.o.first_order, want, 5, "first tokens");
    expect_order(h.o.fin_order, want, 5, "finishes");
    EXPECT_EQ(h.max_n_seqs, 1);
    /* One at a time: each request's first token comes after the previous one ended. */
    for (int32_t i = 2; i <= 5; i++)
        EXPECT(h.o.r[i].first_token_step > h.o.r[i - 1].finish_step);
    h_close(&h);
}

/* A pool that fits one: request 1 (7 blocks) runs alone in 8 blocks; request 5 (2
 * blocks) would fit beside request 2 (6 blocks), but strict FCFS lets nobody overtake
 * request 3 (5 blocks), which waits for request 2. */
TEST(fcfs_pool_fits_one)
{
    struct harness h;
    if (!h_open(&h, 8, 8, 32, 8)) return;
    const int32_t P[5] = {100, 80, 60, 40, 20};
    for (int32_t i = 0; i < 5; i++) {
        struct kv_spec full = spec_full();
        CHECK(admit_blocks(&full, P[i], 8, 1) <= 8);
        h_add(&h, mkreq((uint64_t)i + 1, P[i], 8, 1, REQ_PRIO_INTERACTIVE, full,
                        20 + (uint64_t)i));
    }
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    const int32_t want[5] = {1, 2, 3, 4, 5};
    EXPECT_EQ(h.o.n_first, 5);
    expect_order(h.o.first_order, want, 5, "first tokens");
    /* Requests 2 and 5 never run side by side: 5 starts after 2 ended. */
    EXPECT(h.o.r[5].first_token_step > h.o.r[2].finish_step);
    h_close(&h);
}

/* ---- 2. Interactive before batch. ---- */

TEST(interactive_before_batch)
{
    struct harness h;
    if (!h_open(&h, 64, 1, 16, 32)) return;
    for (uint64_t id = 1; id <= 3; id++)
        h_add(&h, mkreq(id, 8, 4, 1, REQ_PRIO_BATCH, spec_full(), id));
    h_step(&h); /* batch 1 is admitted; 2 and 3 wait */
    for (uint64_t id = 11; id <= 13; id++)
        h_add(&h, mkreq(id, 8, 4, 1, REQ_PRIO_INTERACTIVE, spec_full(), id));
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    /* The running batch request is not preempted; every interactive request starts
     * before any waiting batch request, FCFS among themselves. */
    const int32_t want[6] = {1, 11, 12, 13, 2, 3};
    EXPECT_EQ(h.o.n_first, 6);
    expect_order(h.o.first_order, want, 6, "first tokens");
    for (int32_t i = 11; i <= 13; i++)
        for (int32_t b = 2; b <= 3; b++)
            EXPECT(h.o.r[i].first_token_step < h.o.r[b].first_token_step);
    h_close(&h);
}

/* Same with a pool that fits one request, the class order must hold for blocks too,
 * and a waiting interactive request that does not fit yet blocks the batch class. */
TEST(interactive_before_batch_pool_bound)
{
    struct harness h;
    if (!h_open(&h, 8, 8, 32, 32)) return;
    /* Batch 1 takes 7 of 8 blocks; batch 2 (1 block) would fit beside it. */
    h_add(&h, mkreq(1, 100, 8, 1, REQ_PRIO_BATCH, spec_full(), 1));
    h_step(&h);
    h_add(&h, mkreq(2, 5, 4, 1, REQ_PRIO_BATCH, spec_full(), 2));
    /* Interactive 11 needs 4 blocks: it waits for batch 1, and batch 2 waits for it. */
    h_add(&h, mkreq(11, 50, 8, 1, REQ_PRIO_INTERACTIVE, spec_full(), 11));
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    const int32_t want[3] = {1, 11, 2};
    EXPECT_EQ(h.o.n_first, 3);
    expect_order(h.o.first_order, want, 3, "first tokens");
    h_close(&h);
}

/* ---- 3. No starvation of a long prompt. ---- */

/*
 * Eight short requests (2 blocks each) fill the scheduler (max_num_seqs 8); then a
 * 300-token prompt needing 20 of the 24 blocks arrives, and after it one short
 * request per step for 300 steps. The long one fits only once at most two shorts
 * run; a scheduler that admits whatever fits refills every seat a short frees with
 * the next short and never gets there. FCFS makes the shorts behind it wait, so it
 * must finish within
 *   (8 requests ahead, run one after the other: 10 prompt + 16 decode steps each)
 *   + ceil((300 + 8 * 10) / (32 - 8)) prefill steps + 8 decode steps
 * of its submission (a loose bound; it is far quicker in practice).
 */
TEST(long_prompt_not_starved)
{
    enum {
        N_AHEAD = 8,
        SHORT_P = 10,
        SHORT_T = 16,
        LONG_P = 300,
        LONG_T = 8,
        STREAM = 300,
        MNS = 8,
        MBT = 32
    };
    struct harness h;
    if (!h_open(&h, 24, MNS, MBT, 1 + N_AHEAD + 1 + STREAM)) return;
    uint64_t id = 1;
    for (int32_t i = 0; i < N_AHEAD; i++, id++)
        h_add(&h, mkreq(id, SHORT_P, SHORT_T, 1, REQ_PRIO_BATCH, spec_full(), id));
    const uint64_t long_id = id++;
    h_add(&h, mkreq(long_id, LONG_P, LONG_T, 1, REQ_PRIO_BATCH, spec_full(), 99));
    const int64_t bound = N_AHEAD * (SHORT_P + SHORT_T) +
                          CEIL_DIV(LONG_P + N_AHEAD * SHORT_P, MBT - MNS) + LONG_T;
    CHECK(bound < STREAM);
    for (int32_t t = 0; t < STREAM; t++, id++) {
        h_add(&h, mkreq(id, SHORT_P, SHORT_T, 1, REQ_PRIO_BATCH, spec_full(), id));
        h_step(&h);
    }
    h_run_idle(&h, 100000);
    h_check_all_answered(&h);
    const struct req_obs *lq = &h.o.r[long_id];
    EXPECT(lq->finish_step >= 0);
    const int64_t took = lq->finish_step - lq->add_step;
    printf("# the 300-token prompt finished %lld steps after submission (bound %lld)\n",
           (long long)took, (long long)bound);
    EXPECT(took <= bound);
    h_close(&h);
}

/* ---- 4. Cancellation frees blocks at once. ---- */

/*
 * Pool 64, max_batched_tokens 32. Step 1 admits A (full, P 20, n 2: reserves
 * 2 * ceil(60 / 16) = 8) whose whole prompt fits, so both forks decode from step 2,
 * and B (H2O H = R = 8, P 100, n 2: reserves max(7, 2 * 1) = 7) with the 12 tokens
 * left; steps 2 and 3 give B 30 prompt tokens each (32 minus A's two decode tokens),
 * so B holds ceil(72 / 16) = 5 blocks mid-prompt. C (full, P 10 + 500, n 2:
 * 64 blocks) waits. Each cancel takes effect inside sched_cancel.
 */
TEST(cancel_frees_blocks_at_once)
{
    struct harness h;
    if (!h_open(&h, 64, 8, 32, 128)) return;
    const struct kv_spec kvA = spec_full(), kvB = spec_abs(KV_POLICY_H2O, 8, 8),
                         kvC = spec_full();
    h_add(&h, mkreq(1, 20, 40, 2, REQ_PRIO_BATCH, kvA, 1));
    h_add(&h, mkreq(2, 100, 50, 2, REQ_PRIO_BATCH, kvB, 2));
    h_add(&h, mkreq(3, 10, 500, 2, REQ_PRIO_BATCH, kvC, 3));
    for (int i = 0; i < 3; i++)
        h_step(&h);

    const int32_t resA = admit_blocks(&kvA, 20, 40, 2),
                  resB = admit_blocks(&kvB, 100, 50, 2);
    const int32_t heldB = CEIL_DIV(12 + 30 + 30, BS);
    EXPECT_EQ(resA, 8);
    EXPECT_EQ(resB, 7);
    const struct req_obs *A = &h.o.r[1], *B = &h.o.r[2], *C = &h.o.r[3];
    EXPECT_EQ(A->seq[0].n_tok, 3);
    EXPECT_EQ(A->seq[1].n_tok, 3);
    EXPECT_EQ(B->n_events, 0);
    EXPECT_EQ(C->n_events, 0);
    const int32_t heldA = A->seq[0].last_blocks + A->seq[1].last_blocks;
    EXPECT_EQ(heldA, 2 * CEIL_DIV(22, BS)); /* 20 prompt + 2 decode tokens each */
    struct sched_stats st0 = h_stats(&h);
    EXPECT_EQ(st0.blocks_used, heldA + heldB);
    EXPECT_EQ(st0.blocks_reserved, resA + resB);
    EXPECT_EQ(st0.n_waiting, 1);
    EXPECT_EQ(st0.n_running, 2);
    EXPECT_EQ(st0.n_seqs, 3);

    /* Mid-prompt: both of B's completions end, though only one sequence existed. */
    h_cancel(&h, 2);
    struct sched_stats st1 = h_stats(&h);
    EXPECT_EQ(st0.blocks_used - st1.blocks_used, heldB);
    EXPECT_EQ(st0.blocks_reserved - st1.blocks_reserved, resB);
    EXPECT_EQ(st1.n_running, 1);
    EXPECT_EQ(B->n_events, 2);
    for (int k = 0; k < 2; k++) {
        EXPECT_EQ(B->seq[k].n_fin, 1);
        EXPECT_EQ(B->seq[k].fin, REQ_FINISH_CANCELLED);
    }

    /* Decoding: both forks end, their blocks and reservation come back. */
    const int32_t a_events = A->n_events;
    h_cancel(&h, 1);
    struct sched_stats st2 = h_stats(&h);
    EXPECT_EQ(st1.blocks_used - st2.blocks_used, heldA);
    EXPECT_EQ(st1.blocks_reserved - st2.blocks_reserved, resA);
    EXPECT_EQ(A->n_events - a_events, 2);
    for (int k = 0; k < 2; k++) {
        EXPECT_EQ(A->seq[k].n_fin, 1);
        EXPECT_EQ(A->seq[k].fin, REQ_FINISH_CANCELLED);
    }
    EXPECT_EQ(st2.blocks_used, 0);
    EXPECT_EQ(st2.blocks_reserved, 0);

    /* Waiting: nothing held or reserved, two finishing events. */
    h_cancel(&h, 3);
    struct sched_stats st3 = h_stats(&h);
    EXPECT_EQ(st3.blocks_used, 0);
    EXPECT_EQ(st3.blocks_reserved, 0);
    EXPECT_EQ(st3.n_waiting, 0);
    EXPECT_EQ(C->n_events, 2);
    for (int k = 0; k < 2; k++)
        EXPECT_EQ(C->seq[k].fin, REQ_FINISH_CANCELLED);
    EXPECT(sched_idle(h.s));

    /* Unknown and finished ids are ignored; a step afterwards does nothing. */
    const int64_t before = A->n_events + B->n_events + C->n_events;
    sched_cancel(h.s, 1);
    sched_cancel(h.s, 77);
    EXPECT_EQ(h_step(&h), 0);
    EXPECT_EQ(A->n_events + B->n_events + C->n_events, before);

    /* The scheduler keeps working: a request after the cancels runs to the end. */
    h_add(&h, mkreq(4, 30, 20, 2, REQ_PRIO_BATCH, spec_abs(KV_POLICY_H2O, 4, 4), 4));
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    EXPECT_EQ(h.o.r[4].seq[1].n_tok, 20);
    h_close(&h);
}

/* sched_cancel_all on a mix of decoding, prefilling and waiting requests of both
 * classes: one cancelled finish per completion, every block back at once. */
TEST(cancel_all_frees_everything)
{
    struct harness h;
    if (!h_open(&h, 64, 8, 32, 16)) return;
    h_add(&h,
          mkreq(1, 10, 100, 3, REQ_PRIO_BATCH, spec_ratio(KV_POLICY_H2O, 0.1f, 0.1f), 1));
    h_add(&h, mkreq(2, 200, 100, 1, REQ_PRIO_INTERACTIVE, spec_full(), 2));
    h_add(&h, mkreq(3, 50, 400, 2, REQ_PRIO_BATCH, spec_full(), 3));
    h_add(&h, mkreq(4, 5, 5, 1, REQ_PRIO_BATCH, spec_full(), 4));
    h_add(&h, mkreq(5, 5, 5, 2, REQ_PRIO_INTERACTIVE, spec_full(), 5));
    for (int i = 0; i < 3; i++)
        h_step(&h);
    struct sched_stats st = h_stats(&h);
    EXPECT(st.blocks_used > 0);
    EXPECT(st.n_waiting > 0);
    h_cancel_all(&h);
    st = h_stats(&h);
    EXPECT(sched_idle(h.s));
    EXPECT_EQ(st.blocks_used, 0);
    EXPECT_EQ(st.blocks_reserved, 0);
    EXPECT_EQ(h.pool.n_free, h.pool.n_blocks);
    h_check_all_answered(&h);
    EXPECT_EQ(h_step(&h), 0);
    h_close(&h);
}

/* ---- 5. Every sequence ends once; n > 1 forks. ---- */

TEST(every_sequence_finishes_once)
{
    enum { P = 17, T = 12, SEED = 1234 };
    struct harness h;
    if (!h_open(&h, 256, 32, 64, 64)) return;
    const struct kv_spec kvs[2] = {spec_full(), spec_abs(KV_POLICY_H2O, 4, 4)};
    /* id = 10 * n + 2 * policy + (temperature 1): the same prompt everywhere. */
    int64_t prompt_sum = 0;
    for (int32_t n = 1; n <= 4; n++)
        for (int32_t pol = 0; pol < 2; pol++)
            for (int32_t temp = 0; temp < 2; temp++) {
                struct req *r = mkreq((uint64_t)(10 * n + 2 * pol + temp), P, T, n,
                                      REQ_PRIO_BATCH, kvs[pol], 42);
                r->sp.temperature = (float)temp;
                r->seed = SEED;
                h_add(&h, r);
                prompt_sum += P;
            }
    /* seed + index: a lone request with seed SEED + 1 is sequence 1 of the others. */
    struct req *r = mkreq(50, P, T, 1, REQ_PRIO_BATCH, kvs[0], 42);
    r->sp.temperature = 1;
    r->seed = SEED + 1;
    h_add(&h, r);
    prompt_sum += P;
    /* A text prompt: BOS + 12 bytes with the dummy byte tokenizer. */
    r = req_new(51, &kvs[1]);
    r->prompt = xstrdup("Hello, world");
    r->prompt_len = strlen(r->prompt);
    r->n = 2;
    r->max_tokens = T;
    r->ignore_eos = true;
    r->sp.temperature = 0;
    h.o.r[51].n_prompt = 13;
    h_add(&h, r);
    prompt_sum += 13;
    /* max_tokens 0: every sequence finishes at once, by length, with no token. */
    r = mkreq(52, P, 0, 3, REQ_PRIO_BATCH, kvs[0], 42);
    h_add(&h, r);
    EXPECT_EQ(h.o.r[52].n_fin, 3);

    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    for (int32_t id = 10; id <= 51; id++) {
        const struct req_obs *q = &h.o.r[id];
        if (!q->added) continue;
        for (int32_t k = 0; k < q->n; k++) {
            EXPECT_EQ(q->seq[k].n_tok, T);
            EXPECT_EQ(q->seq[k].fin, REQ_FINISH_LENGTH);
        }
    }
    for (int32_t k = 0; k < 3; k++)
        EXPECT_EQ(h.o.r[52].seq[k].n_tok, 0);
    for (int32_t pol = 0; pol < 2; pol++) {
        /* Greedy: every fork, of every n, gives the text of n = 1 (the prompt's KV and
         * H2O state are copied exactly). */
        const struct seq_obs *ref = &h.o.r[10 + 2 * pol].seq[0];
        for (int32_t n = 1; n <= 4; n++)
            for (int32_t k = 0; k < n; k++) {
                const struct seq_obs *so = &h.o.r[10 * n + 2 * pol].seq[k];
                if (so->tok_hash != ref->tok_hash || so->text_hash != ref->text_hash ||
                    so->text_len != ref->text_len)
                    TEST_FAIL("greedy, %s, n %d: sequence %d differs from n = 1",
                              pol ? "h2o" : "full", n, k);
            }
        /* Sampling: sequence k samples with seed + k, so the forks differ, and
         * sequence k is the same whatever n is. */
        for (int32_t n = 2; n <= 4; n++)
            for (int32_t a = 0; a < n; a++) {
                const struct seq_obs *sa = &h.o.r[10 * n + 2 * pol + 1].seq[a];
                const struct seq_obs *same = &h.o.r[10 * 4 + 2 * pol + 1].seq[a];
                if (sa->tok_hash != same->tok_hash)
                    TEST_FAIL(
                        "temperature 1, %s: sequence %d of n %d differs from that of n 4",
                        pol ? "h2o" : "full", a, n);
                for (int32_t b = a + 1; b < n; b++) {
                    const struct seq_obs *sb = &h.o.r[10 * n + 2 * pol + 1].seq[b];
                    if (sa->tok_hash == sb->tok_hash || sa->text_hash == sb->text_hash)
                        TEST_FAIL(
                            "temperature 1, %s, n %d: sequences %d and %d are the same",
                            pol ? "h2o" : "full", n, a, b);
                }
            }
    }
    if (h.o.r[50].seq[0].tok_hash != h.o.r[41].seq[1].tok_hash)
        TEST_FAIL("a request seeded %d does not sample like sequence 1 of one seeded %d",
                  SEED + 1, SEED);
    /* A prompt is prefilled once, whatever n is. */
    EXPECT_EQ(h_stats(&h).prompt_tokens, prompt_sum);
    h_close(&h);
}

/*
 * Forks when B - 1 is a multiple of the block size (B = 1, 17, 33 with blocks of
 * 16) and the prompt is longer than B - 1: the compacted prompt holds B - 1 tokens
 * in ceil(B / 16) blocks, one more than its slots need, and each fork must get that
 * many blocks too (this aborted in sched.c's finish_prompt before 7f53c20). The
 * greedy forks must match a lone request, and B = 16, 32 are the controls.
 */
TEST(forks_when_budget_is_one_past_a_block)
{
    enum { P = 40, T = 24 };
    const int32_t hr[][2] = {{0, 1}, {8, 9}, {0, 17}, {16, 17}, {8, 8}, {16, 16}};
    const int32_t n_cases = (int32_t)ARRAY_LEN(hr);
    struct harness h;
    if (!h_open(&h, 64, 8, 32, 32)) return;
    for (int32_t c = 0; c < n_cases; c++) {
        const struct kv_spec kv = spec_abs(KV_POLICY_H2O, hr[c][0], hr[c][1]);
        h_add(&h, mkreq((uint64_t)(2 * c), P, T, 1, REQ_PRIO_BATCH, kv, 5));
        h_add(&h, mkreq((uint64_t)(2 * c + 1), P, T, 3, REQ_PRIO_BATCH, kv, 5));
        h_run_idle(&h, 1000);
    }
    h_check_all_answered(&h);
    for (int32_t c = 0; c < n_cases; c++) {
        const struct req_obs *one = &h.o.r[2 * c], *three = &h.o.r[2 * c + 1];
        for (int32_t k = 0; k < 3; k++) {
            EXPECT_EQ(three->seq[k].n_tok, T);
            if (three->seq[k].tok_hash != one->seq[0].tok_hash)
                TEST_FAIL("H %d R %d: fork %d differs from the lone request", hr[c][0],
                          hr[c][1], k);
        }
    }
    h_close(&h);
}

/* ---- 6. Requests that cannot run. ---- */

static void expect_rejected(struct harness *h, struct req *r, const char *what)
{
    const uint64_t id = r->id;
    h->o.r[id].expect_error = true;
    struct sched_stats before = h_stats(h);
    h_add(h, r);
    struct sched_stats after = h_stats(h);
    const struct req_obs *q = &h->o.r[id];
    if (q->n_err != 1 || q->n_events != 1)
        TEST_FAIL("%s: %d error events of %d events from sched_add, expected exactly 1",
                  what, q->n_err, q->n_events);
    if (after.n_waiting != before.n_waiting ||
        after.blocks_reserved != before.blocks_reserved)
        TEST_FAIL("%s: the rejected request was queued", what);
}

TEST(errors)
{
    struct harness h;
    if (!h_open(&h, 160, 4, 64, 64)) return;
    const struct kv_spec full = spec_full();
    struct req *r;

    r = mkreq(1, 0, 8, 1, REQ_PRIO_BATCH, full, 1);
    expect_rejected(&h, r, "an empty prompt");
    r = mkreq(3, 2000, MAX_POS - 2000 + 1, 1, REQ_PRIO_BATCH, spec_abs(KV_POLICY_H2O, 8, 8),
              3);
    expect_rejected(&h, r, "prompt 2000 + max_tokens 49 > 2048 positions");
    r = mkreq(4, 3000, 1, 1, REQ_PRIO_BATCH, full, 4);
    expect_rejected(&h, r, "a prompt of 3000 tokens");
    r = mkreq(5, 1000, 1000, 2, REQ_PRIO_BATCH, full, 5);
    CHECK(admit_blocks(&full, 1000, 1000, 2) > 160);
    expect_rejected(&h, r, "2 x 125 blocks in a pool of 160");
    r = mkreq(6, 10, 10, 5, REQ_PRIO_BATCH, full, 6);
    expect_rejected(&h, r, "n 5 > max_num_seqs 4");
    r = mkreq(7, 10, 10, 1, REQ_PRIO_BATCH, full, 7);
    r->prompt_ids[3] = VOCAB;
    expect_rejected(&h, r, "token id 512 in a vocabulary of 512");
    r = mkreq(8, 10, 10, 1, REQ_PRIO_BATCH, full, 8);
    r->prompt_ids[0] = -1;
    expect_rejected(&h, r, "token id -1");
    r = mkreq(9, 10, 10, 1, REQ_PRIO_BATCH, spec_abs(KV_POLICY_H2O, 4, 0), 9);
    expect_rejected(&h, r, "a recent window of 0");
    r = mkreq(10, 10, 10, 1, REQ_PRIO_BATCH, spec_ratio(KV_POLICY_H2O, -0.1f, 0.1f), 10);
    expect_rejected(&h, r, "a negative heavy ratio");
    r = mkreq(11, 10, 10, 0, REQ_PRIO_BATCH, full, 11);
    expect_rejected(&h, r, "n 0");
    r = mkreq(12, 10, -1, 1, REQ_PRIO_BATCH, full, 12);
    expect_rejected(&h, r, "max_tokens -1");
    EXPECT(sched_idle(h.s));
    EXPECT_EQ(h_step(&h), 0);

    /* Still working: the longest request the context allows (2000 + 48 = 2048
     * positions, 128 blocks of full KV), beside a short H2O one. */
    h_add(&h, mkreq(20, 2000, MAX_POS - 2000, 1, REQ_PRIO_BATCH, full, 20));
    h_add(&h,
          mkreq(21, 30, 10, 2, REQ_PRIO_INTERACTIVE, spec_abs(KV_POLICY_H2O, 2, 2), 21));
    h_run_idle(&h, 1000);
    h_check_all_answered(&h);
    EXPECT_EQ(h.o.r[20].seq[0].n_tok, 48);
    EXPECT_EQ(h.o.r[21].seq[1].n_tok, 10);
    h_close(&h);
}

/* sched_create refuses options that leave a step no room for prompt tokens. */
TEST(invalid_options)
{
    struct model *m = tiny_model(4);
    if (!m) return;
    struct kv_pool pool;
    kv_pool_init(&pool, 4, BS);
    struct obs o = {0};
    const struct sched_opts bad[3] = {{0, 16}, {8, 8}, {8, 4}};
    for (int i = 0; i < 3; i++) {
        struct sched *s = sched_create(m, &pool, &bad[i], on_event, &o);
        if (s)
            TEST_FAIL("sched_create accepted max_num_seqs %d, max_batched_tokens %d",
                      bad[i].max_num_seqs, bad[i].max_batched_tokens);
        sched_destroy(s);
    }
    kv_pool_deinit(&pool);
    model_destroy(m);
}

/* ---- 7. The memory bound and admission: the H2O claim. ---- */

/*
 * 64 identical requests of 512 + 512 tokens into a pool of 512 blocks of 16, which
 * is what the full policy needs for 8 sequences (64 blocks each). With H2O 20%
 * (heavy = recent = 0.1 of 1024: B = 206, 13 blocks) a decoding sequence keeps 13
 * blocks and a prefilling one reserves its 32 prompt blocks, so the steady state is
 * floor((512 - 32) / 13) = 36 decoding plus one prefilling, 37 once that one is done.
 * Nothing finishes in the steps run here (512 tokens each); the run stops when the
 * number decoding has not grown for 16 steps, then everything is cancelled.
 */
static int32_t max_decoding(struct kv_spec kv, int32_t *max_seqs, int32_t *budget_blocks,
                            int32_t *max_blocks, int64_t *steps)
{
    enum { N = 64, P = 512, T = 512 };
    struct harness h;
    if (!h_open(&h, 512, 128, 1024, N)) return -1;
    for (int32_t i = 0; i < N; i++)
        h_add(&h, mkreq((uint64_t)i, P, T, 1, REQ_PRIO_BATCH, kv, 7));
    int32_t best = 0, since = 0;
    int64_t k = 0;
    for (; k < 400 && since < 16; k++) {
        h_step(&h);
        if (h.o.n_decoding > best) {
            best = h.o.n_decoding;
            since = 0;
        } else {
            since++;
        }
    }
    EXPECT(h.o.n_fin_order == 0);
    *max_seqs = h.max_n_seqs;
    *budget_blocks = h.o.max_budget_blocks;
    *max_blocks = h.o.max_kv_blocks;
    *steps = k;
    h_cancel_all(&h);
    EXPECT(sched_idle(h.s));
    h_check_all_answered(&h);
    h_close(&h);
    return best;
}

TEST(h2o_admits_more_than_full)
{
    int32_t full_seqs, h2o_seqs, full_budget, h2o_budget, full_blocks, h2o_blocks;
    int64_t full_steps, h2o_steps;
    const int32_t full =
        max_decoding(spec_full(), &full_seqs, &full_budget, &full_blocks, &full_steps);
    const int32_t h2o = max_decoding(spec_ratio(KV_POLICY_H2O, 0.1f, 0.1f), &h2o_seqs,
                                     &h2o_budget, &h2o_blocks, &h2o_steps);
    printf("# pool of 512 blocks, 512 + 512 tokens: full decodes %d at once (%d live, %lld "
           "steps), h2o 20%% %d (%d live, %lld steps, %d blocks each at most), %.2fx\n",
           full, full_seqs, (long long)full_steps, h2o, h2o_seqs, (long long)h2o_steps,
           h2o_blocks, full > 0 ? (double)h2o / full : 0.0);
    EXPECT_EQ(full, 8);
    EXPECT_EQ(full_seqs, 8);
    EXPECT_EQ(full_budget, 0);
    EXPECT_EQ(h2o_budget, 13);
    EXPECT(h2o_blocks <= 13);
    EXPECT(2 * h2o >= 9 * full); /* >= 4.5x */
    EXPECT(h2o <= 512 / 13);     /* and never more than the pool holds */
}

/* ---- 8. Stress. ---- */

enum cancel_kind { CANCEL_WAITING, CANCEL_PREFILLING, CANCEL_DECODING, N_CANCEL_KINDS };

struct stress_req {
    struct kv_spec kv;
    int32_t P, T, n;
    enum req_priority prio;
};

/* Cancel live request `id` and check what came back against where it was. */
static void stress_cancel(struct harness *h, const struct stress_req *sr, uint64_t id,
                          int32_t *kinds)
{
    const struct req_obs *q = &h->o.r[id];
    const struct sched_stats b = h_stats(h);
    int32_t live = 0, held = 0;
    for (int32_t k = 0; k < q->n; k++)
        if (!q->seq[k].n_fin) {
            live++;
            held += q->seq[k].last_blocks;
        }
    const bool decoding = q->seq[0].n_tok > 0;
    const int32_t events = q->n_events;
    h_cancel(h, id);
    const struct sched_stats a = h_stats(h);
    const int32_t d_used = b.blocks_used - a.blocks_used;
    const int32_t d_res = b.blocks_reserved - a.blocks_reserved;
    if (q->n_events - events != live || q->n_fin != q->n)
        violation(&h->o, "cancel of req %llu: %d events for %d live sequences",
                  (unsigned long long)id, q->n_events - events, live);
    if (decoding) {
        kinds[CANCEL_DECODING]++;
        const int32_t share = live * decode_blocks(&sr->kv, sr->P, sr->T);
        if (d_used != held || d_res != share || b.n_running - a.n_running != 1)
            violation(&h->o,
                      "cancel of decoding req %llu: freed %d blocks (held %d) and %d "
                      "reserved (expected %d)",
                      (unsigned long long)id, d_used, held, d_res, share);
    } else if (d_res == 0) {
        kinds[CANCEL_WAITING]++;
        if (d_used != 0 || b.n_waiting - a.n_waiting != 1)
            violation(&h->o,
                      "cancel of waiting req %llu: freed %d blocks, waiting %d -> %d",
                      (unsigned long long)id, d_used, b.n_waiting, a.n_waiting);
    } else {
        kinds[CANCEL_PREFILLING]++;
        const int32_t res = admit_blocks(&sr->kv, sr->P, sr->T, sr->n);
        if (d_res != res || d_used < 1 || d_used > CEIL_DIV(sr->P, BS) ||
            b.n_running - a.n_running != 1)
            violation(&h->o,
                      "cancel of prefilling req %llu: freed %d blocks (prompt %d) and "
                      "%d reserved (expected %d)",
                      (unsigned long long)id, d_used, CEIL_DIV(sr->P, BS), d_res, res);
    }
}

/* A random request: mostly valid, 2% built to be rejected. */
static void stress_make(uint64_t *rng, struct stress_req *sr, bool *bad)
{
    sr->P = lcg_range(rng, 1, 200);
    sr->T = lcg_range(rng, 1, 64);
    sr->n = lcg_range(rng, 1, 3);
    switch (lcg(rng) % 10) {
    case 0:
    case 1: sr->kv = spec_full(); break;
    case 2: sr->kv = spec_ratio(KV_POLICY_H2O, 0.1f, 0.1f); break;
    case 3: sr->kv = spec_ratio(KV_POLICY_H2O, 0.05f, 0.15f); break;
    case 4: sr->kv = spec_ratio(KV_POLICY_H2O, 0.3f, 0.0f); break; /* R = 1 */
    case 5: sr->kv = spec_ratio(KV_POLICY_LOCAL, 0.1f, 0.2f); break;
    case 6: sr->kv = spec_abs(KV_POLICY_H2O, 0, lcg_range(rng, 1, 40)); break; /* H = 0 */
    case 7: sr->kv = spec_abs(KV_POLICY_H2O, lcg_range(rng, 0, 40), 1); break; /* R = 1 */
    case 8:
        sr->kv = spec_abs(KV_POLICY_H2O, lcg_range(rng, 0, 300), lcg_range(rng, 1, 300));
        break;
    default: sr->kv = spec_abs(KV_POLICY_LOCAL, -1, lcg_range(rng, 1, 64)); break;
    }
    *bad = lcg(rng) % 50 == 0;
    if (*bad) sr->kv = spec_abs(KV_POLICY_H2O, 4, 0); /* recent 0: rejected */
}

/* One scheduler, n_req random requests; returns the steps taken. */
static int64_t stress_round(uint64_t seed, int32_t n_req, int32_t *kinds,
                            int64_t *n_rejected)
{
    uint64_t rng = seed;
    const int32_t mbts[4] = {17, 32, 64, 100}, pools[3] = {64, 128, 256};
    const int32_t mbt = mbts[lcg(&rng) % 4];
    const int32_t mns = lcg_range(&rng, 3, MIN(40, mbt - 1));
    /* The largest request (full, 200 + 64 tokens, n 3) needs 51 blocks. */
    const int32_t n_blocks = pools[lcg(&rng) % 3];
    struct harness h;
    if (!h_open(&h, n_blocks, mns, mbt, n_req)) return 0;
    printf("# stress round seed %llu: %d requests, max_num_seqs %d, max_batched_tokens %d, "
           "%d blocks of %d\n",
           (unsigned long long)seed, n_req, mns, mbt, n_blocks, BS);
    struct stress_req *reqs = xcalloc((size_t)n_req, sizeof *reqs);
    int32_t added = 0;
    int64_t steps = 0, prompt_lo = 0, prompt_hi = 0;
    int32_t max_reserved = 0;
    while (added < n_req || !sched_idle(h.s)) {
        /* Arrivals: about one every three steps, in bursts, so the queue comes and
         * goes instead of only growing. */
        if (added < n_req && lcg(&rng) % 6 == 0) {
            int32_t burst = lcg_range(&rng, 1, 3);
            for (int32_t b = 0; b < burst && added < n_req; b++) {
                const uint64_t id = (uint64_t)added;
                struct stress_req *sr = &reqs[added++];
                bool bad;
                stress_make(&rng, sr, &bad);
                sr->prio = lcg(&rng) % 2 ? REQ_PRIO_BATCH : REQ_PRIO_INTERACTIVE;
                struct req *r = mkreq(id, sr->P, sr->T, sr->n, sr->prio, sr->kv, rng);
                if (lcg(&rng) % 4 == 0) {
                    r->sp.temperature = 1;
                    r->seed = lcg(&rng);
                }
                h.o.r[id].expect_error = bad;
                h_add(&h, r);
                if (bad) {
                    (*n_rejected)++;
                    /* Cancelling a rejected id is cancelling an unknown one: ignored. */
                    h_cancel(&h, id);
                } else {
                    prompt_hi += sr->P;
                    if (lcg(&rng) % 20 == 0) stress_cancel(&h, sr, id, kinds); /* at once */
                }
            }
        }
        /* Cancels of live requests, wherever they are: a random one, one that is
         * decoding, or the oldest of a class with no token yet (likely mid-prompt:
         * admission is FCFS). */
        if (added > 0 && lcg(&rng) % 8 == 0) {
            const int32_t how = (int32_t)(lcg(&rng) % 3),
                          from = (int32_t)(lcg(&rng) % added);
            const enum req_priority prio =
                lcg(&rng) % 2 ? REQ_PRIO_BATCH : REQ_PRIO_INTERACTIVE;
            int64_t pick = how == 0 ? from : -1;
            for (int32_t k = 0; k < added && pick < 0; k++) {
                const int32_t i = how == 1 ? (from + k) % added : k;
                const struct req_obs *q = &h.o.r[i];
                if (q->expect_error || q->cancelled || q->n_fin == q->n) continue;
                if (how == 1 ? q->first_token_step >= 0
                             : reqs[i].prio == prio && q->first_token_step < 0)
                    pick = i;
            }
            const struct req_obs *q = pick >= 0 ? &h.o.r[pick] : NULL;
            if (q && !q->expect_error && !q->cancelled && q->n_fin < q->n)
                stress_cancel(&h, &reqs[pick], (uint64_t)pick, kinds);
        }
        const struct sched_stats st_now = h_stats(&h);
        max_reserved = MAX(max_reserved, st_now.blocks_reserved);
        if (!sched_idle(h.s)) {
            if (h_step(&h) <= 0) {
                TEST_FAIL("sched_step did no work while requests were waiting or running");
                break;
            }
            steps++;
        }
        if (h.o.n_violations > 20) break;
    }
    printf("# %lld steps, at most %d of %d blocks reserved\n", (long long)steps,
           max_reserved, n_blocks);
    h_check_all_answered(&h);
    for (int32_t i = 0; i < added; i++)
        if (h.o.r[i].seq[0].n_tok > 0) prompt_lo += reqs[i].P;
    const struct sched_stats st = h_stats(&h);
    if (st.prompt_tokens < prompt_lo || st.prompt_tokens > prompt_hi)
        TEST_FAIL("prompt_tokens %lld outside [%lld, %lld]", (long long)st.prompt_tokens,
                  (long long)prompt_lo, (long long)prompt_hi);
    free(reqs);
    h_close(&h);
    return steps;
}

TEST(stress_1000_random_requests)
{
    int32_t kinds[N_CANCEL_KINDS] = {0};
    int64_t rejected = 0, steps = 0;
    const double t0 = time_now();
    for (int32_t round = 0; round < 8 && !test_cur_failed; round++)
        steps += stress_round(0x5eed0000u + (uint64_t)round, 125, kinds, &rejected);
    printf("# 1000 requests in %lld steps, %.1f s: %lld rejected; cancelled %d waiting, %d "
           "mid-prompt, %d decoding\n",
           (long long)steps, time_now() - t0, (long long)rejected, kinds[CANCEL_WAITING],
           kinds[CANCEL_PREFILLING], kinds[CANCEL_DECODING]);
    EXPECT(rejected > 0);
    for (int k = 0; k < N_CANCEL_KINDS; k++)
        EXPECT(kinds[k] >= 5);
}

/*
 * A request with neither a prompt nor prompt ids (req_new's zeroes) is rejected like
 * an empty prompt. Last in the file: sched_add used to memcpy from the NULL
 * prompt_ids (size 0, still undefined), which UBSan with halt_on_error stops at.
 */
TEST(request_without_prompt)
{
    struct harness h;
    if (!h_open(&h, 16, 4, 64, 8)) return;
    const struct kv_spec full = spec_full();
    struct req *r = req_new(2, &full);
    r->ignore_eos = true;
    expect_rejected(&h, r, "no prompt at all (NULL prompt and prompt_ids)");
    h_add(&h, mkreq(3, 5, 5, 1, REQ_PRIO_BATCH, full, 3));
    h_run_idle(&h, 100);
    h_check_all_answered(&h);
    h_close(&h);
}

int main(void)
{
    RUN(fcfs_one_seq_at_a_time);
    RUN(fcfs_pool_fits_one);
    RUN(interactive_before_batch);
    RUN(interactive_before_batch_pool_bound);
    RUN(long_prompt_not_starved);
    RUN(cancel_frees_blocks_at_once);
    RUN(cancel_all_frees_everything);
    RUN(every_sequence_finishes_once);
    RUN(forks_when_budget_is_one_past_a_block);
    RUN(errors);
    RUN(invalid_options);
    RUN(h2o_admits_more_than_full);
    RUN(stress_1000_random_requests);
    RUN(request_without_prompt);
    return test_done();
}
