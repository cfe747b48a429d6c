/*
 * model.c - load an OPT model (checkpoint folder or dummy) into a backend.
 *
 * Owns: the tokenizer and the backend of the loaded model; the weights object is
 * closed once the backend has copied the tensors into its own layout.
 */
#include "model.h"

#include "backend_cpu.h"
#include "backend_cuda.h"
#include "err.h"
#include "tokenizer.h"
#include "util.h"
#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void model_opts_default(struct model_opts *o)
{
    memset(o, 0, sizeof *o);
    o->dtype = backend_cpu_has_bf16() ? DTYPE_BF16 : DTYPE_F32;
}

int model_parse_device(const char *s, enum be_device *out)
{
    if (strcmp(s, "cpu") == 0) *out = BE_DEVICE_CPU;
    else if (strcmp(s, "cuda") == 0) *out = BE_DEVICE_CUDA;
    else if (strcmp(s, "auto") == 0) *out = BE_DEVICE_AUTO;
    else return -1;
    return 0;
}

int model_parse_dtype(const char *s, enum dtype *out)
{
    if (strcmp(s, "fp32") == 0) *out = DTYPE_F32;
    else if (strcmp(s, "bf16") == 0) *out = DTYPE_BF16;
    else return -1;
    return 0;
}

static int file_exists(const char *dir, const char *name)
{
    char *p = util_path_join(dir, name);
    int ok = access(p, R_OK) == 0;
    free(p);
    return ok;
}

/* The folder's tokenizer (tokenizer.json, else vocab.json + merges.txt, with the
 * config files beside them: tokenizer_load_dir); for a folder with none of those
 * files, the id-only tokenizer (a warning says so: text prompts are refused and
 * completions have no text), and for dummy models the byte tokenizer. */
static int load_tokenizer(struct tokenizer **out, const struct opt_config *cfg,
                          const char *dir)
{
    if (dir) {
        int err = tokenizer_load_dir(out, dir);
        /* Every id the tokenizer makes must have an embedding row (a model may have
         * more rows than tokens, padded for speed, never fewer). */
        if (!err && tokenizer_vocab_size(*out) > cfg->vocab_size) {
            err = err_set(ENG_EFORMAT,
                          "%s: the tokenizer has %d tokens but config.json's vocab_size "
                          "is %d",
                          dir, tokenizer_vocab_size(*out), cfg->vocab_size);
            tokenizer_destroy(*out);
            *out = NULL;
        }
        if (err != ENG_ENOTFOUND) return err;
        log_warn("%s has no tokenizer.json or vocab.json + merges.txt: token ids only "
                 "(text prompts are refused; completions have no text)",
                 dir);
        *out = tokenizer_create_none(cfg->vocab_size, cfg->bos_id, cfg->eos_id);
        CHECK(*out); /* config.json's vocab_size is checked >= 1 */
        return 0;
    }
    *out = tokenizer_create_bytes(cfg->vocab_size);
    if (!*out)
        return err_set(ENG_EFORMAT, "%s: vocab_size %d is too small for the byte-level "
                                    "tokenizer (needs 260)", cfg->name, cfg->vocab_size);
    return 0;
}

int model_resolve(const char *name, char *buf, size_t cap, const char **out)
{
    *out = name;
    if (strcmp(name, MODEL_DEFAULT) != 0) return 0;
    const char *env = getenv("H2O_MODELS_DIR");
    const char *dirs[] = {env && *env ? env : NULL, H2O_MODELS_INSTALL_DIR,
                          H2O_MODELS_SOURCE_DIR};
    for (size_t i = 0; i < ARRAY_LEN(dirs); i++) {
        if (!dirs[i]) continue;
        snprintf(buf, cap, "%s/%s", dirs[i], MODEL_DEFAULT);
        if (file_exists(buf, "config.json")) {
            *out = buf;
            return 0;
        }
    }
    return err_set(ENG_ENOTFOUND, "the built-in model '%s' is not installed (looked in %s%s%s "
                                  "and %s; H2O_MODELS_DIR names another folder)",
                   MODEL_DEFAULT, env && *env ? env : "", env && *env ? ", " : "",
                   H2O_MODELS_INSTALL_DIR, H2O_MODELS_SOURCE_DIR);
}

/* The config of an already resolved name. */
static int load_config(struct opt_config *cfg, const char *name)
{
    return strncmp(name, "dummy:", 6) == 0 ? opt_config_dummy(cfg, name)
                                           : opt_config_load(cfg, name);
}

int model_load_tokenizer(struct tokenizer **out, struct opt_config *cfg_out, const char *name)
{
    char path[4096];
    int err = model_resolve(name, path, sizeof path, &name);
    if (err) return err;
    struct opt_config cfg;
    err = load_config(&cfg, name);
    if (err) return err;
    if (cfg_out) *cfg_out = cfg;
    return load_tokenizer(out, &cfg, strncmp(name, "dummy:", 6) == 0 ? NULL : name);
}

/* The dtype the CPU backend computes in for `want`: fp16 has no CPU kernels, so it
 * runs bf16 (what vLLM's CPU backend does with float16: "float16 is not supported on
 * CPU, casting to bfloat16"), or fp32 on a CPU without AVX512-BF16, where bf16 has
 * no kernels either. */
static enum dtype cpu_dtype(enum dtype want)
{
    if (want != DTYPE_F16) return want;
    return backend_cpu_has_bf16() ? DTYPE_BF16 : DTYPE_F32;
}

void model_resolve_backend(const struct model_opts *opts, enum be_device *device,
                           enum dtype *dtype)
{
    enum be_device dev = opts->device;
    if (dev == BE_DEVICE_AUTO) dev = backend_cuda_device_count() > 0 ? BE_DEVICE_CUDA : BE_DEVICE_CPU;
    *device = dev;
    *dtype = dev == BE_DEVICE_CUDA ? DTYPE_F16 : cpu_dtype(opts->dtype);
}

/* The backend of opts->device (auto: CUDA when a GPU is there, else CPU). A dtype
 * the backend cannot compute in is replaced, never silently: the user asked for it. */
enum dtype model_kv_dtype(const struct model_opts *opts)
{
    enum be_device dev;
    enum dtype dt;
    model_resolve_backend(opts, &dev, &dt);
    if (dev == BE_DEVICE_CUDA) /* fp16, or the int8 cache when asked for */
        return opts->kv_dtype_set && opts->kv_dtype == DTYPE_I8 ? DTYPE_I8 : dt;
    return opts->kv_dtype_set ? opts->kv_dtype : dt;
}

static int create_backend(struct model *m, const struct model_opts *opts)
{
    enum be_device dev;
    enum dtype dt;
    model_resolve_backend(opts, &dev, &dt);
    if (dev == BE_DEVICE_CUDA) {
        /* The CUDA kernels store K/V in fp16 or, asked for, in the CPU backend's int8
         * format (docs/kv-cache.md); fp32 and bf16 caches have no kernels and run as
         * fp16, which holds the fp16 activations' K/V exactly. */
        const bool int8 = model_kv_dtype(opts) == DTYPE_I8;
        if (opts->kv_dtype_set && !int8)
            log_warn("kv_cache_dtype %s is not supported by the CUDA backend, which stores "
                     "K/V in fp16: running fp16",
                     dtype_name(opts->kv_dtype));
        struct be_cuda_opts co = {.tensor_parallel = opts->tensor_parallel,
                                  .gpu_memory_utilization = opts->gpu_memory_utilization,
                                  .max_step_tokens = opts->max_step_tokens,
                                  .max_step_rows = opts->max_step_rows,
                                  .kv_int8 = int8};
        if (opts->dtype_set && opts->dtype != DTYPE_F16)
            log_warn("dtype %s is not supported by the CUDA backend, which computes in "
                     "fp16: running fp16",
                     dtype_name(opts->dtype));
        m->dtype = dt;
        m->kv_dtype = int8 ? DTYPE_I8 : dt;
        return backend_cuda_create(&m->be, &co);
    }
    if (dt != opts->dtype)
        log_warn("dtype fp16 is not supported by the CPU backend (as in vLLM, float16 "
                 "runs as bfloat16 on CPUs): running %s%s",
                 dtype_name(dt), dt == DTYPE_F32 ? " (this CPU has no AVX512-BF16)" : "");
    const enum dtype kv = model_kv_dtype(opts);
    struct be_cpu_opts bo = {.dtype = dt,
                             .kv_dtype = kv,
                             .kv_dtype_set = true,
                             .n_threads = opts->n_threads,
                             .tensor_parallel = opts->tensor_parallel,
                             .device_state = opts->device_state};
    m->dtype = dt;
    m->kv_dtype = kv;
    return backend_cpu_create(&m->be, &bo);
}

int model_load(struct model **out, const char *name, const struct model_opts *opts)
{
    struct model *m = xcalloc(1, sizeof *m);
    struct weights *w = NULL;
    double t0 = time_now();
    char path[4096];
    const bool dummy = strncmp(name, "dummy:", 6) == 0;
    int err = model_resolve(name, path, sizeof path, &name);
    if (!err) err = load_config(&m->cfg, name);
    if (err) goto fail;
    err = load_tokenizer(&m->tok, &m->cfg, dummy ? NULL : name);
    if (err) goto fail;
    err = dummy ? weights_open_dummy(&w, &m->cfg, opts->dummy_seed) : weights_open(&w, name);
    if (err) goto fail;
    err = create_backend(m, opts);
    if (err) goto fail;
    err = backend_load(&m->be, &m->cfg, w);
    if (err) goto fail;
    weights_close(w);
    m->load_seconds = time_now() - t0;
    *out = m;
    return 0;
fail:
    weights_close(w);
    model_destroy(m); /* safe on a half-built model */
    return err;
}

void model_destroy(struct model *m)
{
    if (!m) return;
    backend_destroy(&m->be);
    if (m->tok) tokenizer_destroy(m->tok);
    free(m);
}
