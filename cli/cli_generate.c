/*
 * cli_generate.c - `h2oserve generate`: complete prompts and print the text, one
 * completion a line on stdout, diagnostics (load time, per-sequence KV use, speed)
 * on stderr. Its flags are config/'s table rows of scope CFG_GENERATE: the engine's
 * (--model, --dtype, --kv-policy, ... as serve spells them, with generate's own
 * defaults: the CPU, every prompt at once) and its own (--prompt, --prompt-ids,
 * --max-tokens, sampling, --print-ids).
 *
 * --prompt-ids and --print-ids check any checkpoint token for token against another
 * implementation (transformers' generate with input_ids): ids in, ids out, no
 * tokenizer in between.
 *
 * Owns: the configuration, the prompts file's text (the prompts point into it) and
 * the model, until it returns. Thread: main (generate_run drives the backend).
 */
#include "cli.h"

#include "err.h"
#include "generate.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most prompts, --prompt and --prompts-file lines together (the row's max). */
#define GEN_MAX_PROMPTS 4096

/* --prompt, then the lines of --prompts-file (empty ones skipped), into prompts[].
 * *file_text holds the file; the prompts point into it and into c. Returns the
 * count, or -1 (1: unreadable file, 2: too many) with the message printed. */
static int gather_prompts(const struct cfg *c, const char **prompts, char **file_text,
                          int *rc)
{
    int n = 0;
    for (int32_t i = 0; i < c->generate.prompt.n; i++)
        prompts[n++] = c->generate.prompt.items[i];
    if (!c->generate.prompts_file) return n;
    size_t len;
    if (util_read_file(c->generate.prompts_file, file_text, &len)) {
        fprintf(stderr, "h2oserve: %s\n", err_msg());
        *rc = 1;
        return -1;
    }
    for (char *line = *file_text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (!*line) continue;
        if (n == GEN_MAX_PROMPTS) {
            fprintf(stderr, "h2oserve: at most %d prompts\n", GEN_MAX_PROMPTS);
            *rc = 2;
            return -1;
        }
        prompts[n++] = line;
    }
    return n;
}

/* One --prompt-ids value: a non-empty JSON array of integers (range checked once
 * the model is loaded). Returns 0 with a new array in *ids, or -1 with the message
 * printed. `k` numbers the flag (1-based) for the message. */
static int parse_ids(const char *text, int k, int32_t **ids, int32_t *n)
{
    cJSON *a = cJSON_Parse(text);
    int bad = !cJSON_IsArray(a) || cJSON_GetArraySize(a) == 0;
    int32_t len = bad ? 0 : cJSON_GetArraySize(a), i = 0;
    *ids = bad ? NULL : xcalloc((size_t)len, sizeof **ids);
    for (const cJSON *e = bad ? NULL : a->child; e; e = e->next, i++) {
        const double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!cJSON_IsNumber(e) || d != floor(d) || d < 0 || d > INT32_MAX) {
            bad = 1;
            break;
        }
        (*ids)[i] = (int32_t)d;
    }
    cJSON_Delete(a);
    if (bad) {
        fprintf(stderr,
                "h2oserve: --prompt-ids #%d: expected a non-empty JSON array of token ids "
                "such as '[2, 133, 1370]', got '%s'\n",
                k, text);
        free(*ids);
        *ids = NULL;
        return -1;
    }
    *n = len;
    return 0;
}

/* The completions on stdout, the per-sequence KV lines and the speed on stderr. */
static void report(const struct gen_result *res, int n_prompts, int32_t min_budget,
                   bool ids, double dt)
{
    long n_gen = 0, n_prompt_tok = 0;
    for (int i = 0; i < n_prompts; i++) {
        const struct gen_result *r = &res[i];
        if (ids) {
            cli_print_ids(r->tokens, r->n_tokens);
        } else {
            fwrite(r->text, 1, r->text_len, stdout);
            fputc('\n', stdout);
        }
        n_gen += r->n_tokens;
        n_prompt_tok += r->prompt_tokens;
        if (r->budget.policy == KV_POLICY_FULL)
            fprintf(stderr,
                    "seq %d: %d prompt + %d generated tokens, kv full: %d slots "
                    "per head, %d blocks\n",
                    i, r->prompt_tokens, r->n_tokens, r->kv_slots, r->kv_blocks_max);
        else
            fprintf(stderr,
                    "seq %d: %d prompt + %d generated tokens, kv %s H=%d R=%d "
                    "(floor %d): %d slots per head, %d blocks, %lld tokens "
                    "evicted per head\n",
                    i, r->prompt_tokens, r->n_tokens,
                    kv_budget_policy_name(r->budget.policy), r->budget.heavy,
                    r->budget.recent, min_budget, r->kv_slots, r->kv_blocks_max,
                    (long long)r->kv_evicted_tokens);
    }
    fprintf(stderr,
            "%d prompts, %ld prompt tokens, %ld generated tokens in %.2f s "
            "(%.1f generated tokens/s)\n",
            n_prompts, n_prompt_tok, n_gen, dt, dt > 0 ? (double)n_gen / dt : 0.0);
}

int cli_generate(int argc, char **argv)
{
    struct cfg c;
    int rc = cli_parse(&c, CFG_GENERATE, argc, argv, "h2oserve", NULL);
    if (rc >= 0) {
        cfg_free(&c);
        return rc;
    }
    char *file_text = NULL;
    const char **prompts = xcalloc(GEN_MAX_PROMPTS, sizeof *prompts);
    struct model *m = NULL;
    struct gen_request *reqs = NULL;
    struct gen_result *res = NULL;
    const int n_text = gather_prompts(&c, prompts, &file_text, &rc);
    const int n_idp = c.generate.prompt_ids.n;
    int32_t **ids = xcalloc((size_t)n_idp + 1, sizeof *ids);
    int32_t *n_ids = xcalloc((size_t)n_idp + 1, sizeof *n_ids);
    const int n_prompts = n_text < 0 ? -1 : n_text + n_idp;
    if (n_prompts > GEN_MAX_PROMPTS) {
        fprintf(stderr, "h2oserve: at most %d prompts\n", GEN_MAX_PROMPTS);
        rc = 2;
        goto done;
    }
    if (n_prompts == 0) {
        fprintf(stderr,
                "h2oserve: generate needs --prompt, --prompts-file or --prompt-ids\n");
        cfg_usage(stderr, "generate");
        rc = 2;
    }
    if (n_prompts <= 0) goto done;
    for (int i = 0; i < n_idp; i++)
        if (parse_ids(c.generate.prompt_ids.items[i], i + 1, &ids[i], &n_ids[i])) {
            rc = 2;
            goto done;
        }

    /* The engine's options as serve maps them; generate sizes its own pool. */
    struct engine_opts eo;
    cfg_engine_opts(&c, &eo);
    struct gen_opts go;
    generate_opts_default(&go);
    go.max_batched_tokens = c.max_batched_tokens;
    go.block_size = c.block_size;
    go.max_num_seqs = c.max_num_seqs;
    struct gen_request proto = {
        .max_tokens = c.generate.max_tokens,
        .seed = (uint64_t)c.generate.seed,
        .stops = (const char *const *)c.generate.stop.items,
        .n_stops = c.generate.stop.n,
        .ignore_eos = c.generate.ignore_eos,
    };
    sampler_params_default(&proto.sp);
    proto.sp.temperature = (float)c.generate.temperature;
    proto.sp.top_p = (float)c.generate.top_p;
    proto.sp.top_k = c.generate.top_k;
    proto.sp.presence_penalty = (float)c.generate.presence_penalty;
    proto.sp.frequency_penalty = (float)c.generate.frequency_penalty;
    cfg_kv_spec(&c, &proto.kv);

    rc = 1;
    if (model_load(&m, c.model, &eo.model_opts)) {
        fprintf(stderr, "h2oserve: %s\n", err_msg());
        goto done;
    }
    fprintf(stderr, "loaded %s (%s, KV cache %s, %d layers, hidden %d) in %.2f s\n",
            m->cfg.name, dtype_name(m->dtype), dtype_name(m->kv_dtype), m->cfg.n_layer,
            m->cfg.hidden, m->load_seconds);
    if (c.kv_cache_bytes > 0) {
        int64_t per_block = (int64_t)backend_kv_block_bytes(&m->be, go.block_size);
        go.kv_blocks = (int32_t)MIN(c.kv_cache_bytes / per_block, INT32_MAX);
        if (go.kv_blocks < 1) {
            fprintf(stderr,
                    "h2oserve: --kv-cache-bytes %lld holds no block (one block of %d "
                    "slots is %lld bytes)\n",
                    (long long)c.kv_cache_bytes, go.block_size, (long long)per_block);
            rc = 2;
            goto done;
        }
    }
    if (!tokenizer_has_text(m->tok) && (n_text > 0 || !c.generate.print_ids)) {
        fprintf(stderr,
                "h2oserve: %s has no tokenizer (no tokenizer.json or vocab.json + "
                "merges.txt): give prompts with --prompt-ids and print completions with "
                "--print-ids\n",
                c.model);
        rc = 2;
        goto done;
    }
    if (!tokenizer_has_text(m->tok) && c.generate.stop.n > 0) {
        fprintf(stderr,
                "h2oserve: %s has no tokenizer, so its completions have no text for --stop "
                "to match\n",
                c.model);
        rc = 2;
        goto done;
    }
    for (int i = 0; i < n_idp; i++)
        for (int32_t k = 0; k < n_ids[i]; k++)
            if (ids[i][k] >= m->cfg.vocab_size) {
                fprintf(stderr,
                        "h2oserve: --prompt-ids #%d: id %d is outside the vocabulary "
                        "(0..%d)\n",
                        i + 1, ids[i][k], m->cfg.vocab_size - 1);
                rc = 2;
                goto done;
            }
    reqs = xcalloc((size_t)n_prompts, sizeof *reqs);
    res = xcalloc((size_t)n_prompts, sizeof *res);
    for (int i = 0; i < n_prompts; i++) {
        reqs[i] = proto;
        if (i < n_text) {
            reqs[i].prompt = prompts[i];
            reqs[i].prompt_len = strlen(prompts[i]);
        } else {
            reqs[i].prompt_ids = ids[i - n_text];
            reqs[i].n_prompt_ids = n_ids[i - n_text];
        }
    }
    double t0 = time_now();
    if (generate_run(m, &go, reqs, n_prompts, res)) {
        fprintf(stderr, "h2oserve: %s\n", err_msg());
        goto done;
    }
    report(res, n_prompts, proto.kv.min_budget, c.generate.print_ids, time_now() - t0);
    for (int i = 0; i < n_prompts; i++)
        generate_result_free(&res[i]);
    rc = 0;
done:
    for (int i = 0; i < n_idp; i++)
        free(ids[i]);
    free(ids);
    free(n_ids);
    free(reqs);
    free(res);
    free(file_text);
    free(prompts);
    model_destroy(m);
    cfg_free(&c);
    return rc;
}
