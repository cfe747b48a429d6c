/*
 * main.c - the h2oserve command line.
 *
 * Subcommands: `generate` (complete prompts on stdout, diagnostics on stderr) and
 * `tokenize` (text -> ids as a JSON array, or --decode ids -> text). `serve`,
 * `run-batch` and `bench` come with the server and benchmark issues; `--version`
 * prints meson's project version (H2O_VERSION, as GET /version does).
 * Owns: the process; all configuration is parsed here and passed down.
 */
#include "bench_quality.h"
#include "cfg.h"
#include "err.h"
#include "generate.h"
#include "run_batch.h"
#include "srv_run.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STOPS 4
#define MAX_PROMPTS 4096

static void usage_generate(FILE *f)
{
    fprintf(f,
            "usage: h2oserve generate [options]\n"
            "  --model DIR|dummy:NAME   checkpoint folder or built-in dummy (default %s)\n"
            "  --prompt TEXT            a prompt (repeat for several; they run as one batch)\n"
            "  --max-tokens N           tokens to generate per prompt (default 16)\n"
            "  --temperature T          0 = greedy (default 1)\n"
            "  --top-p P                nucleus sampling mass (default 1)\n"
            "  --top-k K                keep the K most likely tokens (default 0 = off)\n"
            "  --presence-penalty X     OpenAI presence penalty (default 0)\n"
            "  --frequency-penalty X    OpenAI frequency penalty (default 0)\n"
            "  --seed N                 sampling seed (default 0)\n"
            "  --stop TEXT              stop string (up to 4)\n"
            "  --ignore-eos             keep generating after the end-of-text token\n"
            "  --dtype fp32|bf16        compute dtype (default bf16 where the CPU has it)\n"
            "  --threads N              OpenMP threads (default: all cores)\n"
            "  --tensor-parallel N      shard the layers over N ranks (CPU threads or GPUs;\n"
            "                           default 1)\n"
            "  --device cpu|cuda|auto   where the model runs (default cpu)\n"
            "  --gpu-memory-utilization X  share of each GPU to use (default 0.9)\n"
            "  --max-batched-tokens N   tokens per forward step (default 2048)\n"
            "  --block-size N           KV slots per block (default 16)\n"
            "  --max-num-seqs N         sequences running at once (default: all prompts)\n"
            "  --kv-cache-bytes SIZE    KV pool size, e.g. 512M or 2G (default: enough for\n"
            "                           every prompt at once)\n"
            "  --prompts-file FILE      one prompt per line (added to any --prompt)\n"
            "  --kv-policy P            full | h2o | local (default h2o)\n"
            "  --h2o-heavy-ratio X      heavy hitters per (layer, head), as a fraction of\n"
            "                           prompt + max_tokens (default 0.1)\n"
            "  --h2o-recent-ratio X     recent window, same fraction (default 0.1)\n"
            "  --h2o-heavy N            heavy hitters as a token count (overrides the ratio)\n"
            "  --h2o-recent N           recent window as a token count (overrides the ratio)\n"
            "  --kv-min-budget N        floor of the h2o / local budget in tokens per layer\n"
            "                           and head; prompt + max_tokens under it is never\n"
            "                           evicted (default %d, 0 = none)\n",
            MODEL_DEFAULT, KV_MIN_BUDGET_DEFAULT);
}

static int parse_int(const char *s, const char *flag, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "h2oserve: %s wants an integer in [%ld, %ld], got '%s'\n", flag, lo,
                hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *s, const char *flag, double lo, double hi, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi)) {
        fprintf(stderr, "h2oserve: %s wants a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = (float)v;
    return 0;
}

/* "123", "64K", "512M", "2G" (powers of 1024) -> bytes. */
static int parse_size(const char *s, const char *flag, int64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mult = 1;
    if (*end == 'K' || *end == 'k') mult = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mult = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mult = 1024.0 * 1024 * 1024, end++;
    if (errno || end == s || *end || !(v > 0) || v * mult > 9e18) {
        fprintf(stderr, "h2oserve: %s wants a size like 512M or 2G, got '%s'\n", flag, s);
        return -1;
    }
    *out = (int64_t)(v * mult);
    return 0;
}

static int parse_dtype(const char *s, enum dtype *out)
{
    if (model_parse_dtype(s, out) == 0) return 0;
    fprintf(stderr, "h2oserve: --dtype wants fp32 or bf16, got '%s'\n", s);
    return -1;
}

static int cmd_generate(int argc, char **argv)
{
    enum {
        O_MODEL = 256, O_PROMPT, O_MAXTOK, O_TEMP, O_TOPP, O_TOPK, O_PRES, O_FREQ, O_SEED,
        O_STOP, O_IGNEOS, O_DTYPE, O_THREADS, O_MBT, O_BS, O_HELP, O_PFILE, O_KVP, O_HR, O_RR,
        O_HN, O_RN, O_MNS, O_KVB, O_TP, O_DEV, O_GMU, O_FLOOR,
    };
    static const struct option opts[] = {
        {"model", required_argument, 0, O_MODEL},
        {"prompt", required_argument, 0, O_PROMPT},
        {"max-tokens", required_argument, 0, O_MAXTOK},
        {"temperature", required_argument, 0, O_TEMP},
        {"top-p", required_argument, 0, O_TOPP},
        {"top-k", required_argument, 0, O_TOPK},
        {"presence-penalty", required_argument, 0, O_PRES},
        {"frequency-penalty", required_argument, 0, O_FREQ},
        {"seed", required_argument, 0, O_SEED},
        {"stop", required_argument, 0, O_STOP},
        {"ignore-eos", no_argument, 0, O_IGNEOS},
        {"dtype", required_argument, 0, O_DTYPE},
        {"threads", required_argument, 0, O_THREADS},
        {"max-batched-tokens", required_argument, 0, O_MBT},
        {"block-size", required_argument, 0, O_BS},
        {"help", no_argument, 0, O_HELP},
        {"prompts-file", required_argument, 0, O_PFILE},
        {"kv-policy", required_argument, 0, O_KVP},
        {"h2o-heavy-ratio", required_argument, 0, O_HR},
        {"h2o-recent-ratio", required_argument, 0, O_RR},
        {"h2o-heavy", required_argument, 0, O_HN},
        {"h2o-recent", required_argument, 0, O_RN},
        {"kv-min-budget", required_argument, 0, O_FLOOR},
        {"max-num-seqs", required_argument, 0, O_MNS},
        {"kv-cache-bytes", required_argument, 0, O_KVB},
        {"tensor-parallel", required_argument, 0, O_TP},
        {"device", required_argument, 0, O_DEV},
        {"gpu-memory-utilization", required_argument, 0, O_GMU},
        {0, 0, 0, 0},
    };
    const char *model_name = MODEL_DEFAULT;
    const char *prompts_file = NULL;
    int64_t kv_bytes = 0;
    char *file_text = NULL;
    const char *prompts[MAX_PROMPTS];
    const char *stops[MAX_STOPS];
    int n_prompts = 0, n_stops = 0;
    long v;
    struct gen_request proto = {.max_tokens = 16};
    sampler_params_default(&proto.sp);
    kv_spec_default(&proto.kv);
    struct model_opts mo;
    model_opts_default(&mo);
    struct gen_opts go;
    gen_opts_default(&go);

    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case O_MODEL: model_name = optarg; break;
        case O_PROMPT:
            if (n_prompts == MAX_PROMPTS) {
                fprintf(stderr, "h2oserve: at most %d prompts\n", MAX_PROMPTS);
                return 2;
            }
            prompts[n_prompts++] = optarg;
            break;
        case O_MAXTOK:
            bad = parse_int(optarg, "--max-tokens", 0, 1 << 20, &v);
            proto.max_tokens = (int32_t)v;
            break;
        case O_TEMP: bad = parse_float(optarg, "--temperature", 0, 2, &proto.sp.temperature); break;
        case O_TOPP: bad = parse_float(optarg, "--top-p", 0, 1, &proto.sp.top_p); break;
        case O_TOPK:
            bad = parse_int(optarg, "--top-k", 0, 1 << 30, &v);
            proto.sp.top_k = (int32_t)v;
            break;
        case O_PRES:
            bad = parse_float(optarg, "--presence-penalty", -2, 2, &proto.sp.presence_penalty);
            break;
        case O_FREQ:
            bad = parse_float(optarg, "--frequency-penalty", -2, 2, &proto.sp.frequency_penalty);
            break;
        case O_SEED:
            bad = parse_int(optarg, "--seed", 0, LONG_MAX, &v);
            proto.seed = (uint64_t)v;
            break;
        case O_STOP:
            if (n_stops == MAX_STOPS) {
                fprintf(stderr, "h2oserve: at most %d stop strings\n", MAX_STOPS);
                return 2;
            }
            stops[n_stops++] = optarg;
            break;
        case O_IGNEOS: proto.ignore_eos = true; break;
        case O_DTYPE: bad = parse_dtype(optarg, &mo.dtype); break;
        case O_THREADS:
            bad = parse_int(optarg, "--threads", 0, 1024, &v);
            mo.n_threads = (int)v;
            break;
        case O_TP:
            bad = parse_int(optarg, "--tensor-parallel", 1, BE_MAX_TP, &v);
            mo.tensor_parallel = (int)v;
            break;
        case O_DEV:
            if (model_parse_device(optarg, &mo.device))
                bad = fprintf(stderr, "h2oserve: --device wants cpu, cuda or auto, got '%s'\n",
                              optarg) > 0;
            break;
        case O_GMU:
            bad = parse_float(optarg, "--gpu-memory-utilization", 0.05f, 1, &mo.gpu_memory_utilization);
            break;
        case O_MBT:
            bad = parse_int(optarg, "--max-batched-tokens", 1, 1 << 20, &v);
            go.max_batched_tokens = (int32_t)v;
            break;
        case O_BS:
            bad = parse_int(optarg, "--block-size", 1, 1024, &v);
            go.block_size = (int32_t)v;
            break;
        case O_PFILE: prompts_file = optarg; break;
        case O_KVP:
            if (kv_policy_parse(optarg, &proto.kv.policy)) {
                fprintf(stderr, "h2oserve: --kv-policy wants full, h2o or local, got '%s'\n",
                        optarg);
                bad = 1;
            }
            break;
        case O_HR: bad = parse_float(optarg, "--h2o-heavy-ratio", 0, 1, &proto.kv.heavy_ratio); break;
        case O_RR:
            bad = parse_float(optarg, "--h2o-recent-ratio", 0, 1, &proto.kv.recent_ratio);
            break;
        case O_HN:
            bad = parse_int(optarg, "--h2o-heavy", 0, 1 << 20, &v);
            proto.kv.heavy = (int32_t)v;
            break;
        case O_RN:
            bad = parse_int(optarg, "--h2o-recent", 1, 1 << 20, &v);
            proto.kv.recent = (int32_t)v;
            break;
        case O_FLOOR:
            bad = parse_int(optarg, "--kv-min-budget", 0, 1 << 20, &v);
            proto.kv.min_budget = (int32_t)v;
            break;
        case O_MNS:
            bad = parse_int(optarg, "--max-num-seqs", 1, 1 << 16, &v);
            go.max_num_seqs = (int32_t)v;
            break;
        case O_KVB: bad = parse_size(optarg, "--kv-cache-bytes", &kv_bytes); break;
        case O_HELP: usage_generate(stdout); return 0;
        default: usage_generate(stderr); return 2;
        }
        if (bad) return 2;
    }
    if (prompts_file) {
        /* One prompt per line; the buffer stays alive while the prompts point into it. */
        size_t len;
        if (util_read_file(prompts_file, &file_text, &len)) {
            fprintf(stderr, "h2oserve: %s\n", err_msg());
            return 1;
        }
        for (char *line = file_text, *next; line && *line; line = next) {
            next = strchr(line, '\n');
            if (next) *next++ = '\0';
            if (!*line) continue;
            if (n_prompts == MAX_PROMPTS) {
                fprintf(stderr, "h2oserve: at most %d prompts\n", MAX_PROMPTS);
                free(file_text);
                return 2;
            }
            prompts[n_prompts++] = line;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "h2oserve: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (n_prompts == 0) {
        free(file_text);
        fprintf(stderr, "h2oserve: generate needs --prompt or --prompts-file\n");
        usage_generate(stderr);
        return 2;
    }
    proto.stops = stops;
    proto.n_stops = n_stops;

    struct model *m = NULL;
    int err = model_load(&m, model_name, &mo);
    if (err) {
        fprintf(stderr, "h2oserve: %s\n", err_msg());
        return 1;
    }
    fprintf(stderr, "loaded %s (%s, %d layers, hidden %d) in %.2f s\n", m->cfg.name,
            dtype_name(m->dtype), m->cfg.n_layer, m->cfg.hidden, m->load_seconds);
    if (kv_bytes > 0) {
        int64_t per_block = (int64_t)m->be.ops->kv_block_bytes(m->be.ctx, go.block_size);
        go.kv_blocks = (int32_t)MIN(kv_bytes / per_block, INT32_MAX);
        if (go.kv_blocks < 1) {
            fprintf(stderr, "h2oserve: --kv-cache-bytes %lld holds no block (one block of %d "
                            "slots is %lld bytes)\n",
                    (long long)kv_bytes, go.block_size, (long long)per_block);
            model_destroy(m);
            free(file_text);
            return 2;
        }
    }

    struct gen_request *reqs = xcalloc((size_t)n_prompts, sizeof *reqs);
    struct gen_result *res = xcalloc((size_t)n_prompts, sizeof *res);
    for (int i = 0; i < n_prompts; i++) {
        reqs[i] = proto;
        reqs[i].prompt = prompts[i];
        reqs[i].prompt_len = strlen(prompts[i]);
    }
    double t0 = time_now();
    err = generate_run(m, &go, reqs, n_prompts, res);
    double dt = time_now() - t0;
    int rc = 0;
    if (err) {
        fprintf(stderr, "h2oserve: %s\n", err_msg());
        rc = 1;
    } else {
        long n_gen = 0, n_prompt_tok = 0;
        for (int i = 0; i < n_prompts; i++) {
            fwrite(res[i].text, 1, res[i].text_len, stdout);
            fputc('\n', stdout);
            n_gen += res[i].n_tokens;
            n_prompt_tok += res[i].prompt_tokens;
            const struct gen_result *r = &res[i];
            if (r->budget.policy == KV_POLICY_FULL)
                fprintf(stderr, "seq %d: %d prompt + %d generated tokens, kv full: %d slots "
                                "per head, %d blocks\n",
                        i, r->prompt_tokens, r->n_tokens, r->kv_slots, r->kv_blocks_max);
            else
                fprintf(stderr, "seq %d: %d prompt + %d generated tokens, kv %s H=%d R=%d "
                                "(floor %d): %d slots per head, %d blocks, %lld tokens "
                                "evicted per head\n",
                        i, r->prompt_tokens, r->n_tokens, kv_policy_name(r->budget.policy),
                        r->budget.heavy, r->budget.recent, proto.kv.min_budget, r->kv_slots,
                        r->kv_blocks_max,
                        (long long)r->kv_evicted_tokens);
            gen_result_free(&res[i]);
        }
        fprintf(stderr, "%d prompts, %ld prompt tokens, %ld generated tokens in %.2f s "
                        "(%.1f generated tokens/s)\n",
                n_prompts, n_prompt_tok, n_gen, dt, dt > 0 ? (double)n_gen / dt : 0.0);
    }
    free(reqs);
    free(res);
    free(file_text);
    model_destroy(m);
    return rc;
}

/* Parse "[2, 31414, 232]" or "2,31414 232" into ids. Returns count or -1. */
static int parse_ids(const char *s, int32_t **out)
{
    int32_t *ids = NULL;
    int n = 0, cap = 0;
    const char *p = s;
    while (*p) {
        if (strchr("[], \t\n", *p)) {
            p++;
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            free(ids);
            return -1;
        }
        if (n == cap) ids = xrealloc(ids, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *ids);
        ids[n++] = (int32_t)v;
        p = end;
    }
    *out = ids;
    return n;
}

static int cmd_tokenize(int argc, char **argv)
{
    enum { O_MODEL = 256, O_TEXT, O_DECODE, O_NOBOS, O_HELP };
    static const struct option opts[] = {
        {"model", required_argument, 0, O_MODEL}, {"text", required_argument, 0, O_TEXT},
        {"decode", required_argument, 0, O_DECODE}, {"no-bos", no_argument, 0, O_NOBOS},
        {"help", no_argument, 0, O_HELP}, {0, 0, 0, 0},
    };
    const char *model_name = MODEL_DEFAULT, *text = NULL, *decode = NULL;
    bool bos = true;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_MODEL: model_name = optarg; break;
        case O_TEXT: text = optarg; break;
        case O_DECODE: decode = optarg; break;
        case O_NOBOS: bos = false; break;
        case O_HELP:
        default:
            fprintf(c == O_HELP ? stdout : stderr,
                    "usage: h2oserve tokenize [--model DIR|dummy:NAME] (--text TEXT [--no-bos] "
                    "| --decode IDS)\n  IDS: a JSON array or a comma/space separated list\n");
            return c == O_HELP ? 0 : 2;
        }
    }
    if (!text == !decode) {
        fprintf(stderr, "h2oserve: tokenize needs exactly one of --text and --decode\n");
        return 2;
    }
    struct tokenizer *tok = NULL;
    int err = model_load_tokenizer(&tok, NULL, model_name);
    if (err) {
        fprintf(stderr, "h2oserve: %s\n", err_msg());
        return 1;
    }
    int rc = 0;
    if (text) {
        int32_t *ids = NULL, n = 0;
        err = tokenizer_encode(tok, text, strlen(text), bos, &ids, &n);
        if (err) {
            fprintf(stderr, "h2oserve: %s\n", err_msg());
            rc = 1;
        } else {
            putchar('[');
            for (int32_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
            printf("]\n");
        }
        free(ids);
    } else {
        int32_t *ids = NULL;
        int n = parse_ids(decode, &ids);
        char *out = NULL;
        size_t len = 0;
        if (n < 0) {
            fprintf(stderr, "h2oserve: --decode wants token ids, got '%s'\n", decode);
            rc = 2;
        } else if ((err = tokenizer_decode(tok, ids, n, true, &out, &len))) {
            fprintf(stderr, "h2oserve: %s\n", err_msg());
            rc = 1;
        } else {
            fwrite(out, 1, len, stdout);
            putchar('\n');
        }
        free(ids);
        free(out);
    }
    tokenizer_destroy(tok);
    return rc;
}

/* `h2oserve serve [MODEL]`: the OpenAI-compatible HTTP server (flags and the
 * positional model: config/cfg.c's table). */
static int cmd_serve(int argc, char **argv)
{
    struct cfg c;
    cfg_defaults(&c);
    int next = argc;
    int err = cfg_parse_args(&c, argc, argv, &next);
    if (err == CFG_HELP) {
        cfg_usage(stdout, "serve");
        cfg_free(&c);
        return 0;
    }
    if (!err && next < argc)
        err = err_set(ENG_EINVAL, "unexpected argument '%s' (the one positional argument "
                                  "is the model: serve MODEL)", argv[next]);
    if (!err) err = cfg_validate(&c);
    if (err) {
        fprintf(stderr, "h2oserve: %s\n", err_msg());
        cfg_free(&c);
        return 2;
    }
    int rc = srv_run(&c);
    cfg_free(&c);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: h2oserve COMMAND [options]\n"
               "commands:\n"
               "  serve      the OpenAI-compatible HTTP server\n"
               "  run-batch  an OpenAI Batch JSONL file in, its results out (-i, -o)\n"
               "  generate   complete prompts and print the text\n"
               "  tokenize   text -> token ids, or --decode ids -> text\n"
               "  bench quality  perplexity of a text under KV policies (docs/quality.md)\n"
               "Run 'h2oserve COMMAND --help' for its options, and 'h2oserve --version'\n"
               "for the version.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "serve") == 0) return cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "run-batch") == 0) return run_batch_main(argc - 1, argv + 1);
    if (strcmp(cmd, "generate") == 0) return cmd_generate(argc - 1, argv + 1);
    if (strcmp(cmd, "tokenize") == 0) return cmd_tokenize(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) {
        if (argc >= 3 && strcmp(argv[2], "quality") == 0)
            return bench_quality_main(argc - 2, argv + 2);
        fprintf(stderr, "h2oserve bench: the benchmark is 'quality' (throughput is "
                        "build/bench/bench_throughput; docs/benchmarks.md)\n");
        return 2;
    }
    if (strcmp(cmd, "--version") == 0) {
        /* meson's project version (server/meson.build); GET /version says the same. */
        printf("h2oserve %s\n", H2O_VERSION);
        return 0;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "h2oserve: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
