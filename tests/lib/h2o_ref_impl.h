/*
 * h2o_ref_impl.h - what h2o_ref.c and h2o_ref_families.c share: the reference's
 * weights and per-run state, and the helpers both call. Test-only, not for use
 * outside tests/lib.
 * Thread: any; nothing is shared between h2o_ref objects.
 */
#ifndef H2O_TEST_H2O_REF_IMPL_H
#define H2O_TEST_H2O_REF_IMPL_H

#include "h2o_ref.h"
#include "opt_config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct weights;

struct ref_layer {
    float *attn_ln_w, *attn_ln_b; // [hidden] self_attn_layer_norm (RMSNorm: b NULL)
    /* q [n_head * D, hidden], k and v [n_kv_head * D, hidden], o [hidden, n_head * D]
     * (nn.Linear: [out, in]); the Llama family's biases are NULL where it has none */
    float *q_w, *k_w, *v_w, *o_w;
    float *q_b, *k_b, *v_b, *o_b;
    float *gate_w, *up_w;       // [ffn, hidden] SwiGLU (Llama family); down is fc2_w
    float *ffn_ln_w, *ffn_ln_b; // [hidden] the layer's final_layer_norm
    float *fc1_w, *fc1_b;       // [ffn, hidden], [ffn]
    float *fc2_w, *fc2_b;       // [hidden, ffn], [hidden]
};

struct h2o_ref {
    struct opt_config cfg;
    float *embed_tokens;            // [vocab, proj]
    float *embed_pos;               // [max_pos + 2, hidden]
    float *project_in;              // [hidden, proj], NULL when proj == hidden
    float *project_out;             // [proj, hidden], NULL when proj == hidden
    float *final_ln_w, *final_ln_b; // [hidden], NULL when post-LN
    float *lm_head;                 // [vocab, proj]; == embed_tokens when tied
    struct ref_layer *layers;       // [n_layer]
};

/* The dense state of one run; T = P + n_steps tokens at most. */
struct ref_run {
    int32_t T;
    /* Heads of the cache are KV heads (n_kv_head; == n_head for OPT): with GQA the
     * policy is per KV head and its score sums over the query heads that share it. */
    float *k, *v; // [n_layer, T, n_kv_head, head_dim]: every token ever seen
    bool *kept;   // [n_layer, n_kv_head, T]: false = evicted (or not yet seen)
    float *score; // [n_layer, n_kv_head, T]: accumulated attention (fp32, DESIGN 5)
    int32_t *pos; // [T]: pos[j] = j, for h2o_ref_select_evict
    float *p;     // [T]: scratch, one query's attention probabilities
};

/* Tensor `name` of shape [d0] (d1 == 0) or [d0, d1] into a new array *dst; the
 * caller owns *dst even on failure. The _layer_ form reads "layers.<l>.<suffix>". */
int h2o_ref_read_tensor(const struct weights *w, float **dst, const char *name, int64_t d0,
                        int64_t d1);
int h2o_ref_read_layer_tensor(const struct weights *w, float **dst, int32_t l,
                              const char *suffix, int64_t d0, int64_t d1);

/* y[n_out] = b + W x, W [n_out, n_in] (nn.Linear), in double; b may be NULL. */
void h2o_ref_linear(float *y, const float *W, const float *b, const float *x, int32_t n_out,
                    int32_t n_in);

/* y[n] = LayerNorm(x) * w + b with eps and the biased variance, in double; y may be x. */
void h2o_ref_layer_norm(float *y, const float *x, const float *w, const float *b,
                        double eps, int32_t n);

/* Offsets into the run's k/v [n_layer, T, n_kv_head, head_dim] and kept/score
 * [n_layer, n_kv_head, T]. */
size_t h2o_ref_kv_index(const struct ref_run *run, const struct opt_config *c, int32_t l,
                        int32_t j, int32_t h);
size_t h2o_ref_head_index(const struct ref_run *run, const struct opt_config *c, int32_t l,
                          int32_t h);

/* One query (scaled q [head_dim]) of layer l at position t against KV head h's kept
 * tokens: ctx [head_dim], and its probabilities added to the KV head's scores. */
void h2o_ref_attend(struct ref_run *run, const struct opt_config *c, int32_t l, int32_t h,
                    int32_t t, const float *q, float *ctx);

/* The H2O step of layer l, KV head h after the attention of tokens [pos0, pos0 + n). */
void h2o_ref_evict(struct ref_run *run, const struct opt_config *c, int32_t l, int32_t h,
                   int32_t pos0, int32_t n, struct h2o_ref_policy pol);

/* h2o_ref_families.c: the weights and the forward of the Llama family and GPT-NeoX
 * (feed tokens[0..n) at positions pos0.., logits of the last into logits [vocab]). */
int h2o_ref_load_llama(struct h2o_ref *r, const struct weights *w);
int h2o_ref_load_neox(struct h2o_ref *r, const struct weights *w);
void h2o_ref_forward_llama(const struct h2o_ref *r, struct ref_run *run,
                           const int32_t *tokens, int32_t n, int32_t pos0,
                           struct h2o_ref_policy pol, float *logits);
void h2o_ref_forward_neox(const struct h2o_ref *r, struct ref_run *run,
                          const int32_t *tokens, int32_t n, int32_t pos0,
                          struct h2o_ref_policy pol, float *logits);

#endif
