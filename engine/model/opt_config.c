/*
 * opt_config.c - model configurations: Hugging Face config.json of every family
 * arch.h describes, and the built-in dummy sizes (see opt_config.h).
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

/* Other families' dummies: the published configs' shapes. */
struct dummy_arch {
    const char *name;
    enum arch_family family;
    int32_t n_layer, hidden, n_head, n_kv_head, ffn, vocab, max_pos;
    float theta, rotary_pct;
    bool tied;
};

static const struct dummy_arch dummy_archs[] = {
    {"dummy:llama-3-8b", ARCH_LLAMA, 32, 4096, 32, 8, 14336, 128256, 8192, 500000.0f, 1.0f,
     false},
    {"dummy:llama-2-7b", ARCH_LLAMA, 32, 4096, 32, 32, 11008, 32000, 4096, 10000.0f, 1.0f,
     false},
    {"dummy:qwen2-7b", ARCH_QWEN2, 28, 3584, 28, 4, 18944, 152064, 32768, 1000000.0f, 1.0f,
     false},
    {"dummy:gpt-neox-20b", ARCH_GPT_NEOX, 44, 6144, 64, 64, 24576, 50432, 2048, 10000.0f,
     0.25f, false},
    {"dummy:tinyllama-1.1b", ARCH_LLAMA, 22, 2048, 32, 4, 5632, 32000, 2048, 10000.0f, 1.0f,
     false},
    /* Small enough for this machine's tests: GQA 4 : 2, head_dim 32. */
    {"dummy:llama-tiny", ARCH_LLAMA, 2, 128, 4, 2, 256, 512, 2048, 10000.0f, 1.0f, false},
};

static void dummy_arch_config(struct opt_config *cfg, const struct dummy_arch *d)
{
    *cfg = (struct opt_config){
        .vocab_size = d->vocab,
        .hidden = d->hidden,
        .n_layer = d->n_layer,
        .n_head = d->n_head,
        .n_kv_head = d->n_kv_head,
        .head_dim = d->hidden / d->n_head,
        .ffn = d->ffn,
        .max_pos = d->max_pos,
        .word_embed_proj_dim = d->hidden,
        .ln_before = true,
        .tied_lm_head = d->tied,
        .bos_id = 1,
        .eos_id = 2,
        .pad_id = 0,
    };
    arch_defaults(&cfg->arch, d->family);
    cfg->arch.rope.theta = d->theta;
    cfg->arch.rope.dims = (int32_t)((float)cfg->head_dim * d->rotary_pct);
    if (d->family != ARCH_GPT_NEOX) cfg->arch.norm_eps = 1e-5f;
    if (strcmp(d->name, "dummy:llama-3-8b") == 0) {
        /* Llama 3.1 8B's rope_scaling. */
        cfg->arch.rope.scaling = ARCH_ROPE_LLAMA3;
        cfg->arch.rope.factor = 8.0f;
        cfg->arch.rope.low_freq_factor = 1.0f;
        cfg->arch.rope.high_freq_factor = 4.0f;
        cfg->arch.rope.original_max_pos = 8192;
    }
    snprintf(cfg->name, sizeof cfg->name, "%s", d->name);
}

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
    for (size_t i = 0; i < ARRAY_LEN(dummy_archs); i++)
        if (strcmp(name, dummy_archs[i].name) == 0) {
            dummy_arch_config(cfg, &dummy_archs[i]);
            return 0;
        }
    for (size_t i = 0; i < ARRAY_LEN(dummy_sizes); i++) {
        const struct dummy_size *d = &dummy_sizes[i];
        if (strcmp(name, d->name) != 0) continue;
        *cfg = (struct opt_config){
            .vocab_size = strcmp(name, "dummy:tiny") == 0 ? 512 : 50272,
            .hidden = d->hidden,
            .n_layer = d->n_layer,
            .n_head = d->n_head,
            .n_kv_head = d->n_head,
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
        arch_defaults(&cfg->arch, ARCH_OPT);
        cfg->arch.final_norm = d->ln_before;
        snprintf(cfg->name, sizeof cfg->name, "%s", name);
        return 0;
    }
    return err_set(ENG_ENOTFOUND,
                   "%s: no such dummy model (dummy:opt-125m ... dummy:opt-66b, "
                   "dummy:tiny, dummy:llama-3-8b, dummy:llama-2-7b, dummy:qwen2-7b, "
                   "dummy:gpt-neox-20b, dummy:tinyllama-1.1b, dummy:llama-tiny)",
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

static int get_token_id(const cJSON *root, const char *path, const char *key, int32_t last,
                        int32_t *out);

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

static int parse_opt(struct opt_config *cfg, const cJSON *root, const char *path)
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
        (err = get_token_id(root, path, "eos_token_id", last, &cfg->eos_id)) ||
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
    cfg->n_kv_head = cfg->n_head;
    arch_defaults(&cfg->arch, ARCH_OPT);
    cfg->arch.final_norm = cfg->ln_before;
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

/* A number field (integer or not) into *out; absent or null keeps *out. */
static int get_float(const cJSON *root, const char *path, const char *key, double lo,
                     double hi, float *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v))
        return err_set(ENG_EFORMAT, "%s: field \"%s\" must be a number", path, key);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return err_set(ENG_EFORMAT, "%s: field \"%s\" is %g, outside [%g, %g]", path, key,
                       v->valuedouble, lo, hi);
    *out = (float)v->valuedouble;
    return 0;
}

/* A token id that may be a list (Llama 3's eos_token_id [128001, 128009]): the first
 * one. Every id ending generation is the tokenizer's business (tokenizer_config.json
 * and generation_config.json); the config keeps one. */
static int get_token_id(const cJSON *root, const char *path, const char *key, int32_t last,
                        int32_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (cJSON_IsArray(v)) v = cJSON_GetArrayItem(v, 0);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        !(v->valuedouble >= 0 && v->valuedouble <= last))
        return err_set(ENG_EFORMAT, "%s: field \"%s\" must be a token id in [0, %d]", path,
                       key, last);
    *out = (int32_t)v->valuedouble;
    return 0;
}

/* A string field, or NULL when absent or null; ENG_EFORMAT when not a string. */
static int get_str(const cJSON *root, const char *path, const char *key, const char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v))
        return err_set(ENG_EFORMAT, "%s: field \"%s\" must be a string", path, key);
    *out = v->valuestring;
    return 0;
}

/* The activation names transformers' ACT2FN maps to what this build computes. */
static int parse_act(const char *path, const char *key, const char *name,
                     enum arch_act *out)
{
    static const struct {
        const char *name;
        enum arch_act act;
    } acts[] = {
        {"relu", ARCH_ACT_RELU},           {"gelu", ARCH_ACT_GELU},
        {"gelu_new", ARCH_ACT_GELU_TANH},  {"gelu_pytorch_tanh", ARCH_ACT_GELU_TANH},
        {"gelu_fast", ARCH_ACT_GELU_TANH}, {"silu", ARCH_ACT_SILU},
        {"swish", ARCH_ACT_SILU}};
    for (size_t i = 0; i < ARRAY_LEN(acts); i++)
        if (strcmp(name, acts[i].name) == 0) {
            *out = acts[i].act;
            return 0;
        }
    return err_set(ENG_EUNSUPPORTED,
                   "%s: field \"%s\" is \"%s\"; supported: relu, gelu, gelu_new, "
                   "gelu_pytorch_tanh, gelu_fast, silu",
                   path, key, name);
}

/* rope_scaling: null, {"rope_type" or "type": "default" | "linear" | "llama3", ...}.
 * "dynamic", "yarn", "longrope" and the rest change the frequencies with the length
 * or need attention factors; they are refused rather than run wrong. */
static int parse_rope_scaling(const cJSON *root, const char *path, struct arch_rope *r)
{
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (!rs || cJSON_IsNull(rs)) return 0;
    if (!cJSON_IsObject(rs))
        return err_set(ENG_EFORMAT, "%s: field \"rope_scaling\" must be an object or null",
                       path);
    const char *type = NULL;
    int err = get_str(rs, path, "rope_type", &type);
    if (!err && !type) err = get_str(rs, path, "type", &type);
    if (err) return err;
    if (!type) return err_set(ENG_EFORMAT, "%s: rope_scaling has no \"rope_type\"", path);
    if (strcmp(type, "default") == 0) return 0;
    r->factor = 1.0f;
    if ((err = get_float(rs, path, "factor", 1.0, 1e6, &r->factor))) return err;
    if (strcmp(type, "linear") == 0) {
        r->scaling = ARCH_ROPE_LINEAR;
        return 0;
    }
    if (strcmp(type, "llama3") == 0) {
        r->scaling = ARCH_ROPE_LLAMA3;
        r->low_freq_factor = 1.0f;
        r->high_freq_factor = 4.0f;
        r->original_max_pos = 8192;
        if ((err =
                 get_float(rs, path, "low_freq_factor", 1e-6, 1e6, &r->low_freq_factor)) ||
            (err = get_float(rs, path, "high_freq_factor", 1e-6, 1e6,
                             &r->high_freq_factor)) ||
            (err = get_int(rs, path, "original_max_position_embeddings", false, 1, MAX_DIM,
                           &r->original_max_pos)))
            return err;
        if (!(r->high_freq_factor > r->low_freq_factor))
            return err_set(ENG_EFORMAT,
                           "%s: rope_scaling high_freq_factor must exceed low_freq_factor",
                           path);
        return 0;
    }
    return err_set(
        ENG_EUNSUPPORTED,
        "%s: rope_scaling type \"%s\" is not supported (default, linear, llama3)", path,
        type);
}

/* LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, GPTNeoXForCausalLM; the
 * defaults are those of their transformers config classes. */
static int parse_hf(struct opt_config *cfg, const cJSON *root, const char *path,
                    enum arch_family fam)
{
    struct model_arch *a = &cfg->arch;
    arch_defaults(a, fam);
    const bool neox = fam == ARCH_GPT_NEOX;
    int err;
    if ((err = get_int(root, path, "hidden_size", true, 1, MAX_DIM, &cfg->hidden)) ||
        (err = get_int(root, path, "num_hidden_layers", true, 1, 4096, &cfg->n_layer)) ||
        (err =
             get_int(root, path, "num_attention_heads", true, 1, MAX_DIM, &cfg->n_head)) ||
        (err = get_int(root, path, "intermediate_size", true, 1, MAX_DIM, &cfg->ffn)) ||
        (err = get_int(root, path, "vocab_size", true, 1, MAX_VOCAB, &cfg->vocab_size)) ||
        (err = get_int(root, path, "max_position_embeddings", true, 1, MAX_DIM,
                       &cfg->max_pos)))
        return err;
    int32_t last = cfg->vocab_size - 1;
    cfg->n_kv_head = cfg->n_head;
    cfg->word_embed_proj_dim = cfg->hidden;
    cfg->ln_before = true;
    cfg->tied_lm_head = false;  /* every one of these config classes defaults to false */
    cfg->bos_id = neox ? 0 : 1; /* the config classes' defaults: NeoX 0 / 2, else 1 / 2 */
    cfg->eos_id = 2;
    cfg->pad_id = -1;
    if (cfg->hidden % cfg->n_head)
        return err_set(ENG_EFORMAT,
                       "%s: field \"hidden_size\" (%d) is not divisible by "
                       "\"num_attention_heads\" (%d)",
                       path, cfg->hidden, cfg->n_head);
    cfg->head_dim = cfg->hidden / cfg->n_head;
    const char *act = NULL;
    if ((err = get_int(root, path, "num_key_value_heads", false, 1, MAX_DIM,
                       &cfg->n_kv_head)) ||
        (err = get_int(root, path, "head_dim", false, 1, MAX_DIM, &cfg->head_dim)) ||
        (err = get_bool(root, path, "tie_word_embeddings", &cfg->tied_lm_head)) ||
        (err = get_token_id(root, path, "bos_token_id", last, &cfg->bos_id)) ||
        (err = get_token_id(root, path, "eos_token_id", last, &cfg->eos_id)) ||
        (err = get_str(root, path, "hidden_act", &act)) ||
        (err = parse_act(path, "hidden_act",
                         act    ? act
                         : neox ? "gelu"
                                : "silu",
                         &a->act)) ||
        (err = parse_rope_scaling(root, path, &a->rope)))
        return err;
    if (neox) {
        cfg->n_kv_head = cfg->n_head;
        float pct = 0.25f; /* GPTNeoXConfig's rotary_pct default */
        a->rope.theta = 10000.0f;
        if ((err = get_float(root, path, "rotary_pct", 0.0, 1.0, &pct)) ||
            (err = get_float(root, path, "rotary_emb_base", 1.0, 1e12, &a->rope.theta)) ||
            (err = get_float(root, path, "layer_norm_eps", 0.0, 1.0, &a->norm_eps)) ||
            (err = get_bool(root, path, "use_parallel_residual", &a->parallel_residual)) ||
            (err = get_bool(root, path, "attention_bias", &a->qkv_bias)))
            return err;
        a->o_bias = a->qkv_bias;
        /* HF: rotary_ndims = int(head_size * rotary_pct). */
        a->rope.dims = (int32_t)((float)cfg->head_dim * pct);
    } else {
        a->rope.dims = cfg->head_dim;
        if ((err = get_float(root, path, "rope_theta", 1.0, 1e12, &a->rope.theta)) ||
            (err = get_float(root, path, "rms_norm_eps", 0.0, 1.0, &a->norm_eps)))
            return err;
        if (fam == ARCH_LLAMA) {
            bool mlp_bias = false;
            if ((err = get_bool(root, path, "attention_bias", &a->qkv_bias)) ||
                (err = get_bool(root, path, "mlp_bias", &mlp_bias)))
                return err;
            a->o_bias = a->qkv_bias;
            if (mlp_bias)
                return err_set(ENG_EUNSUPPORTED,
                               "%s: field \"mlp_bias\" true is not supported", path);
        }
        if (a->act != ARCH_ACT_SILU)
            return err_set(ENG_EUNSUPPORTED,
                           "%s: field \"hidden_act\" is \"%s\"; a SwiGLU MLP needs silu",
                           path, act);
    }
    if (fam == ARCH_MISTRAL) {
        /* MistralConfig's default is 4096; an explicit null means no window. */
        a->sliding_window =
            cJSON_GetObjectItemCaseSensitive(root, "sliding_window") ? 0 : 4096;
        if ((err = get_int(root, path, "sliding_window", false, 1, INT32_MAX,
                           &a->sliding_window)))
            return err;
    }
    if (fam == ARCH_QWEN2) {
        /* Qwen2 ignores sliding_window unless use_sliding_window, and then only on the
         * layers past max_window_layers: not served rather than run wrong. */
        bool use = false;
        if ((err = get_bool(root, path, "use_sliding_window", &use))) return err;
        if (use)
            return err_set(ENG_EUNSUPPORTED,
                           "%s: field \"use_sliding_window\" true is not supported", path);
    }
    if (cfg->n_head % cfg->n_kv_head)
        return err_set(ENG_EFORMAT,
                       "%s: \"num_attention_heads\" (%d) is not a multiple of "
                       "\"num_key_value_heads\" (%d)",
                       path, cfg->n_head, cfg->n_kv_head);
    if (a->rope.dims < 2 || a->rope.dims % 2 || a->rope.dims > cfg->head_dim)
        return err_set(ENG_EUNSUPPORTED, "%s: %d rotary dimensions of a %d-wide head", path,
                       a->rope.dims, cfg->head_dim);
    if (cfg->pad_id < 0) cfg->pad_id = cfg->eos_id;
    return 0;
}

/* The family of a config.json: "architectures"[0], else "model_type". */
static int parse(struct opt_config *cfg, const cJSON *root, const char *path)
{
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *first = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    const char *name = NULL;
    int err = 0;
    if (cJSON_IsString(first))
        name = first->valuestring;
    else if ((err = get_str(root, path, "model_type", &name)))
        return err;
    if (!name) name = "OPTForCausalLM"; /* early OPT folders carry neither */
    enum arch_family fam;
    if (arch_family_from_name(name, &fam))
        return err_set(ENG_EUNSUPPORTED,
                       "%s: architecture \"%s\" is not supported (OPTForCausalLM, "
                       "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                       "GPTNeoXForCausalLM)",
                       path, name);
    return fam == ARCH_OPT ? parse_opt(cfg, root, path) : parse_hf(cfg, root, path, fam);
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

int64_t opt_config_layer_params(const struct opt_config *c)
{
    const struct model_arch *a = &c->arch;
    const int64_t h = c->hidden, f = c->ffn, q = (int64_t)c->n_head * c->head_dim;
    const int64_t kv = (int64_t)c->n_kv_head * c->head_dim;
    int64_t n = h * (q + 2 * kv) + q * h;
    n += (a->mlp == ARCH_MLP_SWIGLU ? 3 : 2) * h * f;
    if (a->qkv_bias) n += q + 2 * kv;
    if (a->o_bias) n += h;
    if (a->mlp_bias) n += f + h;
    n += (a->norm == ARCH_NORM_LAYERNORM ? 4 : 2) * h;
    return n;
}

int64_t opt_config_param_count(const struct opt_config *c)
{
    const struct model_arch *a = &c->arch;
    const int64_t h = c->hidden, p = c->word_embed_proj_dim;
    int64_t n =
        (int64_t)c->vocab_size * p + (int64_t)c->n_layer * opt_config_layer_params(c);
    if (a->pos == ARCH_POS_LEARNED) n += (int64_t)(c->max_pos + a->pos_offset) * h;
    if (a->final_norm) n += (a->norm == ARCH_NORM_LAYERNORM ? 2 : 1) * h;
    if (p != h) n += 2 * p * h;
    if (!c->tied_lm_head) n += (int64_t)c->vocab_size * p;
    return n;
}
