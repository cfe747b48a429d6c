/*
 * h2o_ref.h - a dense, obviously-correct reference of OPT inference, of the Llama
 * family (RMSNorm, SwiGLU, rotary positions, grouped-query attention) and of
 * GPT-NeoX (partial rotary, parallel residual, fused q/k/v, GELU), with the
 * H2O KV-cache policy (DESIGN section 3 for the model, section 5 for the policy;
 * docs/kv-cache.md for GQA: the policy is per KV head, a KV head's score the sum
 * over the query heads sharing it; a sliding window masks tokens outside it and
 * evicts them first).
 *
 * Test-only. It shares nothing with the engine's forward, KV cache or H2O code: the
 * weights are read once into plain fp32 arrays, every token's K and V are kept for
 * the whole run, and eviction is a `kept` flag that masks a token out of attention.
 * The paged engine must match it (DESIGN section 5, last rule). It is written for
 * clarity, not speed, and only takes tiny models (h2o_ref_create refuses ~50M+
 * parameters).
 */
#ifndef H2O_TEST_H2O_REF_H
#define H2O_TEST_H2O_REF_H

#include <stdbool.h>
#include <stdint.h>

struct h2o_ref;

/*
 * Load model `name`, a checkpoint folder path or "dummy:NAME" (dummy weights with
 * seed 0, model_opts_default's seed), as plain fp32 arrays.
 * Returns 0, an error from the config or weight readers, or ENG_EUNSUPPORTED (with a
 * message) for a model above ~50M parameters.
 * Owns: *out (h2o_ref_destroy). Thread: any.
 */
int h2o_ref_create(struct h2o_ref **out, const char *name);

/* Free everything. NULL is fine. Thread: any. */
void h2o_ref_destroy(struct h2o_ref *r);

/* The vocabulary size (columns of a logits row). Thread: any. */
int32_t h2o_ref_vocab(const struct h2o_ref *r);

/*
 * The KV policy of one run. `full`: no eviction at all (heavy and recent ignored).
 * Otherwise H2O exact mode with `heavy` H >= 0 heavy hitters and `recent` R >= 1
 * recent tokens per (layer, head): budget B = H + R.
 */
struct h2o_ref_policy {
    bool full;
    int32_t heavy, recent;
};

/*
 * Run prompt[0..P) as one causal prefill, then n_steps decode steps.
 * forced == NULL: greedy (decode token k is the argmax of logits row k, ties to the
 * lowest id); else decode token k is forced[k].
 * out_tokens [n_steps]: the decode tokens fed (may be NULL when n_steps == 0).
 * out_logits [(n_steps + 1) * vocab]: row 0 = logits after the last prompt token,
 * row k + 1 = logits after feeding decode token k.
 * out_kept [n_layer * n_kv_head] (may be NULL): after the run, how many tokens each
 * (layer, head) still keeps.
 * Returns 0, or ENG_EINVAL (with a message) for a bad policy, token id, or a run
 * longer than the model's max_position_embeddings.
 * Borrows every array. Thread: any (one run per h2o_ref at a time).
 */
int h2o_ref_run(struct h2o_ref *r, const int32_t *prompt, int32_t P,
                struct h2o_ref_policy pol, int32_t n_steps, const int32_t *forced,
                int32_t *out_tokens, float *out_logits, int32_t *out_kept);

/* ---- The two selection rules of DESIGN section 5, exposed for hand-checked tests. ---- */

/*
 * The prefill rule for one (layer, head): `col` [P] holds the column sums of the
 * causal prompt attention. If P <= H + R - 1 every token is kept; otherwise the R - 1
 * newest tokens plus the H largest `col` among the rest (ties: older position first).
 * Writes keep [P]. Token j is at position j. Thread: any.
 */
void h2o_ref_select_prefill(const float *col, int32_t P, int32_t H, int32_t R, bool *keep);

/*
 * The decode rule for one (layer, head), once the token at position `t` has been
 * added and all B slots are occupied: among the n entries with kept[i], excluding the
 * R - 1 newest positions (pos[i] > t - (R - 1), the current token included), the one
 * with the smallest score[i], ties to the older pos[i].
 * Returns its index in [0, n), or -1 when no entry is a candidate. Thread: any.
 */
int32_t h2o_ref_select_evict(const float *score, const int32_t *pos, const bool *kept,
                             int32_t n, int32_t t, int32_t R);

#endif
