/*
 * cfg.c - the option table, defaults, setting values from text and JSON, validation
 * and the engine mapping (see cfg.h). cfg_io.c reads files and argv and writes
 * --help and JSON, all through the table and cfg_opt_set below.
 *
 * Owns: the static option table; the strings of a struct cfg belong to its owner.
 * Invariant: every field of struct cfg has exactly one table entry, and an entry
 * reaches only its own field (the unit test sets each option through the table and
 * checks that no other option changed).
 * Thread: any (no mutable state).
 */
#include "cfg.h"
#include "cfg_impl.h"

#include "err.h"
#include "model.h"
#include "util.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Enums are stored and read as int through the table. */
_Static_assert(sizeof(enum cfg_dtype) == sizeof(int), "enum cfg_dtype is int-sized");
_Static_assert(CFG_DTYPE_AUTO == 0 && CFG_DTYPE_FP32 == 1 && CFG_DTYPE_BF16 == 2 &&
                   CFG_DTYPE_FP16 == 3,
               "dtype_names[] is indexed by enum cfg_dtype");
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

#define FIELD(f) .offset = offsetof(struct cfg, f), .size = sizeof(((struct cfg *)0)->f)

static const char *const dtype_names[] = {"auto", "fp32", "bf16", "fp16", NULL};
/* vLLM's --dtype names (torch's), stored as ours. */
static const struct cfg_enum_alias dtype_aliases[] = {
    {"float32", CFG_DTYPE_FP32}, {"float", CFG_DTYPE_FP32}, {"bfloat16", CFG_DTYPE_BF16},
    {"float16", CFG_DTYPE_FP16}, {"half", CFG_DTYPE_FP16},  {NULL, 0},
};
static const char *const policy_names[] = {"full", "h2o", "local", NULL};
static const char *const device_names[] = {"cpu", "cuda", "auto", NULL};

/* The --help heading of the KV policy options. */
static const char group_kv[] = "KV cache policy (requests that set no kv_cache)";

static const struct cfg_opt opt_table[] = {
    /* listen */
    {.key = "host",
     .group = "listen",
     .type = CFG_T_STR,
     FIELD(host),
     .metavar = "ADDR",
     .help = "address to bind; 0.0.0.0 listens on every interface"},
    {.key = "port",
     .group = "listen",
     .type = CFG_T_INT,
     FIELD(port),
     .min = 0,
     .max = 65535,
     .help = "TCP port; 0 lets the kernel pick a free one"},

    /* model */
    {.key = "model",
     .group = "model",
     .type = CFG_T_STR,
     FIELD(model),
     .metavar = "DIR|default|dummy:NAME",
     .flags = CFG_F_POSITIONAL,
     .help = "checkpoint folder (config.json, weights, vocab.json + merges.txt), "
             "'default' (the small built-in trained model, docs/quality.md) or a "
             "built-in dummy model with random weights: dummy:tiny, dummy:opt-125m ... "
             "dummy:opt-66b"},
    {.key = "served_model_name",
     .group = "model",
     .type = CFG_T_STR,
     FIELD(served_model_name),
     .metavar = "NAME",
     .flags = CFG_F_NULLABLE,
     .help = "the model id that clients send and /v1/models lists",
     .dflt_note = "the model's name"},
    {.key = "device",
     .group = "model",
     .type = CFG_T_ENUM,
     FIELD(device),
     .values = device_names,
     .help = "where the model runs: cpu (oneDNN), cuda (one GPU per tensor-parallel "
             "rank, fp16), or auto: cuda where this build has it and a GPU is present, "
             "else cpu"},
    {.key = "gpu_memory_utilization",
     .group = "model",
     .type = CFG_T_FLOAT,
     FIELD(gpu_memory_utilization),
     .min = 0.05,
     .max = 1,
     .help = "share of each GPU's memory for weights, workspace and the KV pool "
             "together; the pool gets what is left (unless kv_cache_bytes is set)"},
    {.key = "dtype",
     .group = "model",
     .type = CFG_T_ENUM,
     FIELD(dtype),
     .values = dtype_names,
     .value_aliases = dtype_aliases,
     .help = "weights, activations and KV cache; auto is bf16 on a CPU with "
             "AVX512-BF16, else fp32, and fp16 on CUDA. The CPU computes in fp32 or bf16 "
             "(fp16 runs as bf16, as vLLM does, or fp32 without AVX512-BF16), CUDA in "
             "fp16 only: a substitution is logged at startup"},
    {.key = "threads",
     .group = "model",
     .type = CFG_T_INT,
     FIELD(threads),
     .min = 0,
     .max = 4096,
     .help = "OpenMP threads of the CPU backend; 0 uses every core"},
    {.key = "tensor_parallel",
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
     .group = "model",
     .type = CFG_T_INT,
     FIELD(dummy_seed),
     .min = 0,
     .max = MAX_EXACT,
     .help = "seed of the deterministic dummy:* weights"},
    {.key = "max_model_len",
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
     .group = "engine",
     .type = CFG_T_INT,
     FIELD(block_size),
     .min = 1,
     .max = 1024,
     .help = "token slots per KV-cache block"},
    {.key = "kv_cache_bytes",
     .group = "engine",
     .type = CFG_T_SIZE,
     FIELD(kv_cache_bytes),
     .min = 0,
     .max = 1024 * GIB * 1024,
     .help = "KV pool size (K, V and the H2O state of all layers), e.g. 512M or 4G; 0 "
             "means min(4G, 25% of RAM), never more than max_num_seqs sequences of the "
             "full context length (max_model_len) can use"},
    {.key = "kv_cache_blocks",
     .group = "engine",
     .type = CFG_T_INT,
     FIELD(kv_cache_blocks),
     .min = 0,
     .max = INT32_MAX,
     .help = "KV pool size as an exact block count, instead of kv_cache_bytes; 0 = off"},
    {.key = "max_num_seqs",
     .group = "engine",
     .type = CFG_T_INT,
     FIELD(max_num_seqs),
     .min = 1,
     .max = 65536,
     .help = "sequences decoding or prefilling at once"},
    {.key = "max_batched_tokens",
     .alias = "max_num_batched_tokens",
     .group = "engine",
     .type = CFG_T_INT,
     FIELD(max_batched_tokens),
     .min = 2,
     .max = 1 << 20,
     .help = "tokens in one forward step (one per decoding sequence, then prompt chunks); "
             "must exceed max_num_seqs"},
    {.key = "batch_prompt_tokens",
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
     .group = group_kv,
     .type = CFG_T_ENUM,
     FIELD(kv_policy),
     .values = policy_names,
     .help = "full keeps every token; h2o keeps the heavy hitters and a recent window; "
             "local keeps the recent window only"},
    {.key = "h2o_heavy_ratio",
     .group = group_kv,
     .type = CFG_T_FLOAT,
     FIELD(h2o_heavy_ratio),
     .min = 0,
     .max = 1,
     .help = "heavy hitters per layer and head, as a fraction of prompt + max_tokens "
             "(0.1 + 0.1 is the H2O paper's 20% budget)"},
    {.key = "h2o_recent_ratio",
     .group = group_kv,
     .type = CFG_T_FLOAT,
     FIELD(h2o_recent_ratio),
     .min = 0,
     .max = 1,
     .help = "recent window, as the same fraction (at least 1 token)"},
    {.key = "h2o_heavy",
     .group = group_kv,
     .type = CFG_T_INT,
     FIELD(h2o_heavy),
     .min = -1,
     .max = 1 << 20,
     .help = "heavy hitters as a token count; -1 uses h2o_heavy_ratio"},
    {.key = "h2o_recent",
     .group = group_kv,
     .type = CFG_T_INT,
     FIELD(h2o_recent),
     .min = -1,
     .max = 1 << 20,
     .help = "recent window as a token count (>= 1); -1 uses h2o_recent_ratio"},
    {.key = "kv_min_budget",
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
     .group = "server",
     .type = CFG_T_STR,
     FIELD(api_key),
     .metavar = "KEY",
     .flags = CFG_F_NULLABLE | CFG_F_SECRET,
     .help = "require 'Authorization: Bearer KEY' (prefer the config file: other users "
             "can read command lines)"},
    {.key = "max_body_bytes",
     .group = "server",
     .type = CFG_T_SIZE,
     FIELD(max_body_bytes),
     .min = KIB,
     .max = 16 * GIB,
     .help = "largest request body; larger gets 413"},
    {.key = "max_header_bytes",
     .group = "server",
     .type = CFG_T_SIZE,
     FIELD(max_header_bytes),
     .min = KIB,
     .max = MIB,
     .help = "largest request line plus headers; larger gets 431"},
    {.key = "max_prompts_per_request",
     .group = "server",
     .type = CFG_T_INT,
     FIELD(max_prompts_per_request),
     .min = 1,
     .max = 65536,
     .help = "prompts in one completion request"},
    {.key = "max_n",
     .group = "server",
     .type = CFG_T_INT,
     FIELD(max_n),
     .min = 1,
     .max = 4096,
     .help = "largest n and best_of of a request"},
    {.key = "max_queue",
     .group = "server",
     .type = CFG_T_INT,
     FIELD(max_queue),
     .min = 1,
     .max = 1 << 24,
     .help = "requests waiting for the engine; beyond it new ones get 429"},
    {.key = "max_connections",
     .group = "server",
     .type = CFG_T_INT,
     FIELD(max_connections),
     .min = 1,
     .max = 1 << 20,
     .help = "client connections open at once"},
    {.key = "idle_timeout_s",
     .group = "server",
     .type = CFG_T_INT,
     FIELD(idle_timeout_s),
     .min = 0,
     .max = 86400,
     .help = "seconds a keep-alive connection may sit idle before it is closed; 0 = never"},
    {.key = "request_timeout_s",
     .group = "server",
     .type = CFG_T_INT,
     FIELD(request_timeout_s),
     .min = 0,
     .max = 1 << 24,
     .help = "seconds a request may run before it is cancelled; 0 = no limit"},
    {.key = "cors_allow_origin",
     .group = "server",
     .type = CFG_T_STR,
     FIELD(cors_allow_origin),
     .metavar = "ORIGIN",
     .flags = CFG_F_NULLABLE,
     .help = "answer CORS preflights and send Access-Control-Allow-Origin: ORIGIN "
             "(for example *); unset sends no CORS headers"},
    {.key = "shutdown_grace_s",
     .group = "server",
     .type = CFG_T_INT,
     FIELD(shutdown_grace_s),
     .min = 0,
     .max = 86400,
     .help = "on SIGINT or SIGTERM, seconds that requests in flight may take to finish "
             "before they are cancelled"},
    {.key = "write_queue_max_bytes",
     .group = "server",
     .type = CFG_T_SIZE,
     FIELD(write_queue_max_bytes),
     .min = 4 * KIB,
     .max = 16 * GIB,
     .help = "response bytes a connection may leave unsent (a slow client) before the "
             "server closes it"},
    {.key = "log_requests",
     .group = "server",
     .type = CFG_T_BOOL,
     FIELD(log_requests),
     .help = "log one line per finished request"},

    /* batch */
    {.key = "data_dir",
     .group = "batch",
     .type = CFG_T_STR,
     FIELD(data_dir),
     .metavar = "DIR",
     .help = "where the Files and Batches API keep their SQLite store and file bodies"},
    {.key = "batch_max_in_flight",
     .group = "batch",
     .type = CFG_T_INT,
     FIELD(batch_max_in_flight),
     .min = 1,
     .max = 65536,
     .help = "batch-job requests handed to the engine at once (they run after "
             "interactive requests)"},
    {.key = "max_file_bytes",
     .group = "batch",
     .type = CFG_T_SIZE,
     FIELD(max_file_bytes),
     .min = KIB,
     .max = 16 * GIB,
     .help = "largest file POST /v1/files accepts (OpenAI's batch limit is 200 MB)"},
    {.key = "batch_max_requests",
     .group = "batch",
     .type = CFG_T_INT,
     FIELD(batch_max_requests),
     .min = 1,
     .max = 10000000,
     .help = "most request lines in one batch input file"},
    {.key = "batch_window_s",
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
    c->batch_max_in_flight = 64;
    c->max_file_bytes = 200 * (int64_t)MIB;
    c->batch_max_requests = 50000;
    c->batch_window_s = 86400;
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

const struct cfg_opt *cfg_find_n(const char *name, size_t len, bool flag)
{
    for (size_t i = 0; i < ARRAY_LEN(opt_table); i++)
        if (name_is(opt_table[i].key, name, len, flag) ||
            name_is(opt_table[i].alias, name, len, flag))
            return &opt_table[i];
    return NULL;
}

const struct cfg_opt *cfg_find(const char *name)
{
    if (name[0] == '-' && name[1] == '-')
        return cfg_find_n(name + 2, strlen(name + 2), true);
    return cfg_find_n(name, strlen(name), false);
}

char **cfg_str_field(struct cfg *c, const struct cfg_opt *o)
{
    return (char **)((char *)c + o->offset);
}

int64_t cfg_int_get(const struct cfg *c, const struct cfg_opt *o)
{
    const char *p = (const char *)c + o->offset;
    if (o->type == CFG_T_BOOL) return *(const bool *)p;
    if (o->type == CFG_T_ENUM) return *(const int *)p;
    if (o->size == sizeof(int32_t)) return *(const int32_t *)p;
    return *(const int64_t *)p;
}

double cfg_float_get(const struct cfg *c, const struct cfg_opt *o)
{
    return *(const double *)((const char *)c + o->offset);
}

const char *cfg_str_get(const struct cfg *c, const struct cfg_opt *o)
{
    return *(char *const *)((const char *)c + o->offset);
}

/* Store a checked value into o's field; strings are copied, the old one freed. */
static void store(struct cfg *c, const struct cfg_opt *o, const struct cfg_val *v)
{
    char *p = (char *)c + o->offset;
    switch (o->type) {
    case CFG_T_STR: {
        char **s = (char **)p;
        free(*s);
        *s = v->s ? xstrdup(v->s) : NULL;
        break;
    }
    case CFG_T_BOOL: *(bool *)p = v->i != 0; break;
    case CFG_T_ENUM: *(int *)p = (int)v->i; break;
    case CFG_T_FLOAT: *(double *)p = v->f; break;
    case CFG_T_INT:
    case CFG_T_SIZE:
        if (o->size == sizeof(int32_t))
            *(int32_t *)p = (int32_t)v->i;
        else
            *(int64_t *)p = v->i;
        break;
    }
}

/* Ranges print as integers for integer types and as sizes for sizes. */
static void fmt_num(const struct cfg_opt *o, double x, char *buf, size_t len)
{
    if (o->type == CFG_T_SIZE)
        cfg_format_size((int64_t)x, buf, len);
    else if (o->type == CFG_T_FLOAT)
        snprintf(buf, len, "%g", x);
    else
        snprintf(buf, len, "%.0f", x);
}

static int range_error(const struct cfg_opt *o, const char *who, const char *got)
{
    char lo[32], hi[32];
    fmt_num(o, o->min, lo, sizeof lo);
    fmt_num(o, o->max, hi, sizeof hi);
    const char *what = o->type == CFG_T_SIZE    ? "a size"
                       : o->type == CFG_T_FLOAT ? "a number"
                                                : "an integer";
    return err_set(ENG_EINVAL, "%s wants %s in [%s, %s], got %s", who, what, lo, hi, got);
}

/* Whole bytes from "123", "1.5G", "512M", "64KiB", "2gb", "100B" (powers of 1024). No
 * sign, exponent or hex: a size is digits, an optional fraction and a unit. */
static int parse_size(const char *s, double *out)
{
    static const char units[] = "kmgt";
    size_t n = strspn(s, "0123456789.");
    char num[64];
    if (n == 0 || n >= sizeof num) return -1;
    memcpy(num, s, n);
    num[n] = '\0';
    char *end;
    double v = strtod(num, &end);
    if (*end) return -1; /* "1.2.3" */
    const char *u = s + n;
    int exp = 0;
    const char *k = *u ? strchr(units, tolower((unsigned char)*u)) : NULL;
    if (k) {
        exp = (int)(k - units) + 1;
        u++;
        if (*u == 'i' || *u == 'I') u++;
    }
    if (*u == 'b' || *u == 'B') u++;
    if (*u) return -1;
    v *= pow(1024.0, exp);
    if (!isfinite(v) || v != floor(v)) return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, int64_t *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) return *out = 1, 0;
        if (strcasecmp(s, no[i]) == 0) return *out = 0, 0;
    }
    return -1;
}

int cfg_enum_parse(const struct cfg_opt *o, const char *s, const char *who, int64_t *out)
{
    for (int i = 0; o->values[i]; i++)
        if (strcmp(o->values[i], s) == 0) return *out = i, 0;
    /* An alias is normalised here, so the struct only ever holds canonical values. */
    for (const struct cfg_enum_alias *a = o->value_aliases; a && a->name; a++)
        if (strcmp(a->name, s) == 0) return *out = a->value, 0;
    char all[256] = "";
    for (int i = 0; o->values[i]; i++) {
        if (i) strncat(all, "|", sizeof all - strlen(all) - 1);
        strncat(all, o->values[i], sizeof all - strlen(all) - 1);
    }
    for (const struct cfg_enum_alias *a = o->value_aliases; a && a->name; a++) {
        strncat(all, a == o->value_aliases ? " (or " : ", ", sizeof all - strlen(all) - 1);
        strncat(all, a->name, sizeof all - strlen(all) - 1);
        if (!a[1].name) strncat(all, ")", sizeof all - strlen(all) - 1);
    }
    return err_set(ENG_EINVAL, "%s wants one of %s, got '%.64s'", who, all, s);
}

int cfg_opt_set(struct cfg *c, const struct cfg_opt *o, const struct cfg_val *v,
                const char *who)
{
    struct cfg_val w = *v;
    char got[48];
    switch (o->type) {
    case CFG_T_STR:
        if ((o->flags & CFG_F_NULLABLE) && w.s && !w.s[0]) w.s = NULL;
        break;
    case CFG_T_INT:
    case CFG_T_SIZE:
        /* w.f holds the number; ranges never reach past 2^63, so the cast is safe once
         * it is inside them. */
        if (!(w.f >= o->min && w.f <= o->max)) {
            snprintf(got, sizeof got, "%.17g", w.f);
            return range_error(o, who, got);
        }
        if (w.f != floor(w.f))
            return err_set(ENG_EINVAL, "%s wants a whole number, got %.17g", who, w.f);
        w.i = (int64_t)w.f;
        break;
    case CFG_T_FLOAT:
        if (!(w.f >= o->min && w.f <= o->max)) {
            snprintf(got, sizeof got, "%.17g", w.f);
            return range_error(o, who, got);
        }
        break;
    case CFG_T_BOOL:
    case CFG_T_ENUM: break;
    }
    store(c, o, &w);
    return 0;
}

int cfg_opt_set_text(struct cfg *c, const struct cfg_opt *o, const char *s, const char *who)
{
    struct cfg_val v = {0};
    char *end;
    switch (o->type) {
    case CFG_T_STR: v.s = s; break;
    case CFG_T_INT:
        /* strtod, not strtoll, so that "1e3" works and out-of-range numbers reach the
         * range check as numbers rather than as ERANGE. No hex, no spaces. */
        v.f = strtod(s, &end);
        if (end == s || *end || isspace((unsigned char)s[0]) || strpbrk(s, "xXnN"))
            return err_set(ENG_EINVAL, "%s wants an integer, got '%.64s'", who, s);
        break;
    case CFG_T_SIZE:
        if (parse_size(s, &v.f))
            return err_set(ENG_EINVAL,
                           "%s wants a size in bytes like 65536, 512M or 2G, got '%.64s'",
                           who, s);
        break;
    case CFG_T_FLOAT:
        v.f = strtod(s, &end);
        if (end == s || *end || isspace((unsigned char)s[0]) || strpbrk(s, "xX") ||
            !isfinite(v.f))
            return err_set(ENG_EINVAL, "%s wants a number, got '%.64s'", who, s);
        break;
    case CFG_T_BOOL:
        if (parse_bool(s, &v.i))
            return err_set(ENG_EINVAL, "%s wants true or false, got '%.64s'", who, s);
        break;
    case CFG_T_ENUM:
        if (cfg_enum_parse(o, s, who, &v.i)) return ENG_EINVAL;
        break;
    }
    return cfg_opt_set(c, o, &v, who);
}

int cfg_set(struct cfg *c, const char *name, const char *value)
{
    const struct cfg_opt *o = cfg_find(name);
    if (!o) return err_set(ENG_ENOTFOUND, "unknown option '%.64s'", name);
    char who[80];
    snprintf(who, sizeof who, "--%s", o->key);
    for (char *p = who; *p; p++)
        if (*p == '_') *p = '-';
    return cfg_opt_set_text(c, o, value, who);
}

void cfg_free(struct cfg *c)
{
    if (!c) return;
    for (size_t i = 0; i < ARRAY_LEN(opt_table); i++) {
        if (opt_table[i].type != CFG_T_STR) continue;
        char **s = cfg_str_field(c, &opt_table[i]);
        free(*s);
        *s = NULL;
    }
}

void cfg_copy(struct cfg *dst, const struct cfg *src)
{
    *dst = *src;
    for (size_t i = 0; i < ARRAY_LEN(opt_table); i++) {
        if (opt_table[i].type != CFG_T_STR) continue;
        char **s = cfg_str_field(dst, &opt_table[i]);
        if (*s) *s = xstrdup(*s);
    }
}

int cfg_validate(const struct cfg *c)
{
    for (size_t i = 0; i < ARRAY_LEN(opt_table); i++) {
        const struct cfg_opt *o = &opt_table[i];
        const char *s;
        int64_t v;
        double f;
        switch (o->type) {
        case CFG_T_STR:
            s = cfg_str_get(c, o);
            if (!s && (o->flags & CFG_F_NULLABLE)) break;
            if (!s || !s[0]) return err_set(ENG_EINVAL, "%s must not be empty", o->key);
            for (const char *p = s; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                    return err_set(ENG_EINVAL, "%s must not contain control characters",
                                   o->key);
            break;
        case CFG_T_INT:
        case CFG_T_SIZE:
            v = cfg_int_get(c, o);
            if ((double)v < o->min || (double)v > o->max) {
                char got[32];
                snprintf(got, sizeof got, "%lld", (long long)v);
                return range_error(o, o->key, got);
            }
            break;
        case CFG_T_FLOAT:
            f = cfg_float_get(c, o);
            if (!(f >= o->min && f <= o->max)) {
                char got[32];
                snprintf(got, sizeof got, "%g", f);
                return range_error(o, o->key, got);
            }
            break;
        case CFG_T_ENUM:
            v = cfg_int_get(c, o);
            int n = 0;
            while (o->values[n])
                n++;
            if (v < 0 || v >= n)
                return err_set(ENG_EINVAL, "%s: bad value %lld", o->key, (long long)v);
            break;
        case CFG_T_BOOL: break;
        }
    }
    /* The scheduler needs room for every running sequence's decode token plus at
     * least one prompt token in each step, or a waiting prompt could starve. */
    if (c->max_batched_tokens <= c->max_num_seqs)
        return err_set(ENG_EINVAL, "max_batched_tokens (%d) must exceed max_num_seqs (%d)",
                       c->max_batched_tokens, c->max_num_seqs);
    if (c->h2o_recent == 0)
        return err_set(ENG_EINVAL, "h2o_recent must be -1 (use the ratio) or >= 1: the "
                                   "recent window includes the current token");
    if (c->kv_cache_bytes > 0 && c->kv_cache_blocks > 0)
        return err_set(ENG_EINVAL, "kv_cache_bytes and kv_cache_blocks both size the KV "
                                   "pool; set one of them (the other 0)");
    return 0;
}

void cfg_kv_spec(const struct cfg *c, struct kv_spec *s)
{
    kv_spec_default(s);
    s->policy = c->kv_policy;
    s->heavy_ratio = (float)c->h2o_heavy_ratio;
    s->recent_ratio = (float)c->h2o_recent_ratio;
    s->heavy = c->h2o_heavy;
    s->recent = c->h2o_recent;
    s->min_budget = c->kv_min_budget;
}

void cfg_fingerprint(const struct cfg *c, char *buf, size_t len)
{
    struct engine_opts eo;
    cfg_engine_opts(c, &eo);
    const struct kv_spec *k = &eo.kv_default;
    enum be_device device;
    enum dtype dtype;
    model_resolve_backend(&eo.model_opts, &device, &dtype); /* what auto comes to here */
    char what[4096];
    snprintf(what, sizeof what, "%s|%s|%d|%d|%d|%llu|%d|%d|%.9g|%.9g|%d|%d|%d", H2O_VERSION,
             c->model, (int)device, (int)dtype,
             eo.model_opts.tensor_parallel, (unsigned long long)eo.model_opts.dummy_seed,
             eo.block_size, (int)k->policy, k->heavy_ratio, k->recent_ratio, k->heavy,
             k->recent, k->min_budget);
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)what; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    snprintf(buf, len, "fp_%010llx", (unsigned long long)(h >> 24));
}

void cfg_engine_opts(const struct cfg *c, struct engine_opts *o)
{
    engine_opts_default(o);
    o->model = c->model;
    /* auto keeps model_opts_default's choice (bf16 where the CPU has it); a dtype
     * asked for is marked, so that a backend that cannot compute in it says so. */
    if (c->dtype == CFG_DTYPE_FP32)
        o->model_opts.dtype = DTYPE_F32;
    else if (c->dtype == CFG_DTYPE_BF16)
        o->model_opts.dtype = DTYPE_BF16;
    else if (c->dtype == CFG_DTYPE_FP16)
        o->model_opts.dtype = DTYPE_F16;
    o->model_opts.dtype_set = c->dtype != CFG_DTYPE_AUTO;
    o->model_opts.n_threads = c->threads;
    o->model_opts.tensor_parallel = c->tensor_parallel;
    o->model_opts.device = c->device;
    o->model_opts.gpu_memory_utilization = (float)c->gpu_memory_utilization;
    o->model_opts.dummy_seed = (uint64_t)c->dummy_seed;
    o->block_size = c->block_size;
    o->kv_cache_bytes = c->kv_cache_bytes;
    o->kv_blocks = c->kv_cache_blocks;
    o->sched.max_num_seqs = c->max_num_seqs;
    o->sched.max_batched_tokens = c->max_batched_tokens;
    o->sched.batch_prompt_tokens = c->batch_prompt_tokens;
    o->sched.max_model_len = c->max_model_len;
    cfg_kv_spec(c, &o->kv_default);
}
