/*
 * h2o_ref.c - the dense reference of OPT + H2O that the engine is tested against:
 * loading, the H2O rules, the OPT forward and a run (the other families' loaders and
 * forwards are in h2o_ref_families.c, on the helpers h2o_ref_impl.h declares).
 *
 * Owns: the model's weights as plain fp32 arrays (struct h2o_ref), and during one
 * h2o_ref_run the dense per-run state (struct ref_run): the K and V of every token
 * ever seen, and per (layer, head) a `kept` flag and an fp32 `score` per token.
 * Invariant (H2O, not full): after each decode step every (layer, head) keeps at most
 * B - 1 tokens, so the next query attends to at most B.
 * Thread: any; nothing is shared between h2o_ref objects.
 *
 * Everything here is written to be read against DESIGN.md (section 3: the OPT
 * forward as in Hugging Face's OPTForCausalLM; section 5: the H2O exact-mode policy),
 * not to be fast: one token at a time, plain loops, dot products accumulated in
 * double and rounded to fp32. A token's index in the per-run arrays is its logical
 * position, so "older" simply means "smaller index".
 */
#include "h2o_ref.h"
#include "h2o_ref_impl.h"

#include "err.h"
#include "model.h"
#include "util.h"
#include "weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reference holds every weight in fp32 and runs plain loops: tiny models only. */
#define REF_MAX_PARAMS 50000000LL

/* HF OPT's LayerNorm epsilon (DESIGN section 3). */
#define REF_LN_EPS 1e-5

/* Learned positions are looked up at logical position + 2 (DESIGN section 3). */
#define REF_POS_OFFSET 2

/* ---- Loading ---- */

/* The size check counts what opt_config counts for reports. */
static int64_t count_params(const struct opt_config *c)
{
    return opt_config_param_count(c);
}

/*
 * Read tensor `name` of shape [d0] (d1 == 0) or [d0, d1] into a new array *dst.
 * The caller owns *dst even on failure.
 */
int h2o_ref_read_tensor(const struct weights *w, float **dst, const char *name, int64_t d0,
                        int64_t d1)
{
    const int64_t shape[2] = {d0, d1};
    *dst = xmalloc((size_t)(d0 * (d1 ? d1 : 1)) * sizeof(float));
    return weights_read_f32(w, name, d1 ? 2 : 1, shape, *dst);
}

int h2o_ref_read_layer_tensor(const struct weights *w, float **dst, int32_t l,
                              const char *suffix, int64_t d0, int64_t d1)
{
    char name[128];
    snprintf(name, sizeof name, "layers.%d.%s", (int)l, suffix);
    return h2o_ref_read_tensor(w, dst, name, d0, d1);
}

static int load_layer(const struct weights *w, struct ref_layer *L, int32_t l,
                      const struct opt_config *c)
{
    const int64_t h = c->hidden, f = c->ffn;
    int err = 0;
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->attn_ln_w, l, "self_attn_layer_norm.weight",
                                        h, 0);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->attn_ln_b, l, "self_attn_layer_norm.bias", h,
                                        0);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->q_w, l, "self_attn.q_proj.weight", h, h);
    if (!err) err = h2o_ref_read_layer_tensor(w, &L->q_b, l, "self_attn.q_proj.bias", h, 0);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->k_w, l, "self_attn.k_proj.weight", h, h);
    if (!err) err = h2o_ref_read_layer_tensor(w, &L->k_b, l, "self_attn.k_proj.bias", h, 0);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->v_w, l, "self_attn.v_proj.weight", h, h);
    if (!err) err = h2o_ref_read_layer_tensor(w, &L->v_b, l, "self_attn.v_proj.bias", h, 0);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->o_w, l, "self_attn.out_proj.weight", h, h);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->o_b, l, "self_attn.out_proj.bias", h, 0);
    if (!err)
        err =
            h2o_ref_read_layer_tensor(w, &L->ffn_ln_w, l, "final_layer_norm.weight", h, 0);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->ffn_ln_b, l, "final_layer_norm.bias", h, 0);
    if (!err) err = h2o_ref_read_layer_tensor(w, &L->fc1_w, l, "fc1.weight", f, h);
    if (!err) err = h2o_ref_read_layer_tensor(w, &L->fc1_b, l, "fc1.bias", f, 0);
    if (!err) err = h2o_ref_read_layer_tensor(w, &L->fc2_w, l, "fc2.weight", h, f);
    if (!err) err = h2o_ref_read_layer_tensor(w, &L->fc2_b, l, "fc2.bias", h, 0);
    return err;
}

static int load_weights(struct h2o_ref *r, const struct weights *w)
{
    const struct opt_config *c = &r->cfg;
    if (c->arch.family == ARCH_GPT_NEOX) return h2o_ref_load_neox(r, w);
    if (c->arch.family != ARCH_OPT) return h2o_ref_load_llama(r, w);
    const int64_t h = c->hidden, d = c->word_embed_proj_dim;
    int err =
        h2o_ref_read_tensor(w, &r->embed_tokens, "embed_tokens.weight", c->vocab_size, d);
    if (!err)
        err = h2o_ref_read_tensor(w, &r->embed_pos, "embed_positions.weight",
                                  (int64_t)c->max_pos + REF_POS_OFFSET, h);
    /* project_in / project_out exist exactly when word_embed_proj_dim != hidden (350m). */
    if (!err && d != h)
        err = h2o_ref_read_tensor(w, &r->project_in, "project_in.weight", h, d);
    if (!err && d != h)
        err = h2o_ref_read_tensor(w, &r->project_out, "project_out.weight", d, h);
    /* Post-LN models (do_layer_norm_before false) have no final layer norm. */
    if (!err && c->ln_before)
        err = h2o_ref_read_tensor(w, &r->final_ln_w, "final_layer_norm.weight", h, 0);
    if (!err && c->ln_before)
        err = h2o_ref_read_tensor(w, &r->final_ln_b, "final_layer_norm.bias", h, 0);
    /* No lm_head.weight in the checkpoint: the head is tied to the token embedding. */
    if (!err && weights_has(w, "lm_head.weight"))
        err = h2o_ref_read_tensor(w, &r->lm_head, "lm_head.weight", c->vocab_size, d);
    else if (!err)
        r->lm_head = r->embed_tokens;
    r->layers = xcalloc((size_t)c->n_layer, sizeof *r->layers);
    for (int32_t l = 0; l < c->n_layer && !err; l++)
        err = load_layer(w, &r->layers[l], l, c);
    return err;
}

int h2o_ref_create(struct h2o_ref **out, const char *name)
{
    struct h2o_ref *r = xcalloc(1, sizeof *r);
    struct weights *w = NULL;
    const bool dummy = strncmp(name, "dummy:", 6) == 0;
    int err = dummy ? opt_config_dummy(&r->cfg, name) : opt_config_load(&r->cfg, name);
    if (err) goto fail;
    /* Beyond OPT the reference runs the Llama family with plain rotary positions
     * (no rope_scaling, no sliding window): GQA and RoPE are what it checks. */
    const struct model_arch *a = &r->cfg.arch;
    if (a->rope.scaling != ARCH_ROPE_NONE ||
        (a->family == ARCH_GPT_NEOX && a->act != ARCH_ACT_GELU)) {
        err = err_set(ENG_EUNSUPPORTED,
                      "%s: the dense reference runs OPT, the Llama family and GPT-NeoX "
                      "(exact GELU) without rope_scaling",
                      name);
        goto fail;
    }
    const int64_t n_params = count_params(&r->cfg);
    if (n_params > REF_MAX_PARAMS) {
        err = err_set(ENG_EUNSUPPORTED,
                      "%s: %lld parameters; the dense reference takes at most %lld", name,
                      (long long)n_params, (long long)REF_MAX_PARAMS);
        goto fail;
    }
    /* Seed 0 is model_opts_default's, so the engine's dummy model has the same weights. */
    err = dummy ? weights_open_dummy(&w, &r->cfg, 0) : weights_open(&w, name);
    if (err) goto fail;
    err = load_weights(r, w);
    if (err) goto fail;
    weights_close(w);
    *out = r;
    return 0;
fail:
    weights_close(w);
    h2o_ref_destroy(r); /* safe on a half-loaded reference */
    return err;
}

void h2o_ref_destroy(struct h2o_ref *r)
{
    if (!r) return;
    if (r->layers) {
        for (int32_t l = 0; l < r->cfg.n_layer; l++) {
            struct ref_layer *L = &r->layers[l];
            float *all[] = {L->attn_ln_w, L->attn_ln_b, L->q_w,   L->k_w,   L->v_w,
                            L->o_w,       L->q_b,       L->k_b,   L->v_b,   L->o_b,
                            L->ffn_ln_w,  L->ffn_ln_b,  L->fc1_w, L->fc1_b, L->fc2_w,
                            L->fc2_b,     L->gate_w,    L->up_w};
            for (size_t i = 0; i < ARRAY_LEN(all); i++)
                free(all[i]);
        }
        free(r->layers);
    }
    if (r->lm_head != r->embed_tokens) free(r->lm_head);
    free(r->embed_tokens);
    free(r->embed_pos);
    free(r->project_in);
    free(r->project_out);
    free(r->final_ln_w);
    free(r->final_ln_b);
    free(r);
}

int32_t h2o_ref_vocab(const struct h2o_ref *r)
{
    return r->cfg.vocab_size;
}

/* ---- The H2O selection rules (DESIGN section 5) ---- */

void h2o_ref_select_prefill(const float *col, int32_t P, int32_t H, int32_t R, bool *keep)
{
    /* "If P <= B - 1 keep all, score = col." */
    if ((int64_t)P <= (int64_t)H + R - 1) {
        for (int32_t j = 0; j < P; j++)
            keep[j] = true;
        return;
    }
    /* "Otherwise keep the R - 1 newest prompt tokens ..." */
    const int32_t first_recent = P - (R - 1);
    for (int32_t j = 0; j < P; j++)
        keep[j] = j >= first_recent;
    /* "... plus the top H of col among the rest (ties: older position first)": pick the
     * largest remaining one H times; scanning oldest first with a strict > keeps the
     * older of equal values. There are first_recent >= H + 1 candidates. */
    for (int32_t n = 0; n < H; n++) {
        int32_t best = -1;
        for (int32_t j = 0; j < first_recent; j++)
            if (!keep[j] && (best < 0 || col[j] > col[best])) best = j;
        CHECK(best >= 0);
        keep[best] = true;
    }
}

int32_t h2o_ref_select_evict(const float *score, const int32_t *pos, const bool *kept,
                             int32_t n, int32_t t, int32_t R)
{
    /* "evict argmin score among every occupied slot except the R - 1 newest tokens
     * (positions > t - (R - 1), the current token included), ties: older position
     * first." With R = 1 nothing is protected and the new token competes too. */
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++) {
        if (!kept[i] || pos[i] > t - (R - 1)) continue;
        if (best < 0 || score[i] < score[best] ||
            (score[i] == score[best] && pos[i] < pos[best]))
            best = i;
    }
    return best;
}

/* ---- The OPT forward (DESIGN section 3) ---- */

/* y[n_out] = b + W x, with W [n_out, n_in] in nn.Linear's layout; b may be NULL. y must
 * not alias x. */
void h2o_ref_linear(float *y, const float *W, const float *b, const float *x, int32_t n_out,
                    int32_t n_in)
{
    for (int32_t o = 0; o < n_out; o++) {
        double acc = b ? b[o] : 0.0;
        for (int32_t i = 0; i < n_in; i++)
            acc += (double)W[(int64_t)o * n_in + i] * x[i];
        y[o] = (float)acc;
    }
}

/* y[n] = LayerNorm(x) with eps 1e-5 and the biased variance, as torch does. y may be x. */
void h2o_ref_layer_norm(float *y, const float *x, const float *w, const float *b,
                        double eps, int32_t n)
{
    double mean = 0, var = 0;
    for (int32_t i = 0; i < n; i++)
        mean += x[i];
    mean /= n;
    for (int32_t i = 0; i < n; i++)
        var += ((double)x[i] - mean) * ((double)x[i] - mean);
    var /= n;
    const double inv = 1.0 / sqrt(var + eps);
    for (int32_t i = 0; i < n; i++)
        y[i] = (float)(((double)x[i] - mean) * inv * w[i] + b[i]);
}

/* OPT's: eps 1e-5. */
static void layer_norm(float *y, const float *x, const float *w, const float *b, int32_t n)
{
    h2o_ref_layer_norm(y, x, w, b, REF_LN_EPS, n);
}

size_t h2o_ref_kv_index(const struct ref_run *run, const struct opt_config *c, int32_t l,
                        int32_t j, int32_t h)
{
    // k/v: [n_layer, T, n_kv_head, head_dim]
    return (((size_t)l * run->T + j) * c->n_kv_head + h) * c->head_dim;
}

size_t h2o_ref_head_index(const struct ref_run *run, const struct opt_config *c, int32_t l,
                          int32_t h)
{
    // kept/score: [n_layer, n_kv_head, T]
    return ((size_t)l * c->n_kv_head + h) * run->T;
}

/*
 * One query of layer l, KV head h at position t: softmax(q . k_j) over every token j <= t
 * that is kept (DESIGN 5: "attend over all occupied slots"; in the prompt the j <= t
 * bound is the causal mask). The probabilities go to run->p [T] (0 for tokens not
 * attended) and are added to score[j] (prefill: the column sums col[j]; decode:
 * score[j] += p(j), the new token starting with its own p). ctx [head_dim] = sum p_j v_j.
 * With GQA every query head of the group calls this for its KV head, so the KV
 * head's score is the sum over the query heads that share it.
 */
void h2o_ref_attend(struct ref_run *run, const struct opt_config *c, int32_t l, int32_t h,
                    int32_t t, const float *q, float *ctx)
{
    const int32_t hd = c->head_dim, W = c->arch.sliding_window;
    const bool *kept = run->kept + h2o_ref_head_index(run, c, l, h);
    float *score = run->score + h2o_ref_head_index(run, c, l, h);
    /* Token j is attended when it is kept and, with a sliding window W (Mistral), one
     * of the W newest: j > t - W. */
    bool *vis = xmalloc((size_t)(t + 1) * sizeof *vis);
    for (int32_t j = 0; j <= t; j++)
        vis[j] = kept[j] && (W <= 0 || j > t - W);
    double *logit = xmalloc((size_t)(t + 1) * sizeof *logit);
    double max = -INFINITY;
    for (int32_t j = 0; j <= t; j++) {
        if (!vis[j]) continue;
        const float *k = run->k + h2o_ref_kv_index(run, c, l, j, h);
        double dot = 0;
        for (int32_t i = 0; i < hd; i++)
            dot += (double)q[i] * k[i];
        logit[j] = dot;
        if (dot > max) max = dot;
    }
    /* The softmax is computed in double and rounded to fp32 probabilities; those fp32
     * values are what both the context and the H2O scores use. */
    double sum = 0;
    for (int32_t j = 0; j <= t; j++)
        if (vis[j]) sum += exp(logit[j] - max);
    for (int32_t j = 0; j < run->T; j++)
        run->p[j] = j <= t && vis[j] ? (float)(exp(logit[j] - max) / sum) : 0.0f;
    free(logit);
    for (int32_t i = 0; i < hd; i++) {
        double acc = 0;
        for (int32_t j = 0; j <= t; j++)
            if (vis[j])
                acc += (double)run->p[j] * run->v[h2o_ref_kv_index(run, c, l, j, h) + i];
        ctx[i] = (float)acc;
    }
    for (int32_t j = 0; j <= t; j++)
        if (vis[j]) score[j] += run->p[j];
    free(vis);
}

/*
 * The H2O step of layer l, head h after that layer's attention of the new tokens
 * [pos0, pos0 + n): the prefill rule after the prompt (pos0 == 0), the decode rule
 * after a decode token (n == 1). It runs after the attention, so the current token
 * itself saw all B tokens when the budget was full.
 */
void h2o_ref_evict(struct ref_run *run, const struct opt_config *c, int32_t l, int32_t h,
                   int32_t pos0, int32_t n, struct h2o_ref_policy pol)
{
    bool *kept = run->kept + h2o_ref_head_index(run, c, l, h);
    const float *score = run->score + h2o_ref_head_index(run, c, l, h);
    const int64_t B = (int64_t)pol.heavy + pol.recent;
    const int32_t W = c->arch.sliding_window;
    if (pos0 == 0) {
        /* Prefill: score already holds col; the evicted tokens' scores are moot. */
        if (W <= 0 || n <= B - 1 || W - 1 < B - 1) {
            /* No window, a prompt that fits, or a window narrower than the budget:
             * the plain rule, or (window) the B - 1 newest, all W - 1 inside the next
             * token's window among them. */
            if (W > 0 && n > B - 1)
                for (int32_t j = 0; j < n; j++)
                    kept[j] = j >= n - (B - 1);
            else
                h2o_ref_select_prefill(score, n, pol.heavy, pol.recent, kept);
            return;
        }
        /* The next token (at n) sees positions n - W + 1 .. n: the W - 1 >= B - 1
         * prompt tokens from n - W + 1 on; the plain rule among them, the rest go. */
        const int32_t first = n - W + 1;
        for (int32_t j = 0; j < first; j++)
            kept[j] = false;
        h2o_ref_select_prefill(score + first, W - 1, pol.heavy, pol.recent, kept + first);
        return;
    }
    CHECK(n == 1);
    const int32_t t = pos0;
    int64_t n_kept = 0;
    for (int32_t j = 0; j <= t; j++)
        n_kept += kept[j];
    CHECK(n_kept <= B);
    /* "If all B slots are now occupied, evict argmin score ..." */
    if (n_kept == B) {
        /* With a window, the oldest kept token the next query (t + 1) cannot see goes
         * first: j <= t + 1 - W. */
        int32_t victim = -1;
        for (int32_t j = 0; W > 0 && j <= t + 1 - W && victim < 0; j++)
            if (kept[j]) victim = j;
        if (victim < 0)
            victim = h2o_ref_select_evict(score, run->pos, kept, t + 1, t, pol.recent);
        CHECK(victim >= 0);
        kept[victim] = false; /* evicted tokens never come back */
    }
}

/*
 * Feed tokens[0..n) at logical positions pos0.. through the model (HF OPTDecoder and
 * OPTDecoderLayer), applying the policy in every layer, and write the logits of the
 * last one into logits [vocab].
 */

static void forward(const struct h2o_ref *r, struct ref_run *run, const int32_t *tokens,
                    int32_t n, int32_t pos0, struct h2o_ref_policy pol, float *logits)
{
    const struct opt_config *c = &r->cfg;
    if (c->arch.family == ARCH_GPT_NEOX) {
        h2o_ref_forward_neox(r, run, tokens, n, pos0, pol, logits);
        return;
    }
    if (c->arch.family != ARCH_OPT) {
        h2o_ref_forward_llama(r, run, tokens, n, pos0, pol, logits);
        return;
    }
    const int32_t hid = c->hidden, d = c->word_embed_proj_dim, hd = c->head_dim;
    float *x = xmalloc((size_t)n * hid * sizeof *x); // [n, hidden] the residual stream
    float *a = xmalloc((size_t)n * hid * sizeof *a); // [n, hidden] normed input / scratch
    float *q = xmalloc((size_t)n * hid * sizeof *q); // [n, n_head, head_dim]
    float *ctx = xmalloc((size_t)n * hid * sizeof *ctx); // [n, n_head, head_dim]
    float *f = xmalloc((size_t)c->ffn * sizeof *f);      // [ffn] one token's fc1 output
    float *o = xmalloc((size_t)(hid > d ? hid : d) * sizeof *o); // [max(hidden, proj)]

    /* Embeddings: token embedding, project_in when present, plus the learned position
     * at logical position + 2. */
    for (int32_t i = 0; i < n; i++) {
        const float *e = r->embed_tokens + (int64_t)tokens[i] * d;
        float *xi = x + (int64_t)i * hid;
        if (r->project_in)
            h2o_ref_linear(xi, r->project_in, NULL, e, hid, d);
        else
            memcpy(xi, e, (size_t)hid * sizeof *xi);
        const float *pe = r->embed_pos + (int64_t)(pos0 + i + REF_POS_OFFSET) * hid;
        for (int32_t k = 0; k < hid; k++)
            xi[k] += pe[k];
    }

    const float scale = 1.0f / sqrtf((float)hd);
    for (int32_t l = 0; l < c->n_layer; l++) {
        const struct ref_layer *L = &r->layers[l];

        /* Self-attention block: pre-LN normalises its input, post-LN its output. */
        for (int32_t i = 0; i < n; i++) {
            const float *xi = x + (int64_t)i * hid;
            float *ai = a + (int64_t)i * hid;
            if (c->ln_before)
                layer_norm(ai, xi, L->attn_ln_w, L->attn_ln_b, hid);
            else
                memcpy(ai, xi, (size_t)hid * sizeof *ai);
            /* q is scaled by head_dim^-0.5 after its bias, as HF does. */
            float *qi = q + (int64_t)i * hid;
            h2o_ref_linear(qi, L->q_w, L->q_b, ai, hid, hid);
            for (int32_t k = 0; k < hid; k++)
                qi[k] *= scale;
            /* K and V of every token are kept for the whole run; eviction only masks. */
            h2o_ref_linear(run->k + h2o_ref_kv_index(run, c, l, pos0 + i, 0), L->k_w,
                           L->k_b, ai, hid, hid);
            h2o_ref_linear(run->v + h2o_ref_kv_index(run, c, l, pos0 + i, 0), L->v_w,
                           L->v_b, ai, hid, hid);
        }
        /* The new tokens enter the kept set with score 0; causality is attend's j <= t. */
        for (int32_t h = 0; h < c->n_head; h++) {
            for (int32_t i = 0; i < n; i++) {
                run->kept[h2o_ref_head_index(run, c, l, h) + pos0 + i] = true;
                run->score[h2o_ref_head_index(run, c, l, h) + pos0 + i] = 0.0f;
            }
        }
        for (int32_t i = 0; i < n; i++)
            for (int32_t h = 0; h < c->n_head; h++)
                h2o_ref_attend(run, c, l, h, pos0 + i,
                               q + (int64_t)i * hid + (int64_t)h * hd,
                               ctx + (int64_t)i * hid + (int64_t)h * hd);
        /* Each (layer, head) evicts on its own, after this layer's attention. */
        if (!pol.full)
            for (int32_t h = 0; h < c->n_head; h++)
                h2o_ref_evict(run, c, l, h, pos0, n, pol);
        for (int32_t i = 0; i < n; i++) {
            float *xi = x + (int64_t)i * hid;
            h2o_ref_linear(o, L->o_w, L->o_b, ctx + (int64_t)i * hid, hid, hid);
            for (int32_t k = 0; k < hid; k++)
                xi[k] += o[k];
            if (!c->ln_before) layer_norm(xi, xi, L->attn_ln_w, L->attn_ln_b, hid);
        }

        /* Feed-forward block: fc1 -> ReLU -> fc2, residual, same LN placement. */
        for (int32_t i = 0; i < n; i++) {
            float *xi = x + (int64_t)i * hid;
            float *ai = a + (int64_t)i * hid;
            if (c->ln_before)
                layer_norm(ai, xi, L->ffn_ln_w, L->ffn_ln_b, hid);
            else
                memcpy(ai, xi, (size_t)hid * sizeof *ai);
            h2o_ref_linear(f, L->fc1_w, L->fc1_b, ai, c->ffn, hid);
            for (int32_t k = 0; k < c->ffn; k++)
                f[k] = f[k] > 0.0f ? f[k] : 0.0f;
            h2o_ref_linear(o, L->fc2_w, L->fc2_b, f, hid, c->ffn);
            for (int32_t k = 0; k < hid; k++)
                xi[k] += o[k];
            if (!c->ln_before) layer_norm(xi, xi, L->ffn_ln_w, L->ffn_ln_b, hid);
        }
    }

    /* Head of the last token: final LN (pre-LN models only), project_out when present,
     * then lm_head (the token embedding when tied). */
    float *xl = x + (int64_t)(n - 1) * hid;
    if (r->final_ln_w) layer_norm(xl, xl, r->final_ln_w, r->final_ln_b, hid);
    const float *hidden_out = xl;
    if (r->project_out) {
        h2o_ref_linear(o, r->project_out, NULL, xl, d, hid);
        hidden_out = o;
    }
    h2o_ref_linear(logits, r->lm_head, NULL, hidden_out, c->vocab_size, d);

    free(x);
    free(a);
    free(q);
    free(ctx);
    free(f);
    free(o);
}

/* ---- One run ---- */

static int32_t argmax_lowest(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i; /* strict: ties go to the lowest id */
    return best;
}

static int check_tokens(const struct h2o_ref *r, const int32_t *tok, int32_t n,
                        const char *what)
{
    for (int32_t i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= r->cfg.vocab_size)
            return err_set(ENG_EINVAL,
                           "h2o_ref: %s[%d] = %d is outside the vocabulary (%d)", what,
                           (int)i, (int)tok[i], (int)r->cfg.vocab_size);
    return 0;
}

int h2o_ref_run(struct h2o_ref *r, const int32_t *prompt, int32_t P,
                struct h2o_ref_policy pol, int32_t n_steps, const int32_t *forced,
                int32_t *out_tokens, float *out_logits, int32_t *out_kept)
{
    const struct opt_config *c = &r->cfg;
    if (P < 1 || n_steps < 0)
        return err_set(ENG_EINVAL, "h2o_ref: P = %d, n_steps = %d", (int)P, (int)n_steps);
    if (!pol.full && (pol.heavy < 0 || pol.recent < 1))
        return err_set(ENG_EINVAL, "h2o_ref: policy H = %d, R = %d (need H >= 0, R >= 1)",
                       (int)pol.heavy, (int)pol.recent);
    /* The last token sits at position P + n_steps - 1, row P + n_steps + 1 of the
     * position table, which has max_pos + 2 rows. */
    if ((int64_t)P + n_steps > c->max_pos)
        return err_set(ENG_EINVAL, "h2o_ref: %lld tokens exceed max_position_embeddings %d",
                       (long long)P + n_steps, (int)c->max_pos);
    int err = check_tokens(r, prompt, P, "prompt");
    if (!err && forced) err = check_tokens(r, forced, n_steps, "forced");
    if (err) return err;

    struct ref_run run = {.T = P + n_steps};
    const size_t kv_n = (size_t)c->n_layer * run.T * c->n_kv_head * c->head_dim;
    const size_t st_n = (size_t)c->n_layer * c->n_kv_head * run.T;
    run.k = xcalloc(kv_n, sizeof *run.k);
    run.v = xcalloc(kv_n, sizeof *run.v);
    run.kept = xcalloc(st_n, sizeof *run.kept);
    run.score = xcalloc(st_n, sizeof *run.score);
    run.pos = xmalloc((size_t)run.T * sizeof *run.pos);
    run.p = xmalloc((size_t)run.T * sizeof *run.p);
    for (int32_t j = 0; j < run.T; j++)
        run.pos[j] = j;

    const int32_t V = c->vocab_size;
    /* Prefill: the whole prompt as one causal pass (row 0 = after its last token). */
    forward(r, &run, prompt, P, 0, pol, out_logits);
    /* Decode: token k at position P + k, greedy from row k unless forced. */
    for (int32_t k = 0; k < n_steps; k++) {
        const int32_t tok =
            forced ? forced[k] : argmax_lowest(out_logits + (int64_t)k * V, V);
        if (out_tokens) out_tokens[k] = tok;
        forward(r, &run, &tok, 1, P + k, pol, out_logits + (int64_t)(k + 1) * V);
    }

    if (out_kept) {
        for (int32_t l = 0; l < c->n_layer; l++) {
            for (int32_t h = 0; h < c->n_kv_head; h++) {
                const bool *kept = run.kept + h2o_ref_head_index(&run, c, l, h);
                int32_t n_kept = 0;
                for (int32_t j = 0; j < run.T; j++)
                    n_kept += kept[j];
                out_kept[l * c->n_kv_head + h] = n_kept;
            }
        }
    }
    free(run.k);
    free(run.v);
    free(run.kept);
    free(run.score);
    free(run.pos);
    free(run.p);
    return 0;
}
