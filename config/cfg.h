/*
 * cfg.h - the configuration of every h2oserve subcommand: defaults, a JSON file,
 * command-line flags, validation and --help, all driven by one table of option
 * descriptors.
 *
 * Every setting of struct cfg has exactly one descriptor (struct cfg_opt): its JSON
 * key ("kv_cache_bytes"), which is also its flag with '_' spelled '-'
 * ("--kv-cache-bytes") unless the row names its flag (.flag), its type, where it
 * lives in struct cfg, its range, its help text and its scopes: the subcommands that
 * take it (serve, run-batch, generate, bench quality, tokenize; enum cfg_scope).
 * `generate`, `run-batch`, `bench quality`, `tokenize` and `serve` parse argv
 * through the same code with their scope, so a flag they share
 * (--model, --dtype, --kv-policy, ...) has one spelling, one range, one help line;
 * a command's own default, where it differs (generate and bench quality run on the
 * CPU unless told otherwise), comes from cfg_defaults_cmd and --help shows it. The
 * file format, the flags and the help are all read from that table, so they cannot
 * drift apart; the unit test walks the table and checks that every option can be
 * set every way its scopes allow.
 *
 * vLLM's spellings are part of the table too, so that a vLLM command line works:
 * a descriptor may carry one alias name (.alias = "tensor_parallel_size": the flag
 * --tensor-parallel-size and the file key "tensor_parallel_size" set the same field
 * as "tensor_parallel"), an enum may accept alias values (--dtype bfloat16 is
 * stored as bf16; help and JSON dumps show the canonical names only), and one
 * option may be the command's positional argument (`h2oserve serve MODEL`; serve
 * and run-batch only).
 *
 * The file is one flat JSON object whose keys are the names of serve's options
 * (see config/example.json, config/README.md); run-batch, which takes every serve
 * option, reads the same files. Keys that start with '_' are comments and are
 * ignored; any other unknown key is an error that names the key and the file. A
 * key given twice is an error too: a config file that says two things about one
 * setting is a mistake, and "last wins" would hide it.
 *
 * Precedence: built-in defaults < --config files (in the order given) < every other
 * flag, wherever --config appears in argv.
 *
 * Files: cfg_table.c (the table, defaults, look-up), cfg_value.c (text and JSON
 * values into fields), cfg_validate.c (ranges and the rules that join options),
 * cfg_engine.c (struct engine_opts and the fingerprint), cfg_io.c (files, argv,
 * JSON out), cfg_usage.c (--help).
 *
 * Owns: the strings in struct cfg (heap copies; cfg_free).
 * Thread: any; a struct cfg is plain data and is not shared while it is being set.
 */
#ifndef H2O_CFG_H
#define H2O_CFG_H

#include "engine.h"
#include "kv_budget.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The compute dtype as the user asks for it; auto = bf16 where the CPU has
 * AVX512-BF16, else fp32 (model_opts_default decides), and fp16 on CUDA. The CPU
 * backend computes in fp32 or bf16 and the CUDA backend in fp16 only: fp16 on the
 * CPU runs bf16 (fp32 without AVX512-BF16), fp32 or bf16 on CUDA runs fp16, each
 * with a warning at load (model.c create_backend). */
enum cfg_dtype {
    CFG_DTYPE_AUTO = 0,
    CFG_DTYPE_FP32 = 1,
    CFG_DTYPE_BF16 = 2,
    CFG_DTYPE_FP16 = 3,
};

/* The KV cache's storage dtype as the user asks for it (--kv-cache-dtype); auto =
 * the compute dtype (what the cache always was). int8 is symmetric int8 with an fp32
 * scale per token and KV head, CPU backend only (docs/kv-cache.md). */
enum cfg_kv_dtype {
    CFG_KV_DTYPE_AUTO = 0,
    CFG_KV_DTYPE_FP32 = 1,
    CFG_KV_DTYPE_BF16 = 2,
    CFG_KV_DTYPE_INT8 = 3,
};

/* The subcommands an option belongs to (struct cfg_opt.scopes, a mask). */
enum cfg_scope {
    CFG_SERVE = 1,         /* h2oserve serve: the HTTP server */
    CFG_RUN_BATCH = 2,     /* h2oserve run-batch: every serve option, and -i / -o */
    CFG_GENERATE = 4,      /* h2oserve generate: the engine's options and sampling */
    CFG_BENCH_QUALITY = 8, /* h2oserve bench quality: the model, the KV policy */
    CFG_TOKENIZE = 16,     /* h2oserve tokenize: the model's tokenizer only */
};

/* A repeatable option's values in the order given (--prompt A --prompt B). */
struct cfg_list {
    char **items; /* [n] heap copies */
    int32_t n;
};

struct cfg {
    /* listen */
    char *host;   /* address to bind; default "127.0.0.1" */
    int32_t port; /* 0..65535, 0 = let the kernel pick a free port; default 8000 */

    /* model */
    char *model; /* checkpoint folder, "default" or "dummy:NAME"; default MODEL_DEFAULT */
    char *served_model_name; /* the id clients use; NULL = the loaded model's name */
    char *chat_template;     /* --chat-template FILE; NULL = the model folder's */
    enum be_device device;   /* default auto */
    double gpu_memory_utilization; /* default 0.9 */
    enum cfg_dtype dtype;    /* default auto */
    int32_t threads;         /* OpenMP threads; 0 = all cores */
    int32_t tensor_parallel; /* ranks the layers are sharded over; default 1 */
    int64_t dummy_seed;      /* seed of dummy:* weights; default 0 */
    int32_t max_model_len;   /* context length; 0 = max_position_embeddings (the most) */

    /* engine */
    int32_t block_size;         /* KV slots per block; default 16 */
    enum cfg_kv_dtype kv_cache_dtype; /* KV storage dtype; default auto (= dtype) */
    int64_t kv_cache_bytes;     /* KV pool bytes; 0 = the engine's default */
    int32_t kv_cache_blocks;    /* > 0: exactly this many blocks (instead of bytes) */
    int32_t max_num_seqs;       /* sequences running at once; default 256 */
    int32_t max_batched_tokens; /* tokens per forward step, > max_num_seqs; default 2048 */
    int32_t batch_prompt_tokens; /* batch-job prompt tokens per step; 0 = no own cap; 128 */

    /* the KV policy of requests that name none */
    enum kv_policy kv_policy; /* default h2o */
    double h2o_heavy_ratio;   /* of prompt + max_tokens; default 0.1 */
    double h2o_recent_ratio;  /* default 0.1 */
    int32_t h2o_heavy;        /* absolute count, -1 = use the ratio */
    int32_t h2o_recent;       /* absolute count >= 1, -1 = use the ratio */
    int32_t kv_min_budget;    /* floor of B in tokens; default KV_MIN_BUDGET_DEFAULT */

    /* server limits */
    char *api_key;            /* NULL = no authentication */
    int64_t max_body_bytes;   /* request body (413 beyond); default 32 MiB */
    int64_t max_header_bytes; /* request line + headers (431 beyond); default 16 KiB */
    int32_t max_prompts_per_request; /* default 64 */
    int32_t max_n;                   /* largest n / best_of; default 128 */
    int32_t max_queue;               /* waiting sequences before 429; default 1024 */
    int32_t max_connections;         /* open connections; default 1024 */
    int32_t idle_timeout_s;          /* keep-alive idle close; 0 = never; default 60 */
    int32_t request_timeout_s;       /* whole-request deadline; 0 = none */
    char *cors_allow_origin;         /* Access-Control-Allow-Origin; NULL = no CORS */
    int32_t shutdown_grace_s;        /* SIGINT/SIGTERM drain time; default 30 */
    int64_t write_queue_max_bytes;   /* per-connection unsent + buffered; 8 MiB */
    bool log_requests;               /* one log line per finished request; default false */

    /* batch */
    char *data_dir;              /* Files + Batches store; default "./h2oserve-data" */
    char *job_store;             /* postgresql:// URI instead of data_dir; NULL = SQLite */
    int32_t batch_max_in_flight; /* batch requests handed to the engine at once; 64 */
    int32_t batch_lease_s;       /* lease on claimed batch requests; default 30 */
    int64_t max_file_bytes;      /* POST /v1/files body; default 200 MiB */
    int32_t batch_max_requests;  /* lines in one batch input file; default 50,000 */
    int32_t batch_window_s;      /* run time before a batch expires; default 86400 */

    /* run-batch's own */
    struct cfg_run_batch {
        char *input_file;  /* -i: OpenAI Batch input lines; NULL until given */
        char *output_file; /* -o: one output line per input line */
    } run_batch;

    /* generate's own: the prompts and how to sample them */
    struct cfg_generate {
        struct cfg_list prompt;   /* --prompt, repeatable, at most 4096 */
        char *prompts_file;       /* one prompt per line; NULL = none */
        struct cfg_list prompt_ids; /* --prompt-ids, repeatable: JSON arrays of ids */
        bool print_ids;             /* ids instead of text on stdout */
        int32_t max_tokens;       /* per prompt; default 16 */
        double temperature;       /* 0 = greedy; default 1 */
        double top_p;             /* default 1 */
        int32_t top_k;            /* 0 = off */
        double presence_penalty;  /* default 0 */
        double frequency_penalty; /* default 0 */
        int64_t seed;             /* default 0 */
        struct cfg_list stop;     /* --stop, repeatable, at most 4 */
        bool ignore_eos;          /* default false */
    } generate;

    /* bench quality's own: the text and how it is cut and scored */
    struct cfg_bench_quality {
        char *text;         /* file of text to score; NULL until given */
        int32_t prompt_len; /* P; default 64 */
        int32_t gen_len;    /* G; default 448 */
        int32_t segments;   /* at most this many; 0 = every whole one */
        int32_t batch;      /* segments side by side; default 16 */
        char *sweep;        /* "0.05,0.1": budget fractions; NULL = none */
        char *plot;         /* PNG of the sweep; NULL = none */
    } bench_quality;

    /* tokenize's own: one of text and decode */
    struct cfg_tokenize {
        char *text;   /* --text: the text to encode, as given ("" too); NULL = none */
        char *decode; /* --decode: ids to decode, as given; NULL = none */
        bool bos;     /* encode with BOS first (--no-bos: without); default true */
    } tokenize;
};

enum cfg_type {
    CFG_T_STR = 0, /* char *, owned; JSON string (or null where CFG_F_NULLABLE) */
    CFG_T_INT,     /* int32_t or int64_t (see size); JSON integer */
    CFG_T_SIZE,    /* int64_t bytes; a JSON number or a string "512M", "2G", "16KiB" */
    CFG_T_FLOAT,   /* double; JSON number */
    CFG_T_BOOL,    /* bool; JSON true/false; flags --x, --no-x, --x=true|false */
    CFG_T_ENUM,    /* an enum (int-sized) indexing `values`; JSON string */
    CFG_T_LIST,    /* struct cfg_list: each flag appends one string, at most `max` */
};

enum cfg_opt_flags {
    CFG_F_NULLABLE = 1, /* a string that may be unset: JSON null or "" gives NULL */
    CFG_F_SECRET = 2,   /* never printed by cfg_to_json(.., redact = true) */
    /* The command's one positional argument sets it (`serve MODEL` is --model MODEL);
     * at most one option has it, and its metavar names the argument in --help. */
    CFG_F_POSITIONAL = 4,
    /* A string taken exactly as given: "" is a value, not unset (unset is NULL, the
     * default), and any character but NUL is allowed (tokenize's --text: text to
     * encode, newlines included). Only for options that never reach a header, a
     * path or a file: the subcommand reads them and nothing else does. */
    CFG_F_RAW = 8,
};

/* An alias value of an enum: `name` is stored as values[value] ("bfloat16" as bf16).
 * Lists end with {NULL, 0}. */
struct cfg_enum_alias {
    const char *name;
    int value;
};

/* One option. The table is static and lives as long as the program. */
struct cfg_opt {
    const char *key;   /* JSON key, unique in the table */
    /* The flag without its "--" where it is not the key with '_' spelled '-', or
     * NULL. Two rows may share a flag when no subcommand takes both (tokenize's
     * --text is a string, bench quality's a file: keys "tokenize_text" and "text"),
     * so within one subcommand a flag still names one row. */
    const char *flag;
    unsigned scopes;   /* enum cfg_scope: the subcommands that take it */
    char short_flag;   /* '-i' for 'i', or 0 */
    /* Another name of the same option, or NULL, spelled as a key
     * ("tensor_parallel_size"): accepted as a flag (--tensor-parallel-size) and as
     * a file key, shown in --help; never written by cfg_to_json. */
    const char *alias;
    const char *group; /* heading in --help */
    enum cfg_type type;
    size_t offset;             /* of the field in struct cfg */
    size_t size;               /* of the field (CFG_T_INT: 4 or 8) */
    double min, max;           /* inclusive range (numbers, sizes; LIST: max items) */
    const char *const *values; /* CFG_T_ENUM: names, NULL-terminated, index = value */
    const struct cfg_enum_alias *value_aliases; /* CFG_T_ENUM: more names, or NULL */
    const char *metavar;   /* placeholder in --help ("DIR|dummy:NAME"); NULL = by type */
    const char *help;      /* one sentence, why and what */
    const char *dflt_note; /* shown instead of the default value in --help, or NULL */
    unsigned flags;        /* enum cfg_opt_flags */
};

/* cfg_parse_args returns this (not an error) when --help or -h was given. */
#define CFG_HELP 1

/*
 * Fill *c with the built-in defaults (the values in the comments of struct cfg).
 * *c may be uninitialised; anything it held is not freed.
 * Owns: the caller owns the strings now in *c (cfg_free). Thread: any.
 */
void cfg_defaults(struct cfg *c);

/*
 * cfg_defaults, then the defaults of subcommand `scope` (one enum cfg_scope bit)
 * where they differ: generate and bench quality run on the CPU (device cpu),
 * generate runs every prompt at once (max_num_seqs 0), bench quality scores the
 * full policy and floors no budget (kv_policy full, kv_min_budget 0).
 * Owns: as cfg_defaults. Thread: any.
 */
void cfg_defaults_cmd(struct cfg *c, unsigned scope);

/* Free the strings of *c and set them to NULL. NULL is fine. Thread: any. */
void cfg_free(struct cfg *c);

/*
 * Apply the JSON file at `path` on top of *c: one object, flat keys as in the table
 * (an option's alias is a key too). All or nothing: on error *c is unchanged.
 * Returns 0, ENG_EIO (unreadable, or larger than 1 MiB), ENG_EFORMAT (not JSON, not
 * an object, an unknown key, or one option given twice: the same key twice, or a
 * key and its alias) or ENG_EINVAL (a value of the wrong type or out of range), with
 * a one-line message naming the file and the key (err_msg).
 * Thread: any.
 */
int cfg_load_file(struct cfg *c, const char *path);

/* As cfg_load_file, on the text of a JSON object (`name` is used in messages). */
int cfg_load_string(struct cfg *c, const char *json, const char *name);

/*
 * Apply command-line flags on top of *c. argv[0] is the command's name and is
 * skipped. Every --config FILE (or --config=FILE) is applied first, in order, then
 * every other flag in order, so flags override files wherever --config stands; a
 * flag given twice, or a flag and its alias, is "last wins" like any later flag.
 * Flags: --name VALUE, --name=VALUE; bools also --name, --no-name, --name=true|false.
 * Arguments that are not flags (and every argument after "--") are positional: the
 * first one sets the table's CFG_F_POSITIONAL option (the model) wherever it
 * stands, and parsing goes on after it; parsing stops at the next one, whose index
 * is stored in *next (argc when none), and the caller decides whether more
 * positional arguments are welcome. The positional and its own flag both given
 * with different values is an error (ENG_EINVAL, naming both).
 * All or nothing: on error *c is unchanged. Returns 0, CFG_HELP when --help or -h
 * appears (nothing else is applied), or a negative engine error whose message names
 * the flag (or the file and key).
 * Thread: any.
 */
int cfg_parse_args(struct cfg *c, int argc, char **argv, int *next);

/*
 * cfg_parse_args for subcommand `scope` (one enum cfg_scope bit): only the options
 * of that scope are flags (another is "unknown option"), short flags (-i, -o) too;
 * --config and the positional model only where the command takes them (serve,
 * run-batch; elsewhere a positional argument stops parsing like a second one).
 * Thread: any.
 */
int cfg_parse_cmd(struct cfg *c, unsigned scope, int argc, char **argv, int *next);

/*
 * Set one option from text, as a flag would: `name` is a key ("max_n") or a flag
 * ("--max-n"), an alias in either spelling too, `value` as on the command line
 * ("512M", "true", "h2o", "bfloat16"). Checks the type and range; returns 0,
 * ENG_ENOTFOUND for an unknown name, or ENG_EINVAL, with a message naming the
 * option. On error *c is unchanged. Thread: any.
 */
int cfg_set(struct cfg *c, const char *name, const char *value);

/*
 * Check every range and the rules that join options: max_batched_tokens >
 * max_num_seqs, h2o_recent is -1 or >= 1, kv_cache_bytes and kv_cache_blocks not
 * both set, host / model / data_dir not empty, no control characters in any string
 * (they end up in HTTP headers). Returns 0 or ENG_EINVAL with a one-line message
 * naming the option(s). Thread: any.
 */
int cfg_validate(const struct cfg *c);

/*
 * cfg_validate for subcommand `scope`: the ranges of its options and the rules that
 * join them (for serve and run-batch, max_num_seqs >= 1 as well; for bench quality,
 * --sweep is a list of fractions and --plot needs it). Thread: any.
 */
int cfg_validate_cmd(const struct cfg *c, unsigned scope);

/*
 * Parse "0.05,0.1,0.5" (fractions in (0, 1], comma separated) into out[0..max).
 * Returns the count, or -1 for anything else (empty, a trailing comma, too many).
 * Thread: any.
 */
int cfg_fractions(const char *s, float *out, int max);

/* --sweep's most fractions (bench quality runs two rows for each). */
#define CFG_SWEEP_MAX 16

/*
 * Print "usage: h2oserve CMD [MODEL] [options]" and every flag of CMD ("serve",
 * "run-batch", "generate", "bench quality", "tokenize"; its scope) with its
 * placeholder, alias, help and CMD's default, grouped as in the table. Thread: any.
 */
void cfg_usage(FILE *f, const char *cmd);

/* The scope of subcommand `cmd` ("run-batch"), or 0. Thread: any. */
unsigned cfg_scope_of(const char *cmd);

/*
 * The KV cache dtype *c runs with, "auto" resolved as model_load will (the compute
 * dtype; fp16 on CUDA): what a request's kv_cache.dtype must match. Thread: any.
 */
enum dtype cfg_kv_dtype(const struct cfg *c);

/*
 * The engine options for *c: model, dtype (auto -> model_opts_default's choice;
 * model_opts.dtype_set says whether one was asked for), threads, dummy seed, block
 * size, KV pool size, scheduler limits (max_model_len too) and the default KV
 * spec. o->model points into c: it must outlive o until engine_create (which
 * copies it). Thread: any.
 */
void cfg_engine_opts(const struct cfg *c, struct engine_opts *o);

/* The KV policy of requests that name none. Thread: any. */
void cfg_kv_spec(const struct cfg *c, struct kv_spec *s);

/*
 * OpenAI's system_fingerprint for this configuration: "fp_" and 10 hex digits of a
 * hash of what can change a completion for a given seed (the version, the model, the
 * device and the dtype it resolves to, tensor parallelism, the dummy seed, the block
 * size and the KV policy defaults), and of nothing else (not the port, limits or
 * paths). buf holds at least 14 bytes. Thread: any.
 */
void cfg_fingerprint(const struct cfg *c, char *buf, size_t len);

/*
 * *c as a JSON object with every option of the file (serve's), loadable by
 * cfg_load_file. With `redact`,
 * secrets (api_key) are written as "***" if set, for logging the effective
 * configuration. Owns: the caller frees the string. Thread: any.
 */
char *cfg_to_json(const struct cfg *c, bool redact);

/* The option table and its length. Thread: any. */
const struct cfg_opt *cfg_opts(size_t *n);

/* The option named by key ("max_n") or flag ("--max-n"), its alias's included, or
 * NULL. A flag two rows share (--text) names the first in the table (bench
 * quality's); cfg_parse_cmd looks flags up within its scope. Thread: any. */
const struct cfg_opt *cfg_find(const char *name);

/*
 * Write option o's value in *c as text, the way --help shows defaults ("8000",
 * "32M", "0.1", "true", "h2o", "127.0.0.1", "none" for an unset string).
 * Returns buf. Thread: any.
 */
char *cfg_format_value(const struct cfg *c, const struct cfg_opt *o, char *buf, size_t len);

#endif
