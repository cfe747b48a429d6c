/*
 * cfg_table.c - the option table: one row per setting of struct cfg, with the
 * subcommands it belongs to (its scopes), its range and its help; the built-in
 * defaults and each subcommand's own; finding a row by key or flag, and naming a
 * row's flag (see cfg.h).
 * cfg_value.c puts values into fields, cfg_validate.c checks them, cfg_io.c and
 * cfg_usage.c read files and argv and write --help, all through this table.
 *
 * This file is over 600 lines because it is one table: every option is a row of
 * about ten lines (key, scopes, group, type, field, range, help), and one array is
 * what lets the file format, the flags, the validation and --help of every
 * subcommand be generated from the same place.
 *
 * Owns: the static option table and the subcommand list; the strings of a struct
 * cfg belong to its owner.
 * Invariant: every field of struct cfg has exactly one table entry, and an entry
 * reaches only its own field (the unit test sets each option through the table and
 * checks that no other option changed); a key is unique in the table, and so is a
 * flag among the rows of one scope.
 * Thread: any (no mutable state).
 */
#include "cfg.h"
#include "cfg_impl.h"

#include "model.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Enums are stored and read as int through the table. */
_Static_assert(sizeof(enum cfg_dtype) == sizeof(int), "enum cfg_dtype is int-sized");
_Static_assert(CFG_DTYPE_AUTO == 0 && CFG_DTYPE_FP32 == 1 && CFG_DTYPE_BF16 == 2 &&
                   CFG_DTYPE_FP16 == 3,
               "dtype_names[] is indexed by enum cfg_dtype");
_Static_assert(sizeof(enum cfg_kv_dtype) == sizeof(int), "enum cfg_kv_dtype is int-sized");
_Static_assert(CFG_KV_DTYPE_AUTO == 0 && CFG_KV_DTYPE_FP32 == 1 && CFG_KV_DTYPE_BF16 == 2 &&
                   CFG_KV_DTYPE_INT8 == 3,
               "kv_dtype_names[] is indexed by enum cfg_kv_dtype");
_Static_assert(sizeof(enum kv_policy) == sizeof(int), "enum kv_policy is int-sized");
_Static_assert(sizeof(enum be_device) == sizeof(int), "enum be_device is int-sized");
_Static_assert(BE_DEVICE_CPU == 0 && BE_DEVICE_CUDA == 1 && BE_DEVICE_AUTO == 2,
               "device_names[] is indexed by enum be_device");
_Static_assert(KV_POLICY_FULL == 0 && KV_POLICY_H2O == 1 && KV_POLICY_LOCAL == 2,
               "policy_names[] is indexed by enum kv_policy");

#define KIB (1024.0)
#define MIB (1024.0 * 1024)
#define GIB (1024.0 * 1024 * 1024)
/* Integers in the file are JSON numbers (doubles): 2^53 - 1 is the largest exact. */
#define MAX_EXACT 9007199254740991.0

/* The scopes of the shared rows: every serve option is run-batch's too (run-batch
 * reads serve's config files); generate and bench quality take the engine's. */
#define SRV (CFG_SERVE | CFG_RUN_BATCH)
#define SRV_GEN (SRV | CFG_GENERATE)
#define SRV_GEN_BQ (SRV_GEN | CFG_BENCH_QUALITY)

#define FIELD(f) .offset = offsetof(struct cfg, f), .size = sizeof(((struct cfg *)0)->f)

static const char *const dtype_names[] = {"auto", "fp32", "bf16", "fp16", NULL};
/* vLLM's --dtype names (torch's), stored as ours. */
static const struct cfg_enum_alias dtype_aliases[] = {
    {"float32", CFG_DTYPE_FP32}, {"float", CFG_DTYPE_FP32}, {"bfloat16", CFG_DTYPE_BF16},
    {"float16", CFG_DTYPE_FP16}, {"half", CFG_DTYPE_FP16},  {NULL, 0},
};
static const char *const kv_dtype_names[] = {"auto", "fp32", "bf16", "int8", NULL};
/* torch's names of the same types, as --dtype takes them. */
static const struct cfg_enum_alias kv_dtype_aliases[] = {
    {"float32", CFG_KV_DTYPE_FP32},
    {"bfloat16", CFG_KV_DTYPE_BF16},
    {NULL, 0},
};
static const char *const policy_names[] = {"full", "h2o", "local", NULL};
static const char *const device_names[] = {"cpu", "cuda", "auto", NULL};

/* The --help heading of the KV policy options. */
static const char group_kv[] = "KV cache policy (requests that set no kv_cache)";

static const struct cfg_opt opt_table[] = {
    /* Each command's own options come first, so that its --help starts with them. */

    /* run-batch */
    {.key = "input_file",
     .scopes = CFG_RUN_BATCH,
     .short_flag = 'i',
     .group = "run-batch",
     .type = CFG_T_STR,
     FIELD(run_batch.input_file),
     .metavar = "FILE",
     .flags = CFG_F_NULLABLE,
     .help = "OpenAI Batch input lines (required)",
     .dflt_note = "none"},
    {.key = "output_file",
     .scopes = CFG_RUN_BATCH,
     .short_flag = 'o',
     .group = "run-batch",
     .type = CFG_T_STR,
     FIELD(run_batch.output_file),
     .metavar = "FILE",
     .flags = CFG_F_NULLABLE,
     .help = "one output line per input line, in input order (required)",
     .dflt_note = "none"},

    /* generate */
    {.key = "prompt",
     .scopes = CFG_GENERATE,
     .group = "generate",
     .type = CFG_T_LIST,
     FIELD(generate.prompt),
     .max = 4096,
     .metavar = "TEXT",
     .help = "a prompt (repeat for several; they run as one batch)"},
    {.key = "prompts_file",
     .scopes = CFG_GENERATE,
     .group = "generate",
     .type = CFG_T_STR,
     FIELD(generate.prompts_file),
     .metavar = "FILE",
     .flags = CFG_F_NULLABLE,
     .help = "one prompt per line (added to any --prompt; empty lines are skipped)"},
    {.key = "prompt_ids",
     .scopes = CFG_GENERATE,
     .group = "generate",
     .type = CFG_T_LIST,
     FIELD(generate.prompt_ids),
     .max = 4096,
     .metavar = "JSON",
     .help = "a prompt as token ids, a JSON array such as '[2, 133, 1370]', given to the "
             "model as is (no BOS added; repeat for several; they run after the text "
             "prompts)"},
    {.key = "print_ids",
     .scopes = CFG_GENERATE,
     .group = "generate",
     .type = CFG_T_BOOL,
     FIELD(generate.print_ids),
     .help = "print each completion's generated token ids as one JSON array a line "
             "instead of its text"},
    {.key = "max_tokens",
     .scopes = CFG_GENERATE,
     .group = "generate",
     .type = CFG_T_INT,
     FIELD(generate.max_tokens),
     .min = 0,
     .max = 1 << 20,
     .help = "tokens to generate per prompt"},
    {.key = "temperature",
     .scopes = CFG_GENERATE,
     .group = "generate",
     .type = CFG_T_FLOAT,
     FIELD(generate.temperature),
     .min = 0,
     .max = 2,
     .help = "sampling temperature; 0 = greedy"},
    {.key = "top_p",
     .scopes = CFG_GENERATE,
     .group = "generate",
     .type = CFG_T_FLOAT,
     FIELD(generate.top_p),
     .min = 0,
     .max = 1,
     .help = "nucleus sampling mass"},
    {.key = "top_k",
     .scopes = CFG_GENERATE,
     .group = "generate",
     .type = CFG_T_INT,
     FIELD(generate.top_k),
     .min = 0,
     .max = 1 << 30,
     .help = "keep the K most likely tokens; 0 = off"},
    {.key = "presence_penalty",
     .scopes = CFG_GENERATE,
     .group = "generate",
     .type = CFG_T_FLOAT,
     FIELD(generate.presence_penalty),
     .min = -2,
     .max = 2,
     .help = "OpenAI presence penalty"},
    {.key = "frequency_penalty",
     .scopes = CFG_GENERATE,
     .group = "generate",
     .type = CFG_T_FLOAT,
     FIELD(generate.frequency_penalty),
     .min = -2,
     .max = 2,
     .help = "OpenAI frequency penalty"},
    {.key = "seed",
     .scopes = CFG_GENERATE,
     .group = "generate",
     .type = CFG_T_INT,
     FIELD(generate.seed),
     .min = 0,
     .max = MAX_EXACT,
     .help = "sampling seed"},
    {.key = "stop",
     .scopes = CFG_GENERATE,
     .group = "generate",
     .type = CFG_T_LIST,
     FIELD(generate.stop),
     .max = 4,
     .metavar = "TEXT",
     .help = "stop string (repeat for up to 4)"},
    {.key = "ignore_eos",
     .scopes = CFG_GENERATE,
     .group = "generate",
     .type = CFG_T_BOOL,
     FIELD(generate.ignore_eos),
     .help = "keep generating after the end-of-text token"},

    /* bench quality */
    {.key = "text",
     .scopes = CFG_BENCH_QUALITY,
     .group = "bench quality",
     .type = CFG_T_STR,
     FIELD(bench_quality.text),
     .metavar = "FILE",
     .flags = CFG_F_NULLABLE,
     .help = "the text to score, tokenized as one stream without BOS (required)",
     .dflt_note = "none"},
    {.key = "prompt_len",
     .scopes = CFG_BENCH_QUALITY,
     .group = "bench quality",
     .type = CFG_T_INT,
     FIELD(bench_quality.prompt_len),
     .min = 1,
     .max = INT32_MAX,
     .help = "P: tokens of each segment prefilled before scoring"},
    {.key = "gen_len",
     .scopes = CFG_BENCH_QUALITY,
     .group = "bench quality",
     .type = CFG_T_INT,
     FIELD(bench_quality.gen_len),
     .min = 1,
     .max = INT32_MAX,
     .help = "G: tokens of each segment scored, one decode step each"},
    {.key = "segments",
     .scopes = CFG_BENCH_QUALITY,
     .group = "bench quality",
     .type = CFG_T_INT,
     FIELD(bench_quality.segments),
     .min = 0,
     .max = INT32_MAX,
     .help = "score at most this many segments of P + G tokens; 0 = every whole one"},
    {.key = "batch",
     .scopes = CFG_BENCH_QUALITY,
     .group = "bench quality",
     .type = CFG_T_INT,
     FIELD(bench_quality.batch),
     .min = 1,
     .max = INT32_MAX,
     .help = "segments run side by side (bounds the KV pool)"},
    {.key = "sweep",
     .scopes = CFG_BENCH_QUALITY,
     .group = "bench quality",
     .type = CFG_T_STR,
     FIELD(bench_quality.sweep),
     .metavar = "F1,F2,...",
     .flags = CFG_F_NULLABLE,
     .help = "instead of --kv-policy, for each total budget fraction f of P + G (in "
             "(0, 1], at most 16): h2o with f/2 heavy + f/2 recent and local with f "
             "recent"},
    {.key = "plot",
     .scopes = CFG_BENCH_QUALITY,
     .group = "bench quality",
     .type = CFG_T_STR,
     FIELD(bench_quality.plot),
     .metavar = "FILE.png",
     .flags = CFG_F_NULLABLE,
     .help = "draw the --sweep as a chart (needs gnuplot)"},

    /* tokenize: its --text is the text itself, where bench quality's is a file, so
     * the two are two rows (two fields, two helps) that share the flag. Both strings
     * are taken as given (CFG_F_RAW): "" encodes to BOS alone, and text may hold
     * newlines. cli_tokenize.c wants exactly one of them. */
    {.key = "tokenize_text",
     .flag = "text",
     .scopes = CFG_TOKENIZE,
     .group = "tokenize",
     .type = CFG_T_STR,
     FIELD(tokenize.text),
     .metavar = "TEXT",
     .flags = CFG_F_RAW,
     .help = "encode TEXT and print its ids as a JSON array",
     .dflt_note = "none"},
    {.key = "decode",
     .scopes = CFG_TOKENIZE,
     .group = "tokenize",
     .type = CFG_T_STR,
     FIELD(tokenize.decode),
     .metavar = "IDS",
     .flags = CFG_F_RAW,
     .help = "instead of --text, decode IDS (a JSON array or a comma/space separated "
             "list) and print the text",
     .dflt_note = "none"},
    {.key = "bos",
     .scopes = CFG_TOKENIZE,
     .group = "tokenize",
     .type = CFG_T_BOOL,
     FIELD(tokenize.bos),
     .help = "with --text, put BOS (</s> for OPT) first, as the server encodes prompts"},
    /* listen */
    {.key = "host",
     .scopes = SRV,
     .group = "listen",
     .type = CFG_T_STR,
     FIELD(host),
     .metavar = "ADDR",
     .help = "address to bind; 0.0.0.0 listens on every interface"},
    {.key = "port",
     .scopes = SRV,
     .group = "listen",
     .type = CFG_T_INT,
     FIELD(port),
     .min = 0,
     .max = 65535,
     .help = "TCP port; 0 lets the kernel pick a free one"},

    /* model */
    {.key = "model",
     .scopes = SRV_GEN_BQ | CFG_TOKENIZE,
     .group = "model",
     .type = CFG_T_STR,
     FIELD(model),
     .metavar = "DIR|default|dummy:NAME",
     .flags = CFG_F_POSITIONAL,
     .help = "checkpoint folder (config.json, weights, vocab.json + merges.txt), "
             "'default' (the small built-in trained model, docs/quality.md) or a "
             "built-in dummy model with random weights: dummy:tiny, dummy:opt-125m ... "
             "dummy:opt-66b, dummy:llama-3-8b, dummy:llama-2-7b, dummy:qwen2-7b, "
             "dummy:gpt-neox-20b, dummy:tinyllama-1.1b, dummy:llama-tiny"},
    {.key = "served_model_name",
     .scopes = SRV,
     .group = "model",
     .type = CFG_T_STR,
     FIELD(served_model_name),
     .metavar = "NAME",
     .flags = CFG_F_NULLABLE,
     .help = "the model id that clients send and /v1/models lists",
     .dflt_note = "the model's name"},
    {.key = "chat_template",
     .scopes = SRV,
     .group = "model",
     .type = CFG_T_STR,
     FIELD(chat_template),
     .metavar = "FILE",
     .flags = CFG_F_NULLABLE,
     .help = "a Jinja chat template for /v1/chat/completions, instead of the model "
             "folder's (chat_template.jinja, else tokenizer_config.json's chat_template)",
     .dflt_note = "the model folder's, if it has one"},
    {.key = "device",
     .scopes = SRV_GEN_BQ,
     .group = "model",
     .type = CFG_T_ENUM,
     FIELD(device),
     .values = device_names,
     .help = "where the model runs: cpu (oneDNN), cuda (one GPU per tensor-parallel "
             "rank, fp16), or auto: cuda where this build has it and a GPU is present, "
             "else cpu"},
    {.key = "gpu_memory_utilization",
     .scopes = SRV_GEN,
     .group = "model",
     .type = CFG_T_FLOAT,
     FIELD(gpu_memory_utilization),
     .min = 0.05,
     .max = 1,
     .help = "share of each GPU's memory for weights, workspace and the KV pool "
             "together; the pool gets what is left (unless kv_cache_bytes is set)"},
    {.key = "dtype",
     .scopes = SRV_GEN_BQ,
     .group = "model",
     .type = CFG_T_ENUM,
     FIELD(dtype),
     .values = dtype_names,
     .value_aliases = dtype_aliases,
     .help = "weights, activations and (unless kv_cache_dtype says otherwise) the KV "
             "cache; auto is bf16 on a CPU with "
             "AVX512-BF16, else fp32, and fp16 on CUDA. The CPU computes in fp32 or bf16 "
             "(fp16 runs as bf16, as vLLM does, or fp32 without AVX512-BF16), CUDA in "
             "fp16 only: a substitution is logged at startup"},
    {.key = "threads",
     .scopes = SRV_GEN,
     .group = "model",
     .type = CFG_T_INT,
     FIELD(threads),
     .min = 0,
     .max = 4096,
     .help = "OpenMP threads of the CPU backend; 0 uses every core"},
    {.key = "tensor_parallel",
     .scopes = SRV_GEN,
     .alias = "tensor_parallel_size",
     .group = "model",
     .type = CFG_T_INT,
     FIELD(tensor_parallel),
     .min = 1,
     .max = 64,
     .help = "ranks the layers are sharded over (Megatron style: heads and fc1 units "
             "split, one all-reduce after out_proj and after fc2); the CPU backend runs "
             "one thread per rank and splits the OpenMP threads between them; the heads "
             "and ffn size must divide by it"},
    {.key = "dummy_seed",
     .scopes = SRV,
     .group = "model",
     .type = CFG_T_INT,
     FIELD(dummy_seed),
     .min = 0,
     .max = MAX_EXACT,
     .help = "seed of the deterministic dummy:* weights"},
    {.key = "max_model_len",
     .scopes = SRV,
     .group = "model",
     .type = CFG_T_INT,
     FIELD(max_model_len),
     .min = 0,
     .max = 1 << 20,
     .help = "context length: prompt + max_tokens of a request must fit in it (longer "
             "gets 400 context_length_exceeded), and /v1/models reports it; at most the "
             "model's max_position_embeddings (a larger value is a startup error, as in "
             "vLLM: positions beyond the table have no embedding); 0 = the model's"},

    /* engine */
    {.key = "block_size",
     .scopes = SRV_GEN_BQ,
     .group = "engine",
     .type = CFG_T_INT,
     FIELD(block_size),
     .min = 1,
     .max = 1024,
     .help = "token slots per KV-cache block"},
    {.key = "kv_cache_dtype",
     .scopes = SRV_GEN_BQ,
     .group = "engine",
     .type = CFG_T_ENUM,
     FIELD(kv_cache_dtype),
     .values = kv_dtype_names,
     .value_aliases = kv_dtype_aliases,
     .help = "KV cache storage: auto is --dtype's; int8 (CPU and CUDA) is symmetric "
             "int8 with an fp32 scale per token and KV head: about half bf16's bytes per "
             "token, so the same kv_cache_bytes holds about twice the tokens, at a small "
             "quality cost (docs/kv-cache.md). The H2O scores stay fp32"},
    {.key = "kv_cache_bytes",
     .scopes = SRV_GEN,
     .group = "engine",
     .type = CFG_T_SIZE,
     FIELD(kv_cache_bytes),
     .min = 0,
     .max = 1024 * GIB * 1024,
     .help = "KV pool size (K, V and the H2O state of all layers), e.g. 512M or 4G; 0 "
             "means min(4G, 25% of RAM), never more than max_num_seqs sequences of the "
             "full context length (max_model_len) can use (generate: enough for every "
             "prompt at once)"},
    {.key = "kv_cache_blocks",
     .scopes = SRV,
     .group = "engine",
     .type = CFG_T_INT,
     FIELD(kv_cache_blocks),
     .min = 0,
     .max = INT32_MAX,
     .help = "KV pool size as an exact block count, instead of kv_cache_bytes; 0 = off"},
    {.key = "max_num_seqs",
     .scopes = SRV_GEN,
     .group = "engine",
     .type = CFG_T_INT,
     FIELD(max_num_seqs),
     .min = 0,
     .max = 65536,
     .help = "sequences decoding or prefilling at once (generate: 0, its default, runs "
             "every prompt at once; serve and run-batch want at least 1)"},
    {.key = "max_batched_tokens",
     .scopes = SRV_GEN_BQ,
     .alias = "max_num_batched_tokens",
     .group = "engine",
     .type = CFG_T_INT,
     FIELD(max_batched_tokens),
     .min = 1,
     .max = 1 << 20,
     .help = "tokens in one forward step (one per decoding sequence, then prompt chunks); "
             "must exceed max_num_seqs (bench quality: prompt tokens per prefill forward)"},
    {.key = "batch_prompt_tokens",
     .scopes = SRV,
     .group = "engine",
     .type = CFG_T_INT,
     FIELD(batch_prompt_tokens),
     .min = 0,
     .max = 1 << 20,
     .help = "prompt tokens of batch-job requests in one forward step (0: no cap of its "
             "own); smaller keeps the steps an interactive request may wait for short, "
             "larger lets batch jobs with long prompts prefill faster (run-batch: no cap)"},

    /* KV policy */
    {.key = "kv_policy",
     .scopes = SRV_GEN_BQ,
     .group = group_kv,
     .type = CFG_T_ENUM,
     FIELD(kv_policy),
     .values = policy_names,
     .help = "full keeps every token; h2o keeps the heavy hitters and a recent window; "
             "local keeps the recent window only"},
    {.key = "h2o_heavy_ratio",
     .scopes = SRV_GEN_BQ,
     .group = group_kv,
     .type = CFG_T_FLOAT,
     FIELD(h2o_heavy_ratio),
     .min = 0,
     .max = 1,
     .help = "heavy hitters per layer and head, as a fraction of prompt + max_tokens "
             "(0.1 + 0.1 is the H2O paper's 20% budget)"},
    {.key = "h2o_recent_ratio",
     .scopes = SRV_GEN_BQ,
     .group = group_kv,
     .type = CFG_T_FLOAT,
     FIELD(h2o_recent_ratio),
     .min = 0,
     .max = 1,
     .help = "recent window, as the same fraction (at least 1 token)"},
    {.key = "h2o_heavy",
     .scopes = SRV_GEN_BQ,
     .group = group_kv,
     .type = CFG_T_INT,
     FIELD(h2o_heavy),
     .min = -1,
     .max = 1 << 20,
     .help = "heavy hitters as a token count; -1 uses h2o_heavy_ratio"},
    {.key = "h2o_recent",
     .scopes = SRV_GEN_BQ,
     .group = group_kv,
     .type = CFG_T_INT,
     FIELD(h2o_recent),
     .min = -1,
     .max = 1 << 20,
     .help = "recent window as a token count (>= 1); -1 uses h2o_recent_ratio"},
    {.key = "kv_min_budget",
     .scopes = SRV_GEN_BQ,
     .group = group_kv,
     .type = CFG_T_INT,
     FIELD(kv_min_budget),
     .min = 0,
     .max = 1 << 20,
     .help = "floor of the h2o and local budgets, in tokens per layer and head: a "
             "smaller budget is raised to it, so a request whose prompt + max_tokens "
             "fits under it is never evicted (0 = no floor; docs/kv-cache.md)"},

    /* server limits */
    {.key = "api_key",
     .scopes = SRV,
     .group = "server",
     .type = CFG_T_STR,
     FIELD(api_key),
     .metavar = "KEY",
     .flags = CFG_F_NULLABLE | CFG_F_SECRET,
     .help = "require 'Authorization: Bearer KEY' (prefer the config file: other users "
             "can read command lines)"},
    {.key = "max_body_bytes",
     .scopes = SRV,
     .group = "server",
     .type = CFG_T_SIZE,
     FIELD(max_body_bytes),
     .min = KIB,
     .max = 16 * GIB,
     .help = "largest request body; larger gets 413"},
    {.key = "max_header_bytes",
     .scopes = SRV,
     .group = "server",
     .type = CFG_T_SIZE,
     FIELD(max_header_bytes),
     .min = KIB,
     .max = MIB,
     .help = "largest request line plus headers; larger gets 431"},
    {.key = "max_prompts_per_request",
     .scopes = SRV,
     .group = "server",
     .type = CFG_T_INT,
     FIELD(max_prompts_per_request),
     .min = 1,
     .max = 65536,
     .help = "prompts in one completion request"},
    {.key = "max_n",
     .scopes = SRV,
     .group = "server",
     .type = CFG_T_INT,
     FIELD(max_n),
     .min = 1,
     .max = 4096,
     .help = "largest n and best_of of a request"},
    {.key = "max_queue",
     .scopes = SRV,
     .group = "server",
     .type = CFG_T_INT,
     FIELD(max_queue),
     .min = 1,
     .max = 1 << 24,
     .help = "waiting completion sequences (prompts x max(n, best_of)); past it, 429"},
    {.key = "max_connections",
     .scopes = SRV,
     .group = "server",
     .type = CFG_T_INT,
     FIELD(max_connections),
     .min = 1,
     .max = 1 << 20,
     .help = "client connections open at once"},
    {.key = "idle_timeout_s",
     .scopes = SRV,
     .group = "server",
     .type = CFG_T_INT,
     FIELD(idle_timeout_s),
     .min = 0,
     .max = 86400,
     .help = "seconds a keep-alive connection may sit idle before it is closed; 0 = never"},
    {.key = "request_timeout_s",
     .scopes = SRV,
     .group = "server",
     .type = CFG_T_INT,
     FIELD(request_timeout_s),
     .min = 0,
     .max = 1 << 24,
     .help = "seconds a request may run before it is cancelled; 0 = no limit"},
    {.key = "cors_allow_origin",
     .scopes = SRV,
     .group = "server",
     .type = CFG_T_STR,
     FIELD(cors_allow_origin),
     .metavar = "ORIGIN",
     .flags = CFG_F_NULLABLE,
     .help = "answer CORS preflights and send Access-Control-Allow-Origin: ORIGIN "
             "(for example *); unset sends no CORS headers"},
    {.key = "shutdown_grace_s",
     .scopes = SRV,
     .group = "server",
     .type = CFG_T_INT,
     FIELD(shutdown_grace_s),
     .min = 0,
     .max = 86400,
     .help = "on SIGINT or SIGTERM, seconds that requests in flight may take to finish "
             "before they are cancelled"},
    {.key = "write_queue_max_bytes",
     .scopes = SRV,
     .group = "server",
     .type = CFG_T_SIZE,
     FIELD(write_queue_max_bytes),
     .min = 4 * KIB,
     .max = 16 * GIB,
     .help = "per connection: unsent response bytes queued on the socket (bodies go in "
             "pieces under it; a stream that piles more on a client that does not read "
             "is closed), and buffered answers to pipelined requests before the server "
             "stops reading more"},
    {.key = "log_requests",
     .scopes = SRV,
     .group = "server",
     .type = CFG_T_BOOL,
     FIELD(log_requests),
     .help = "log one line per finished request"},

    /* batch */
    {.key = "data_dir",
     .scopes = SRV,
     .group = "batch",
     .type = CFG_T_STR,
     FIELD(data_dir),
     .metavar = "DIR",
     .help = "where the Files and Batches API keep their SQLite store and file bodies "
             "(unless job_store is set)"},
    {.key = "job_store",
     .scopes = SRV,
     .group = "batch",
     .type = CFG_T_STR,
     FIELD(job_store),
     .metavar = "URI",
     /* Secret: a URI may carry a password (PGPASSFILE or ~/.pgpass keep it out). */
     .flags = CFG_F_NULLABLE | CFG_F_SECRET,
     .dflt_note = "SQLite under data_dir",
     .help = "a postgresql://... URI: keep Files, their bodies and Batches in that "
             "database, which many replicas share (docs/deploy.md)"},
    {.key = "batch_max_in_flight",
     .scopes = SRV,
     .group = "batch",
     .type = CFG_T_INT,
     FIELD(batch_max_in_flight),
     .min = 1,
     .max = 65536,
     .help = "batch-job requests handed to the engine at once (they run after "
             "interactive requests)"},
    {.key = "batch_lease_s",
     .scopes = SRV,
     .group = "batch",
     .type = CFG_T_INT,
     FIELD(batch_lease_s),
     .min = 1,
     .max = 86400,
     .help = "seconds a replica holds the batch requests it claims without renewing "
             "them: a replica that dies loses its requests to the others this long "
             "after (docs/deploy.md, sizing the lease)"},
    {.key = "max_file_bytes",
     .scopes = SRV,
     .group = "batch",
     .type = CFG_T_SIZE,
     FIELD(max_file_bytes),
     .min = KIB,
     .max = 16 * GIB,
     .help = "largest file POST /v1/files accepts (OpenAI's batch limit is 200 MB)"},
    {.key = "batch_max_requests",
     .scopes = SRV,
     .group = "batch",
     .type = CFG_T_INT,
     FIELD(batch_max_requests),
     .min = 1,
     .max = 10000000,
     .help = "most request lines in one batch input file"},
    {.key = "batch_window_s",
     .scopes = SRV,
     .group = "batch",
     .type = CFG_T_INT,
     FIELD(batch_window_s),
     .min = 1,
     .max = 31 * 86400,
     .help = "seconds a batch may run before it expires (its completion_window is "
             "always reported as \"24h\")"},
};

void cfg_defaults(struct cfg *c)
{
    memset(c, 0, sizeof *c);
    c->host = xstrdup("127.0.0.1");
    c->port = 8000;
    c->model = xstrdup(MODEL_DEFAULT);
    c->served_model_name = NULL;
    c->dtype = CFG_DTYPE_AUTO;
    c->threads = 0;
    c->device = BE_DEVICE_AUTO;
    c->gpu_memory_utilization = 0.9;
    c->tensor_parallel = 1;
    c->dummy_seed = 0;
    c->max_model_len = 0;
    c->block_size = 16;
    c->kv_cache_dtype = CFG_KV_DTYPE_AUTO;
    c->kv_cache_bytes = 0;
    c->kv_cache_blocks = 0;
    c->max_num_seqs = 256;
    c->max_batched_tokens = 2048;
    c->batch_prompt_tokens = 128;
    c->kv_policy = KV_POLICY_H2O;
    c->h2o_heavy_ratio = 0.1;
    c->h2o_recent_ratio = 0.1;
    c->h2o_heavy = -1;
    c->h2o_recent = -1;
    c->kv_min_budget = KV_MIN_BUDGET_DEFAULT;
    c->api_key = NULL;
    c->max_body_bytes = 32 * (int64_t)MIB;
    c->max_header_bytes = 16 * (int64_t)KIB;
    c->max_prompts_per_request = 64;
    c->max_n = 128;
    c->max_queue = 1024;
    c->max_connections = 1024;
    c->idle_timeout_s = 60;
    c->request_timeout_s = 0;
    c->cors_allow_origin = NULL;
    c->shutdown_grace_s = 30;
    c->write_queue_max_bytes = 8 * (int64_t)MIB;
    c->log_requests = false;
    c->data_dir = xstrdup("./h2oserve-data");
    c->job_store = NULL;
    c->batch_max_in_flight = 64;
    c->batch_lease_s = 30;
    c->max_file_bytes = 200 * (int64_t)MIB;
    c->batch_max_requests = 50000;
    c->batch_window_s = 86400;
    /* generate: sampler_params_default's, 16 tokens */
    c->generate.max_tokens = 16;
    c->generate.temperature = 1;
    c->generate.top_p = 1;
    /* bench quality: quality_spec_default's */
    c->bench_quality.prompt_len = 64;
    c->bench_quality.gen_len = 448;
    c->bench_quality.segments = 0;
    c->bench_quality.batch = 16;
    /* tokenize: BOS first, as /v1/completions and /tokenize encode prompts */
    c->tokenize.bos = true;
}

void cfg_defaults_cmd(struct cfg *c, unsigned scope)
{
    cfg_defaults(c);
    /* The offline commands run where they are told: a machine with a GPU still runs
     * `generate` on the CPU unless --device says otherwise (model_opts_default). */
    if (scope & (CFG_GENERATE | CFG_BENCH_QUALITY)) c->device = BE_DEVICE_CPU;
    if (scope & CFG_GENERATE) c->max_num_seqs = 0; /* every prompt at once */
    if (scope & CFG_BENCH_QUALITY) {
        /* Budgets are exactly what they say: full is the reference row, and the
         * floor applies only when --kv-min-budget asks for it. */
        c->kv_policy = KV_POLICY_FULL;
        c->kv_min_budget = 0;
    }
}

/* The subcommands that parse through the table. */
static const struct cfg_cmd cmd_table[] = {
    {.scope = CFG_SERVE, .name = "serve", .positional = true, .config = true},
    {.scope = CFG_RUN_BATCH,
     .name = "run-batch",
     .required = "-i IN.jsonl -o OUT.jsonl",
     .positional = true,
     .config = true},
    {.scope = CFG_GENERATE, .name = "generate", .required = "--prompt TEXT"},
    {.scope = CFG_BENCH_QUALITY, .name = "bench quality", .required = "--text FILE"},
    {.scope = CFG_TOKENIZE, .name = "tokenize", .required = "(--text TEXT | --decode IDS)"},
};

const struct cfg_cmd *cfg_cmd_of(unsigned scope)
{
    for (size_t i = 0; i < ARRAY_LEN(cmd_table); i++)
        if (cmd_table[i].scope == scope) return &cmd_table[i];
    return NULL;
}

unsigned cfg_scope_of(const char *cmd)
{
    for (size_t i = 0; i < ARRAY_LEN(cmd_table); i++)
        if (strcmp(cmd_table[i].name, cmd) == 0) return cmd_table[i].scope;
    return 0;
}

const struct cfg_opt *cfg_opts(size_t *n)
{
    *n = ARRAY_LEN(opt_table);
    return opt_table;
}

/* "--max-n" or "max_n" (len bytes of name) names option key "max_n". */
static bool name_is(const char *key, const char *name, size_t len, bool flag)
{
    if (!key || strlen(key) != len) return false;
    for (size_t i = 0; i < len; i++) {
        char k = key[i] == '_' && flag ? '-' : key[i];
        if (k != name[i]) return false;
    }
    return true;
}

const struct cfg_opt *cfg_find_n(const char *name, size_t len, bool flag, unsigned scopes)
{
    for (size_t i = 0; i < ARRAY_LEN(opt_table); i++) {
        const struct cfg_opt *o = &opt_table[i];
        if (!(o->scopes & scopes)) continue;
        /* A row that names its flag answers to that flag, not to its key's. */
        const bool own = flag && o->flag
                             ? strlen(o->flag) == len && memcmp(o->flag, name, len) == 0
                             : name_is(o->key, name, len, flag);
        if (own || name_is(o->alias, name, len, flag)) return o;
    }
    return NULL;
}

const struct cfg_opt *cfg_find(const char *name)
{
    if (name[0] == '-' && name[1] == '-')
        return cfg_find_n(name + 2, strlen(name + 2), true, CFG_ANY_SCOPE);
    return cfg_find_n(name, strlen(name), false, CFG_ANY_SCOPE);
}

/* A row's flag as the user types it: its own flag name, else its key with dashes
 * (cfg_usage.c, cfg_value.c). */
void cfg_flag_of_key(const char *key, char *buf, size_t len)
{
    snprintf(buf, len, "--%s", key);
    for (char *p = buf; *p; p++)
        if (*p == '_') *p = '-';
}

void cfg_flag_of(const struct cfg_opt *o, char *buf, size_t len)
{
    if (o->flag)
        snprintf(buf, len, "--%s", o->flag);
    else
        cfg_flag_of_key(o->key, buf, len);
}

/* The row that takes the positional argument (the model), or NULL. */
const struct cfg_opt *cfg_positional_opt(void)
{
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    for (size_t i = 0; i < n; i++)
        if (t[i].flags & CFG_F_POSITIONAL) return &t[i];
    return NULL;
}
