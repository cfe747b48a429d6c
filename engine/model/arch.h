/*
 * arch.h - what the forward pass needs to know about a model family, in one place.
 *
 * A `struct model_arch` is a description, not code: the kind of norm, MLP, position
 * encoding and residual, the q/k/v layout and its biases, the rotary parameters, the
 * sliding window, and the tensor names of the family's checkpoints. The backends read
 * these fields (cpu_rank.c, shard.c) and never ask which family a model is, so a new
 * family that fits the same pieces is one table row plus its config.json reader here.
 *
 * Families (Hugging Face semantics, transformers 4.46):
 * - OPTForCausalLM: LayerNorm with bias (eps 1e-5), fc1 -> ReLU -> fc2 with biases,
 *   learned positions at position + 2, q/k/v/out with bias, sequential residual.
 * - LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM: RMSNorm (rms_norm_eps),
 *   SwiGLU (down(silu(gate) * up), no bias), rotary on the whole head (rope_theta,
 *   rope_scaling linear or llama3), grouped-query attention (num_key_value_heads),
 *   no biases except Qwen2's q/k/v (and Llama's attention_bias / mlp_bias when set),
 *   Mistral's sliding_window.
 * - GPTNeoXForCausalLM: LayerNorm with bias (layer_norm_eps), fc -> GELU -> fc with
 *   biases, rotary on the first rotary_pct of each head, one fused query_key_value
 *   whose rows are [head][q|k|v][head_dim], parallel residual when
 *   use_parallel_residual (x + attn(ln1(x)) + mlp(ln2(x))).
 * Rotary layout: every family here rotates halves, as HF's rotate_half does: within
 * the rotary dims r of a head, element i pairs with i + r/2 (HF's Llama weights are
 * already permuted from Meta's interleaved pairs into this layout). There is no
 * interleaved (GPT-J) family, so there is no layout switch to get wrong.
 *
 * Thread: any; everything here is pure or reads one JSON tree.
 */
#ifndef H2O_ARCH_H
#define H2O_ARCH_H

#include <stdbool.h>
#include <stdint.h>

enum arch_family { ARCH_OPT, ARCH_LLAMA, ARCH_MISTRAL, ARCH_QWEN2, ARCH_GPT_NEOX };

enum arch_norm {
    ARCH_NORM_LAYERNORM, /* (x - mean) / sqrt(var + eps) * w + b */
    ARCH_NORM_RMSNORM,   /* x / sqrt(mean(x^2) + eps) * w, no bias */
};

enum arch_mlp {
    ARCH_MLP_FC,     /* fc2(act(fc1(x))), with biases when mlp_bias */
    ARCH_MLP_SWIGLU, /* down(silu(gate(x)) * up(x)) */
};

enum arch_act {
    ARCH_ACT_RELU,
    ARCH_ACT_GELU,      /* exact: x * (1 + erf(x / sqrt 2)) / 2 (HF "gelu") */
    ARCH_ACT_GELU_TANH, /* HF "gelu_new", "gelu_pytorch_tanh", "gelu_fast" */
    ARCH_ACT_SILU,      /* SwiGLU's gate */
};

enum arch_pos {
    ARCH_POS_LEARNED, /* a [max_pos + pos_offset, hidden] table added to the embedding */
    ARCH_POS_ROTARY,  /* q and k rotated at their true positions before caching */
};

enum arch_qkv {
    ARCH_QKV_SEPARATE,    /* q_proj, k_proj, v_proj */
    ARCH_QKV_FUSED_HEADS, /* one [(n_head * 3) * head_dim, hidden], rows [head][q|k|v][d] */
};

enum arch_rope_scaling { ARCH_ROPE_NONE, ARCH_ROPE_LINEAR, ARCH_ROPE_LLAMA3 };

struct arch_rope {
    float theta;  /* rope_theta (NeoX: rotary_emb_base) */
    int32_t dims; /* rotary dims of a head: head_dim, or head_dim * rotary_pct (NeoX) */
    enum arch_rope_scaling scaling;
    float factor;             /* linear and llama3 */
    float low_freq_factor;    /* llama3 */
    float high_freq_factor;   /* llama3 */
    int32_t original_max_pos; /* llama3: original_max_position_embeddings */
};

/* Tensor names without the checkpoint's prefix (weights.h strips model.decoder.,
 * decoder., model. and gpt_neox.); the per-layer ones follow "layers.N.". NULL where
 * the family has no such tensor. */
struct arch_names {
    const char *embed, *pos_embed, *final_norm, *lm_head;
    const char *q, *k, *v, *qkv, *o;
    const char *ln1, *ln2;        /* before attention, before the MLP */
    const char *fc1, *fc2;        /* ARCH_MLP_FC */
    const char *gate, *up, *down; /* ARCH_MLP_SWIGLU */
};

struct model_arch {
    enum arch_family family;
    const char *hf_name; /* "LlamaForCausalLM", ... */
    enum arch_norm norm;
    float norm_eps;
    enum arch_mlp mlp;
    enum arch_act act;
    enum arch_pos pos;
    int32_t pos_offset; /* learned: OPT looks positions up at position + 2 */
    struct arch_rope rope;
    enum arch_qkv qkv;
    bool qkv_bias, o_bias, mlp_bias;
    bool parallel_residual;
    bool final_norm; /* OPT post-LN has none */
    /* Mistral: a query at position t sees keys at positions t - W + 1 .. t (W tokens,
     * itself included); 0 = no window. docs/kv-cache.md composes it with H2O. */
    int32_t sliding_window;
    const struct arch_names *names;
};

/* The description of a family with its defaults (what transformers' config class
 * sets when a config.json leaves a field out). */
void arch_defaults(struct model_arch *a, enum arch_family f);

/* The family of a config.json's "architectures"[0] (or "model_type" when that is
 * missing): 0, or -1 for a name this build does not serve. Thread: any. */
int arch_family_from_name(const char *name, enum arch_family *out);

/*
 * The rotary inverse frequencies of a: inv_freq[i] for i < dims / 2, fp32 as HF
 * computes them (theta^(-2i / dims), then the scaling). The angle of position p is
 * (float)p * inv_freq[i]. Thread: any.
 */
void arch_rope_inv_freq(const struct arch_rope *r, float *inv_freq);

/* A short description for logs and error messages ("llama: rmsnorm, swiglu, rope"). */
const char *arch_family_name(enum arch_family f);

#endif
