/*
 * sched.h - continuous (iteration-level) batching over the paged, H2O-budgeted KV
 * cache.
 *
 * Owns: the requests it was given (waiting, then running), their sequences and
 * the sequences' KV blocks; not the model or the pool.
 * Each sched_step: cancelled requests are dropped; every running decode sequence
 * contributes its next token; prompt chunks of admitted requests (oldest first)
 * fill the rest of max_batched_tokens; new requests are admitted, interactive
 * before batch and first come first served within a class, while their peak KV
 * footprint fits the blocks nobody has reserved and max_num_seqs allows. One
 * forward runs; the H2O policy acts (prefill selection, decode eviction); each
 * sequence that got logits samples a token, detokenizes it and emits an event.
 *
 * Interactive work also comes first once admitted, so that an interactive prompt's
 * time to first token beside a batch job stays close to what it is on an idle
 * engine (bench/bench_prio.c measures it):
 * - A step in which an interactive request has prompt tokens to prefill (admitted
 *   with its prompt unfinished, or at the head of the queue and fitting, so admitted
 *   now) carries interactive work only: its prompt chunks and the interactive decode
 *   tokens. REQ_PRIO_BATCH sequences sit that step out and no batch request is
 *   admitted in it. They keep their blocks and H2O state and go on at the next
 *   step, so nothing is evicted, preempted or recomputed, and a sequence's
 *   tokens do not depend on the steps it sat out.
 * - At most 4 steps in a row leave the batch class out; the next is an ordinary step
 *   with every batch sequence, so batch sequences advance at least every fifth step
 *   whatever the interactive load: they are slowed, never starved.
 * - Batch prompt tokens per step may be capped (batch_prompt_tokens): an interactive
 *   request that arrives while a step runs waits for it, and a step of batch work
 *   then carries at most one token per batch sequence plus that many prompt tokens.
 *   Off by default. Without it, a batch job whose requests finish together (the
 *   same lengths) refills in steps of max_batched_tokens prompt tokens, 0.85 s each
 *   for OPT-125m fp32 on 2 cores against 65 ms for 64 decodes, and an interactive
 *   request that lands in one waits that long; a cap of 256 took the worst TTFT
 *   there from 1.6 s to 0.2 s but spreads the prompts over more steps, so more
 *   arrivals wait for a longer step and the 90th percentile grew (bench_prio).
 * Invariant: the blocks sequences hold never exceed what their requests reserved,
 * so a forward never finds the pool full (checked); when a step ends, the pool's
 * free blocks plus the blocks held by sequences equal the pool size.
 * Thread: the one that owns the model (the engine thread, or a test).
 */
#ifndef H2O_SCHED_H
#define H2O_SCHED_H

#include "req.h"

#include <stdbool.h>
#include <stdint.h>

struct model;
struct opt_config;
struct kv_pool;
struct sched;

struct sched_opts {
    int32_t max_num_seqs;        /* sequences decoding or prefilling at once */
    int32_t max_batched_tokens;  /* tokens per forward; must exceed max_num_seqs */
    int32_t batch_prompt_tokens; /* prompt tokens of REQ_PRIO_BATCH requests per
                                    forward; 0: no cap but max_batched_tokens. A
                                    server that takes interactive requests beside
                                    batch jobs wants about max_batched_tokens / 8. */
    int32_t max_model_len;       /* context length: prompt + max_tokens beyond it is
                                    refused; 0 = the model's max_pos, and more than
                                    max_pos is an error (sched_context_len) */
};

/* Events go to the caller through this callback, which takes ownership. */
typedef void (*sched_emit_fn)(void *arg, struct req_event *ev);

struct sched_stats {
    int32_t n_waiting;          /* requests not admitted yet */
    int32_t n_running;          /* requests admitted and not finished */
    int32_t n_seqs;             /* live sequences */
    int32_t blocks_used;        /* blocks held by sequences */
    int32_t blocks_reserved;    /* blocks promised to admitted requests */
    int32_t blocks_total;
    int64_t prompt_tokens;      /* counters since creation */
    int64_t generation_tokens;
    int64_t tokens_evicted;     /* summed over layers and heads */
    int64_t steps;
};

/*
 * The context length that max_model_len allows for a model of config cfg:
 * max_model_len, or cfg->max_pos when it is 0. Returns 0 with it in *out, or
 * ENG_EINVAL with a message when max_model_len exceeds max_pos (a position past the
 * table has no embedding, so the model cannot run such a sequence; vLLM refuses
 * this too). The server checks with it before it starts; sched_create, the engine's
 * pool sizing and run-batch use the same rule. Thread: any.
 */
int sched_context_len(int32_t max_model_len, const struct opt_config *cfg, int32_t *out);

/*
 * The most logits rows one step of a scheduler with options o asks the backend for:
 * a row per decoding sequence and per prompt that ends in the step (both sequences
 * of max_num_seqs), plus the rows of scored prompt chunks, and never more than the
 * step's tokens. A device backend keeps room for them out of the KV pool
 * (model_opts.max_step_rows). Thread: any.
 */
int32_t sched_max_step_rows(const struct sched_opts *o);

/* Returns NULL for invalid options, max_model_len too (message set). Thread: owner. */
struct sched *sched_create(struct model *m, struct kv_pool *pool, const struct sched_opts *o,
                           sched_emit_fn emit, void *emit_arg);

/* Cancels everything left (emitting nothing) and frees it. Thread: owner. */
void sched_destroy(struct sched *s);

/*
 * Take a request. It is tokenized and checked here; a request that cannot run
 * (empty prompt, prompt + max_tokens beyond the context, a KV budget that can never
 * fit the pool) gets one error event at once. Owns: r from now on. Thread: owner.
 */
void sched_add(struct sched *s, struct req *r);

/* Cancel a request wherever it is: its blocks are freed at once and each live
 * sequence gets a finish event (cancelled). Unknown ids are ignored. Thread: owner. */
void sched_cancel(struct sched *s, uint64_t id);

/* Cancel every request (shutdown). Thread: owner. */
void sched_cancel_all(struct sched *s);

/*
 * One iteration. Returns the number of tokens the forward processed (0 when there
 * was nothing to do), or a negative engine error when the backend failed (the
 * running requests then got error events and were dropped). Thread: owner.
 */
int sched_step(struct sched *s);

/* Whether nothing is waiting or running. Thread: owner. */
bool sched_idle(const struct sched *s);

void sched_get_stats(const struct sched *s, struct sched_stats *out);

#endif
