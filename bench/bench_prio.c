/*
 * bench_prio.c - time to first token (TTFT) of interactive requests while a batch
 * job runs, against the same requests on an idle scheduler.
 *
 * The acceptance bar this measures: interactive requests sent while a large batch
 * runs get their first token within 2x the time they take on an idle server. The
 * program drives the scheduler on this thread as the engine thread does (sched_add
 * between steps, then sched_step), with no HTTP around it:
 * - idle: interactive requests of P prompt tokens, one at a time; TTFT is the time
 *   from sched_add to the event of the first generated token. Half of them run
 *   before the batch job and half after it.
 * - loaded: a batch job keeps K requests of REQ_PRIO_BATCH in flight (as the server
 *   does with batch_max_in_flight), each greedy and run to its length, replaced as
 *   it finishes. Their lengths vary (--batch-spread, as EOS would make them), so
 *   they finish at different steps; with --batch-spread 0 they finish in cohorts
 *   whose replacements arrive together, and a step of max_batched_tokens prompt
 *   tokens follows. Once the first K have been replaced, the batch runs alone for
 *   a window (its tokens/s), then
 *   interactive requests arrive one at a time, each a random 0..2 * gap after the
 *   previous one finished. An arrival time falls inside some step; the request is
 *   added when that step ends, as the engine drains its inbox only between steps,
 *   and its TTFT counts from the arrival, so the wait for the step in progress is
 *   part of it.
 * The ratio loaded / idle of the median and of the 90th percentile is the number
 * the bar speaks of; the batch's tokens/s with and without interactive arrivals
 * shows what protecting them costs the batch.
 *
 * Usage: bench_prio [--model NAME] [--dtype fp32|bf16] [--prompts 128,512]
 *                   [--in-flight 64] [--batch-prompt 128] [--batch-tokens 128]
 *                   [--batch-spread 0.5] [--interactive 20] [--interactive-tokens 8]
 *                   [--gap-ms 250] [--window 8] [--kv h2o|full] [--max-num-seqs 256]
 *                   [--max-batched-tokens 2048] [--batch-prompt-tokens 0]
 */
#include "bench_args.h"
#include "engine_core.h"
#include "err.h"
#include "kv_budget.h"
#include "model.h"
#include "req.h"
#include "sched.h"
#include "util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Batch requests get ids from here up; interactive ones count from 0. */
#define BATCH_ID0 (1ull << 32)
#define MAX_PROMPTS 8

struct bench_opts {
    const char *model;
    enum dtype dtype;
    int32_t prompts[MAX_PROMPTS], n_prompts; /* interactive prompt lengths */
    int32_t in_flight, batch_prompt, batch_tokens;
    double batch_spread; /* max_tokens drawn from batch_tokens * (1 +- spread) */
    int32_t n_interactive, interactive_tokens;
    double gap_s, window_s;
    struct kv_spec kv;
    struct sched_opts so;
};

/* One interactive request as the bench sees it. */
struct ireq {
    double t_arrive, t_first; /* time_now(); t_first 0 until the first token */
    bool done;
};

struct bench {
    const struct bench_opts *o;
    struct engine_core *core;
    struct model *m;         /* core->m */
    struct sched *s;         /* core->sched */
    uint64_t rng;            /* prompts and arrival gaps */
    bool batch_on;           /* keep o->in_flight batch requests submitted */
    uint64_t next_batch;     /* batch requests submitted so far */
    int32_t batch_in_flight;
    int64_t batch_tokens;    /* generated tokens of batch requests */
    int64_t batch_done;      /* batch requests finished */
    double longest_step;     /* seconds, since the last window_open */
    struct ireq *ir;         /* [n_ir] by interactive id */
    int32_t n_ir, cap_ir;
};

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* sched_emit_fn: count batch tokens and finishes, time interactive first tokens. */
static void on_event(void *arg, struct req_event *ev)
{
    struct bench *b = arg;
    if (ev->finish == REQ_FINISH_ERROR) {
        fprintf(stderr, "bench_prio: request %llu failed: %s\n",
                (unsigned long long)ev->req_id, ev->error ? ev->error : "?");
        exit(1);
    }
    const bool token = ev->token >= 0 && ev->prompt_pos == 0;
    if (ev->req_id >= BATCH_ID0) {
        if (token) b->batch_tokens++;
        if (ev->finish != REQ_FINISH_NONE) { /* n = 1: one finish per request */
            b->batch_in_flight--;
            b->batch_done++;
        }
    } else {
        struct ireq *q = &b->ir[ev->req_id];
        if (token && q->t_first == 0) q->t_first = time_now();
        if (ev->finish != REQ_FINISH_NONE) q->done = true;
    }
    req_event_free(ev);
}

/* A greedy request of P random prompt ids that runs to max_tokens (no EOS). */
static struct req *make_req(struct bench *b, uint64_t id, enum req_priority prio, int32_t P,
                            int32_t max_tokens)
{
    const int32_t V = b->m->cfg.vocab_size;
    struct req *r = req_new(id, &b->o->kv);
    r->prio = prio;
    r->prompt_ids = xmalloc((size_t)P * sizeof *r->prompt_ids);
    for (int32_t i = 0; i < P; i++) r->prompt_ids[i] = 4 + (int32_t)(lcg(&b->rng) % (V - 4));
    r->n_prompt_ids = P;
    r->max_tokens = max_tokens;
    r->ignore_eos = true;
    r->sp.temperature = 0;
    r->t_submit = time_now();
    return r;
}

/* Submit an interactive request that arrived at t_arrive; returns its id. */
static int32_t add_interactive(struct bench *b, int32_t P, double t_arrive)
{
    if (b->n_ir == b->cap_ir) {
        b->cap_ir = MAX(64, 2 * b->cap_ir);
        b->ir = xrealloc(b->ir, (size_t)b->cap_ir * sizeof *b->ir);
    }
    const int32_t id = b->n_ir++;
    b->ir[id] = (struct ireq){.t_arrive = t_arrive};
    sched_add(b->s, make_req(b, (uint64_t)id, REQ_PRIO_INTERACTIVE, P,
                             b->o->interactive_tokens));
    return id;
}

/* One engine iteration: a step, then the batch job tops up what finished (the
 * server's batch runner submits as results come back). */
static void step(struct bench *b)
{
    const double t0 = time_now();
    if (sched_step(b->s) < 0) {
        fprintf(stderr, "bench_prio: sched_step: %s\n", err_msg());
        exit(1);
    }
    b->longest_step = MAX(b->longest_step, time_now() - t0);
    while (b->batch_on && b->batch_in_flight < b->o->in_flight) {
        const double u = (double)(lcg(&b->rng) % 1000001) / 1e6;
        const double f = 1.0 + b->o->batch_spread * (2.0 * u - 1.0);
        const int32_t T = MAX(1, (int32_t)(b->o->batch_tokens * f + 0.5));
        b->batch_in_flight++;
        sched_add(b->s, make_req(b, BATCH_ID0 + b->next_batch++, REQ_PRIO_BATCH,
                                 b->o->batch_prompt, T));
    }
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile q (0..1] of v[0..n-1]; sorts v. */
static double percentile(double *v, int32_t n, double q)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int32_t k = (int32_t)(q * n + 0.999999) - 1;
    return v[MIN(MAX(k, 0), n - 1)];
}

struct ttft {
    double median, p90, max;
};

static struct ttft summarize(double *v, int32_t n)
{
    struct ttft t = {percentile(v, n, 0.5), percentile(v, n, 0.9), percentile(v, n, 1.0)};
    return t;
}

/* n interactive requests of P tokens on the idle scheduler, one at a time, after
 * one that is not counted (first touch of its buffers); their TTFTs go to v. */
static void run_idle(struct bench *b, int32_t P, int32_t n, double *v)
{
    for (int32_t i = -1; i < n; i++) {
        const int32_t id = add_interactive(b, P, time_now());
        while (!b->ir[id].done) step(b);
        if (i >= 0) v[i] = b->ir[id].t_first - b->ir[id].t_arrive;
    }
}

/* A random gap in [0, 2 * gap_s): arrivals land anywhere within a step. */
static double next_gap(struct bench *b)
{
    return 2.0 * b->o->gap_s * (double)(lcg(&b->rng) % 1000000) / 1e6;
}

/* A span of steps over which the batch's generated tokens/s is measured. */
struct window {
    double t0;
    int64_t tok0;
};

static struct window window_open(struct bench *b)
{
    b->longest_step = 0;
    return (struct window){time_now(), b->batch_tokens};
}

static double window_tps(const struct bench *b, const struct window *w)
{
    return (double)(b->batch_tokens - w->tok0) / (time_now() - w->t0);
}

/* Interactive requests of P tokens arriving while the batch job runs. */
static struct ttft run_loaded(struct bench *b, int32_t P, double *batch_tps)
{
    const int32_t n = b->o->n_interactive;
    double *v = xmalloc((size_t)n * sizeof *v);
    struct window w = window_open(b);
    double t_next = time_now() + next_gap(b);
    int32_t cur = -1, got = 0;
    while (got < n) {
        step(b);
        if (cur < 0 && time_now() >= t_next) {
            cur = add_interactive(b, P, t_next); /* it arrived during that step */
        } else if (cur >= 0 && b->ir[cur].done) {
            v[got++] = b->ir[cur].t_first - b->ir[cur].t_arrive;
            cur = -1;
            t_next = time_now() + next_gap(b);
        }
    }
    *batch_tps = window_tps(b, &w);
    struct ttft t = summarize(v, n);
    free(v);
    return t;
}

static const char usage[] =
    "usage: bench_prio [--model NAME] [--dtype fp32|bf16] [--prompts 128,512]\n"
    "                  [--in-flight 64] [--batch-prompt 128] [--batch-tokens 128]\n"
    "                  [--batch-spread 0.5] [--interactive 20] [--interactive-tokens 8]\n"
    "                  [--gap-ms 250] [--window 8] [--kv h2o|full] [--max-num-seqs 256]\n"
    "                  [--max-batched-tokens 2048] [--batch-prompt-tokens 0]\n";

static int parse_args(int argc, char **argv, struct bench_opts *o)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},
        {"dtype", required_argument, 0, 'd'},
        {"prompts", required_argument, 0, 'p'},
        {"in-flight", required_argument, 0, 'k'},
        {"batch-prompt", required_argument, 0, 'P'},
        {"batch-tokens", required_argument, 0, 'T'},
        {"batch-spread", required_argument, 0, 'S'},
        {"interactive", required_argument, 0, 'n'},
        {"interactive-tokens", required_argument, 0, 't'},
        {"gap-ms", required_argument, 0, 'g'},
        {"window", required_argument, 0, 'w'},
        {"kv", required_argument, 0, 'v'},
        {"max-num-seqs", required_argument, 0, 's'},
        {"max-batched-tokens", required_argument, 0, 'b'},
        {"batch-prompt-tokens", required_argument, 0, 'c'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 'm': o->model = optarg; break;
        case 'd':
            if (strcmp(optarg, "fp32") == 0) o->dtype = DTYPE_F32;
            else if (strcmp(optarg, "bf16") == 0) o->dtype = DTYPE_BF16;
            else return fprintf(stderr, "bad --dtype\n"), 2;
            break;
        case 'p':
            o->n_prompts = bench_args_int_list(optarg, o->prompts, MAX_PROMPTS);
            if (o->n_prompts <= 0) return fprintf(stderr, "bad --prompts\n"), 2;
            break;
        case 'k': o->in_flight = atoi(optarg); break;
        case 'P': o->batch_prompt = atoi(optarg); break;
        case 'T': o->batch_tokens = atoi(optarg); break;
        case 'S': o->batch_spread = atof(optarg); break;
        case 'n': o->n_interactive = atoi(optarg); break;
        case 't': o->interactive_tokens = atoi(optarg); break;
        case 'g': o->gap_s = atof(optarg) * 1e-3; break;
        case 'w': o->window_s = atof(optarg); break;
        case 'v':
            if (kv_budget_policy_parse(optarg, &o->kv.policy))
                return fprintf(stderr, "bad --kv\n"), 2;
            break;
        case 's': o->so.max_num_seqs = atoi(optarg); break;
        case 'b': o->so.max_batched_tokens = atoi(optarg); break;
        case 'c': o->so.batch_prompt_tokens = atoi(optarg); break;
        default: fputs(usage, ch == 'h' ? stdout : stderr); return ch == 'h' ? 0 : 2;
        }
    }
    if (optind != argc || o->in_flight <= 0 || o->batch_prompt <= 0 ||
        o->batch_tokens <= 0 || o->n_interactive <= 0 || o->interactive_tokens <= 0 ||
        o->gap_s < 0 || o->window_s <= 0 || o->batch_spread < 0 || o->batch_spread >= 1)
        return fputs(usage, stderr), 2;
    return -1;
}

int main(int argc, char **argv)
{
    struct bench_opts o = {
        .model = "dummy:opt-125m", .dtype = DTYPE_F32, .prompts = {128, 512}, .n_prompts = 2,
        .in_flight = 64, .batch_prompt = 128, .batch_tokens = 128, .batch_spread = 0.5,
        .n_interactive = 20,
        .interactive_tokens = 8, .gap_s = 0.25, .window_s = 8,
        .so = {.max_num_seqs = 256, .max_batched_tokens = 2048},
    };
    kv_budget_spec_default(&o.kv); /* the server's default: H2O, 10% heavy + 10% recent */
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;

    struct bench b = {.o = &o, .rng = 12345};
    /* Room for every batch request and two interactive ones with the full cache, so
     * admission never waits for blocks and only the scheduling rule is measured. */
    const int32_t bs = 16;
    int32_t p_max = 0;
    for (int i = 0; i < o.n_prompts; i++) p_max = MAX(p_max, o.prompts[i]);
    const int32_t batch_most =
        o.batch_prompt + (int32_t)(o.batch_tokens * (1 + o.batch_spread)) + 1;
    struct engine_core_opts co = {
        .upto = ENGINE_CORE_SCHED,
        .model = o.model,
        .block_size = bs,
        .kv_blocks = o.in_flight * CEIL_DIV(batch_most, bs) +
                     2 * CEIL_DIV(p_max + o.interactive_tokens, bs),
        .sched = o.so,
        .emit = on_event,
        .emit_arg = &b,
    };
    model_opts_default(&co.model_opts);
    co.model_opts.dtype = o.dtype;
    if (engine_core_open(&co, &b.core)) {
        fprintf(stderr, "bench_prio: %s\n", err_msg());
        return 1;
    }
    b.m = b.core->m;
    b.s = b.core->sched;
    printf("model %s %s, kv %s, max_num_seqs %d, max_batched_tokens %d, "
           "batch_prompt_tokens %d\n",
           o.model, dtype_name(o.dtype), kv_budget_policy_name(o.kv.policy),
           o.so.max_num_seqs, o.so.max_batched_tokens, o.so.batch_prompt_tokens);
    printf("batch: %d in flight, %d + %d (+-%.0f%%) tokens each; interactive: %d per "
           "prompt length, %d tokens, arriving 0..%.0f ms after the previous one\n",
           o.in_flight, o.batch_prompt, o.batch_tokens, 100 * o.batch_spread,
           o.n_interactive, o.interactive_tokens, 2e3 * o.gap_s);
    fflush(stdout);

    /* Idle TTFTs: half before the batch job, half after it, so that a machine whose
     * speed drifts (other work on the same cores) shifts both sides alike. */
    struct ttft idle[MAX_PROMPTS], loaded[MAX_PROMPTS];
    double tps_with[MAX_PROMPTS];
    const int32_t n_first = (o.n_interactive + 1) / 2;
    double *idle_v = xmalloc((size_t)(o.n_prompts * o.n_interactive) * sizeof *idle_v);
    for (int i = 0; i < o.n_prompts; i++)
        run_idle(&b, o.prompts[i], n_first, idle_v + i * o.n_interactive);

    /* The batch job starts; measure once every first request has been replaced, so
     * the start-up burst of prompts is over. */
    b.batch_on = true;
    step(&b);
    while (b.batch_done < o.in_flight) step(&b);
    struct sched_stats st0;
    sched_get_stats(b.s, &st0);
    struct window w = window_open(&b);
    while (time_now() - w.t0 < o.window_s) step(&b);
    const double tps_alone = window_tps(&b, &w);
    struct sched_stats st1;
    sched_get_stats(b.s, &st1);
    const double step_ms = 1e3 * (time_now() - w.t0) / (double)(st1.steps - st0.steps);
    const double longest_ms = 1e3 * b.longest_step;
    for (int i = 0; i < o.n_prompts; i++)
        loaded[i] = run_loaded(&b, o.prompts[i], &tps_with[i]);
    b.batch_on = false;
    sched_cancel_all(b.s);
    for (int i = 0; i < o.n_prompts; i++) {
        double *v = idle_v + i * o.n_interactive;
        run_idle(&b, o.prompts[i], o.n_interactive - n_first, v + n_first);
        idle[i] = summarize(v, o.n_interactive);
    }
    free(idle_v);

    printf("%-7s %-22s %-22s %-14s %s\n", "prompt", "idle TTFT ms", "loaded TTFT ms",
           "ratio", "batch tok/s");
    printf("%-7s %-22s %-22s %-14s %s\n", "", "median   p90   max", "median   p90   max",
           "median  p90", "");
    printf("%-7s %-22s %-22s %-14s %.1f (alone; steps %.1f ms, longest %.1f ms)\n", "-", "",
           "", "", tps_alone, step_ms, longest_ms);
    for (int i = 0; i < o.n_prompts; i++) {
        const struct ttft *a = &idle[i], *l = &loaded[i];
        printf("%-7d %6.1f %6.1f %6.1f   %6.1f %6.1f %6.1f   %5.2f %5.2f   %.1f (%.2fx)\n",
               o.prompts[i], 1e3 * a->median, 1e3 * a->p90, 1e3 * a->max, 1e3 * l->median,
               1e3 * l->p90, 1e3 * l->max, l->median / a->median, l->p90 / a->p90,
               tps_with[i], tps_with[i] / tps_alone);
    }

    engine_core_close(b.core);
    free(b.ir);
    return 0;
}
