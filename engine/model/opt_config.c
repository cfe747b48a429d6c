/*
 * opt_config.c - OPT configurations: Hugging Face config.json and the built-in
 * dummy sizes (see opt_config.h).
 *
 * Owns nothing past a call: the JSON tree lives only while one file is parsed.
 * Invariant: a config this file returns is usable as is: sizes positive, hidden
 * divisible by the heads, special token ids inside the vocabulary.
 */
#include "opt_config.h"

#include "err.h"
#include "util.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sizes beyond these are typos or hostile files, and would overflow later products. */
#define MAX_DIM (1 << 20)
#define MAX_VOCAB (1 << 24)

struct dummy_size {
    const char *name;
    int32_t n_layer, hidden, n_head, ffn, proj;
    bool ln_before;
};

/* REFERENCE section 5; all use the 50272-token vocabulary and 2048 positions. */
static const struct dummy_size dummy_sizes[] = {
    {"dummy:opt-125m", 12, 768, 12, 3072, 768, true},
    {"dummy:opt-350m", 24, 1024, 16, 4096, 512, false},
    {"dummy:opt-1.3b", 24, 2048, 32, 8192, 2048, true},
    {"dummy:opt-2.7b", 32, 2560, 32, 10240, 2560, true},
    {"dummy:opt-6.7b", 32, 4096, 32, 16384, 4096, true},
    {"dummy:opt-13b", 40, 5120, 40, 20480, 5120, true},
    {"dummy:opt-30b", 48, 7168, 56, 28672, 7168, true},
    {"dummy:opt-66b", 64, 9216, 72, 36864, 9216, true},
    /* Small enough for unit tests; the byte-level tokenizer needs vocab >= 260. */
    {"dummy:tiny", 2, 64, 4, 256, 64, true},
};

int opt_config_dummy(struct opt_config *cfg, const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(dummy_sizes); i++) {
        const struct dummy_size *d = &dummy_sizes[i];
        if (strcmp(name, d->name) != 0) continue;
        *cfg = (struct opt_config){
            .vocab_size = strcmp(name, "dummy:tiny") == 0 ? 512 : 50272,
            .hidden = d->hidden,
            .n_layer = d->n_layer,
            .n_head = d->n_head,
            .head_dim = d->hidden / d->n_head,
            .ffn = d->ffn,
            .max_pos = 2048,
            .word_embed_proj_dim = d->proj,
            .ln_before = d->ln_before,
            .tied_lm_head = true,
            .bos_id = 2,
            .eos_id = 2,
            .pad_id = 1,
        };
        snprintf(cfg->name, sizeof cfg->name, "%s", name);
        return 0;
    }
    return err_set(ENG_ENOTFOUND,
                   "%s: no such dummy model (dummy:opt-125m ... dummy:opt-66b, "
                   "dummy:tiny)",
                   name);
}

/*
 * Read integer field `key` into *out. An absent or null optional field keeps *out.
 * Returns 0 or ENG_EFORMAT naming the file and field.
 */
static int get_int(const cJSON *root, const char *path, const char *key, bool required,
                   int32_t lo, int32_t hi, int32_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return err_set(ENG_EFORMAT, "%s: missing field \"%s\"", path, key);
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return err_set(ENG_EFORMAT, "%s: field \"%s\" must be an integer", path, key);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return err_set(ENG_EFORMAT, "%s: field \"%s\" is %.0f, outside [%d, %d]", path, key,
                       v->valuedouble, lo, hi);
    *out = (int32_t)v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *root, const char *path, const char *key, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v))
        return err_set(ENG_EFORMAT, "%s: field \"%s\" must be true or false", path, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* An optional string field that must equal `want` when present. */
static int expect_str(const cJSON *root, const char *path, const char *key,
                      const char *want, int code)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v))
        return err_set(ENG_EFORMAT, "%s: field \"%s\" must be a string", path, key);
    if (strcmp(v->valuestring, want) != 0)
        return err_set(code, "%s: field \"%s\" is \"%s\"; only \"%s\" is supported", path,
                       key, v->valuestring, want);
    return 0;
}

/* The folder's last path component, trailing slashes ignored; "." and ".." are
 * resolved first so that running from inside the model folder still names it. */
static void set_name(struct opt_config *cfg, const char *dir)
{
    char *real = NULL;
    size_t end = strlen(dir);
    while (end > 1 && dir[end - 1] == '/')
        end--;
    size_t start = end;
    while (start > 0 && dir[start - 1] != '/')
        start--;
    if ((end - start == 1 && dir[start] == '.') ||
        (end - start == 2 && dir[start] == '.' && dir[start + 1] == '.')) {
        if ((real = realpath(dir, NULL))) {
            dir = real;
            end = strlen(dir);
            start = end;
            while (start > 0 && dir[start - 1] != '/')
                start--;
        }
    }
    int n = (int)MIN(end - start, sizeof cfg->name - 1);
    snprintf(cfg->name, sizeof cfg->name, "%.*s", n, dir + start);
    free(real);
}

static int parse(struct opt_config *cfg, const cJSON *root, const char *path)
{
    int err;
    /* OPT's published configs; the defaults are those of transformers' OPTConfig. */
    if ((err = get_int(root, path, "hidden_size", true, 1, MAX_DIM, &cfg->hidden)) ||
        (err = get_int(root, path, "num_hidden_layers", true, 1, 4096, &cfg->n_layer)) ||
        (err =
             get_int(root, path, "num_attention_heads", true, 1, MAX_DIM, &cfg->n_head)) ||
        (err = get_int(root, path, "ffn_dim", true, 1, MAX_DIM, &cfg->ffn)) ||
        (err = get_int(root, path, "vocab_size", true, 1, MAX_VOCAB, &cfg->vocab_size)) ||
        (err = get_int(root, path, "max_position_embeddings", true, 1, MAX_DIM,
                       &cfg->max_pos)))
        return err;
    cfg->word_embed_proj_dim = cfg->hidden;
    cfg->ln_before = true;
    cfg->tied_lm_head = true;
    cfg->bos_id = 2;
    cfg->eos_id = 2;
    cfg->pad_id = 1;
    int32_t last = cfg->vocab_size - 1;
    if ((err = get_int(root, path, "word_embed_proj_dim", false, 1, MAX_DIM,
                       &cfg->word_embed_proj_dim)) ||
        (err = get_bool(root, path, "do_layer_norm_before", &cfg->ln_before)) ||
        (err = get_bool(root, path, "tie_word_embeddings", &cfg->tied_lm_head)) ||
        (err = get_int(root, path, "bos_token_id", false, 0, last, &cfg->bos_id)) ||
        (err = get_int(root, path, "eos_token_id", false, 0, last, &cfg->eos_id)) ||
        (err = get_int(root, path, "pad_token_id", false, 0, last, &cfg->pad_id)) ||
        (err = expect_str(root, path, "activation_function", "relu", ENG_EUNSUPPORTED)) ||
        (err = expect_str(root, path, "model_type", "opt", ENG_EUNSUPPORTED)))
        return err;
    if (cfg->hidden % cfg->n_head)
        return err_set(ENG_EFORMAT,
                       "%s: field \"hidden_size\" (%d) is not divisible by "
                       "\"num_attention_heads\" (%d)",
                       path, cfg->hidden, cfg->n_head);
    cfg->head_dim = cfg->hidden / cfg->n_head;
    /* Checkpoints without biases or LayerNorm affine parameters (enable_bias false and
     * friends) would need a different forward pass. */
    bool flag = true;
    if ((err = get_bool(root, path, "enable_bias", &flag))) return err;
    if (!flag)
        return err_set(ENG_EUNSUPPORTED, "%s: field \"enable_bias\" false is not supported",
                       path);
    if ((err = get_bool(root, path, "layer_norm_elementwise_affine", &flag))) return err;
    if (!flag)
        return err_set(ENG_EUNSUPPORTED,
                       "%s: field \"layer_norm_elementwise_affine\" false is not supported",
                       path);
    return 0;
}

int opt_config_load(struct opt_config *cfg, const char *dir)
{
    char *path = util_path_join(dir, "config.json"), *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    int err = util_read_file(path, &text, &len);
    if (err) goto out;
    /* The parse end, unlike cJSON_GetErrorPtr, is not a global: safe from any thread. */
    const char *end = text;
    root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root) {
        err = err_set(ENG_EFORMAT, "%s: not valid JSON (near byte %zu)", path,
                      (size_t)(end - text));
    } else if (!cJSON_IsObject(root)) {
        err = err_set(ENG_EFORMAT, "%s: not a JSON object", path);
    } else {
        struct opt_config c = {0};
        err = parse(&c, root, path);
        if (!err) {
            set_name(&c, dir);
            *cfg = c;
        }
    }
out:
    cJSON_Delete(root);
    free(text);
    free(path);
    return err;
}
