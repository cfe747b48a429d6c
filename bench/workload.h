/*
 * workload.h - FlexGen's offline workload, run through the engine's batches: n
 * prompts of exactly prompt_len tokens (deterministic random ids) each generate
 * gen_len greedy tokens. The prompts are prefilled in order, up to max_batched
 * tokens a forward (several prompts in one forward while the KV pool can hold them),
 * each compacted by its KV policy as soon as it is in; then every sequence decodes in one batch per step, gen_len - 1
 * steps (the first token comes from the prefill), as flex_opt.py runs it.
 *
 * Owns: nothing between calls. Thread: the model's (engine) thread.
 */
#ifndef H2O_BENCH_WORKLOAD_H
#define H2O_BENCH_WORKLOAD_H

#include "kv_budget.h"
#include "backend.h"
#include "model.h"

#include <stdint.h>

struct workload {
    int32_t n;                      /* sequences */
    int32_t prompt_len, gen_len;    /* tokens each */
    int32_t max_batched;            /* prompt tokens per prefill forward */
    int32_t block_size;             /* KV slots per block */
    struct kv_spec spec;            /* the KV policy every sequence runs */
    /* The pool the plan assumes (0: as large as needed). A prefill forward takes a
     * further prompt only while the pool can hold it, as a scheduler admitting by
     * free blocks does, so a small pool holds few uncompacted prompts at once. */
    int64_t pool_blocks;
};

struct workload_result {
    double prefill_s, decode_s;
    int64_t evicted;      /* tokens evicted, over sequences, layers and heads */
    int32_t peak_blocks;  /* most pool blocks in use at once */
    uint64_t checksum;    /* of the generated tokens: the same run gives the same */
    /* The decode phase's backend time (zero when the backend keeps none): forwards,
     * of which GEMMs and attention; decode_s - forward_s is the host's share, of
     * which H2O victim choice (evict_s) and greedy sampling (sample_s); the rest is
     * building the batches. */
    struct be_profile decode_prof;
    double evict_s, sample_s;
};

/*
 * The most pool blocks the run holds at once, from the policy's rules alone (the
 * prompts of one prefill forward before their compaction, the compacted ones, and
 * the decode growth), without running anything. workload_run's measured peak equals
 * it. Thread: any.
 */
int64_t workload_peak_blocks(const struct workload *w);

/* The largest n in [1, limit] whose peak fits in pool_blocks, or 0 when none does.
 * Thread: any. */
int32_t workload_max_batch(const struct workload *w, int64_t pool_blocks, int32_t limit);

/*
 * Run the workload on m with a KV pool of pool_blocks blocks (kv_alloc replaces
 * the backend's pool; w->pool_blocks is not read, the pool itself gates the
 * prefill). Greedy tokens are taken where the server takes them: on the
 * device when the backend samples there, so its logits never cross to the host.
 * Returns 0, or an engine error with its message (ENG_ENOSPC when the pool is too
 * small for n sequences).
 */
int workload_run(struct model *m, const struct workload *w, int32_t pool_blocks,
                 struct workload_result *res);

#endif
