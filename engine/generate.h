/*
 * generate.h - synchronous generation of several prompts as one continuous batch.
 *
 * The simplest driver of the model: every step, each decoding sequence gives one
 * token and prompt chunks fill the rest of max_batched_tokens. It is what
 * `h2oserve generate` runs; the engine thread with its scheduler (admission,
 * priorities, cancellation) builds on the same batch and sampling pieces.
 * Thread: the caller's (it drives the backend directly).
 */
#ifndef H2O_GENERATE_H
#define H2O_GENERATE_H

#include "kv_budget.h"
#include "model.h"
#include "sampler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gen_request {
    const char *prompt;          /* text, tokenized with BOS; or NULL and: */
    const int32_t *prompt_ids;   /* token ids as given (no BOS added) */
    int32_t n_prompt_ids;
    size_t prompt_len;           /* bytes of prompt */
    int32_t max_tokens;
    struct sampler_params sp;
    uint64_t seed;
    const char *const *stops;    /* [n_stops] stop strings */
    int32_t n_stops;
    bool ignore_eos;
    struct kv_spec kv;           /* KV-cache policy (zeroed = full) */
};

enum gen_finish {
    GEN_FINISH_LENGTH = 0,
    GEN_FINISH_STOP = 1,
};

struct gen_result {
    char *text;                  /* completion text, stop string excluded */
    size_t text_len;
    int32_t *tokens;             /* generated ids */
    int32_t n_tokens;
    int32_t prompt_tokens;
    enum gen_finish finish;
    struct kv_budget budget;     /* the policy as resolved for this sequence */
    int32_t kv_slots;            /* slots per (layer, head) in use at the end */
    int32_t kv_blocks_max;       /* most blocks held after the prompt */
    int64_t kv_evicted;          /* tokens evicted, summed over layers and heads */
    int64_t kv_evicted_tokens;   /* the tokens each (layer, head) dropped */
};

struct gen_opts {
    int32_t max_batched_tokens;  /* tokens per forward (prefill chunk budget) */
    int32_t block_size;          /* KV slots per block */
    int32_t kv_blocks;           /* pool size; 0 = enough for every request at once */
    int32_t max_num_seqs;        /* sequences at once; 0 = as many as there are requests */
};

void generate_opts_default(struct gen_opts *o);

/*
 * Generate a completion for each request. Returns 0, or an error (err_msg) for a
 * request that cannot run (empty prompt, context exceeded); results are then not
 * filled. Owns: nothing after return; results are the caller's (generate_result_free).
 * Thread: the thread that owns the model.
 */
int generate_run(struct model *m, const struct gen_opts *o, const struct gen_request *reqs,
                 int32_t n_reqs, struct gen_result *results);

void generate_result_free(struct gen_result *r);

#endif
