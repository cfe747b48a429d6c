/*
 * fuzz_cmpl.c - libFuzzer target for POST /v1/completions without the network: a
 * request body through cmpl_parse (with OPT's real BPE tokenizer, so text prompts,
 * stop strings and logit_bias meet the tokenizer too), cmpl_make_req for every
 * prompt, then a response assembled from engine events made the engine's way
 * (detok.h with the request's stop strings) until every sequence finishes.
 *
 * Input: the body, then optionally the bytes FF FE (never in UTF-8, so a valid body
 * cannot hold them) and an event script, 4 bytes per event:
 *   a: prompt index (a % prompts) and sequence ((a >> 4) % (seqs + 1): one past the
 *      last is a stray event the response must ignore);
 *   b, c: the token, (b << 8 | c) % vocab;
 *   d: d & 3 = 0 a token, 1 EOS, 2 the length limit, 3 (with d == 0xFF) an engine
 *      error; bit 2 (with echo and logprobs) makes it a prompt-token event; the rest
 *      is the logprob.
 * Checks beyond the sanitizers: a refusal is 400 or 404 with a JSON error body; an
 * accepted request gives engine requests that say what the params do; every SSE
 * chunk and the final body are "data: " + JSON / JSON, valid UTF-8.
 */
#include "cmpl.h"
#include "cmpl_resp.h"
#include "fuzz_opt.h"
#include "fuzz_util.h"

#include "detok.h"
#include "req.h"
#include "tokenizer.h"

#include <stdbool.h>
#include <stdio.h>

#define VOCAB FUZZ_OPT_VOCAB

static const struct api_model *model;
static const struct tokenizer *opt_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    model = fuzz_opt_model();
    opt_tok = model->tok;
    return 0;
}

/* A streamed chunk: "data: " + one JSON object + "\n\n". */
static void check_sse(const char *s, size_t len)
{
    REQUIRE(len > 8 && memcmp(s, "data: ", 6) == 0);
    REQUIRE(s[len - 2] == '\n' && s[len - 1] == '\n');
    REQUIRE(json_utf8_valid(s, len));
    struct json_fault f;
    cJSON *j = json_parse_checked(s + 6, len - 8, &f);
    REQUIRE(j != NULL);
    cJSON_Delete(j);
}

/* The stream's tail: optional usage chunk, then "data: [DONE]\n\n". */
static void check_tail(const char *s, size_t len)
{
    static const char done[] = "data: [DONE]\n\n";
    const size_t nd = sizeof done - 1;
    REQUIRE(len >= nd && memcmp(s + len - nd, done, nd) == 0);
    if (len > nd) check_sse(s, len - nd);
}

static void check_req(const struct cmpl_params *p, int32_t i, const struct req *r)
{
    REQUIRE(r->n == cmpl_params_seqs(p));
    REQUIRE(r->n_prompt_ids == p->prompts[i].n_ids);
    for (int32_t k = 0; k < r->n_prompt_ids; k++)
        REQUIRE(r->prompt_ids[k] >= 0 && r->prompt_ids[k] < VOCAB);
    REQUIRE(r->max_tokens == p->max_tokens);
    REQUIRE(r->n_stops == p->n_stops);
    REQUIRE(r->prompt_ids[0] == p->prompts[i].ids[0]);
}

struct run {
    const struct cmpl_params *p;
    struct cmpl_resp *resp;
    struct detok *dt; /* [prompts * seqs] */
    bool *finished;   /* [prompts * seqs] */
    int32_t seqs;
};

/* text[0..*len) + more[0..n), NUL-terminated, in a new buffer; text is freed. */
static char *append(char *text, size_t *len, const char *more, size_t n)
{
    char *out = realloc(text, *len + n + 1);
    memcpy(out + *len, more, n);
    *len += n;
    out[*len] = '\0';
    return out;
}

/* Give one event to the response as the engine makes it (sched_step.c: seq_emit). */
static void emit(struct run *u, int32_t pi, int32_t seq, int32_t token, uint8_t d)
{
    const struct cmpl_prompt *pr = &u->p->prompts[pi];
    struct req_event ev;
    memset(&ev, 0, sizeof ev);
    ev.seq = seq;
    ev.token = token;
    ev.logprob = -(float)(d >> 3) / 4.0f;
    ev.n_top = u->p->logprobs > 0 ? u->p->logprobs : 0;
    for (int32_t k = 0; k < ev.n_top; k++) {
        ev.top_ids[k] = (token + k * 7919) % VOCAB;
        ev.top_logprobs[k] = ev.logprob - (float)k;
    }
    const int kind = d & 3;
    const bool in_range = seq < u->seqs;
    bool *finished = in_range ? &u->finished[pi * u->seqs + seq] : NULL;
    char *text = NULL, *delta;
    size_t len = 0, n;
    if (kind == 3 && d == 0xFF) {
        ev.finish = REQ_FINISH_ERROR;
        ev.token = -1;
        ev.seq = -1;
        ev.error = (char *)"fuzz: engine error";
    } else if ((d & 4) && u->p->echo && u->p->logprobs >= 0) {
        /* A scored prompt token; positions out of range must be ignored. */
        ev.prompt_pos = 1 + token % pr->n_ids;
        if ((d & 8) && ev.prompt_pos < pr->n_ids) ev.token = pr->ids[ev.prompt_pos];
        ev.seq = 0;
    } else if (in_range) {
        if (*finished) return;
        struct detok *dt = &u->dt[pi * u->seqs + seq];
        ev.text_offset = detok_emitted_len(dt);
        bool stopped = false;
        if (kind == 1) {
            ev.finish = REQ_FINISH_STOP; /* EOS: not pushed, what is held is released */
        } else {
            detok_push(dt, token, &delta, &n, &stopped);
            text = append(text, &len, delta, n);
            if (stopped)
                ev.finish = REQ_FINISH_STOP;
            else if (kind == 2)
                ev.finish = REQ_FINISH_LENGTH;
        }
        if (ev.finish != REQ_FINISH_NONE && !stopped) {
            detok_flush(dt, &delta, &n);
            text = append(text, &len, delta, n);
        }
    }
    ev.text = text ? text : (char *)"";
    ev.text_len = len;
    if (ev.finish == REQ_FINISH_STOP || ev.finish == REQ_FINISH_LENGTH) {
        ev.completion_tokens = 1;
        ev.prompt_tokens = pr->n_ids;
        *finished = true;
    }
    size_t out_len = 0;
    char *out = cmpl_resp_event(u->resp, pi, &ev, &out_len);
    if (out) {
        REQUIRE(u->p->stream);
        check_sse(out, out_len);
        free(out);
    }
    free(text);
}

static void respond(const struct cmpl_params *p, const uint8_t *script, size_t n)
{
    struct run u = {.p = p, .seqs = cmpl_params_seqs(p)};
    const int32_t total = p->n_prompts * u.seqs;
    u.resp = cmpl_resp_create(p, opt_tok, "cmpl-fuzz", 1700000000);
    cmpl_resp_set_fingerprint(u.resp, "fp_0123456789");
    u.dt = calloc((size_t)total, sizeof *u.dt);
    u.finished = calloc((size_t)total, sizeof *u.finished);
    for (int32_t i = 0; i < total; i++)
        detok_init(&u.dt[i], opt_tok, (const char *const *)p->stops, p->n_stops);

    for (size_t at = 0; at + 4 <= n && !cmpl_resp_done(u.resp); at += 4) {
        const uint8_t a = script[at], d = script[at + 3];
        int32_t token = ((int32_t)script[at + 1] << 8 | script[at + 2]) % VOCAB;
        emit(&u, a % p->n_prompts, (a >> 4) % (u.seqs + 1), token, d);
    }
    /* The engine always ends what it started: finish what the script left open. */
    for (int32_t i = 0; i < total && !cmpl_resp_done(u.resp); i++)
        if (!u.finished[i]) emit(&u, i / u.seqs, i % u.seqs, 2, 2);
    REQUIRE(cmpl_resp_done(u.resp));

    const struct api_error *err = cmpl_resp_error(u.resp);
    size_t len = 0;
    char *out;
    if (p->stream) {
        if (err) {
            out = cmpl_resp_stream_error(err, &len);
            check_sse(out, len);
            free(out);
        }
        out = cmpl_resp_stream_tail(u.resp, &len);
        check_tail(out, len);
    } else if (err) {
        out = api_error_json(err, &len);
        fuzz_require_json(out, len);
    } else {
        out = cmpl_resp_body(u.resp, &len);
        fuzz_require_json(out, len);
    }
    free(out);
    for (int32_t i = 0; i < total; i++)
        detok_deinit(&u.dt[i]);
    free(u.dt);
    free(u.finished);
    cmpl_resp_destroy(u.resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t body_len = size;
    const uint8_t *script = NULL;
    size_t script_len = 0;
    for (size_t i = 0; i + 1 < size; i++)
        if (data[i] == 0xFF && data[i + 1] == 0xFE) {
            body_len = i;
            script = data + i + 2;
            script_len = size - i - 2;
            break;
        }
    /* The HTTP layer hands over a NUL-terminated copy; so does this. */
    char *body = malloc(body_len + 1);
    memcpy(body, data, body_len);
    body[body_len] = '\0';

    struct cmpl_params p;
    struct api_error e = {0};
    if (cmpl_parse(body, body_len, model, &p, &e)) {
        REQUIRE(e.status == 400 || e.status == 404);
        REQUIRE(e.message != NULL && json_utf8_valid(e.message, strlen(e.message)));
        size_t len;
        char *j = api_error_json(&e, &len);
        fuzz_require_json(j, len);
        free(j);
        api_error_clear(&e);
        free(body);
        return 0;
    }
    REQUIRE(e.status == 0);
    REQUIRE(p.n_prompts >= 1 && p.n_prompts <= model->max_prompts);
    REQUIRE((int64_t)p.n_prompts * cmpl_params_seqs(&p) <= model->max_seqs);
    for (int32_t i = 0; i < p.n_prompts; i++) {
        REQUIRE(p.prompts[i].n_ids >= 1);
        REQUIRE(p.prompts[i].n_ids + p.max_tokens <= model->max_model_len);
        struct req *r = cmpl_make_req(&p, i, 1 + (uint64_t)i, 42);
        check_req(&p, i, r);
        req_free(r);
    }
    respond(&p, script, script_len);
    cmpl_params_free(&p);
    free(body);
    return 0;
}
