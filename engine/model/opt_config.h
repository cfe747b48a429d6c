/*
 * opt_config.h - the OPT model configuration (Hugging Face config.json semantics).
 *
 * One struct describes every OPT size: OPT-350m's quirks are word_embed_proj_dim !=
 * hidden (project_in / project_out) and ln_before == false (post-LN, no final layer
 * norm).
 */
#ifndef H2O_OPT_CONFIG_H
#define H2O_OPT_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

struct opt_config {
    char name[64];               /* "opt-125m", "dummy:tiny", or the folder name */
    int32_t vocab_size;          /* rows of the token embedding (50272 for OPT) */
    int32_t hidden;              /* hidden_size */
    int32_t n_layer;             /* num_hidden_layers */
    int32_t n_head;              /* num_attention_heads */
    int32_t head_dim;            /* hidden / n_head */
    int32_t ffn;                 /* ffn_dim */
    int32_t max_pos;             /* max_position_embeddings (table has max_pos + 2 rows) */
    int32_t word_embed_proj_dim; /* == hidden unless project_in/out exist */
    bool ln_before;              /* do_layer_norm_before; false = post-LN */
    bool tied_lm_head;           /* true when lm_head is the token embedding */
    int32_t bos_id, eos_id, pad_id;
};

/*
 * Parse `dir`/config.json into `cfg`. Checks the fields OPT needs (activation relu,
 * hidden divisible by heads, positive sizes). Returns 0, or ENG_EIO / ENG_EFORMAT
 * with a one-line message naming the file and field.
 * Thread: any.
 */
int opt_config_load(struct opt_config *cfg, const char *dir);

/*
 * The config of a built-in dummy model: "dummy:opt-125m" ... "dummy:opt-66b",
 * "dummy:tiny". Returns 0 or ENG_ENOTFOUND.
 * Thread: any.
 */
int opt_config_dummy(struct opt_config *cfg, const char *name);

#endif
