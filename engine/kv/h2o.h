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

#endif
