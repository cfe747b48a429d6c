/*
 * cmpl.c - POST /v1/completions: parsing and validating the request body, and
 * turning it into engine requests (see cmpl.h). The response side is cmpl_resp.c.
 *
 * Owns: the strings and arrays of a struct cmpl_params (cmpl_params_free).
 * Validation order: the body must be UTF-8 JSON holding an object; then each known
 * field's type and range in the order of the table below; then the fields that
 * depend on each other (best_of vs n and stream, stream_options vs stream); then the
 * model (404); then the prompts, which are tokenized, and the context length. The
 * first problem found is the one reported.
 * Why one file of about 630 lines: that validation order is the contract (clients
 * and tests see which error comes first), and it is read top to bottom here; the
 * typed readers and the structured fields (stop, logit_bias, stream_options,
 * kv_cache, prompts) have parse_fields as their only caller, so moving them out
 * would export a dozen helpers to save no reader a jump.
 * Thread: any (no state).
 */
#include "cmpl.h"

#include "tokenizer.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fields we read. Anything else in the body is ignored (see cmpl_parse). */
enum field {
    F_MODEL,
    F_PROMPT,
    F_MAX_TOKENS,
    F_TEMPERATURE,
    F_TOP_P,
    F_TOP_K,
    F_N,
    F_BEST_OF,
    F_STREAM,
    F_STREAM_OPTIONS,
    F_LOGPROBS,
    F_ECHO,
    F_STOP,
    F_PRESENCE,
    F_FREQUENCY,
    F_LOGIT_BIAS,
    F_SEED,
    F_USER,
    F_SUFFIX,
    F_IGNORE_EOS,
    F_KV_CACHE,
    F_KV_MIN_BUDGET,
    F_COUNT
};

static const char *const field_names[F_COUNT] = {
    [F_MODEL] = "model",
    [F_PROMPT] = "prompt",
    [F_MAX_TOKENS] = "max_tokens",
    [F_TEMPERATURE] = "temperature",
    [F_TOP_P] = "top_p",
    [F_TOP_K] = "top_k",
    [F_N] = "n",
    [F_BEST_OF] = "best_of",
    [F_STREAM] = "stream",
    [F_STREAM_OPTIONS] = "stream_options",
    [F_LOGPROBS] = "logprobs",
    [F_ECHO] = "echo",
    [F_STOP] = "stop",
    [F_PRESENCE] = "presence_penalty",
    [F_FREQUENCY] = "frequency_penalty",
    [F_LOGIT_BIAS] = "logit_bias",
    [F_SEED] = "seed",
    [F_USER] = "user",
    [F_SUFFIX] = "suffix",
    [F_IGNORE_EOS] = "ignore_eos",
    [F_KV_CACHE] = "kv_cache",
    [F_KV_MIN_BUDGET] = "kv_min_budget",
};

/* ---- error helpers: every client mistake is a 400 naming the param ---- */


/* ---- typed readers: item is never NULL or JSON null here ---- */

static int read_number(const cJSON *item, const char *param, double lo, double hi,
                       float *out, struct api_error *err)
{
    if (!cJSON_IsNumber(item)) return json_type_error(err, param, "a number", item);
    const double d = item->valuedouble;
    if (!(d >= lo && d <= hi)) /* also catches 1e400 (inf) */
        return API_BAD_VALUE(err, param, "Invalid value for '%s': %g is not between %g and %g.",
                         param, d, lo, hi);
    *out = (float)d;
    return 0;
}

static int read_int(const cJSON *item, const char *param, int64_t lo, int64_t hi,
                    int64_t *out, struct api_error *err)
{
    if (!cJSON_IsNumber(item)) return json_type_error(err, param, "an integer", item);
    const double d = item->valuedouble;
    if (isfinite(d) && d != floor(d))
        return API_BAD_VALUE(err, param, "Invalid value for '%s': %g is not an integer.", param,
                         d);
    if (!json_int_in(item, lo, hi, out))
        return API_BAD_VALUE(err, param,
                         "Invalid value for '%s': %g is not between %lld and %lld.", param,
                         d, (long long)lo, (long long)hi);
    return 0;
}

static int read_string(const cJSON *item, const char *param, const char **out,
                       struct api_error *err)
{
    if (!cJSON_IsString(item)) return json_type_error(err, param, "a string", item);
    *out = item->valuestring;
    return 0;
}

/* ---- the fields with structure ---- */

static int parse_stop(const cJSON *item, struct cmpl_params *p, struct api_error *err)
{
    const cJSON *one[1] = {item};
    const cJSON *const *list = one;
    const cJSON *arr[REQ_MAX_STOPS];
    int32_t n = 1;
    if (cJSON_IsArray(item)) {
        n = cJSON_GetArraySize(item);
        if (n < 1 || n > REQ_MAX_STOPS)
            return API_BAD_VALUE(err, "stop",
                             "Invalid value for 'stop': give 1 to %d strings, not %d.",
                             REQ_MAX_STOPS, n);
        int32_t i = 0;
        for (const cJSON *c = item->child; c; c = c->next)
            arr[i++] = c;
        list = arr;
    } else if (!cJSON_IsString(item)) {
        return json_type_error(err, "stop", "a string or an array of strings", item);
    }
    for (int32_t i = 0; i < n; i++) {
        const cJSON *s = list[i];
        if (!cJSON_IsString(s)) return json_type_error(err, "stop", "a string", s);
        const size_t len = strlen(s->valuestring);
        if (len == 0)
            return API_BAD_VALUE(err, "stop",
                             "Invalid value for 'stop': stop strings must not be empty.");
        if (len > CMPL_MAX_STOP_BYTES)
            return API_BAD_VALUE(err, "stop",
                             "Invalid value for 'stop': a stop string may be at "
                             "most %d bytes, not %zu.",
                             CMPL_MAX_STOP_BYTES, len);
        p->stops[p->n_stops++] = xstrdup(s->valuestring);
    }
    return 0;
}

/* A token id written as a JSON object key: decimal digits only ("50256"). */
static bool parse_token_key(const char *s, int32_t vocab, int32_t *out)
{
    int64_t v = 0;
    if (!*s) return false;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9' || c - s >= 10) return false;
        v = v * 10 + (*c - '0');
    }
    if (v >= vocab) return false;
    *out = (int32_t)v;
    return true;
}

static int cmp_int32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int parse_logit_bias(const cJSON *item, const struct api_model *m,
                            struct cmpl_params *p, struct api_error *err)
{
    if (!cJSON_IsObject(item)) return json_type_error(err, "logit_bias", "an object", item);
    const int32_t n = cJSON_GetArraySize(item);
    if (n == 0) return 0;
    p->bias_ids = xmalloc((size_t)n * sizeof *p->bias_ids);
    p->bias_vals = xmalloc((size_t)n * sizeof *p->bias_vals);
    for (const cJSON *c = item->child; c; c = c->next) {
        int32_t id = 0;
        if (!parse_token_key(c->string, m->vocab_size, &id))
            return API_BAD_VALUE(err, "logit_bias",
                             "Invalid key in 'logit_bias': \"%.*s\" is not a "
                             "token id in 0..%d.",
                             json_clip_len(c->string, 64), c->string, m->vocab_size - 1);
        float v = 0;
        if (read_number(c, "logit_bias", -100, 100, &v, err)) return -1;
        p->bias_ids[p->n_bias] = id;
        p->bias_vals[p->n_bias++] = v;
    }
    /* "5" and "05" name the same token; two biases for one token are a mistake. */
    int32_t *sorted = xmalloc((size_t)n * sizeof *sorted);
    memcpy(sorted, p->bias_ids, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_int32);
    int32_t dup = -1;
    for (int32_t i = 1; i < n && dup < 0; i++)
        if (sorted[i] == sorted[i - 1]) dup = sorted[i];
    free(sorted);
    if (dup >= 0)
        return API_BAD_VALUE(err, "logit_bias",
                         "Invalid value for 'logit_bias': token %d is given twice.", dup);
    return 0;
}

static int parse_stream_options(const cJSON *item, struct cmpl_params *p,
                                struct api_error *err)
{
    if (!cJSON_IsObject(item))
        return json_type_error(err, "stream_options", "an object", item);
    /* Other keys are OpenAI's newer options (include_obfuscation): ignored. */
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(item, "include_usage");
    if (u && !cJSON_IsNull(u))
        return json_read_bool(u, "stream_options.include_usage", &p->include_usage, err);
    return 0;
}

/*
 * kv_cache: "full" | "h2o" | "local", or {"policy": ..., sizes}. Sizes are
 * heavy_ratio / recent_ratio (fractions of prompt + max_tokens) or heavy / recent
 * (token counts); a size not given comes from the server's default. Unknown keys are
 * errors here: this object is our extension, so a typo ("heavy_ration") would
 * otherwise silently run another policy than the one asked for.
 */
static int parse_kv_cache(const cJSON *item, const struct api_model *m,
                          struct cmpl_params *p, bool *min_budget_given, struct api_error *err)
{
    const cJSON *policy = item;
    if (cJSON_IsObject(item)) {
        policy = cJSON_GetObjectItemCaseSensitive(item, "policy");
        if (!policy || cJSON_IsNull(policy))
            return API_BAD_VALUE(err, "kv_cache.policy",
                             "'kv_cache' needs a 'policy' (\"full\", "
                             "\"h2o\" or \"local\").");
    } else if (!cJSON_IsString(item)) {
        return json_type_error(err, "kv_cache", "an object or a string", item);
    }
    const char *pname = NULL;
    if (read_string(policy, cJSON_IsObject(item) ? "kv_cache.policy" : "kv_cache", &pname,
                    err))
        return -1;
    struct kv_spec kv = m->kv_default;
    if (kv_budget_policy_parse(pname, &kv.policy))
        return API_BAD_VALUE(err, "kv_cache.policy",
                         "Invalid value for 'kv_cache.policy': \"%.*s\" "
                         "is not one of \"full\", \"h2o\", \"local\".",
                         json_clip_len(pname, 64), pname);
    if (!cJSON_IsObject(item)) {
        p->kv = kv;
        return 0;
    }
    bool seen[4] = {false}; /* heavy, heavy_ratio, recent, recent_ratio */
    for (const cJSON *c = item->child; c; c = c->next) {
        const char *k = c->string;
        if (strcmp(k, "policy") == 0 || cJSON_IsNull(c)) continue;
        if (strcmp(k, "dtype") == 0) {
            /* The pool holds one dtype for every sequence, so a request can only
             * confirm it (or say "auto"), never pick another one. */
            const char *dt = NULL;
            if (read_string(c, "kv_cache.dtype", &dt, err)) return -1;
            if (strcmp(dt, "auto") == 0 || (m->kv_dtype && strcmp(dt, m->kv_dtype) == 0))
                continue;
            return API_BAD_VALUE(
                err, "kv_cache.dtype",
                "'kv_cache.dtype' \"%.*s\" is not this server's KV cache "
                "dtype (%s): it is set per server with --kv-cache-dtype, not "
                "per request.",
                json_clip_len(dt, 64), dt, m->kv_dtype ? m->kv_dtype : "unknown");
        }
        if (strcmp(k, "min_budget") == 0) {
            /* The floor, as the top-level kv_min_budget says it (which must agree). */
            int64_t v = 0;
            if (read_int(c, "kv_cache.min_budget", 0, INT32_MAX, &v, err)) return -1;
            kv.min_budget = (int32_t)v;
            *min_budget_given = true;
            continue;
        }
        static const char *const names[4] = {"heavy", "heavy_ratio", "recent",
                                             "recent_ratio"};
        int which = -1;
        for (int i = 0; i < 4; i++)
            if (strcmp(k, names[i]) == 0) which = i;
        if (which < 0)
            return API_BAD_VALUE(err, "kv_cache",
                                 "Unknown key in 'kv_cache': \"%.*s\" (expected "
                                 "policy, heavy, recent, heavy_ratio, recent_ratio, "
                                 "min_budget, dtype).",
                                 json_clip_len(k, 64), k);
        char param[32];
        snprintf(param, sizeof param, "kv_cache.%s", names[which]);
        const bool is_heavy = which < 2, is_ratio = which % 2 == 1;
        if (kv.policy == KV_POLICY_FULL || (kv.policy == KV_POLICY_LOCAL && is_heavy))
            return API_BAD_VALUE(err, param, "'%s' does not apply to the %s policy.", param,
                             kv_budget_policy_name(kv.policy));
        if (seen[which ^ 1])
            return API_BAD_VALUE(err, param,
                             "'kv_cache' takes a count or a ratio for each size, "
                             "not both.");
        seen[which] = true;
        int64_t v = 0;
        float f = 0;
        if (is_ratio) {
            if (read_number(c, param, 0, 1, &f, err)) return -1;
        } else if (read_int(c, param, is_heavy ? 0 : 1, INT32_MAX, &v, err)) {
            return -1;
        }
        /* kv_spec uses a count when it is >= 0, else the ratio. */
        if (is_heavy && is_ratio) kv.heavy_ratio = f, kv.heavy = -1;
        if (is_heavy && !is_ratio) kv.heavy = (int32_t)v;
        if (!is_heavy && is_ratio) kv.recent_ratio = f, kv.recent = -1;
        if (!is_heavy && !is_ratio) kv.recent = (int32_t)v;
    }
    p->kv = kv;
    return 0;
}

/* ---- prompts ---- */

static void prompt_set_text(struct cmpl_prompt *pr, const char *s)
{
    pr->text_len = strlen(s);
    pr->text = xstrndup(s, pr->text_len);
}

/* A JSON array of token ids -> pr->ids. `param` names it in errors ("prompt[2]"). */
static int prompt_set_ids(struct cmpl_prompt *pr, const cJSON *arr,
                          const struct api_model *m, const char *param,
                          struct api_error *err)
{
    const int32_t n = cJSON_GetArraySize(arr);
    if (n == 0)
        return API_BAD_VALUE(err, "prompt",
                         "Invalid value for '%s': a token prompt must not be empty.",
                         param);
    pr->ids = xmalloc((size_t)n * sizeof *pr->ids);
    const int32_t got = json_read_token_ids(arr, m->vocab_size, "prompt", param, pr->ids, err);
    if (got < 0) return -1;
    pr->n_ids = got;
    return 0;
}

/*
 * prompt: a string, an array of strings, an array of token ids, or an array of
 * arrays of token ids. Text prompts are tokenized with m->tok as the engine does
 * (BOS first), so the context check counts exactly what the engine will run.
 */
static int parse_prompt(const cJSON *item, const struct api_model *m, struct cmpl_params *p,
                        struct api_error *err)
{
    const char *expected =
        "a string, an array of strings, an array of token ids or an array "
        "of token id arrays";
    if (cJSON_IsString(item)) {
        p->prompts = xcalloc(1, sizeof *p->prompts);
        p->n_prompts = 1;
        prompt_set_text(&p->prompts[0], item->valuestring);
    } else if (cJSON_IsArray(item)) {
        const cJSON *first = item->child;
        if (!first)
            return API_BAD_VALUE(err, "prompt",
                             "Invalid value for 'prompt': the array is empty.");
        if (cJSON_IsNumber(first)) { /* one prompt of token ids */
            p->prompts = xcalloc(1, sizeof *p->prompts);
            p->n_prompts = 1;
            if (prompt_set_ids(&p->prompts[0], item, m, "prompt", err)) return -1;
        } else if (cJSON_IsString(first) || cJSON_IsArray(first)) {
            const int32_t n = cJSON_GetArraySize(item);
            if (n > m->max_prompts)
                return API_BAD_VALUE(err, "prompt",
                                 "Invalid value for 'prompt': %d prompts, at most "
                                 "%d per request.",
                                 n, m->max_prompts);
            p->prompts = xcalloc((size_t)n, sizeof *p->prompts);
            const bool text = cJSON_IsString(first);
            for (const cJSON *c = first; c; c = c->next) {
                struct cmpl_prompt *pr = &p->prompts[p->n_prompts];
                char param[32];
                snprintf(param, sizeof param, "prompt[%d]", p->n_prompts);
                p->n_prompts++;
                if (text != !!cJSON_IsString(c) || (!text && !cJSON_IsArray(c)))
                    return json_type_error(err, "prompt",
                                          text ? "a string in an array of strings"
                                               : "an array of token ids",
                                          c);
                if (text)
                    prompt_set_text(pr, c->valuestring);
                else if (prompt_set_ids(pr, c, m, param, err))
                    return -1;
            }
        } else {
            return json_type_error(err, "prompt", expected, first);
        }
    } else {
        return json_type_error(err, "prompt", expected, item);
    }
    for (int32_t i = 0; i < p->n_prompts; i++) {
        struct cmpl_prompt *pr = &p->prompts[i];
        if (!pr->text) continue;
        if (!tokenizer_has_text(m->tok))
            return API_BAD_VALUE(err, "prompt",
                                 "The model '%s' has no tokenizer (its folder has no "
                                 "tokenizer.json or vocab.json + merges.txt): give the "
                                 "prompt as token ids.",
                                 m->id);
        if (tokenizer_encode(m->tok, pr->text, pr->text_len, true, &pr->ids, &pr->n_ids))
            return api_error_set(err, 500, API_ERR_SERVER, NULL, NULL,
                                 "tokenizing the prompt failed");
        /* A tokenizer that adds no BOS (Qwen2) turns "" into no tokens at all, and
         * the model needs at least one to predict from. */
        if (pr->n_ids == 0)
            return API_BAD_VALUE(err, "prompt",
                                 "The prompt is empty: this model adds no BOS token, so "
                                 "\"\" has no tokens to start from.");
    }
    return 0;
}

/* prompt + max_tokens must fit the context, as OpenAI words it. */
static int check_context(const struct api_model *m, const struct cmpl_params *p,
                         struct api_error *err)
{
    for (int32_t i = 0; i < p->n_prompts; i++) {
        const int64_t need = (int64_t)p->prompts[i].n_ids + p->max_tokens;
        if (need <= m->max_model_len) continue;
        char which[48] = "";
        if (p->n_prompts > 1) snprintf(which, sizeof which, " (prompt %d)", i);
        /* Every prompt has a token at least, so max_tokens alone can be the fault. */
        const char *param =
            (int64_t)p->max_tokens + 1 > m->max_model_len ? "max_tokens" : "prompt";
        return api_error_set(
            err, 400, API_ERR_INVALID, param, "context_length_exceeded",
            "This model's maximum context length is %d tokens, however you "
            "requested %lld tokens (%d in your prompt%s; %d for the "
            "completion). Please reduce your prompt or completion length.",
            m->max_model_len, (long long)need, p->prompts[i].n_ids, which, p->max_tokens);
    }
    return 0;
}

/* ---- the request ---- */

/* The scalar fields, in table order; f[k] is NULL for absent or null fields. */
static int parse_fields(const cJSON *const *f, const struct api_model *m,
                        struct cmpl_params *p, struct api_error *err)
{
    int64_t v = 0;
    const char *s = NULL;
    if (f[F_MAX_TOKENS]) {
        if (read_int(f[F_MAX_TOKENS], "max_tokens", 0, INT32_MAX, &v, err)) return -1;
        p->max_tokens = (int32_t)v;
    }
    if (f[F_TEMPERATURE] &&
        read_number(f[F_TEMPERATURE], "temperature", 0, 2, &p->temperature, err))
        return -1;
    if (f[F_TOP_P] && read_number(f[F_TOP_P], "top_p", 0, 1, &p->top_p, err)) return -1;
    if (f[F_TOP_K]) {
        if (read_int(f[F_TOP_K], "top_k", -1, INT32_MAX, &v, err)) return -1;
        p->top_k = v < 0 ? 0 : (int32_t)v; /* vLLM spells "off" -1 */
    }
    if (f[F_N]) {
        if (read_int(f[F_N], "n", 1, m->max_n, &v, err)) return -1;
        p->n = (int32_t)v;
    }
    p->best_of = p->n;
    if (f[F_BEST_OF]) {
        if (read_int(f[F_BEST_OF], "best_of", 1, MIN(CMPL_MAX_BEST_OF, m->max_n), &v, err))
            return -1;
        p->best_of = (int32_t)v;
    }
    if (f[F_STREAM] && json_read_bool(f[F_STREAM], "stream", &p->stream, err)) return -1;
    if (f[F_STREAM_OPTIONS] && parse_stream_options(f[F_STREAM_OPTIONS], p, err)) return -1;
    if (f[F_LOGPROBS]) {
        if (read_int(f[F_LOGPROBS], "logprobs", 0, CMPL_MAX_LOGPROBS, &v, err)) return -1;
        p->logprobs = (int32_t)v;
    }
    if (f[F_ECHO] && json_read_bool(f[F_ECHO], "echo", &p->echo, err)) return -1;
    if (f[F_STOP] && parse_stop(f[F_STOP], p, err)) return -1;
    if (f[F_PRESENCE] &&
        read_number(f[F_PRESENCE], "presence_penalty", -2, 2, &p->presence_penalty, err))
        return -1;
    if (f[F_FREQUENCY] &&
        read_number(f[F_FREQUENCY], "frequency_penalty", -2, 2, &p->frequency_penalty, err))
        return -1;
    if (f[F_LOGIT_BIAS] && parse_logit_bias(f[F_LOGIT_BIAS], m, p, err)) return -1;
    if (f[F_SEED]) {
        if (read_int(f[F_SEED], "seed", INT64_MIN, INT64_MAX, &p->seed, err)) return -1;
        p->has_seed = true;
    }
    if (f[F_USER]) {
        if (read_string(f[F_USER], "user", &s, err)) return -1;
        p->user = xstrdup(s);
    }
    if (f[F_SUFFIX]) {
        if (read_string(f[F_SUFFIX], "suffix", &s, err)) return -1;
        /* An empty suffix asks for nothing, so it is fine. */
        if (*s)
            return API_BAD_VALUE(err, "suffix", "'suffix' is not supported by this server.");
    }
    if (f[F_IGNORE_EOS] && json_read_bool(f[F_IGNORE_EOS], "ignore_eos", &p->ignore_eos, err))
        return -1;
    bool floor_in_kv = false;
    if (f[F_KV_CACHE] && parse_kv_cache(f[F_KV_CACHE], m, p, &floor_in_kv, err)) return -1;
    /* After kv_cache, which starts from the server's spec and its floor. */
    if (f[F_KV_MIN_BUDGET]) {
        if (read_int(f[F_KV_MIN_BUDGET], "kv_min_budget", 0, INT32_MAX, &v, err)) return -1;
        if (floor_in_kv && v != p->kv.min_budget)
            return API_BAD_VALUE(err, "kv_min_budget",
                             "'kv_min_budget' (%lld) and 'kv_cache.min_budget' (%d) "
                             "disagree; give the floor once.",
                             (long long)v, p->kv.min_budget);
        p->kv.min_budget = (int32_t)v;
    }

    /* Fields that depend on each other. */
    if (p->best_of < p->n)
        return API_BAD_VALUE(err, "best_of",
                         "Invalid value for 'best_of': %d is less than n (%d); "
                         "best_of must be >= n.",
                         p->best_of, p->n);
    /* best_of == n selects nothing, so only best_of > n is incompatible with a stream. */
    if (p->stream && p->best_of > p->n)
        return API_BAD_VALUE(err, "best_of",
                         "'best_of' cannot be used with 'stream': the best "
                         "completions are known only at the end.");
    if (f[F_STREAM_OPTIONS] && !p->stream)
        return API_BAD_VALUE(err, "stream_options",
                         "'stream_options' is only allowed when 'stream' is true.");
    return 0;
}

static int parse_root(const cJSON *root, const struct api_model *m, struct cmpl_params *p,
                      struct api_error *err)
{
    int rc = -1;
    /* One pass over the keys; a key given twice takes its last value, as Python's
     * json module (and so OpenAI's server) does. */
    const cJSON *f[F_COUNT] = {0};
    for (const cJSON *c = root->child; c; c = c->next)
        for (int k = 0; k < F_COUNT; k++)
            if (strcmp(c->string, field_names[k]) == 0) {
                f[k] = cJSON_IsNull(c) ? NULL : c;
                break;
            }

    const char *model = NULL;
    if (!f[F_MODEL]) {
        API_BAD_VALUE(err, "model", "You must provide a model parameter.");
        goto done;
    }
    if (read_string(f[F_MODEL], "model", &model, err)) goto done;
    if (!f[F_PROMPT]) {
        API_BAD_VALUE(err, "prompt", "You must provide a prompt parameter.");
        goto done;
    }
    if (parse_fields(f, m, p, err)) goto done;
    if (json_model_check(f[F_MODEL], m->id, err)) goto done;
    p->model = xstrdup(model);
    if (parse_prompt(f[F_PROMPT], m, p, err)) goto done;
    /* Without a tokenizer the engine sees no text, so a stop string could never
     * match: refused rather than silently ignored. */
    if (p->n_stops > 0 && !tokenizer_has_text(m->tok)) {
        API_BAD_VALUE(err, "stop",
                      "The model '%s' has no tokenizer, so its completions have no text "
                      "for a stop string to match.",
                      m->id);
        goto done;
    }
    const int64_t seqs = (int64_t)p->n_prompts * cmpl_params_seqs(p);
    if (m->max_seqs > 0 && seqs > m->max_seqs) {
        API_BAD_VALUE(err, "n",
                  "This request asks for %lld completions (prompts x max(n, "
                  "best_of)); the server allows at most %d per request.",
                  (long long)seqs, m->max_seqs);
        goto done;
    }
    if (check_context(m, p, err)) goto done;
    rc = 0;
done:
    return rc;
}

int cmpl_parse_json(const cJSON *root, const struct api_model *m, struct cmpl_params *out,
                    struct api_error *err)
{
    memset(out, 0, sizeof *out);
    out->max_tokens = 16;
    out->temperature = 1;
    out->top_p = 1;
    out->n = 1;
    out->best_of = 1;
    out->logprobs = -1;
    out->kv = m->kv_default;
    if (parse_root(root, m, out, err)) {
        cmpl_params_free(out);
        return -1;
    }
    return 0;
}

int cmpl_parse(const char *body, size_t len, const struct api_model *m,
               struct cmpl_params *out, struct api_error *err)
{
    memset(out, 0, sizeof *out);
    cJSON *root = json_parse_object(body, len, err);
    if (!root) return -1;
    const int rc = cmpl_parse_json(root, m, out, err);
    cJSON_Delete(root);
    return rc;
}

void cmpl_params_free(struct cmpl_params *p)
{
    free(p->model);
    for (int32_t i = 0; i < p->n_prompts; i++) {
        free(p->prompts[i].text);
        free(p->prompts[i].ids);
    }
    free(p->prompts);
    for (int32_t i = 0; i < p->n_stops; i++)
        free(p->stops[i]);
    free(p->bias_ids);
    free(p->bias_vals);
    free(p->user);
    memset(p, 0, sizeof *p);
}

int32_t cmpl_params_seqs(const struct cmpl_params *p)
{
    return MAX(p->n, p->best_of);
}

struct req *cmpl_make_req(const struct cmpl_params *p, int32_t prompt_index, uint64_t id,
                          uint64_t seed)
{
    CHECK(prompt_index >= 0 && prompt_index < p->n_prompts);
    const struct cmpl_prompt *pr = &p->prompts[prompt_index];
    struct req *r = req_new(id, &p->kv);
    r->prio = REQ_PRIO_INTERACTIVE;
    /* The ids, not the text: they are what the engine would make of the text (BOS
     * included), and tokenizing once here spares the engine thread doing it again. */
    r->prompt_ids = xmalloc((size_t)pr->n_ids * sizeof *r->prompt_ids);
    memcpy(r->prompt_ids, pr->ids, (size_t)pr->n_ids * sizeof *r->prompt_ids);
    r->n_prompt_ids = pr->n_ids;
    r->n = cmpl_params_seqs(p);
    r->max_tokens = p->max_tokens;
    r->sp.temperature = p->temperature;
    r->sp.top_p = p->top_p;
    r->sp.top_k = p->top_k;
    r->sp.presence_penalty = p->presence_penalty;
    r->sp.frequency_penalty = p->frequency_penalty;
    /* best_of ranks sequences by mean token logprob, which the sampler computes only
     * when asked for logprobs (0 alternatives is enough). */
    r->sp.n_logprobs = p->logprobs >= 0 ? p->logprobs : p->best_of > p->n ? 0 : -1;
    if (p->n_bias > 0) {
        r->bias_ids = xmalloc((size_t)p->n_bias * sizeof *r->bias_ids);
        r->bias_vals = xmalloc((size_t)p->n_bias * sizeof *r->bias_vals);
        memcpy(r->bias_ids, p->bias_ids, (size_t)p->n_bias * sizeof *r->bias_ids);
        memcpy(r->bias_vals, p->bias_vals, (size_t)p->n_bias * sizeof *r->bias_vals);
        r->sp.bias_ids = r->bias_ids;
        r->sp.bias_vals = r->bias_vals;
        r->sp.n_bias = p->n_bias;
    }
    r->seed = p->has_seed ? (uint64_t)p->seed : seed;
    for (int32_t i = 0; i < p->n_stops; i++)
        r->stops[i] = xstrdup(p->stops[i]);
    r->n_stops = p->n_stops;
    r->ignore_eos = p->ignore_eos;
    /* echo with logprobs reports the prompt tokens' logprobs too. */
    r->prompt_logprobs = p->echo && p->logprobs >= 0;
    return r;
}
