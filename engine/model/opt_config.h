/*
 * opt_config.h - a model's configuration (Hugging Face config.json semantics): the
 * sizes, and the family's description (arch.h) that the forward reads.
 *
 * The name is historical: OPT was the first family. One struct describes every OPT
 * size (OPT-350m's quirks are word_embed_proj_dim != hidden, i.e. project_in /
 * project_out, and ln_before == false, post-LN with no final layer norm) and every
 * Llama, Mistral, Qwen2 and GPT-NeoX checkpoint (arch.h says what they need).
 */
#ifndef H2O_OPT_CONFIG_H
#define H2O_OPT_CONFIG_H

#include "arch.h"

#include <stdbool.h>
#include <stdint.h>

struct opt_config {
    char name[64];               /* "opt-125m", "dummy:tiny", or the folder name */
    int32_t vocab_size;          /* rows of the token embedding (50272 for OPT) */
    int32_t hidden;              /* hidden_size */
    int32_t n_layer;             /* num_hidden_layers */
    int32_t n_head;              /* num_attention_heads (query heads) */
    /* num_key_value_heads: the KV heads, which the cache, the H2O budget and the
     * eviction are per (grouped-query attention; == n_head without GQA, always for
     * OPT and NeoX). Query head h reads KV head h / (n_head / n_kv_head). */
    int32_t n_kv_head;
    int32_t head_dim;            /* hidden / n_head, or config.json's head_dim */
    int32_t ffn;                 /* ffn_dim / intermediate_size */
    int32_t max_pos;             /* max_position_embeddings (OPT's table has + 2 rows) */
    int32_t word_embed_proj_dim; /* == hidden unless project_in/out exist */
    bool ln_before;              /* do_layer_norm_before; false = post-LN */
    bool tied_lm_head;           /* true when lm_head is the token embedding */
    int32_t bos_id, eos_id, pad_id; /* eos_id: the first when config.json lists several */
    struct model_arch arch;         /* what the forward needs (arch.h) */
};

/*
 * Parse `dir`/config.json into `cfg`: OPTForCausalLM, LlamaForCausalLM,
 * MistralForCausalLM, Qwen2ForCausalLM or GPTNeoXForCausalLM (by "architectures",
 * else "model_type"). Checks the fields the family needs (positive sizes, heads
 * dividing hidden and the KV heads dividing the heads, a known activation and
 * rope_scaling type). Returns 0, or ENG_EIO / ENG_EFORMAT, or ENG_EUNSUPPORTED for
 * a family or value this build does not run (an unknown activation or rope_scaling
 * type, Qwen2's use_sliding_window), with a one-line message naming the file and
 * field.
 * Thread: any.
 */
int opt_config_load(struct opt_config *cfg, const char *dir);

/*
 * The config of a built-in dummy model: "dummy:opt-125m" ... "dummy:opt-66b",
 * "dummy:tiny", and the real shapes of other families ("dummy:llama-3-8b",
 * "dummy:llama-2-7b", "dummy:qwen2-7b", "dummy:gpt-neox-20b", "dummy:tinyllama-1.1b",
 * "dummy:llama-tiny"). Returns 0 or ENG_ENOTFOUND.
 * Thread: any.
 */
int opt_config_dummy(struct opt_config *cfg, const char *name);

/* Parameters of one decoder layer (q/k/v/o with the KV heads, the MLP's two or
 * three matrices, biases and norms), and of the whole model (embeddings, learned
 * positions, the LM head counted once when tied). For reports. Thread: any. */
int64_t opt_config_layer_params(const struct opt_config *cfg);
int64_t opt_config_param_count(const struct opt_config *cfg);

#endif
