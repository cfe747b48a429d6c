/*
 * sched_impl.h - what sched.c (requests: admission, reservations, cancellation,
 * forks and finishes) shares with sched_step.c (one step: building the batch,
 * sampling, emitting tokens). Not for other modules: they use sched.h.
 *
 * The scheduler is one struct sched; each file keeps to its half of it. sched.c
 * changes the queues, the running list and the reservation counters; sched_step.c
 * fills the step's items and pending rows and calls back into sched.c whenever a
 * request's state changes (admitted, prompt done, sequence finished).
 * Thread: the scheduler's owner, as sched.h.
 */
#ifndef H2O_SCHED_IMPL_H
#define H2O_SCHED_IMPL_H

#include "batch.h"
#include "detok.h"
#include "kv_seq.h"
#include "sampler.h"
#include "sched.h"

#include <stdbool.h>
#include <stdint.h>


/* A step that carries interactive prompt work leaves batch sequences out (see
 * sched.h), but never more than this many steps in a row: the next step then runs
 * every batch sequence beside the interactive work, so a stream of interactive
 * prompts slows the batch down to one step in SCHED_BATCH_MAX_PAUSE + 1 at worst and
 * never stops it. Four steps are four full interactive prompts of
 * max_batched_tokens each. */
#define SCHED_BATCH_MAX_PAUSE 4

/* Prompt chunks of a request that scores its prompt (prompt_logprobs) need logits
 * for every token: each row is vocab floats (200 KiB for OPT), so such chunks get
 * at most this many rows per step, all such requests together. */
#define SCHED_PROMPT_LOGIT_ROWS 256

struct sseq {
    struct sreq *req;
    int32_t index;      /* 0..n-1 within the request */
    int32_t *ids;       /* [P + max_tokens] prompt, then generated tokens */
    int32_t n_ids;
    int32_t n_cached;   /* tokens whose K/V are in the cache */
    struct kv_seq kv;
    struct rng rng;
    struct detok dt;
    bool live;
};

struct sreq {
    struct req *r;
    struct sreq *next;      /* waiting queue link */
    int32_t n_prompt;
    struct kv_budget budget;
    int32_t prompt_blocks;  /* ceil(P / bs) */
    int32_t dec_blocks;     /* one sequence's share after the prompt */
    int32_t reserved;       /* blocks reserved for this request now */
    int32_t seqs_reserved;  /* sequences counted against max_num_seqs now */
    double t_admit;         /* time_now() at admission */
    struct sseq *seqs;      /* [r->n]; only seqs[0] is live until the prompt is done */
    int32_t n_live;
    bool prefilled;
};

struct sched {
    struct model *m;
    struct kv_pool *pool;
    struct sched_opts o;
    sched_emit_fn emit;
    void *emit_arg;
    struct sreq *wait_head[2], *wait_tail[2]; /* per priority class, FIFO */
    struct sreq **running;                    /* admission order */
    int32_t n_running, cap_running;
    int32_t n_waiting, n_seqs_reserved, reserved_total;
    int32_t batch_paused;   /* steps in a row that left the batch class out */
    struct batch batch;
    struct batch_item *items;
    struct sseq **owner;
    int32_t cap_items;
    struct sampler_scratch scratch;
    float *row;             /* [vocab] a logits row the sampler may modify */
    /* The step's sampling, done once every item is accounted for: which sequence
     * samples from which logits row, and (device sampling) the rows' descriptions. */
    struct pending {
        struct sseq *sq;
        int32_t row;
    } *pending;
    int32_t n_pending, cap_pending;
    struct kv_seq **ev_kv;  /* the step's decode sequences, for one eviction call */
    int32_t *ev_t;          /* and the position of the token each fed */
    int32_t n_ev, cap_ev;
    struct be_sample_row *srows;
    struct sample_out *souts;
    int32_t *add_ids;       /* steps 1-2 of every row, back to back */
    float *add_vals;
    int64_t cap_adds;
    struct sched_stats st;
};

/* A fresh event of request q's sequence `seq` (-1: the whole request), with the
 * fields every event carries (ids, prompt tokens, budget). Owns: the caller. */
struct req_event *sched_event_new(const struct sreq *q, int32_t seq);

/* Sequence sq's eviction counts on event ev. */
void sched_event_evicted(const struct sched *s, const struct sseq *sq, struct req_event *ev);

/* A finishing event for sequence i that produced no token (cancel, max_tokens 0). */
void sched_emit_finish(struct sched *s, struct sreq *q, int32_t i, enum req_finish f);

/* Drop a running request: free every sequence and its reservation (no events). */
void sched_drop_running(struct sched *s, struct sreq *q);

/* Whether the waiting request q fits what nobody has reserved (blocks and
 * sequences). */
bool sched_admit_fits(const struct sched *s, const struct sreq *q);

/* Admit the head of the highest waiting class if it fits (and, unless `batch_too`,
 * only if that class is interactive): it joins the running list with its
 * reservation and its sequence 0 started. Returns false when nothing was admitted. */
bool sched_admit_one(struct sched *s, bool batch_too);

/* Request q's prompt is in the cache: H2O selection, shrink the reservation to the
 * decode shares, fork sequences 1..n-1. */
void sched_finish_prompt(struct sched *s, struct sreq *q);

/* Sequence sq finished (its last event is out): give back its blocks and its share
 * of the reservation; the request is freed with its last sequence. */
void sched_seq_finish(struct sched *s, struct sseq *sq);

/* CHECK the reservation invariants (sched.c's header) after a step. */
void sched_check_invariants(const struct sched *s);

#endif
