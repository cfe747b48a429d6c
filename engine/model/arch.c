/*
 * arch.c - the family table and the rotary frequencies (see arch.h).
 *
 * Owns nothing: the tables are constant. A family's defaults are those of its
 * transformers config class, so that a config.json that leaves a field out means
 * what it means to transformers.
 */
#include "arch.h"

#include "util.h"

#include <math.h>
#include <string.h>

static const struct arch_names opt_names = {
    .embed = "embed_tokens",
    .pos_embed = "embed_positions",
    .final_norm = "final_layer_norm",
    .lm_head = "lm_head",
    .q = "self_attn.q_proj",
    .k = "self_attn.k_proj",
    .v = "self_attn.v_proj",
    .o = "self_attn.out_proj",
    .ln1 = "self_attn_layer_norm",
    .ln2 = "final_layer_norm",
    .fc1 = "fc1",
    .fc2 = "fc2",
};

/* Llama, Mistral and Qwen2 checkpoints spell their tensors the same way. */
static const struct arch_names llama_names = {
    .embed = "embed_tokens",
    .final_norm = "norm",
    .lm_head = "lm_head",
    .q = "self_attn.q_proj",
    .k = "self_attn.k_proj",
    .v = "self_attn.v_proj",
    .o = "self_attn.o_proj",
    .ln1 = "input_layernorm",
    .ln2 = "post_attention_layernorm",
    .gate = "mlp.gate_proj",
    .up = "mlp.up_proj",
    .down = "mlp.down_proj",
};

static const struct arch_names neox_names = {
    .embed = "embed_in",
    .final_norm = "final_layer_norm",
    .lm_head = "embed_out",
    .qkv = "attention.query_key_value",
    .o = "attention.dense",
    .ln1 = "input_layernorm",
    .ln2 = "post_attention_layernorm",
    .fc1 = "mlp.dense_h_to_4h",
    .fc2 = "mlp.dense_4h_to_h",
};

static const struct {
    const char *hf, *model_type;
    enum arch_family family;
} families[] = {
    {"OPTForCausalLM", "opt", ARCH_OPT},
    {"LlamaForCausalLM", "llama", ARCH_LLAMA},
    {"MistralForCausalLM", "mistral", ARCH_MISTRAL},
    {"Qwen2ForCausalLM", "qwen2", ARCH_QWEN2},
    {"GPTNeoXForCausalLM", "gpt_neox", ARCH_GPT_NEOX},
};

int arch_family_from_name(const char *name, enum arch_family *out)
{
    for (size_t i = 0; i < ARRAY_LEN(families); i++)
        if (strcmp(name, families[i].hf) == 0 ||
            strcmp(name, families[i].model_type) == 0) {
            *out = families[i].family;
            return 0;
        }
    return -1;
}

const char *arch_family_name(enum arch_family f)
{
    for (size_t i = 0; i < ARRAY_LEN(families); i++)
        if (families[i].family == f) return families[i].hf;
    return "?";
}

void arch_defaults(struct model_arch *a, enum arch_family f)
{
    memset(a, 0, sizeof *a);
    a->family = f;
    a->hf_name = arch_family_name(f);
    a->final_norm = true;
    a->rope.theta = 10000.0f;
    switch (f) {
    case ARCH_OPT:
        *a = (struct model_arch){.family = f,
                                 .hf_name = a->hf_name,
                                 .norm = ARCH_NORM_LAYERNORM,
                                 .norm_eps = 1e-5f,
                                 .mlp = ARCH_MLP_FC,
                                 .act = ARCH_ACT_RELU,
                                 .pos = ARCH_POS_LEARNED,
                                 .pos_offset = 2,
                                 .qkv = ARCH_QKV_SEPARATE,
                                 .qkv_bias = true,
                                 .o_bias = true,
                                 .mlp_bias = true,
                                 .final_norm = true,
                                 .names = &opt_names};
        break;
    case ARCH_LLAMA:
    case ARCH_MISTRAL:
    case ARCH_QWEN2:
        a->norm = ARCH_NORM_RMSNORM;
        a->norm_eps = 1e-6f;
        a->mlp = ARCH_MLP_SWIGLU;
        a->act = ARCH_ACT_SILU;
        a->pos = ARCH_POS_ROTARY;
        a->qkv = ARCH_QKV_SEPARATE;
        /* Qwen2's attention has q/k/v biases and no o bias, fixed in its code. */
        a->qkv_bias = f == ARCH_QWEN2;
        a->names = &llama_names;
        break;
    case ARCH_GPT_NEOX:
        a->norm = ARCH_NORM_LAYERNORM;
        a->norm_eps = 1e-5f;
        a->mlp = ARCH_MLP_FC;
        a->act = ARCH_ACT_GELU;
        a->pos = ARCH_POS_ROTARY;
        a->qkv = ARCH_QKV_FUSED_HEADS;
        a->qkv_bias = a->o_bias = a->mlp_bias = true;
        a->parallel_residual = true;
        a->names = &neox_names;
        break;
    }
}

void arch_rope_inv_freq(const struct arch_rope *r, float *inv_freq)
{
    const int32_t half = r->dims / 2;
    for (int32_t i = 0; i < half; i++) {
        /* HF: 1 / base ** (arange(0, dim, 2).float() / dim), in fp32. */
        float e = (float)(2 * i) / (float)r->dims;
        float f = 1.0f / powf(r->theta, e);
        if (r->scaling == ARCH_ROPE_LINEAR) {
            f /= r->factor;
        } else if (r->scaling == ARCH_ROPE_LLAMA3) {
            /* transformers' _compute_llama3_parameters: long wavelengths (low
             * frequencies) are slowed by `factor`, short ones kept, and the band in
             * between blends the two smoothly. */
            const float old = (float)r->original_max_pos;
            const float low_wl = old / r->low_freq_factor,
                        high_wl = old / r->high_freq_factor;
            const float wl = 2.0f * (float)M_PI / f;
            float g = wl > low_wl ? f / r->factor : f;
            if (!(wl < high_wl) && !(wl > low_wl)) {
                float s = (old / wl - r->low_freq_factor) /
                          (r->high_freq_factor - r->low_freq_factor);
                g = (1.0f - s) * g / r->factor + s * g;
            }
            f = g;
        }
        inv_freq[i] = f;
    }
}
