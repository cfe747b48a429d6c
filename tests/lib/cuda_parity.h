/*
 * cuda_parity.h - the CUDA backend against the CPU backend: the checks that
 * test_cuda_host (on a fake device, tests/fakecuda) and tests/gpu/test_cuda_model (on
 * a real GPU) both run, so that the two hold the backend to the same bar.
 *
 * The bar: the same sequences (engine_run.h's table: batched, prompts in chunks, 64
 * greedy decode steps, H2O budgets that evict during the prompt and mid-decode,
 * R = 1, H = 0, and full) on the CPU backend in fp32 and on the CUDA backend in fp16
 * give logits within TOL_LOGIT, the same greedy tokens up to a near-tie, and the same
 * evictions, slots and blocks; with tensor_parallel 2, also the same against CUDA at
 * TP = 1 within TOL_TP; and after each sequence the slot state that kv_read_state
 * returns equals the CPU's (positions exactly, scores within TOL_SCORE), and a
 * kv_copy_blocks copy of it reads back bit for bit. The scheduler's path
 * (generate_run) runs on CUDA, keeps the budget and repeats itself.
 *
 * The int8 KV cache (parity_check_int8) is held to the CPU's own int8 bar instead
 * (tests/backend/test_h2o_int8.c, int8 against fp32 there): the CPU quantizes fp32
 * K/V and CUDA the same values rounded to fp16, and an fp16 rounding moves an element
 * across an int8 rounding boundary often enough (a step is max|x| / 127, some 60 fp16
 * ulps of the largest element) that the two caches differ by single int8 steps; H2O
 * near-ties then evict other tokens, so slot-exact parity is not a bar that holds.
 *
 * Nothing here knows the fake device: a test that sets the fake's GPUs or counts its
 * allocations does so around these calls. The caller must have as many CUDA devices
 * as the tensor-parallel size it asks for.
 */
#ifndef H2O_TEST_CUDA_PARITY_H
#define H2O_TEST_CUDA_PARITY_H

#include "engine_run.h"

#include "cuda_ref.h"

#include <math.h>

/* fp16 activations and weights over 2-12 layers against fp32: the measured
 * differences are printed (about 1e-2 on the tiny models); these bounds leave room
 * above them without hiding a wrong head, slot, row or scale (which move logits by
 * whole units). TP = 2 against TP = 1 differs only in fp16 summation order. */
#define TOL_LOGIT 5e-2
#define TOL_TP 2e-2
/* Scores are sums of fp32 probabilities computed from fp16 K/V and queries: relative
 * to max(1, score) (measured about 3e-3). */
#define TOL_SCORE 2e-2

/* The prompts of case c come from seed PARITY_SEED + c, for both tests, so that a
 * real GPU's log reads line for line against the fake device's. The per-head state
 * check is exact about which tokens a head holds: on the fake device with seed 500
 * (test_cuda_model's seed before the two shared this header) the tiny OPT-350m's case
 * {30, 25, 25} evicts token 13 on the CPU and 14 on CUDA in one head, a near-tie of
 * scores that leaves tokens and logits equal; these sequences have no such tie on the
 * tiny models. dummy:opt-125m (144 heads) has such ties with this seed too, so
 * test_cuda_model checks it with exact_heads false (see cuda_parity.c's compare). */
#define PARITY_SEED 700

/* The seed the next parity_check_model uses (PARITY_SEED unless a test sets another
 * for one model: the same near-tie hazard as above, which a seed moves but no
 * tolerance fixes, since a flipped victim changes the cache itself). */
extern uint64_t parity_seed;

/* The largest differences seen so far, for the test's summary line. */
struct parity_worst {
    double logit, tp, score;
};
extern struct parity_worst parity_worst;

/* CUDA with `tp` ranks (as many devices) against the CPU backend in fp32; with tp > 1
 * also against CUDA with one rank. Prompts in chunks of `chunk`. exact_heads: as in
 * cuda_parity.c's compare. */
void parity_check_model(const char *name, int32_t chunk, int tp, bool exact_heads);

/*
 * CUDA with `tp` ranks and the CPU backend, both with --kv-cache-dtype int8, prompts
 * in chunks of `chunk`: every logit row up to the first greedy token that differs
 * within 15% of the row's max |logit|, the prompts' rows within 6% (test_h2o_int8's
 * bounds: a lost or misplaced scale is off by 100% or more); every H2O case evicts
 * and ends within its budget, full ones never evict; both report int8.
 */
void parity_check_int8(const char *name, int32_t chunk, int tp);

/*
 * The scheduler's path (h2oserve generate) on `name`: three prompts, H2O with H = 4,
 * R = 4, greedy, max_tokens each, 16 tokens a step, on the CPU backend in fp32 and on
 * CUDA with 1 rank (twice) and, where max_tp >= 2, 2 ranks. Every CUDA run gives
 * max_tokens tokens, evicts and keeps the budget; the second TP = 1 run repeats the
 * first token for token; and the count of leading tokens the CPU's shares is
 * printed. With `same_as_cpu` every token must be the CPU's: the fake device's
 * kernels are the host references, so no near-tie can flip there; a real GPU's
 * summation order may flip one, so there it is reported, and test_cuda_model's
 * logit comparison above holds the tokens to the near-tie rule.
 */
void parity_generate(const char *name, int32_t max_tokens, int max_tp, bool same_as_cpu);

#endif
