/*
 * model.h - a loaded model: its configuration (opt_config.h), tokenizer and a
 * backend holding the weights.
 */
#ifndef H2O_MODEL_H
#define H2O_MODEL_H

#include "backend.h"
#include "backend_cpu.h"
#include "opt_config.h"

#include <stdbool.h>
#include <stdint.h>

struct tokenizer;

/* The model commands load when none is named: the built-in trained model, the
 * folder models/default (installed with the binary, or in the source tree). */
#define MODEL_DEFAULT "default"

struct model_opts {
    enum be_device device; /* default BE_DEVICE_CPU (the server's default is auto) */
    /* The compute dtype asked for. The CPU backend computes in fp32 or bf16: fp16 runs
     * bf16 there (fp32 without AVX512-BF16), as vLLM runs float16 as bfloat16 on
     * CPUs. The CUDA backend computes in fp16 whatever this says. Both log a warning
     * when they substitute a dtype that dtype_set says was asked for. */
    enum dtype dtype;
    bool dtype_set;      /* the user chose dtype (not "auto"): substitutions are logged */
    /* The KV cache's storage dtype (--kv-cache-dtype) when kv_dtype_set; else the
     * cache is stored in the compute dtype. DTYPE_I8 runs on the CPU backend only:
     * model_load refuses it on CUDA. */
    enum dtype kv_dtype;
    bool kv_dtype_set;
    int n_threads;       /* 0 = OpenMP's default */
    int tensor_parallel; /* ranks the layers are sharded over; 0 or 1 = none */
    float gpu_memory_utilization; /* CUDA: share of each GPU to use; 0 = 0.9 */
    /* CUDA: the most tokens and logits rows one forward carries (the scheduler's
     * max_batched_tokens, and its decode sequences plus scored prompt rows): the
     * workspace kept out of the KV pool grows with them. 0 = 4096 and 512. */
    int32_t max_step_tokens, max_step_rows;
    uint64_t dummy_seed; /* seed of dummy:* weights */
    /* The CPU backend serves the slot state as a device backend does
     * (be_cpu_opts.device_state): the hook that runs the engine's device path (the
     * CUDA backend's) on the CPU, for tests. Results are identical either way. */
    bool device_state;
};

struct model {
    struct opt_config cfg;
    struct tokenizer *tok;
    struct backend be;
    enum dtype dtype;            /* what the backend computes in (fp16 on CUDA) */
    enum dtype kv_dtype;         /* what the KV cache stores (int8: with fp32 scales) */
    double load_seconds;
};

/* Defaults: bf16 where the CPU has AVX512-BF16, else fp32 (dtype_set false); seed 0.
 * Thread: any. */
void model_opts_default(struct model_opts *o);

/* The command-line words: "cpu", "cuda", "auto" -> device; "fp32", "bf16" -> the
 * CPU compute dtype. Return 0, or -1 (out untouched) for anything else. Thread: any. */
int model_parse_device(const char *s, enum be_device *out);
int model_parse_dtype(const char *s, enum dtype *out);

/*
 * What model_load will run opts on: the device (auto: CUDA where this build has it
 * and a GPU is present, else the CPU; no CUDA call at all without an NVIDIA driver)
 * and the dtype that device computes in (fp16 on CUDA; on the CPU opts->dtype, fp16
 * replaced by bf16, or fp32 without AVX512-BF16). Thread: any.
 */
void model_resolve_backend(const struct model_opts *opts, enum be_device *device,
                           enum dtype *dtype);

/*
 * The KV cache dtype model_load will run opts with: on the CPU opts->kv_dtype when
 * kv_dtype_set, else the compute dtype; on CUDA int8 when asked for, else fp16 (the
 * CUDA backend stores K/V in fp16 or int8 only; fp32 and bf16 run as fp16). The server
 * names it before the model is loaded (per-request kv_cache.dtype, /v1/models). Thread:
 * any.
 */
enum dtype model_kv_dtype(const struct model_opts *opts);

/*
 * Load `name`: a checkpoint folder (config.json, weights, and vocab.json +
 * merges.txt; without them a byte-level tokenizer is used and a warning logged), or
 * a built-in dummy model "dummy:NAME". Returns 0, or an engine error with a one-line
 * message (err_msg) naming the file and tensor at fault.
 * Owns: *out (model_destroy). Thread: the engine thread (it owns the backend).
 */
int model_load(struct model **out, const char *name, const struct model_opts *opts);

/*
 * The folder model_load reads for `name`: MODEL_DEFAULT is the built-in model's
 * folder ($H2O_MODELS_DIR/default, else the installed share/h2oserve/models/default,
 * else the source tree's models/default; the first that has a config.json), any
 * other name is itself. *out is name or buf (cap bytes). Returns 0, or
 * ENG_ENOTFOUND naming the places looked in. Thread: any.
 */
int model_resolve(const char *name, char *buf, size_t cap, const char **out);

/*
 * Only the tokenizer of model `name` (as model_load would make it), and its config in
 * *cfg_out unless NULL, for commands that need no weights. Owns: *out
 * (tokenizer_destroy). Thread: any.
 */
int model_load_tokenizer(struct tokenizer **out, struct opt_config *cfg_out, const char *name);

/* Free everything. NULL is fine. Thread: engine. */
void model_destroy(struct model *m);

#endif
