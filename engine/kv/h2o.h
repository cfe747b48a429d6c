/*
 * h2o.h - the two H2O decisions of DESIGN.md section 5, as pure functions.
 *
 * With no knowledge of blocks, backends or policies: which prompt tokens survive
 * the prefill, and which token a full head evicts after a decode step. The budget
 * they take (heavy, recent) comes from kv_budget.h; kv_seq.c applies them to the
 * paged cache.
 * Thread: any (no state).
 */
#ifndef H2O_H2O_H
#define H2O_H2O_H

#include <stdint.h>

/*
 * Prefill selection for one (layer, head). n slots hold the prompt's tokens, with
 * positions pos[] and accumulated column sums col[]. If n <= B - 1 every slot is
 * kept; else the R - 1 newest positions plus the H largest col among the rest (ties:
 * older position first). Writes the kept slot indices in ascending order to keep[]
 * and returns their count. scratch holds n int32. Expected O(n) (quickselect), no
 * full sort.
 */
int32_t h2o_select_prefill(const float *col, const int32_t *pos, int32_t n, int32_t heavy,
                           int32_t recent, int32_t *keep, int32_t *scratch);

/*
 * Decode eviction for one full (layer, head): among the n slots (all occupied),
 * the argmin score, skipping the R - 1 newest tokens (positions > t - (R - 1), t the
 * current token's position); ties: older position first. O(n). Returns the slot.
 */
int32_t h2o_select_evict(const float *score, const int32_t *pos, int32_t n, int32_t t,
                         int32_t recent);

/*
 * The same choice in portable C, the reference: h2o_select_evict runs an AVX-512
 * version where the build targets it, which must pick the very same slot (ties and
 * NaN scores included); tests/unit/test_h2o_evict.c compares the two. Thread: any.
 */
int32_t h2o_select_evict_portable(const float *score, const int32_t *pos, int32_t n,
                                  int32_t t, int32_t recent);

/*
 * Sliding window (Mistral) and H2O: a slot outside the window of the next token
 * (position <= next - window, next = the largest position + 1) is never attended
 * again, so it is the first to go. Prefill: when at least B - 1 prompt tokens are
 * inside the window, h2o_select_prefill runs on those alone (the rest are dropped);
 * when fewer are, all of them are kept and the newest tokens outside fill the B - 1
 * (they go first in decode). window <= 0 is h2o_select_prefill. Same contract.
 */
int32_t h2o_select_prefill_window(const float *col, const int32_t *pos, int32_t n,
                                  int32_t heavy, int32_t recent, int32_t window,
                                  int32_t *keep, int32_t *scratch);

/*
 * Decode eviction with a sliding window: the oldest slot outside the window of the
 * next token (position <= t + 1 - window), whatever its score and even among the
 * R - 1 newest; only when there is none, h2o_select_evict. window <= 0 is
 * h2o_select_evict.
 */
int32_t h2o_select_evict_window(const float *score, const int32_t *pos, int32_t n,
                                int32_t t, int32_t recent, int32_t window);

/* The portable reference of h2o_select_evict_window (see h2o_select_evict_portable). */
int32_t h2o_select_evict_window_portable(const float *score, const int32_t *pos, int32_t n,
                                         int32_t t, int32_t recent, int32_t window);

#endif
