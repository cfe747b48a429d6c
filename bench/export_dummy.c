/*
 * export_dummy.c - write a built-in dummy model as a Hugging Face OPT checkpoint.
 *
 * The peers of bench/peers (transformers, CTranslate2) cannot generate our dummy
 * weights, so to compare on the same weights this program writes them out the way
 * `OPTForCausalLM.save_pretrained` does: config.json, model.safetensors in fp32 with
 * the "model.decoder." prefix (the tied lm_head left out, as transformers leaves it),
 * and, with --tokenizer DIR, that folder's vocab.json and merges.txt (CTranslate2's
 * converter reads the vocabulary from them).
 *
 * --check then proves the round trip: the folder's config equals the dummy's, every
 * tensor read back is bit-identical, and the engine's fp32 logits for a prompt from
 * the folder equal those from dummy:NAME exactly. Exit status 0 only if all hold.
 * --dump-logits FILE (implies --check) saves those logits for bench/peers/run.py,
 * which checks that transformers computes the same ones from the folder.
 *
 * Usage: export_dummy [--model dummy:opt-125m] [--seed 0] [--tokenizer DIR] [--check]
 *          [--dump-logits FILE] OUT_DIR
 * Owns: nothing past main. Thread: one.
 */
#include "batch.h"
#include "engine_core.h"
#include "err.h"
#include "kv_seq.h"
#include "model.h"
#include "util.h"
#include "weights.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Tokens of the --check prompt; a few KV blocks of 16. */
#define CHECK_TOKENS 40

/* One tensor of the checkpoint: its prefix-free name and shape. */
struct tensor {
    char name[96];
    int ndim;
    int64_t shape[2];
};

static void tensor_add(struct tensor *t, int *n, int ndim, int64_t d0, int64_t d1,
                       const char *fmt, int layer)
{
    struct tensor *x = &t[(*n)++];
    snprintf(x->name, sizeof x->name, fmt, layer);
    x->ndim = ndim;
    x->shape[0] = d0;
    x->shape[1] = d1;
}

/*
 * Every tensor HF's OPTForCausalLM stores for `cfg`, in its state-dict order. The
 * same list weights_dummy.c generates; project_in/out only where
 * word_embed_proj_dim differs from hidden (OPT-350m), the final LayerNorm only with
 * pre-LN. Returns the count written to t (room for 6 + 16 * n_layer entries).
 */
static int tensor_list(const struct opt_config *cfg, struct tensor *t)
{
    const int64_t h = cfg->hidden, proj = cfg->word_embed_proj_dim, ffn = cfg->ffn;
    int n = 0;
    tensor_add(t, &n, 2, cfg->vocab_size, proj, "embed_tokens.weight", 0);
    tensor_add(t, &n, 2, (int64_t)cfg->max_pos + 2, h, "embed_positions.weight", 0);
    if (cfg->ln_before) {
        tensor_add(t, &n, 1, h, 0, "final_layer_norm.weight", 0);
        tensor_add(t, &n, 1, h, 0, "final_layer_norm.bias", 0);
    }
    if (proj != h) {
        /* nn.Linear weights are [out, in]: project_out maps hidden -> proj. */
        tensor_add(t, &n, 2, proj, h, "project_out.weight", 0);
        tensor_add(t, &n, 2, h, proj, "project_in.weight", 0);
    }
    static const char *const attn[] = {"k_proj", "v_proj", "q_proj", "out_proj"};
    for (int l = 0; l < cfg->n_layer; l++) {
        for (size_t i = 0; i < ARRAY_LEN(attn); i++) {
            char fmt[96];
            snprintf(fmt, sizeof fmt, "layers.%%d.self_attn.%s.weight", attn[i]);
            tensor_add(t, &n, 2, h, h, fmt, l);
            snprintf(fmt, sizeof fmt, "layers.%%d.self_attn.%s.bias", attn[i]);
            tensor_add(t, &n, 1, h, 0, fmt, l);
        }
        tensor_add(t, &n, 1, h, 0, "layers.%d.self_attn_layer_norm.weight", l);
        tensor_add(t, &n, 1, h, 0, "layers.%d.self_attn_layer_norm.bias", l);
        tensor_add(t, &n, 2, ffn, h, "layers.%d.fc1.weight", l);
        tensor_add(t, &n, 1, ffn, 0, "layers.%d.fc1.bias", l);
        tensor_add(t, &n, 2, h, ffn, "layers.%d.fc2.weight", l);
        tensor_add(t, &n, 1, h, 0, "layers.%d.fc2.bias", l);
        tensor_add(t, &n, 1, h, 0, "layers.%d.final_layer_norm.weight", l);
        tensor_add(t, &n, 1, h, 0, "layers.%d.final_layer_norm.bias", l);
    }
    return n;
}

static int64_t numel(const struct tensor *t)
{
    return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
}

static int write_config(const char *dir, const struct opt_config *c)
{
    char *path = util_path_join(dir, "config.json");
    FILE *f = fopen(path, "w");
    if (!f) {
        int err = err_set(ENG_EIO, "%s: %s", path, strerror(errno));
        free(path);
        return err;
    }
    /* The fields transformers 4.40 writes for OPT (tests/data/golden/tiny-opt). */
    fprintf(f,
            "{\n"
            "  \"_remove_final_layer_norm\": false,\n"
            "  \"activation_function\": \"relu\",\n"
            "  \"architectures\": [\"OPTForCausalLM\"],\n"
            "  \"attention_dropout\": 0.0,\n"
            "  \"bos_token_id\": %d,\n"
            "  \"do_layer_norm_before\": %s,\n"
            "  \"dropout\": 0.0,\n"
            "  \"enable_bias\": true,\n"
            "  \"eos_token_id\": %d,\n"
            "  \"ffn_dim\": %d,\n"
            "  \"hidden_size\": %d,\n"
            "  \"init_std\": 0.02,\n"
            "  \"layer_norm_elementwise_affine\": true,\n"
            "  \"layerdrop\": 0.0,\n"
            "  \"max_position_embeddings\": %d,\n"
            "  \"model_type\": \"opt\",\n"
            "  \"num_attention_heads\": %d,\n"
            "  \"num_hidden_layers\": %d,\n"
            "  \"pad_token_id\": %d,\n"
            "  \"tie_word_embeddings\": true,\n"
            "  \"torch_dtype\": \"float32\",\n"
            "  \"use_cache\": true,\n"
            "  \"vocab_size\": %d,\n"
            "  \"word_embed_proj_dim\": %d\n"
            "}\n",
            c->bos_id, c->ln_before ? "true" : "false", c->eos_id, c->ffn, c->hidden,
            c->max_pos, c->n_head, c->n_layer, c->pad_id, c->vocab_size,
            c->word_embed_proj_dim);
    int err = fclose(f) ? err_set(ENG_EIO, "%s: %s", path, strerror(errno)) : 0;
    free(path);
    return err;
}

/*
 * model.safetensors: an 8-byte little-endian header length, the JSON header
 * (name -> dtype, shape, [begin, end) byte offsets into the data), padded with
 * spaces to a multiple of 8 as the safetensors library does, then the tensors'
 * fp32 bytes in header order. Each tensor is generated, written and freed in turn,
 * so memory stays at the largest tensor.
 */
static int write_safetensors(const char *dir, const struct weights *w, const struct tensor *t,
                             int n)
{
    size_t cap = 256 + (size_t)n * 192, len = 0;
    char *hdr = xmalloc(cap);
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const int64_t bytes = numel(&t[i]) * 4;
        char shape[48];
        if (t[i].ndim == 1)
            snprintf(shape, sizeof shape, "%" PRId64, t[i].shape[0]);
        else
            snprintf(shape, sizeof shape, "%" PRId64 ",%" PRId64, t[i].shape[0],
                     t[i].shape[1]);
        len += (size_t)snprintf(hdr + len, cap - len,
                                ",\"model.decoder.%s\":{\"dtype\":\"F32\",\"shape\":[%s],"
                                "\"data_offsets\":[%" PRId64 ",%" PRId64 "]}",
                                t[i].name, shape, off, off + bytes);
        off += bytes;
    }
    hdr[len++] = '}';
    while (len % 8)
        hdr[len++] = ' ';

    char *path = util_path_join(dir, "model.safetensors");
    FILE *f = fopen(path, "wb");
    int err = 0;
    if (!f) {
        err = err_set(ENG_EIO, "%s: %s", path, strerror(errno));
        goto out;
    }
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)((uint64_t)len >> (8 * i));
    if (fwrite(le, 1, 8, f) != 8 || fwrite(hdr, 1, len, f) != len)
        err = err_set(ENG_EIO, "%s: %s", path, strerror(errno));
    for (int i = 0; !err && i < n; i++) {
        const int64_t m = numel(&t[i]);
        float *buf = xmalloc((size_t)m * sizeof *buf); /* [shape] */
        err = weights_read_f32(w, t[i].name, t[i].ndim, t[i].shape, buf);
        /* The file is little-endian fp32, as x86 and ARM hosts store floats. */
        if (!err && fwrite(buf, sizeof *buf, (size_t)m, f) != (size_t)m)
            err = err_set(ENG_EIO, "%s: %s", path, strerror(errno));
        free(buf);
    }
    if (fclose(f) && !err) err = err_set(ENG_EIO, "%s: %s", path, strerror(errno));
out:
    free(path);
    free(hdr);
    return err;
}

static int copy_file(const char *src_dir, const char *dst_dir, const char *name)
{
    char *src = util_path_join(src_dir, name), *dst = util_path_join(dst_dir, name);
    char *data = NULL;
    size_t len = 0;
    int err = util_read_file(src, &data, &len);
    if (!err) {
        FILE *f = fopen(dst, "wb");
        if (!f || fwrite(data, 1, len, f) != len || fclose(f))
            err = err_set(ENG_EIO, "%s: %s", dst, strerror(errno));
    }
    free(data);
    free(src);
    free(dst);
    return err;
}

/* The fields that define the network (the name differs by design). */
static int same_config(const struct opt_config *a, const struct opt_config *b)
{
    return a->vocab_size == b->vocab_size && a->hidden == b->hidden &&
           a->n_layer == b->n_layer && a->n_head == b->n_head && a->ffn == b->ffn &&
           a->max_pos == b->max_pos && a->word_embed_proj_dim == b->word_embed_proj_dim &&
           a->ln_before == b->ln_before && a->tied_lm_head == b->tied_lm_head &&
           a->bos_id == b->bos_id && a->eos_id == b->eos_id && a->pad_id == b->pad_id;
}

/* Every tensor of the folder bit-identical to the dummy's. */
static int check_tensors(const char *dir, const struct weights *dummy, const struct tensor *t,
                         int n)
{
    struct weights *back = NULL;
    int err = weights_open(&back, dir);
    for (int i = 0; !err && i < n; i++) {
        const int64_t m = numel(&t[i]);
        float *a = xmalloc((size_t)m * sizeof *a), *b = xmalloc((size_t)m * sizeof *b);
        err = weights_read_f32(dummy, t[i].name, t[i].ndim, t[i].shape, a);
        if (!err) err = weights_read_f32(back, t[i].name, t[i].ndim, t[i].shape, b);
        if (!err && memcmp(a, b, (size_t)m * sizeof *a) != 0)
            err = err_set(ENG_EFORMAT, "%s: tensor %s differs from the dummy's", dir,
                          t[i].name);
        free(a);
        free(b);
    }
    if (!err && weights_has(back, "lm_head.weight"))
        err = err_set(ENG_EFORMAT, "%s: an untied lm_head.weight was written", dir);
    weights_close(back);
    return err;
}

/*
 * The fp32 logits of every position of one prompt (deterministic ids) from model
 * `name`, into logits [CHECK_TOKENS, vocab] (caller frees).
 */
static int prompt_logits(const char *name, uint64_t seed, float **logits, int32_t *vocab)
{
    /* A few blocks of 16 hold the prompt. */
    struct engine_core_opts co = {
        .upto = ENGINE_CORE_POOL, .model = name, .block_size = 16, .kv_blocks = 8};
    model_opts_default(&co.model_opts);
    co.model_opts.dtype = DTYPE_F32;
    co.model_opts.dummy_seed = seed;
    struct engine_core *core;
    int err = engine_core_open(&co, &core);
    if (err) return err;
    struct model *m = core->m;
    const int32_t V = m->cfg.vocab_size;
    int32_t tokens[CHECK_TOKENS];
    for (int32_t i = 0; i < CHECK_TOKENS; i++)
        tokens[i] = (int32_t)((2 + 7919u * (uint32_t)i) % (uint32_t)V);
    struct kv_seq kv;
    struct batch b;
    kv_seq_init(&kv);
    batch_init(&b);
    struct batch_item it = {
        .kv = &kv, .tokens = tokens, .n_tok = CHECK_TOKENS, .pos0 = 0, .all_logits = true};
    err = batch_run(&b, &m->be, &core->pool, V, &it, 1);
    if (!err) {
        const size_t bytes = (size_t)CHECK_TOKENS * (size_t)V * sizeof(float);
        *logits = xmalloc(bytes);
        memcpy(*logits, b.logits + (int64_t)it.logits_row * V, bytes);
        *vocab = V;
    }
    batch_deinit(&b);
    kv_seq_deinit(&kv, &core->pool);
    engine_core_close(core);
    return err;
}

/*
 * The check compares the folder's logits with dummy:NAME's; with `dump` it also
 * writes the dummy's as raw little-endian fp32 [CHECK_TOKENS, vocab], so that
 * bench/peers can check that transformers reads the same model (its prompt ids are
 * (2 + 7919 i) mod vocab, i < CHECK_TOKENS).
 */
static int check_logits(const char *dir, const char *dummy_name, uint64_t seed,
                        const char *dump)
{
    float *a = NULL, *b = NULL;
    int32_t va = 0, vb = 0;
    int err = prompt_logits(dummy_name, seed, &a, &va);
    if (!err) err = prompt_logits(dir, seed, &b, &vb);
    if (!err) {
        double worst = 0;
        for (int64_t i = 0; i < (int64_t)CHECK_TOKENS * va; i++)
            worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
        printf("export_dummy: %s vs %s, fp32 logits of %d positions: max |diff| = %g\n",
               dir, dummy_name, CHECK_TOKENS, worst);
        if (worst != 0)
            err = err_set(ENG_EFORMAT, "%s: logits differ from %s by up to %g", dir,
                          dummy_name, worst);
    }
    if (!err && dump) {
        const size_t m = (size_t)CHECK_TOKENS * (size_t)va;
        FILE *f = fopen(dump, "wb");
        if (!f || fwrite(a, sizeof *a, m, f) != m || fclose(f))
            err = err_set(ENG_EIO, "%s: %s", dump, strerror(errno));
    }
    free(a);
    free(b);
    return err;
}

static int usage(FILE *f, int rc)
{
    fprintf(f, "usage: export_dummy [--model dummy:opt-125m] [--seed 0] [--tokenizer DIR] "
               "[--check] [--dump-logits FILE] OUT_DIR\n");
    return rc;
}

int main(int argc, char **argv)
{
    const char *name = "dummy:opt-125m", *tok_dir = NULL, *dump = NULL;
    uint64_t seed = 0;
    int check = 0;
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'},
        {"seed", required_argument, 0, 's'},
        {"tokenizer", required_argument, 0, 't'},
        {"check", no_argument, 0, 'c'},
        {"dump-logits", required_argument, 0, 'd'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'm': name = optarg; break;
        case 's': seed = strtoull(optarg, NULL, 0); break;
        case 't': tok_dir = optarg; break;
        case 'c': check = 1; break;
        case 'd': dump = optarg; check = 1; break;
        default: return usage(ch == 'h' ? stdout : stderr, ch == 'h' ? 0 : 2);
        }
    }
    if (optind != argc - 1) return usage(stderr, 2);
    const char *dir = argv[optind];

    struct opt_config cfg;
    if (strncmp(name, "dummy:", 6) != 0 || opt_config_dummy(&cfg, name) != 0) {
        fprintf(stderr, "export_dummy: %s is not a built-in dummy model\n", name);
        return 2;
    }
    /* The tensor list and config.json below are OPT's. */
    if (cfg.arch.family != ARCH_OPT) {
        fprintf(stderr, "export_dummy: %s is a %s; only OPT dummies are exported\n", name,
                cfg.arch.hf_name);
        return 2;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "export_dummy: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    struct tensor *t = xcalloc(6 + 16 * (size_t)cfg.n_layer, sizeof *t);
    const int n = tensor_list(&cfg, t);
    struct weights *w = NULL;
    int err = weights_open_dummy(&w, &cfg, seed);
    for (int i = 0; !err && i < n; i++)
        if (!weights_has(w, t[i].name))
            err = err_set(ENG_ENOTFOUND, "%s: no tensor %s", name, t[i].name);
    if (!err) err = write_config(dir, &cfg);
    if (!err && tok_dir) err = copy_file(tok_dir, dir, "vocab.json");
    if (!err && tok_dir) err = copy_file(tok_dir, dir, "merges.txt");
    if (!err) err = write_safetensors(dir, w, t, n);
    if (!err) printf("export_dummy: wrote %s (seed %" PRIu64 ", %d tensors) to %s\n", name,
                     seed, n, dir);
    if (!err && check) {
        struct opt_config back;
        err = opt_config_load(&back, dir);
        if (!err && !same_config(&back, &cfg))
            err = err_set(ENG_EFORMAT, "%s/config.json: differs from %s's config", dir, name);
        if (!err) err = check_tensors(dir, w, t, n);
        if (!err) err = check_logits(dir, name, seed, dump);
        if (!err) printf("export_dummy: round trip ok\n");
    }
    if (err) fprintf(stderr, "export_dummy: %s\n", err_msg());
    weights_close(w);
    free(t);
    return err ? 1 : 0;
}
