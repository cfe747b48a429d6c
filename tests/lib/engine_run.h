/*
 * engine_run.h - drive several sequences through the paged engine step by step
 * (batch_run plus the H2O hooks), the way the scheduler does, and keep every step's
 * logits; shared by the tests that compare such runs (test_h2o_equiv against the
 * dense reference, test_tp across tensor-parallel sizes, test_device_state against
 * the host slot state, cuda_parity.h's CUDA against CPU).
 *
 * On top of the single sequences: the standard table of budget cases (erun_cases),
 * the options they load with and a loader from struct model_opts (erun_opts,
 * erun_load), one model's run of every case (struct erun: erun_run, erun_free) and
 * the scheduler's greedy path (erun_requests, erun_generate).
 */
#ifndef H2O_TEST_ENGINE_RUN_H
#define H2O_TEST_ENGINE_RUN_H

#include "test.h"

#include "err.h"
#include "generate.h"
#include "golden.h"
#include "kv_budget.h"
#include "h2o_ref.h"
#include "rnd.h"

#define STEPS 64
#define MAX_SEQ 8

struct eseq {
    int32_t tokens[256];
    int32_t P;
    struct kv_budget budget;
    struct h2o_ref_policy pol;
    struct kv_seq kv;
    int32_t n_cached, step;
    float *logits; /* [(STEPS + 1) * V] as the engine computed them */
};

void eseq_init(struct eseq *e, int32_t P, int32_t H, int32_t R, bool full, uint64_t seed,
               int32_t vocab);

/* Run the sequences together through the paged engine: decode tokens first, then
 * prompt chunks of at most `chunk` tokens. Decode tokens are the engine's own
 * greedy choices. */
void run_engine(struct model *m, struct kv_pool *pool, struct eseq *es, int32_t n,
                int32_t chunk);

/* Free what eseq_init and run_engine gave the sequence. */
void eseq_deinit(struct eseq *e, struct kv_pool *pool);

/* Every budget kind: B < P (compaction), B reached mid-decode, R = 1, H = 0, and
 * full; last, a short prompt (12) whose budget (31, R = 1) is first reached while
 * decoding, so that the first evictions come from decode tokens only. Case c of a
 * run starts from seed + c, so a table that only grows keeps every earlier case's
 * sequence. */
struct erun_case {
    int32_t P, H, R;
    bool full;
};
static const struct erun_case erun_cases[] = {
    {40, 4, 3, false}, {40, 6, 1, false}, {40, 0, 8, false},  {30, 25, 25, false},
    {33, 0, 0, true},  {21, 0, 0, true},  {12, 30, 1, false},
};
#define ERUN_CASES ((int32_t)ARRAY_LEN(erun_cases))
#define ERUN_POOL_BLOCKS 512
#define ERUN_BS 16

/* The options these tests load with: fp32 weights on `dev` with `tp` ranks, slot
 * state on the host or (device_state) as a device keeps it. */
void erun_opts(struct model_opts *mo, enum be_device dev, int tp, bool device_state);

/*
 * Load `name` (a directory under the test data, or "dummy:*" as it is) with `mo` and
 * give its backend a KV pool of ERUN_POOL_BLOCKS blocks of ERUN_BS.
 * Returns the model (the caller destroys it), or NULL after printing why.
 */
struct model *erun_load(const char *name, const struct model_opts *mo);

/* One model's run of every case of erun_cases. */
struct erun {
    struct model *m; /* NULL when it could not be loaded */
    struct kv_pool pool;
    struct eseq es[ERUN_CASES];
};

/*
 * Load `name` with `mo` into r and run every case batched, prompts in chunks of
 * `chunk`, case c's prompt drawn from seed + c. Returns false (r->m NULL) when the
 * model cannot be loaded. Either way the caller ends with erun_free(r).
 */
bool erun_run(struct erun *r, const char *name, const struct model_opts *mo, int32_t chunk,
              uint64_t seed);

/* Free what erun_run gave r; every block must be back in the pool. Safe on a run
 * whose model did not load, and twice. */
void erun_free(struct erun *r);

/* Greedy requests for prompts[0, n): max_tokens each, ignoring EOS, budget kv. */
void erun_requests(struct gen_request *rq, const char *const *prompts, int32_t n,
                   int32_t max_tokens, struct kv_spec kv);

/* The scheduler's path (h2oserve generate) on m, at most 16 tokens a step so that
 * prompts are chunked and batched with decodes. Returns generate_run's result. */
int erun_generate(struct model *m, const struct gen_request *rq, int32_t n,
                  struct gen_result *out);

#endif
