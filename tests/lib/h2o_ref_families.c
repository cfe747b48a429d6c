/*
 * h2o_ref_families.c - the dense reference's families beyond OPT: the Llama family
 * (Llama, Mistral, Qwen2: RMSNorm, SwiGLU, rotary positions, grouped-query attention)
 * and GPT-NeoX (partial rotary, parallel residual, fused q/k/v, GELU), written from
 * transformers' modeling code, on h2o_ref.c's attention and H2O steps
 * (h2o_ref_impl.h). Like h2o_ref.c it shares nothing with the engine's forward.
 * Thread: any; nothing is shared between h2o_ref objects.
 */
#include "h2o_ref_impl.h"

#include "util.h"
#include "weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The Llama family (Llama, Mistral, Qwen2) in its checkpoints' names (arch.h). */
static int load_layer_llama(const struct weights *w, struct ref_layer *L, int32_t l,
                            const struct opt_config *c)
{
    const int64_t h = c->hidden, f = c->ffn, q = (int64_t)c->n_head * c->head_dim;
    const int64_t kv = (int64_t)c->n_kv_head * c->head_dim;
    const bool bias = c->arch.qkv_bias;
    int err =
        h2o_ref_read_layer_tensor(w, &L->attn_ln_w, l, "input_layernorm.weight", h, 0);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->q_w, l, "self_attn.q_proj.weight", q, h);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->k_w, l, "self_attn.k_proj.weight", kv, h);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->v_w, l, "self_attn.v_proj.weight", kv, h);
    if (!err && bias)
        err = h2o_ref_read_layer_tensor(w, &L->q_b, l, "self_attn.q_proj.bias", q, 0);
    if (!err && bias)
        err = h2o_ref_read_layer_tensor(w, &L->k_b, l, "self_attn.k_proj.bias", kv, 0);
    if (!err && bias)
        err = h2o_ref_read_layer_tensor(w, &L->v_b, l, "self_attn.v_proj.bias", kv, 0);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->o_w, l, "self_attn.o_proj.weight", h, q);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->ffn_ln_w, l,
                                        "post_attention_layernorm.weight", h, 0);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->gate_w, l, "mlp.gate_proj.weight", f, h);
    if (!err) err = h2o_ref_read_layer_tensor(w, &L->up_w, l, "mlp.up_proj.weight", f, h);
    if (!err)
        err = h2o_ref_read_layer_tensor(w, &L->fc2_w, l, "mlp.down_proj.weight", h, f);
    return err;
}

int h2o_ref_load_llama(struct h2o_ref *r, const struct weights *w)
{
    const struct opt_config *c = &r->cfg;
    const int64_t h = c->hidden;
    int err =
        h2o_ref_read_tensor(w, &r->embed_tokens, "embed_tokens.weight", c->vocab_size, h);
    if (!err) err = h2o_ref_read_tensor(w, &r->final_ln_w, "norm.weight", h, 0);
    if (!err && !c->tied_lm_head)
        err = h2o_ref_read_tensor(w, &r->lm_head, "lm_head.weight", c->vocab_size, h);
    else if (!err)
        r->lm_head = r->embed_tokens;
    r->layers = xcalloc((size_t)c->n_layer, sizeof *r->layers);
    for (int32_t l = 0; l < c->n_layer && !err; l++)
        err = load_layer_llama(w, &r->layers[l], l, c);
    return err;
}

/* GPT-NeoX (names without gpt_neox.): the fused query_key_value goes to q_w / q_b
 * as it is, [n_head, 3, head_dim] rows. */
int h2o_ref_load_neox(struct h2o_ref *r, const struct weights *w)
{
    const struct opt_config *c = &r->cfg;
    const int64_t h = c->hidden, f = c->ffn, q = (int64_t)c->n_head * c->head_dim;
    int err = h2o_ref_read_tensor(w, &r->embed_tokens, "embed_in.weight", c->vocab_size, h);
    if (!err) err = h2o_ref_read_tensor(w, &r->final_ln_w, "final_layer_norm.weight", h, 0);
    if (!err) err = h2o_ref_read_tensor(w, &r->final_ln_b, "final_layer_norm.bias", h, 0);
    if (!err)
        err = h2o_ref_read_tensor(w, &r->lm_head, "embed_out.weight", c->vocab_size, h);
    r->layers = xcalloc((size_t)c->n_layer, sizeof *r->layers);
    for (int32_t l = 0; l < c->n_layer && !err; l++) {
        struct ref_layer *L = &r->layers[l];
        err =
            h2o_ref_read_layer_tensor(w, &L->attn_ln_w, l, "input_layernorm.weight", h, 0);
        if (!err)
            err = h2o_ref_read_layer_tensor(w, &L->attn_ln_b, l, "input_layernorm.bias", h,
                                            0);
        if (!err)
            err = h2o_ref_read_layer_tensor(w, &L->ffn_ln_w, l,
                                            "post_attention_layernorm.weight", h, 0);
        if (!err)
            err = h2o_ref_read_layer_tensor(w, &L->ffn_ln_b, l,
                                            "post_attention_layernorm.bias", h, 0);
        if (!err)
            err = h2o_ref_read_layer_tensor(w, &L->q_w, l,
                                            "attention.query_key_value.weight", 3 * q, h);
        if (!err)
            err = h2o_ref_read_layer_tensor(w, &L->q_b, l, "attention.query_key_value.bias",
                                            3 * q, 0);
        if (!err)
            err = h2o_ref_read_layer_tensor(w, &L->o_w, l, "attention.dense.weight", h, q);
        if (!err)
            err = h2o_ref_read_layer_tensor(w, &L->o_b, l, "attention.dense.bias", h, 0);
        if (!err)
            err = h2o_ref_read_layer_tensor(w, &L->fc1_w, l, "mlp.dense_h_to_4h.weight", f,
                                            h);
        if (!err)
            err =
                h2o_ref_read_layer_tensor(w, &L->fc1_b, l, "mlp.dense_h_to_4h.bias", f, 0);
        if (!err)
            err = h2o_ref_read_layer_tensor(w, &L->fc2_w, l, "mlp.dense_4h_to_h.weight", h,
                                            f);
        if (!err)
            err =
                h2o_ref_read_layer_tensor(w, &L->fc2_b, l, "mlp.dense_4h_to_h.bias", h, 0);
    }
    return err;
}

/* ---- The Llama family's forward (HF LlamaDecoderLayer, MistralDecoderLayer,
 * Qwen2DecoderLayer) ---- */

/* y[n] = x * rsqrt(mean(x^2) + eps) * w, in double. y may be x. */
static void rms_norm(float *y, const float *x, const float *w, double eps, int32_t n)
{
    double ms = 0;
    for (int32_t i = 0; i < n; i++)
        ms += (double)x[i] * x[i];
    ms /= n;
    const double inv = 1.0 / sqrt(ms + eps);
    for (int32_t i = 0; i < n; i++)
        y[i] = (float)((double)x[i] * inv * w[i]);
}

/* Rotate one head v [head_dim] to position t: element i < d/2 pairs with i + d/2
 * (HF's rotate_half), angle t * theta^(-2i/d), in double. */
static void rope(float *v, int32_t t, int32_t d, double theta)
{
    for (int32_t i = 0; i < d / 2; i++) {
        const double ang = t * pow(theta, -2.0 * i / d);
        const double x1 = v[i], x2 = v[i + d / 2];
        v[i] = (float)(x1 * cos(ang) - x2 * sin(ang));
        v[i + d / 2] = (float)(x2 * cos(ang) + x1 * sin(ang));
    }
}

void h2o_ref_forward_llama(const struct h2o_ref *r, struct ref_run *run,
                           const int32_t *tokens, int32_t n, int32_t pos0,
                           struct h2o_ref_policy pol, float *logits)
{
    const struct opt_config *c = &r->cfg;
    const int32_t hid = c->hidden, D = c->head_dim, H = c->n_head, KV = c->n_kv_head;
    const int32_t qw = H * D, rep = H / KV, f = c->ffn;
    const double eps = c->arch.norm_eps, theta = c->arch.rope.theta;
    float *x = xmalloc((size_t)n * hid * sizeof *x);    // [n, hidden] the residual stream
    float *a = xmalloc((size_t)hid * sizeof *a);        // [hidden] normed input
    float *q = xmalloc((size_t)n * qw * sizeof *q);     // [n, n_head, head_dim]
    float *ctx = xmalloc((size_t)n * qw * sizeof *ctx); // [n, n_head, head_dim]
    float *g = xmalloc((size_t)f * sizeof *g), *u = xmalloc((size_t)f * sizeof *u);
    float *o = xmalloc((size_t)hid * sizeof *o);
    for (int32_t i = 0; i < n; i++)
        memcpy(x + (int64_t)i * hid, r->embed_tokens + (int64_t)tokens[i] * hid,
               (size_t)hid * sizeof *x);
    const float scale = 1.0f / sqrtf((float)D);
    for (int32_t l = 0; l < c->n_layer; l++) {
        const struct ref_layer *L = &r->layers[l];
        for (int32_t i = 0; i < n; i++) {
            const int32_t t = pos0 + i;
            rms_norm(a, x + (int64_t)i * hid, L->attn_ln_w, eps, hid);
            float *qi = q + (int64_t)i * qw;
            float *ki = run->k + h2o_ref_kv_index(run, c, l, t, 0);
            float *vi = run->v + h2o_ref_kv_index(run, c, l, t, 0);
            h2o_ref_linear(qi, L->q_w, L->q_b, a, qw, hid);
            h2o_ref_linear(ki, L->k_w, L->k_b, a, KV * D, hid);
            h2o_ref_linear(vi, L->v_w, L->v_b, a, KV * D, hid);
            /* Keys are kept rotated at their true position t; nothing re-rotates them
             * when other tokens are evicted. */
            for (int32_t h = 0; h < H; h++)
                rope(qi + (int64_t)h * D, t, D, theta);
            for (int32_t h = 0; h < KV; h++)
                rope(ki + (int64_t)h * D, t, D, theta);
            for (int32_t k = 0; k < qw; k++)
                qi[k] *= scale;
        }
        for (int32_t h = 0; h < KV; h++)
            for (int32_t i = 0; i < n; i++) {
                run->kept[h2o_ref_head_index(run, c, l, h) + pos0 + i] = true;
                run->score[h2o_ref_head_index(run, c, l, h) + pos0 + i] = 0.0f;
            }
        /* Query head h reads KV head h / rep (HF's repeat_kv). */
        for (int32_t i = 0; i < n; i++)
            for (int32_t h = 0; h < H; h++)
                h2o_ref_attend(run, c, l, h / rep, pos0 + i,
                               q + (int64_t)i * qw + (int64_t)h * D,
                               ctx + (int64_t)i * qw + (int64_t)h * D);
        if (!pol.full)
            for (int32_t h = 0; h < KV; h++)
                h2o_ref_evict(run, c, l, h, pos0, n, pol);
        for (int32_t i = 0; i < n; i++) {
            float *xi = x + (int64_t)i * hid;
            h2o_ref_linear(o, L->o_w, NULL, ctx + (int64_t)i * qw, hid, qw);
            for (int32_t k = 0; k < hid; k++)
                xi[k] += o[k];
            /* SwiGLU: down(silu(gate(x)) * up(x)). */
            rms_norm(a, xi, L->ffn_ln_w, eps, hid);
            h2o_ref_linear(g, L->gate_w, NULL, a, f, hid);
            h2o_ref_linear(u, L->up_w, NULL, a, f, hid);
            for (int32_t k = 0; k < f; k++)
                g[k] = (float)((double)g[k] / (1.0 + exp(-(double)g[k])) * u[k]);
            h2o_ref_linear(o, L->fc2_w, NULL, g, hid, f);
            for (int32_t k = 0; k < hid; k++)
                xi[k] += o[k];
        }
    }
    float *xl = x + (int64_t)(n - 1) * hid;
    rms_norm(xl, xl, r->final_ln_w, eps, hid);
    h2o_ref_linear(logits, r->lm_head, NULL, xl, c->vocab_size, hid);
    free(x);
    free(a);
    free(q);
    free(ctx);
    free(g);
    free(u);
    free(o);
}

/* ---- GPT-NeoX's forward (HF GPTNeoXLayer) ---- */

void h2o_ref_forward_neox(const struct h2o_ref *r, struct ref_run *run,
                          const int32_t *tokens, int32_t n, int32_t pos0,
                          struct h2o_ref_policy pol, float *logits)
{
    const struct opt_config *c = &r->cfg;
    const int32_t hid = c->hidden, D = c->head_dim, H = c->n_head, f = c->ffn;
    const int32_t qw = H * D, rot = c->arch.rope.dims;
    const double eps = c->arch.norm_eps, theta = c->arch.rope.theta;
    float *x = xmalloc((size_t)n * hid * sizeof *x);    // [n, hidden] the residual stream
    float *a = xmalloc((size_t)hid * sizeof *a);        // [hidden] normed input
    float *qkv = xmalloc((size_t)3 * qw * sizeof *qkv); // [n_head, 3, head_dim]
    float *q = xmalloc((size_t)n * qw * sizeof *q);     // [n, n_head, head_dim]
    float *ctx = xmalloc((size_t)n * qw * sizeof *ctx); // [n, n_head, head_dim]
    float *g = xmalloc((size_t)f * sizeof *g);
    float *o = xmalloc((size_t)hid * sizeof *o), *m = xmalloc((size_t)hid * sizeof *m);
    for (int32_t i = 0; i < n; i++)
        memcpy(x + (int64_t)i * hid, r->embed_tokens + (int64_t)tokens[i] * hid,
               (size_t)hid * sizeof *x);
    const float scale = 1.0f / sqrtf((float)D);
    for (int32_t l = 0; l < c->n_layer; l++) {
        const struct ref_layer *L = &r->layers[l];
        for (int32_t i = 0; i < n; i++) {
            const int32_t t = pos0 + i;
            h2o_ref_layer_norm(a, x + (int64_t)i * hid, L->attn_ln_w, L->attn_ln_b, eps,
                               hid);
            h2o_ref_linear(qkv, L->q_w, L->q_b, a, 3 * qw, hid);
            for (int32_t h = 0; h < H; h++) {
                float *qh = q + (int64_t)i * qw + (int64_t)h * D;
                float *kh = run->k + h2o_ref_kv_index(run, c, l, t, h);
                float *vh = run->v + h2o_ref_kv_index(run, c, l, t, h);
                memcpy(qh, qkv + (int64_t)(3 * h) * D, (size_t)D * sizeof *qh);
                memcpy(kh, qkv + (int64_t)(3 * h + 1) * D, (size_t)D * sizeof *kh);
                memcpy(vh, qkv + (int64_t)(3 * h + 2) * D, (size_t)D * sizeof *vh);
                /* Partial rotary: the first rot dims of the head only. */
                rope(qh, t, rot, theta);
                rope(kh, t, rot, theta);
                for (int32_t k = 0; k < D; k++)
                    qh[k] *= scale;
            }
        }
        for (int32_t h = 0; h < H; h++)
            for (int32_t i = 0; i < n; i++) {
                run->kept[h2o_ref_head_index(run, c, l, h) + pos0 + i] = true;
                run->score[h2o_ref_head_index(run, c, l, h) + pos0 + i] = 0.0f;
            }
        for (int32_t i = 0; i < n; i++)
            for (int32_t h = 0; h < H; h++)
                h2o_ref_attend(run, c, l, h, pos0 + i, q + (int64_t)i * qw + (int64_t)h * D,
                               ctx + (int64_t)i * qw + (int64_t)h * D);
        if (!pol.full)
            for (int32_t h = 0; h < H; h++)
                h2o_ref_evict(run, c, l, h, pos0, n, pol);
        for (int32_t i = 0; i < n; i++) {
            float *xi = x + (int64_t)i * hid;
            h2o_ref_linear(o, L->o_w, L->o_b, ctx + (int64_t)i * qw, hid, qw);
            /* Parallel residual: the MLP reads LN2 of the same x as the attention. */
            if (!c->arch.parallel_residual)
                for (int32_t k = 0; k < hid; k++)
                    xi[k] += o[k];
            h2o_ref_layer_norm(a, xi, L->ffn_ln_w, L->ffn_ln_b, eps, hid);
            h2o_ref_linear(g, L->fc1_w, L->fc1_b, a, f, hid);
            for (int32_t k = 0; k < f; k++)
                g[k] = (float)(0.5 * g[k] * (1.0 + erf((double)g[k] / sqrt(2.0))));
            h2o_ref_linear(m, L->fc2_w, L->fc2_b, g, hid, f);
            for (int32_t k = 0; k < hid; k++)
                xi[k] += m[k] + (c->arch.parallel_residual ? o[k] : 0.0f);
        }
    }
    float *xl = x + (int64_t)(n - 1) * hid;
    h2o_ref_layer_norm(xl, xl, r->final_ln_w, r->final_ln_b, eps, hid);
    h2o_ref_linear(logits, r->lm_head, NULL, xl, c->vocab_size, hid);
    free(x);
    free(a);
    free(qkv);
    free(q);
    free(ctx);
    free(g);
    free(o);
    free(m);
}
