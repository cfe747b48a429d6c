/*
 * sched_harness.h - the scheduler test harness shared by test_sched.c (the requests'
 * side, engine/sched.c), test_sched_step.c (the step, engine/sched_step.c) and
 * test_sched_stress.c: dummy:tiny on one thread, an observer that checks every event
 * as it arrives, and request builders.
 *
 * The observer's rules, in every test: events only for requests that were added; an
 * error event (seq -1) is a request's only event; no event after a sequence's
 * finishing event, and none after sched_cancel returned; text offsets add up;
 * completion_tokens counts the token events; with ignore_eos a sequence that ends by
 * length has exactly max_tokens tokens; every token event of an H2O sequence holds at
 * most ceil(B / block_size) blocks; a cancelled finish only comes out of sched_cancel.
 * Each test ends with every block back in the pool (pool.n_free == pool.n_blocks after
 * sched_destroy, stats blocks_used == blocks_reserved == 0 once idle) and the stats
 * counters equal to what was observed (generation_tokens == token events, steps ==
 * forwards).
 */
#ifndef H2O_TEST_SCHED_HARNESS_H
#define H2O_TEST_SCHED_HARNESS_H

#include "test.h"

#include "err.h"
#include "kv_budget.h"
#include "kv_pool.h"
#include "model.h"
#include "req.h"
#include "sched.h"
#include "util.h"

#include "rnd.h"

#define BS 16        /* block size of every pool here */
#define MAXN 4       /* most sequences per request in these tests */
#define VOCAB 512    /* dummy:tiny */
#define MAX_POS 2048 /* dummy:tiny */

/* FNV-1a over n bytes, continuing from h. */
static inline uint64_t hash_mix(uint64_t h, const void *p, size_t n)
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
    uint64_t lp_hash; /* the token events' logprobs and alternatives, bit for bit */
};

struct req_obs {
    bool added;
    bool expect_error; /* built to be rejected */
    bool cancelled;    /* sched_cancel returned for it */
    int32_t n, max_tokens, n_prompt;
    int32_t n_err;     /* seq -1 events */
    char err_msg[256]; /* the message of its error event */
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
void violation(struct obs *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void on_event(void *arg, struct req_event *ev);

/* ---- A scheduler on dummy:tiny with its pool and observer. ---- */

/* dummy:tiny in fp32 with a KV pool of n_blocks blocks of BS (test_model's job), on
 * one thread: its forwards take microseconds, so waking OpenMP threads for each of
 * the thousands of steps here costs 20x the work itself. */
struct model *tiny_model_ex(int32_t n_blocks, bool device_state);

struct model *tiny_model(int32_t n_blocks);

struct harness {
    struct model *m;
    struct kv_pool pool;
    struct sched *s;
    struct sched_opts so;
    struct obs o;
    int64_t n_forwards; /* sched_step calls that ran a forward */
    int32_t max_n_seqs; /* stats n_seqs, the most after any step */
};

/* h_open on a model whose slot state is served as a device's when device_state
 * (model_opts.device_state): the scheduler then runs the engine's device path. */
bool h_open_ex(struct harness *h, int32_t n_blocks, int32_t max_num_seqs,
               int32_t max_batched_tokens, int32_t n_ids, bool device_state);

bool h_open(struct harness *h, int32_t n_blocks, int32_t max_num_seqs,
            int32_t max_batched_tokens, int32_t n_ids);

struct sched_stats h_stats(const struct harness *h);

/* Stats that must hold between any two calls. */
void h_check_stats(struct harness *h);

int h_step(struct harness *h);

/* Step until idle; every step of a busy scheduler must make progress. */
int64_t h_run_idle(struct harness *h, int64_t max_steps);

void h_add(struct harness *h, struct req *r);

void h_cancel(struct harness *h, uint64_t id);

void h_cancel_all(struct harness *h);

/* Every added request is answered: an error event alone, or one finishing event per
 * sequence. */
void h_check_all_answered(struct harness *h);

void h_close(struct harness *h);

/* ---- Requests. ---- */

struct kv_spec spec_full(void);

struct kv_spec spec_ratio(enum kv_policy p, float heavy, float recent);

struct kv_spec spec_abs(enum kv_policy p, int32_t heavy, int32_t recent);

/* A greedy, ignore_eos request of P token ids in [4, 511] drawn from `seed`. */
struct req *mkreq(uint64_t id, int32_t P, int32_t max_tokens, int32_t n,
                  enum req_priority prio, struct kv_spec kv, uint64_t seed);

/* Blocks one sequence of a request keeps after its prompt (sched.c's decode share,
 * from the public budget rules of h2o.h and docs/kv-cache.md). */
int32_t decode_blocks(const struct kv_spec *kv, int32_t P, int32_t max_tokens);

/* What admission reserves: max(prompt blocks, n * decode blocks). */
int32_t admit_blocks(const struct kv_spec *kv, int32_t P, int32_t max_tokens, int32_t n);

void expect_order(const int32_t *got, const int32_t *want, int32_t n, const char *what);

#endif
