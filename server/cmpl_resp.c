/*
 * cmpl_resp.c - assembling a /v1/completions response from engine events: the
 * non-streaming body, the SSE chunks, usage, best_of selection, echo and the logprobs
 * object (see cmpl_resp.h). A chat request (cmpl_params.chat) gets the same
 * assembly in the chat shape, whose JSON pieces are cmpl_resp_chat.c's.
 *
 * Owns: per sequence, its text (non-streaming) and its logprob entries (all of them
 * when not streaming; in a stream only those not sent yet); per prompt, the echo (the
 * prompt as text and the character offset of each prompt token), built on first use.
 * Invariants: n_done counts the sequences whose finish is set; a finished sequence
 * takes no more events. Every string that reaches cJSON is valid UTF-8 without NULs
 * (json_utf8_append), so every response is valid JSON whatever the events hold.
 *
 * Decisions a client can see, also in docs/api.md:
 * - text_offset counts Unicode characters (code points), as in OpenAI's responses,
 *   which are computed on Python strings; the engine's offsets are bytes.
 * - Every generated token appears in logprobs, the end-of-text token (</s>, no text)
 *   included, since it was sampled and has a logprob; completion_tokens counts it too.
 * - top_logprobs holds the top `logprobs` alternatives plus the sampled token when it
 *   is not among them ("up to logprobs + 1 elements", as OpenAI documents). Two ids
 *   that display as the same string keep the more likely one.
 * - echo with logprobs lists the prompt's tokens (BOS included for text prompts: the
 *   model saw it). The first has a null logprob and null top_logprobs, as OpenAI's;
 *   the others carry the scores the engine sends as prompt-token events
 *   (req.prompt_logprobs), under the raw model distribution.
 * - usage.completion_tokens counts every generated token, best_of candidates that
 *   were not returned included: they were computed, and OpenAI bills them the same.
 * Thread: whichever thread owns the response.
 */
#include "cmpl_resp.h"
#include "cmpl_resp_impl.h"

#include "err.h"
#include "tokenizer.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cmpl_seq {
    char *text; /* generated text so far (non-streaming), NUL-terminated */
    size_t len, cap;
    int64_t n_chars;     /* characters generated so far */
    struct lp_entry *lp; /* [n_lp] see the file comment */
    int32_t n_lp, cap_lp;
    int32_t n_tokens;   /* tokens generated */
    double sum_logprob; /* of those tokens, for best_of */
    enum req_finish finish;
    bool started; /* streaming: the first chunk (with any echo) went out */
    int64_t kv_evicted; /* tokens each (layer, head) of this sequence dropped */
};

struct cmpl_echo {
    bool built;
    char *text; /* the prompt as text (valid UTF-8) */
    size_t len;
    int64_t n_chars;
    int64_t *offsets; /* [n_ids] character offset of each prompt token */
    struct lp_entry *plp; /* [n_ids] the engine's scores of prompt tokens 1.., or NULL */
    bool *has_plp;        /* [n_ids] which of plp arrived */
};

struct cmpl_resp {
    const struct cmpl_params *p;
    const struct tokenizer *tok;
    char *id;
    char *fingerprint; /* system_fingerprint, or NULL (JSON null) */
    int64_t created;
    int32_t n_gen;         /* sequences per prompt */
    struct cmpl_seq *seqs; /* [n_prompts * n_gen], prompt-major */
    int32_t n_done;
    struct cmpl_echo *echo; /* [n_prompts] */
    struct kv_budget *kv;   /* [n_prompts] the budget each prompt ran with */
    bool *kv_seen;          /* [n_prompts] whether an event has told it yet */
    struct api_error err;
};

/* ---- text ---- */

/*
 * The echo of prompt i: the prompt text as given (token prompts: their tokens' bytes)
 * and where each prompt token starts, in characters. A token that starts inside a
 * character (byte-level BPE may split one) is placed after that character.
 */
static const struct cmpl_echo *echo_get(struct cmpl_resp *r, int32_t i)
{
    struct cmpl_echo *e = &r->echo[i];
    if (e->built) return e;
    const struct cmpl_prompt *pr = &r->p->prompts[i];
    char *raw = NULL;
    size_t raw_len = 0, raw_cap = 0;
    const char *src = pr->text;
    if (src) {
        raw_len = pr->text_len;
    } else {
        for (int32_t k = 0; k < pr->n_ids; k++) {
            size_t tl;
            const char *tb = tokenizer_token_bytes(r->tok, pr->ids[k], &tl);
            json_buf_reserve(&raw, &raw_cap, raw_len + tl + 1);
            memcpy(raw + raw_len, tb, tl);
            raw_len += tl;
        }
        src = raw ? raw : "";
    }
    e->offsets = xmalloc((size_t)MAX(pr->n_ids, 1) * sizeof *e->offsets);
    size_t cap = 0, pos = 0, tok_start = 0;
    int32_t k = 0;
    json_buf_reserve(&e->text, &cap, 1);
    e->text[0] = '\0';
    for (;;) {
        /* Tokens that start at or before this character's first byte begin here. */
        while (k < pr->n_ids && tok_start <= pos) {
            size_t tl;
            tokenizer_token_bytes(r->tok, pr->ids[k], &tl);
            e->offsets[k++] = e->n_chars;
            tok_start += tl;
        }
        if (pos >= raw_len) break;
        size_t l = 1;
        if ((unsigned char)src[pos] >= 0x80)
            tokenizer_utf8_next((const unsigned char *)src + pos, raw_len - pos, &l);
        json_utf8_append(&e->text, &e->len, &cap, src + pos, l, &e->n_chars);
        pos += l;
    }
    while (k < pr->n_ids)
        e->offsets[k++] = e->n_chars; /* text shorter than its tokens */
    free(raw);
    e->built = true;
    return e;
}

/* ---- logprobs ---- */

static struct lp_entry *lp_push(struct cmpl_seq *s)
{
    if (s->n_lp == s->cap_lp) {
        s->cap_lp = s->cap_lp ? 2 * s->cap_lp : 16;
        s->lp = xrealloc(s->lp, (size_t)s->cap_lp * sizeof *s->lp);
    }
    return &s->lp[s->n_lp++];
}

static cJSON *top_object(const struct tokenizer *tok, const struct lp_entry *e)
{
    cJSON *o = cJSON_CreateObject();
    for (int32_t k = 0; k <= e->n_top; k++) {
        /* k == n_top: the sampled token, when it is not among the alternatives. */
        const int32_t id = k < e->n_top ? e->top_ids[k] : e->token;
        const float lp = k < e->n_top ? e->top_logprobs[k] : e->logprob;
        if (k == e->n_top) {
            bool listed = false;
            for (int32_t j = 0; j < e->n_top; j++)
                listed |= e->top_ids[j] == id;
            if (listed) break;
        }
        const char *key = tokenizer_token_str(tok, id);
        if (!cJSON_GetObjectItemCaseSensitive(o, key))
            cJSON_AddItemToObject(o, key, json_float(lp));
    }
    return o;
}

/*
 * The logprobs object for sequence `s` of prompt `pi`: the prompt's tokens first when
 * `with_echo`, then the entries lp[0..n). `base` is the character offset of the
 * generated text in the choice's text (the echo's length, or 0).
 */
static cJSON *logprobs_object(struct cmpl_resp *r, int32_t pi, bool with_echo,
                              const struct lp_entry *lp, int32_t n, int64_t base)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(o, "text_offset");
    if (with_echo) {
        const struct cmpl_prompt *pr = &r->p->prompts[pi];
        const struct cmpl_echo *e = echo_get(r, pi);
        for (int32_t k = 0; k < pr->n_ids; k++) {
            cJSON_AddItemToArray(
                tokens, cJSON_CreateString(tokenizer_token_str(r->tok, pr->ids[k])));
            /* The first prompt token has no logprob (nothing comes before it); the
             * others have the engine's score when it sent one. */
            const bool scored = k > 0 && e->has_plp && e->has_plp[k];
            cJSON_AddItemToArray(lps, scored ? json_float(e->plp[k].logprob) : cJSON_CreateNull());
            cJSON_AddItemToArray(tops, scored ? top_object(r->tok, &e->plp[k]) : cJSON_CreateNull());
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)e->offsets[k]));
        }
    }
    for (int32_t k = 0; k < n; k++) {
        cJSON_AddItemToArray(tokens,
                             cJSON_CreateString(tokenizer_token_str(r->tok, lp[k].token)));
        cJSON_AddItemToArray(lps, json_float(lp[k].logprob));
        cJSON_AddItemToArray(tops, top_object(r->tok, &lp[k]));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(base + lp[k].offset)));
    }
    return o;
}

/* ---- objects ---- */

const char *cmpl_resp_finish_reason(enum req_finish f)
{
    switch (f) {
    case REQ_FINISH_STOP: return "stop";
    case REQ_FINISH_LENGTH:
    case REQ_FINISH_CANCELLED: return "length";
    default: return NULL;
    }
}

/* {"id","object","created","model","choices":[]} (+ "usage":null in a stream that
 * promised usage); returns the object and its choices array in *choices. A chat
 * response is a chat.completion, each of its stream's pieces (chunk) a
 * chat.completion.chunk; a completion is a text_completion either way. */
static cJSON *completion_object(const struct cmpl_resp *r, bool chunk, cJSON **choices)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object",
                            !r->p->chat ? "text_completion"
                            : chunk     ? "chat.completion.chunk"
                                        : "chat.completion");
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", r->p->model ? r->p->model : "");
    cJSON_AddItemToObject(o, "system_fingerprint", r->fingerprint
                                                       ? cJSON_CreateString(r->fingerprint)
                                                       : cJSON_CreateNull());
    *choices = cJSON_AddArrayToObject(o, "choices");
    return o;
}

static cJSON *choice_object(const char *text, int64_t index, cJSON *logprobs,
                            enum req_finish f)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "text", text);
    cJSON_AddNumberToObject(c, "index", (double)index);
    cJSON_AddItemToObject(c, "logprobs", logprobs ? logprobs : cJSON_CreateNull());
    const char *fr = cmpl_resp_finish_reason(f);
    cJSON_AddItemToObject(c, "finish_reason",
                          fr ? cJSON_CreateString(fr) : cJSON_CreateNull());
    return c;
}

/* usage.kv_cache (see cmpl_resp_kv_usage): what the KV policy did, so that a lossy
 * budget is never silent. */
void cmpl_resp_kv_usage(const struct cmpl_resp *r, struct kv_budget *budget,
                        int64_t *evicted_tokens)
{
    const struct cmpl_params *p = r->p;
    *budget = (struct kv_budget){.policy = p->kv.policy};
    for (int32_t i = 0; i < p->n_prompts; i++)
        if (r->kv_seen[i]) {
            budget->heavy = MAX(budget->heavy, r->kv[i].heavy);
            budget->recent = MAX(budget->recent, r->kv[i].recent);
        }
    *evicted_tokens = 0;
    for (int64_t i = 0; i < (int64_t)p->n_prompts * r->n_gen; i++)
        *evicted_tokens += r->seqs[i].kv_evicted;
}

static cJSON *kv_usage_object(const struct cmpl_resp *r)
{
    struct kv_budget b;
    int64_t evicted;
    cmpl_resp_kv_usage(r, &b, &evicted);
    cJSON *k = cJSON_CreateObject();
    cJSON_AddStringToObject(k, "policy", kv_budget_policy_name(b.policy));
    if (b.policy != KV_POLICY_FULL) {
        cJSON_AddNumberToObject(k, "heavy", b.heavy);
        cJSON_AddNumberToObject(k, "recent", b.recent);
        cJSON_AddNumberToObject(k, "min_budget", r->p->kv.min_budget);
    }
    cJSON_AddNumberToObject(k, "evicted_tokens", (double)evicted);
    return k;
}

static cJSON *usage_object(const struct cmpl_resp *r)
{
    int64_t pt, ct;
    cmpl_resp_usage(r, &pt, &ct);
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)pt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)ct);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(pt + ct));
    cJSON_AddItemToObject(u, "kv_cache", kv_usage_object(r));
    return u;
}

/* ---- the response ---- */

struct cmpl_resp *cmpl_resp_create(const struct cmpl_params *p, const struct tokenizer *tok,
                                   const char *id, int64_t created)
{
    struct cmpl_resp *r = xcalloc(1, sizeof *r);
    r->p = p;
    r->tok = tok;
    r->id = xstrdup(id);
    r->created = created;
    r->n_gen = cmpl_params_seqs(p);
    r->seqs = xcalloc((size_t)p->n_prompts * (size_t)r->n_gen, sizeof *r->seqs);
    r->echo = xcalloc((size_t)MAX(p->n_prompts, 1), sizeof *r->echo);
    r->kv = xcalloc((size_t)MAX(p->n_prompts, 1), sizeof *r->kv);
    r->kv_seen = xcalloc((size_t)MAX(p->n_prompts, 1), sizeof *r->kv_seen);
    return r;
}

void cmpl_resp_set_fingerprint(struct cmpl_resp *r, const char *fingerprint)
{
    free(r->fingerprint);
    r->fingerprint = fingerprint ? xstrdup(fingerprint) : NULL;
}

void cmpl_resp_destroy(struct cmpl_resp *r)
{
    if (!r) return;
    for (int64_t i = 0; i < (int64_t)r->p->n_prompts * r->n_gen; i++) {
        free(r->seqs[i].text);
        free(r->seqs[i].lp);
    }
    for (int32_t i = 0; i < r->p->n_prompts; i++) {
        free(r->echo[i].text);
        free(r->echo[i].offsets);
        free(r->echo[i].plp);
        free(r->echo[i].has_plp);
    }
    free(r->seqs);
    free(r->echo);
    free(r->kv);
    free(r->kv_seen);
    free(r->id);
    free(r->fingerprint);
    api_error_clear(&r->err);
    free(r);
}

static void finish_seq(struct cmpl_resp *r, struct cmpl_seq *s, enum req_finish f)
{
    s->finish = f;
    r->n_done++;
}

/* An engine error: status by code (see cmpl_resp_error), first one kept. */
static void remember_error(struct cmpl_resp *r, const struct req_event *ev)
{
    if (r->err.status) return;
    const char *msg = ev->error ? ev->error : err_name(ev->error_code);
    if (ev->error_code == ENG_EINVAL || ev->error_code == ENG_ENOSPC)
        api_error_set(&r->err, 400, API_ERR_INVALID, NULL, NULL, "%s", msg);
    else if (ev->error_code == ENG_EUNAVAILABLE)
        api_error_set(&r->err, 503, API_ERR_SERVER, NULL, NULL, "%s", msg);
    else
        api_error_set(&r->err, 500, API_ERR_SERVER, NULL, NULL, "%s", msg);
}

/* One streaming chunk for sequence j of prompt pi carrying `delta`. */
static char *stream_chunk(struct cmpl_resp *r, int32_t pi, int32_t j, const char *delta,
                          size_t *len)
{
    const struct cmpl_params *p = r->p;
    struct cmpl_seq *s = &r->seqs[(int64_t)pi * r->n_gen + j];
    const bool echo_now = p->echo && !s->started;
    const struct cmpl_echo *e = p->echo ? echo_get(r, pi) : NULL;
    char *text = NULL;
    if (echo_now) {
        const size_t dl = strlen(delta);
        text = xmalloc(e->len + dl + 1);
        memcpy(text, e->text, e->len);
        memcpy(text + e->len, delta, dl + 1);
    }
    cJSON *lp = NULL;
    if (p->logprobs >= 0) {
        lp = p->chat ? cmpl_resp_chat_logprobs(r->tok, s->lp, s->n_lp)
                     : logprobs_object(r, pi, echo_now, s->lp, s->n_lp, e ? e->n_chars : 0);
        s->n_lp = 0; /* sent */
    }
    cJSON *choices;
    cJSON *o = completion_object(r, true, &choices);
    const int64_t index = (int64_t)pi * p->n + j;
    cJSON_AddItemToArray(
        choices, p->chat ? cmpl_resp_chat_choice(delta, index, lp, s->finish,
                                                 s->started ? CMPL_CHAT_DELTA
                                                            : CMPL_CHAT_FIRST_DELTA)
                         : choice_object(text ? text : delta, index, lp, s->finish));
    if (p->include_usage) cJSON_AddNullToObject(o, "usage");
    s->started = true;
    char *out = json_sse(o, len);
    cJSON_Delete(o);
    free(text);
    return out;
}

char *cmpl_resp_event(struct cmpl_resp *r, int32_t prompt_index, const struct req_event *ev,
                      size_t *len)
{
    const struct cmpl_params *p = r->p;
    if (len) *len = 0;
    if (prompt_index < 0 || prompt_index >= p->n_prompts || ev->seq < -1 ||
        ev->seq >= r->n_gen)
        return NULL;
    struct cmpl_seq *base = &r->seqs[(int64_t)prompt_index * r->n_gen];
    if (ev->prompt_pos > 0) {
        /* A scored prompt token (echo with logprobs): kept for the echo. */
        const struct cmpl_prompt *pr = &p->prompts[prompt_index];
        struct cmpl_echo *e = &r->echo[prompt_index];
        if (ev->prompt_pos >= pr->n_ids || ev->token != pr->ids[ev->prompt_pos]) return NULL;
        if (!e->plp) {
            e->plp = xcalloc((size_t)pr->n_ids, sizeof *e->plp);
            e->has_plp = xcalloc((size_t)pr->n_ids, sizeof *e->has_plp);
        }
        struct lp_entry *l = &e->plp[ev->prompt_pos];
        l->token = ev->token;
        l->logprob = ev->logprob;
        l->n_top = MAX(0, MIN(ev->n_top, MIN(p->logprobs, CMPL_MAX_LOGPROBS)));
        memcpy(l->top_ids, ev->top_ids, sizeof l->top_ids);
        memcpy(l->top_logprobs, ev->top_logprobs, sizeof l->top_logprobs);
        e->has_plp[ev->prompt_pos] = true;
        return NULL;
    }
    if (ev->seq < 0 || ev->finish == REQ_FINISH_ERROR) {
        /* A whole-request event: an error (the only kind the engine sends), or a finish
         * that ends every sequence still running. */
        if (ev->finish == REQ_FINISH_ERROR) remember_error(r, ev);
        if (ev->finish == REQ_FINISH_NONE) return NULL;
        for (int32_t j = 0; j < r->n_gen; j++)
            if (base[j].finish == REQ_FINISH_NONE &&
                (ev->seq < 0 || j == ev->seq || ev->finish == REQ_FINISH_ERROR))
                finish_seq(r, &base[j], ev->finish);
        return NULL;
    }
    struct cmpl_seq *s = &base[ev->seq];
    if (s->finish != REQ_FINISH_NONE) return NULL;
    r->kv[prompt_index] = ev->kv_budget;
    r->kv_seen[prompt_index] = true;
    s->kv_evicted = MAX(s->kv_evicted, ev->kv_evicted_tokens);
    if (ev->token >= 0) {
        s->n_tokens++;
        s->sum_logprob += ev->logprob;
        if (p->logprobs >= 0) {
            struct lp_entry *e = lp_push(s);
            e->token = ev->token;
            e->logprob = ev->logprob;
            e->n_top = MAX(0, MIN(ev->n_top, CMPL_MAX_LOGPROBS));
            memcpy(e->top_ids, ev->top_ids, sizeof e->top_ids);
            memcpy(e->top_logprobs, ev->top_logprobs, sizeof e->top_logprobs);
            e->offset = s->n_chars;
        }
    }
    const char *t = ev->text ? ev->text : "";
    const size_t tl = ev->text ? ev->text_len : 0;
    if (ev->finish != REQ_FINISH_NONE) finish_seq(r, s, ev->finish);
    if (!p->stream) {
        json_utf8_append(&s->text, &s->len, &s->cap, t, tl, &s->n_chars);
        return NULL;
    }
    /* A chat choice's first chunk carries the role, so it goes out at once. */
    if (tl == 0 && ev->finish == REQ_FINISH_NONE && !((p->echo || p->chat) && !s->started))
        return NULL;
    char *delta = NULL;
    size_t dlen = 0, dcap = 0;
    json_utf8_append(&delta, &dlen, &dcap, t, tl, &s->n_chars);
    char *out = stream_chunk(r, prompt_index, ev->seq, delta, len);
    free(delta);
    return out;
}

bool cmpl_resp_done(const struct cmpl_resp *r)
{
    return r->n_done == r->p->n_prompts * r->n_gen;
}

const struct api_error *cmpl_resp_error(const struct cmpl_resp *r)
{
    return r->err.status ? &r->err : NULL;
}

void cmpl_resp_usage(const struct cmpl_resp *r, int64_t *prompt_tokens,
                     int64_t *completion_tokens)
{
    int64_t pt = 0, ct = 0;
    for (int32_t i = 0; i < r->p->n_prompts; i++)
        pt += r->p->prompts[i].n_ids;
    for (int64_t i = 0; i < (int64_t)r->p->n_prompts * r->n_gen; i++)
        ct += r->seqs[i].n_tokens;
    *prompt_tokens = pt;
    *completion_tokens = ct;
}

/* Mean token logprob, the best_of score; a sequence without tokens ranks last. */
static double seq_score(const struct cmpl_seq *s)
{
    return s->n_tokens > 0 ? s->sum_logprob / s->n_tokens : -INFINITY;
}

char *cmpl_resp_body(struct cmpl_resp *r, size_t *len)
{
    const struct cmpl_params *p = r->p;
    cJSON *choices;
    cJSON *o = completion_object(r, false, &choices);
    int32_t *order = xmalloc((size_t)r->n_gen * sizeof *order);
    for (int32_t pi = 0; pi < p->n_prompts; pi++) {
        const struct cmpl_seq *base = &r->seqs[(int64_t)pi * r->n_gen];
        for (int32_t j = 0; j < r->n_gen; j++)
            order[j] = j;
        if (r->n_gen > p->n) {
            /* Stable insertion sort by score, best first: ties keep the lower index.
             * n_gen <= 20 here (best_of's limit). */
            for (int32_t a = 1; a < r->n_gen; a++) {
                const int32_t x = order[a];
                int32_t b = a;
                while (b > 0 && seq_score(&base[x]) > seq_score(&base[order[b - 1]])) {
                    order[b] = order[b - 1];
                    b--;
                }
                order[b] = x;
            }
        }
        const struct cmpl_echo *e = p->echo ? echo_get(r, pi) : NULL;
        for (int32_t j = 0; j < p->n; j++) {
            const struct cmpl_seq *s = &base[order[j]];
            const char *gen = s->text ? s->text : "";
            char *text = NULL;
            if (e) {
                text = xmalloc(e->len + s->len + 1);
                memcpy(text, e->text, e->len);
                memcpy(text + e->len, gen, s->len + 1);
            }
            const int64_t index = (int64_t)pi * p->n + j;
            cJSON *lp = NULL;
            if (p->logprobs >= 0)
                lp = p->chat ? cmpl_resp_chat_logprobs(r->tok, s->lp, s->n_lp)
                             : logprobs_object(r, pi, p->echo, s->lp, s->n_lp,
                                               e ? e->n_chars : 0);
            cJSON_AddItemToArray(
                choices, p->chat ? cmpl_resp_chat_choice(gen, index, lp, s->finish,
                                                         CMPL_CHAT_MESSAGE)
                                 : choice_object(text ? text : gen, index, lp, s->finish));
            free(text);
        }
    }
    free(order);
    cJSON_AddItemToObject(o, "usage", usage_object(r));
    char *out = json_print(o, len);
    cJSON_Delete(o);
    return out;
}

char *cmpl_resp_stream_error(const struct api_error *e, size_t *len)
{
    cJSON *o = api_error_object(e);
    char *out = json_sse(o, len);
    cJSON_Delete(o);
    return out;
}

char *cmpl_resp_stream_tail(struct cmpl_resp *r, size_t *len)
{
    static const char done[] = "data: [DONE]\n\n";
    char *head = NULL;
    size_t hl = 0;
    /* After an engine error the caller has sent cmpl_resp_stream_error; usage would
     * describe a response that never completed, so it is left out. */
    if (r->p->include_usage && !r->err.status) {
        cJSON *choices;
        cJSON *o = completion_object(r, true, &choices);
        cJSON_AddItemToObject(o, "usage", usage_object(r));
        head = json_sse(o, &hl);
        cJSON_Delete(o);
    }
    char *out = xmalloc(hl + sizeof done);
    if (head) memcpy(out, head, hl);
    memcpy(out + hl, done, sizeof done);
    free(head);
    if (len) *len = hl + sizeof done - 1;
    return out;
}
