/*
 * test_cmpl_resp.c - POST /v1/completions responses (server/cmpl_resp.c) assembled
 * from hand-made engine events: the non-streaming body (prompt-major choices, usage,
 * best_of, echo, logprobs), SSE chunks and the stream tail, engine errors, and the
 * JSON helpers.
 */
#include "api_testlib.h"
#include "cmpl_resp.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct req_event ev_tok(int32_t seq, int32_t token, float lp, const char *text,
                               enum req_finish fin)
{
    struct req_event ev;
    memset(&ev, 0, sizeof ev);
    ev.seq = seq;
    ev.token = token;
    ev.logprob = lp;
    ev.text = (char *)text;
    ev.text_len = strlen(text);
    ev.finish = fin;
    return ev;
}

static cJSON *parse_json(const char *s)
{
    cJSON *o = cJSON_Parse(s);
    if (!o) TEST_FAIL("not JSON: %s", s);
    return o;
}

static const cJSON *get(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) TEST_FAIL("missing key %s", k);
    return v;
}

static const char *str_of(const cJSON *o, const char *k)
{
    const cJSON *v = get(o, k);
    return cJSON_IsString(v) ? v->valuestring : "(not a string)";
}

static void setup(struct cmpl_params *p, const char *body)
{
    struct api_error e = {0};
    if (parse(body, p, &e)) TEST_FAIL("%s: %s", body, e.message);
    api_error_clear(&e);
}

/* Feed one event, expecting no output (non-streaming). */
static void feed(struct cmpl_resp *r, int32_t pi, struct req_event ev)
{
    size_t len = 99;
    char *out = cmpl_resp_event(r, pi, &ev, &len);
    EXPECT(out == NULL);
    EXPECT_EQ(len, 0);
}

TEST(body_prompt_major_with_usage)
{
    /* P = 2, n = 2, events arriving interleaved: choice k is prompt k / 2, seq k % 2. */
    struct cmpl_params p;
    setup(&p, "{" M ",'prompt':['ab','xyz'],'n':2,'max_tokens':2}");
    struct cmpl_resp *r = cmpl_resp_create(&p, byte_tok, "cmpl-1", 1700000000);
    feed(r, 1, ev_tok(1, 10, -1, "q", REQ_FINISH_NONE));
    feed(r, 0, ev_tok(0, 10, -1, "a", REQ_FINISH_NONE));
    feed(r, 0, ev_tok(1, 10, -1, "c", REQ_FINISH_NONE));
    feed(r, 1, ev_tok(0, 10, -1, "p", REQ_FINISH_NONE));
    feed(r, 0, ev_tok(0, 11, -1, "b", REQ_FINISH_LENGTH));
    EXPECT(!cmpl_resp_done(r));
    feed(r, 1, ev_tok(1, 2, -1, "", REQ_FINISH_STOP)); /* EOS: a token without text */
    feed(r, 1, ev_tok(0, 11, -1, "p", REQ_FINISH_LENGTH));
    EXPECT(!cmpl_resp_done(r));
    feed(r, 0, ev_tok(1, 11, -1, "d", REQ_FINISH_LENGTH));
    EXPECT(cmpl_resp_done(r));
    EXPECT(cmpl_resp_error(r) == NULL);
    /* Late or stray events change nothing. */
    feed(r, 0, ev_tok(1, 11, -1, "zzz", REQ_FINISH_NONE));
    feed(r, 5, ev_tok(0, 11, -1, "zzz", REQ_FINISH_NONE));
    feed(r, 0, ev_tok(7, 11, -1, "zzz", REQ_FINISH_NONE));

    size_t len;
    char *body = cmpl_resp_body(r, &len);
    EXPECT_EQ(len, strlen(body));
    cJSON *o = parse_json(body);
    EXPECT_STR(str_of(o, "id"), "cmpl-1");
    EXPECT_STR(str_of(o, "object"), "text_completion");
    EXPECT_EQ(get(o, "created")->valuedouble, 1700000000);
    EXPECT_STR(str_of(o, "model"), "opt-test");
    const cJSON *ch = get(o, "choices");
    EXPECT_EQ(cJSON_GetArraySize(ch), 4);
    static const char *const texts[4] = {"ab", "cd", "pp", "q"};
    static const char *const fins[4] = {"length", "length", "length", "stop"};
    for (int k = 0; k < 4; k++) {
        const cJSON *c = cJSON_GetArrayItem(ch, k);
        EXPECT_EQ(get(c, "index")->valuedouble, k);
        EXPECT_STR(str_of(c, "text"), texts[k]);
        EXPECT(cJSON_IsNull(get(c, "logprobs")));
        EXPECT_STR(str_of(c, "finish_reason"), fins[k]);
    }
    const cJSON *u = get(o, "usage");
    EXPECT_EQ(get(u, "prompt_tokens")->valuedouble,
              3 + 4); /* BOS + bytes, each prompt once */
    EXPECT_EQ(get(u, "completion_tokens")->valuedouble, 8);
    EXPECT_EQ(get(u, "total_tokens")->valuedouble, 15);
    cJSON_Delete(o);
    free(body);
    cmpl_resp_destroy(r);
    cmpl_params_free(&p);
}

TEST(body_best_of_picks_highest_mean_logprob)
{
    /* best_of 4, n 2. Means: seq0 -1, seq1 -0.5 (two tokens), seq2 -0.5 (one token: a
     * tie with seq1, which wins as the lower index), seq3 -2. Choices: seq1, seq2. */
    struct cmpl_params p;
    setup(&p, "{" M ",'prompt':'a','n':2,'best_of':4,'max_tokens':2}");
    struct cmpl_resp *r = cmpl_resp_create(&p, byte_tok, "cmpl-2", 1);
    feed(r, 0, ev_tok(2, 10, -0.5f, "s2", REQ_FINISH_STOP));
    feed(r, 0, ev_tok(0, 10, -1.0f, "s0", REQ_FINISH_NONE));
    feed(r, 0, ev_tok(1, 10, -0.25f, "s1", REQ_FINISH_NONE));
    feed(r, 0, ev_tok(3, 10, -2.0f, "s3", REQ_FINISH_NONE));
    feed(r, 0, ev_tok(0, 10, -1.0f, "x", REQ_FINISH_LENGTH));
    feed(r, 0, ev_tok(1, 10, -0.75f, "x", REQ_FINISH_LENGTH));
    feed(r, 0, ev_tok(3, 10, -2.0f, "x", REQ_FINISH_LENGTH));
    EXPECT(cmpl_resp_done(r));
    char *body = cmpl_resp_body(r, NULL);
    cJSON *o = parse_json(body);
    const cJSON *ch = get(o, "choices");
    EXPECT_EQ(cJSON_GetArraySize(ch), 2);
    EXPECT_STR(str_of(cJSON_GetArrayItem(ch, 0), "text"), "s1x");
    EXPECT_STR(str_of(cJSON_GetArrayItem(ch, 1), "text"), "s2");
    EXPECT_EQ(get(cJSON_GetArrayItem(ch, 1), "index")->valuedouble, 1);
    EXPECT_STR(str_of(cJSON_GetArrayItem(ch, 1), "finish_reason"), "stop");
    EXPECT(cJSON_IsNull(get(cJSON_GetArrayItem(ch, 0), "logprobs")));
    /* Usage counts every generated token, the two candidates not returned included. */
    EXPECT_EQ(get(get(o, "usage"), "completion_tokens")->valuedouble, 7);
    int64_t pt, ct;
    cmpl_resp_usage(r, &pt, &ct);
    EXPECT_EQ(pt, 2);
    EXPECT_EQ(ct, 7);
    cJSON_Delete(o);
    free(body);
    cmpl_resp_destroy(r);
    cmpl_params_free(&p);
}

/* Check a logprobs object: parallel arrays, and each non-special token found at its
 * text_offset in `text` (ASCII text, so characters are bytes). */
static void check_logprobs(const cJSON *lp, const char *text, int n_expected)
{
    const cJSON *toks = get(lp, "tokens"), *lps = get(lp, "token_logprobs");
    const cJSON *tops = get(lp, "top_logprobs"), *offs = get(lp, "text_offset");
    const int n = cJSON_GetArraySize(toks);
    EXPECT_EQ(n, n_expected);
    EXPECT_EQ(cJSON_GetArraySize(lps), n);
    EXPECT_EQ(cJSON_GetArraySize(tops), n);
    EXPECT_EQ(cJSON_GetArraySize(offs), n);
    double prev = 0;
    for (int i = 0; i < n; i++) {
        const char *t = cJSON_GetArrayItem(toks, i)->valuestring;
        const double off = cJSON_GetArrayItem(offs, i)->valuedouble;
        EXPECT(off >= prev); /* offsets never go back */
        prev = off;
        if (strcmp(t, "</s>") == 0) continue;
        EXPECT(off + strlen(t) <= strlen(text));
        if (strncmp(text + (size_t)off, t, strlen(t)) != 0)
            TEST_FAIL("token %d \"%s\" is not at offset %g of \"%s\"", i, t, off, text);
    }
}

TEST(body_echo_and_logprobs_with_opt_tokens)
{
    /* "Hello world" is </s> Hello Ġworld; the completion " foo bar" is fed as the
     * engine would: one event per token, then EOS. */
    struct api_model m;
    model_init(&m, opt_tok);
    m.max_model_len = 2048;
    struct cmpl_params p;
    struct api_error e = {0};
    const char *b =
        q("{" M ",'prompt':'Hello world','echo':true,'logprobs':2,'max_tokens':5}");
    EXPECT_EQ(cmpl_parse(b, strlen(b), &m, &p, &e), 0);
    EXPECT_EQ(p.prompts[0].n_ids, 3);
    EXPECT_EQ(p.prompts[0].ids[1], 31414);
    int32_t *gen, n_gen;
    EXPECT_EQ(tokenizer_encode(opt_tok, " foo bar", 8, false, &gen, &n_gen), 0);
    EXPECT_EQ(n_gen, 2);
    struct cmpl_resp *r = cmpl_resp_create(&p, opt_tok, "cmpl-3", 5);
    const char *texts[2] = {" foo", " bar"};
    for (int i = 0; i < 2; i++) {
        struct req_event ev =
            ev_tok(0, gen[i], -0.5f * (float)(i + 1), texts[i], REQ_FINISH_NONE);
        /* The alternatives do not include the sampled token: it is added. */
        ev.n_top = 2;
        ev.top_ids[0] = 31414;
        ev.top_logprobs[0] = -0.1f;
        ev.top_ids[1] = 232;
        ev.top_logprobs[1] = -0.2f;
        feed(r, 0, ev);
    }
    struct req_event eos = ev_tok(0, 2, -0.05f, "", REQ_FINISH_STOP);
    eos.n_top = 1;
    eos.top_ids[0] = 2;
    eos.top_logprobs[0] = -0.05f;
    feed(r, 0, eos);
    EXPECT(cmpl_resp_done(r));
    char *body = cmpl_resp_body(r, NULL);
    cJSON *o = parse_json(body);
    const cJSON *c = cJSON_GetArrayItem(get(o, "choices"), 0);
    EXPECT_STR(str_of(c, "text"), "Hello world foo bar");
    EXPECT_STR(str_of(c, "finish_reason"), "stop");
    const cJSON *lp = get(c, "logprobs");
    check_logprobs(lp, "Hello world foo bar", 6);
    const cJSON *toks = get(lp, "tokens"), *lps = get(lp, "token_logprobs");
    const cJSON *tops = get(lp, "top_logprobs"), *offs = get(lp, "text_offset");
    EXPECT_STR(cJSON_GetArrayItem(toks, 0)->valuestring, "</s>");
    EXPECT_STR(cJSON_GetArrayItem(toks, 2)->valuestring, " world");
    EXPECT_STR(cJSON_GetArrayItem(toks, 3)->valuestring, " foo");
    EXPECT_STR(cJSON_GetArrayItem(toks, 5)->valuestring, "</s>");
    for (int i = 0; i < 3; i++) { /* prompt tokens: not scored (yet) */
        EXPECT(cJSON_IsNull(cJSON_GetArrayItem(lps, i)));
        EXPECT(cJSON_IsNull(cJSON_GetArrayItem(tops, i)));
    }
    EXPECT_NEAR(cJSON_GetArrayItem(lps, 3)->valuedouble, -0.5, 0);
    EXPECT_NEAR(cJSON_GetArrayItem(lps, 4)->valuedouble, -1.0, 0);
    static const double want_off[6] = {0, 0, 5, 11, 15, 19};
    for (int i = 0; i < 6; i++)
        EXPECT_EQ(cJSON_GetArrayItem(offs, i)->valuedouble, want_off[i]);
    const cJSON *t3 = cJSON_GetArrayItem(tops, 3);
    EXPECT_EQ(cJSON_GetArraySize(t3), 3); /* two alternatives + the sampled token */
    EXPECT_NEAR(get(t3, "Hello")->valuedouble, -0.1, 1e-9); /* printed as the float reads */
    EXPECT_NEAR(get(t3, " foo")->valuedouble, -0.5, 0);
    EXPECT_EQ(cJSON_GetArraySize(cJSON_GetArrayItem(tops, 5)), 1); /* EOS is its own top */
    EXPECT(strstr(body, "-0.1,") != NULL || strstr(body, "-0.1}") != NULL);
    const cJSON *u = get(o, "usage");
    EXPECT_EQ(get(u, "prompt_tokens")->valuedouble, 3);
    EXPECT_EQ(get(u, "completion_tokens")->valuedouble, 3);
    cJSON_Delete(o);
    free(body);
    free(gen);
    cmpl_resp_destroy(r);
    cmpl_params_free(&p);
}

TEST(body_echo_token_prompt_and_max_tokens_zero)
{
    /* Scoring-style request: echo a token prompt and generate nothing. Byte ids: 'H' is
     * 76, 'i' 109; 0xC3 0xA9 (é) is 199 173; a lone 0xFF is 259. */
    struct cmpl_params p;
    setup(&p, "{" M ",'prompt':[[76,109,199,173,33],[259,76]],'echo':true,'logprobs':0,"
              "'max_tokens':0}");
    struct cmpl_resp *r = cmpl_resp_create(&p, byte_tok, "cmpl-4", 5);
    feed(r, 0, ev_tok(0, -1, 0, "", REQ_FINISH_LENGTH));
    feed(r, 1, ev_tok(0, -1, 0, "", REQ_FINISH_LENGTH));
    EXPECT(cmpl_resp_done(r));
    char *body = cmpl_resp_body(r, NULL);
    cJSON *o = parse_json(body);
    const cJSON *c0 = cJSON_GetArrayItem(get(o, "choices"), 0);
    EXPECT_STR(str_of(c0, "text"), "Hi\xc3\xa9\x1d");
    EXPECT_STR(str_of(c0, "finish_reason"), "length");
    const cJSON *offs = get(get(c0, "logprobs"), "text_offset");
    /* Offsets in characters: the é's second byte starts inside the character and is
     * placed after it. */
    static const double want[5] = {0, 1, 2, 3, 3};
    EXPECT_EQ(cJSON_GetArraySize(offs), 5);
    for (int i = 0; i < 5; i++)
        EXPECT_EQ(cJSON_GetArrayItem(offs, i)->valuedouble, want[i]);
    /* An invalid byte in a token prompt echoes as U+FFFD, so the body stays UTF-8. */
    const cJSON *c1 = cJSON_GetArrayItem(get(o, "choices"), 1);
    EXPECT_STR(str_of(c1, "text"), "\xef\xbf\xbdH");
    EXPECT_EQ(cJSON_GetArrayItem(get(get(c1, "logprobs"), "text_offset"), 1)->valuedouble,
              1);
    EXPECT(json_utf8_valid(body, strlen(body)));
    EXPECT_EQ(get(get(o, "usage"), "completion_tokens")->valuedouble, 0);
    EXPECT_EQ(get(get(o, "usage"), "prompt_tokens")->valuedouble, 7);
    cJSON_Delete(o);
    free(body);
    cmpl_resp_destroy(r);
    cmpl_params_free(&p);
}

TEST(body_sanitizes_bad_text_and_maps_cancel)
{
    struct cmpl_params p;
    setup(&p, "{" M ",'prompt':'a','n':2}");
    struct cmpl_resp *r = cmpl_resp_create(&p, byte_tok, "cmpl-5", 5);
    struct req_event ev = ev_tok(0, 10, -1, "x\xff", REQ_FINISH_NONE);
    feed(r, 0, ev);
    ev = ev_tok(0, 11, -1, "", REQ_FINISH_CANCELLED);
    feed(r, 0, ev);
    char nul_text[] = {'a', 0, 'b', 0};
    ev = ev_tok(1, 12, -1, nul_text, REQ_FINISH_STOP);
    ev.text_len = 3; /* a generated U+0000 inside the delta */
    feed(r, 0, ev);
    char *body = cmpl_resp_body(r, NULL);
    EXPECT(json_utf8_valid(body, strlen(body)));
    cJSON *o = parse_json(body);
    const cJSON *ch = get(o, "choices");
    EXPECT_STR(str_of(cJSON_GetArrayItem(ch, 0), "text"), "x\xef\xbf\xbd");
    EXPECT_STR(str_of(cJSON_GetArrayItem(ch, 0), "finish_reason"),
               "length"); /* cancelled */
    EXPECT_STR(str_of(cJSON_GetArrayItem(ch, 1), "text"), "a\xef\xbf\xbd"
                                                          "b");
    cJSON_Delete(o);
    free(body);
    cmpl_resp_destroy(r);
    cmpl_params_free(&p);
    EXPECT(cmpl_resp_finish_reason(REQ_FINISH_NONE) == NULL);
    EXPECT_STR(cmpl_resp_finish_reason(REQ_FINISH_STOP), "stop");
}

TEST(engine_errors_are_remembered)
{
    struct cmpl_params p;
    setup(&p, "{" M ",'prompt':['a','b'],'n':2,'stream':true,"
              "'stream_options':{'include_usage':true}}");
    struct cmpl_resp *r = cmpl_resp_create(&p, byte_tok, "cmpl-6", 5);
    size_t len;
    char *out = cmpl_resp_event(
        r, 1, &(struct req_event){.seq = 0, .token = 10, .text = "z", .text_len = 1}, &len);
    EXPECT(out != NULL);
    free(out);
    struct req_event ev = ev_tok(-1, -1, 0, "", REQ_FINISH_ERROR);
    ev.error = "the prompt is empty";
    ev.error_code = -1005; /* ENG_EINVAL */
    EXPECT(cmpl_resp_event(r, 0, &ev, &len) == NULL);
    EXPECT(!cmpl_resp_done(r)); /* prompt 1 still runs */
    const struct api_error *err = cmpl_resp_error(r);
    EXPECT(err && err->status == 400);
    EXPECT_STR(err->message, "the prompt is empty");
    /* A second error keeps the first. */
    ev.error_code = -1008;
    ev.error = "stopping";
    EXPECT(cmpl_resp_event(r, 1, &ev, &len) == NULL);
    EXPECT(cmpl_resp_done(r));
    EXPECT_EQ(cmpl_resp_error(r)->status, 400);
    /* The stream ends with the error event, then [DONE] alone: no usage for a
     * response that failed, even with include_usage. */
    out = cmpl_resp_stream_error(cmpl_resp_error(r), &len);
    const char *want = "data: {\"error\":{\"message\":\"the prompt is empty\"";
    EXPECT(strncmp(out, want, strlen(want)) == 0);
    free(out);
    out = cmpl_resp_stream_tail(r, &len);
    EXPECT_STR(out, "data: [DONE]\n\n");
    EXPECT_EQ(len, 14);
    free(out);
    cmpl_resp_destroy(r);

    /* Unavailable engine -> 503; anything else -> 500. */
    r = cmpl_resp_create(&p, byte_tok, "cmpl-7", 5);
    EXPECT(cmpl_resp_event(r, 0, &ev, &len) == NULL);
    EXPECT_EQ(cmpl_resp_error(r)->status, 503);
    cmpl_resp_destroy(r);
    r = cmpl_resp_create(&p, byte_tok, "cmpl-8", 5);
    ev.error_code = -1001;
    EXPECT(cmpl_resp_event(r, 0, &ev, &len) == NULL);
    EXPECT_EQ(cmpl_resp_error(r)->status, 500);
    EXPECT_STR(cmpl_resp_error(r)->type, "server_error");
    cmpl_resp_destroy(r);
    cmpl_params_free(&p);
}

/* ---- streaming ---- */

struct stream_seen {
    char text[8][64];
    int n_tokens[8];
    int n_finish[8];
    int chunks_after_finish[8];
};

/* Check one SSE chunk and record what it says per choice index. */
static void take_chunk(char *out, size_t len, struct stream_seen *s, bool usage_key)
{
    if (!out) return;
    EXPECT_EQ(len, strlen(out));
    EXPECT(strncmp(out, "data: ", 6) == 0);
    EXPECT(len >= 8 && strcmp(out + len - 2, "\n\n") == 0);
    out[len - 2] = '\0';
    cJSON *o = parse_json(out + 6);
    if (!o) return;
    EXPECT_STR(str_of(o, "object"), "text_completion");
    EXPECT_STR(str_of(o, "id"), "cmpl-s");
    if (usage_key)
        EXPECT(cJSON_IsNull(get(o, "usage")));
    else
        EXPECT(cJSON_GetObjectItemCaseSensitive(o, "usage") == NULL);
    const cJSON *ch = get(o, "choices");
    EXPECT_EQ(cJSON_GetArraySize(ch), 1);
    const cJSON *c = cJSON_GetArrayItem(ch, 0);
    const int idx = (int)get(c, "index")->valuedouble;
    if (idx < 0 || idx >= 8) {
        TEST_FAIL("index %d", idx);
    } else {
        if (s->n_finish[idx]) s->chunks_after_finish[idx]++;
        strcat(s->text[idx], str_of(c, "text"));
        const cJSON *lp = get(c, "logprobs");
        if (!cJSON_IsNull(lp)) {
            const int n = cJSON_GetArraySize(get(lp, "tokens"));
            EXPECT_EQ(cJSON_GetArraySize(get(lp, "token_logprobs")), n);
            EXPECT_EQ(cJSON_GetArraySize(get(lp, "top_logprobs")), n);
            EXPECT_EQ(cJSON_GetArraySize(get(lp, "text_offset")), n);
            s->n_tokens[idx] += n;
        }
        if (!cJSON_IsNull(get(c, "finish_reason"))) s->n_finish[idx]++;
    }
    cJSON_Delete(o);
    free(out);
}

TEST(stream_chunks_finish_last_and_usage_tail)
{
    /* P = 2, n = 2, logprobs 1, include_usage. Some tokens release no text (a held-back
     * UTF-8 half): they send nothing, and their logprobs ride on the next chunk. */
    struct cmpl_params p;
    setup(&p, "{" M ",'prompt':['ab','c'],'n':2,'logprobs':1,'stream':true,"
              "'stream_options':{'include_usage':true}}");
    struct cmpl_resp *r = cmpl_resp_create(&p, byte_tok, "cmpl-s", 9);
    struct stream_seen s;
    memset(&s, 0, sizeof s);
    size_t len;
    struct {
        int32_t pi, seq, token;
        const char *text;
        enum req_finish fin;
        bool sends;
    } evs[] = {
        {0, 0, 10, "He", REQ_FINISH_NONE, true},
        {1, 1, 199, "", REQ_FINISH_NONE, false}, /* first byte of é: held back */
        {0, 1, 10, "A", REQ_FINISH_NONE, true},
        {1, 1, 203, "\xc3\xa9", REQ_FINISH_NONE, true},
        {1, 0, 10, "x", REQ_FINISH_NONE, true},
        {0, 0, 10, "llo", REQ_FINISH_NONE, true},
        {0, 1, 2, "", REQ_FINISH_STOP, true}, /* EOS: no text, but the finish is news */
        {1, 0, 10, "", REQ_FINISH_NONE, false},
        {1, 0, 10, "yz", REQ_FINISH_LENGTH, true},
        {0, 0, 10, "!", REQ_FINISH_LENGTH, true},
        {1, 1, -1, "", REQ_FINISH_CANCELLED, true},
    };
    for (size_t i = 0; i < ARRAY_LEN(evs); i++) {
        struct req_event ev =
            ev_tok(evs[i].seq, evs[i].token, -0.5f, evs[i].text, evs[i].fin);
        if (evs[i].token >= 0) {
            ev.n_top = 1;
            ev.top_ids[0] = evs[i].token;
            ev.top_logprobs[0] = -0.5f;
        }
        EXPECT(!cmpl_resp_done(r));
        char *out = cmpl_resp_event(r, evs[i].pi, &ev, &len);
        EXPECT_EQ(out != NULL, evs[i].sends);
        take_chunk(out, len, &s, true);
    }
    EXPECT(cmpl_resp_done(r));
    static const char *const want[4] = {"Hello!", "A", "xyz", "\xc3\xa9"};
    static const int want_tokens[4] = {3, 2, 3, 2};
    for (int k = 0; k < 4; k++) {
        EXPECT_STR(s.text[k], want[k]);
        EXPECT_EQ(s.n_tokens[k], want_tokens[k]);
        EXPECT_EQ(s.n_finish[k], 1);
        EXPECT_EQ(s.chunks_after_finish[k], 0);
    }
    char *tail = cmpl_resp_stream_tail(r, &len);
    EXPECT_EQ(len, strlen(tail));
    char *done = strstr(tail, "data: [DONE]\n\n");
    EXPECT(done != NULL && done[14] == '\0'); /* [DONE] is last */
    if (done) {
        *done = '\0';
        EXPECT(strncmp(tail, "data: ", 6) == 0);
        tail[strlen(tail) - 2] = '\0';
        cJSON *o = parse_json(tail + 6);
        EXPECT_EQ(cJSON_GetArraySize(get(o, "choices")), 0);
        const cJSON *u = get(o, "usage");
        EXPECT_EQ(get(u, "prompt_tokens")->valuedouble, 5);
        EXPECT_EQ(get(u, "completion_tokens")->valuedouble, 10);
        EXPECT_EQ(get(u, "total_tokens")->valuedouble, 15);
        cJSON_Delete(o);
    }
    free(tail);
    cmpl_resp_destroy(r);
    cmpl_params_free(&p);
}

TEST(stream_echo_in_first_chunk_and_plain_tail)
{
    /* Without include_usage the chunks have no usage key and the tail is [DONE]
     * alone. With echo the first chunk of each choice starts with the prompt, and its
     * logprobs start with the prompt's tokens. */
    struct cmpl_params p;
    setup(&p, "{" M ",'prompt':'Hi','n':2,'echo':true,'logprobs':0,'stream':true}");
    struct cmpl_resp *r = cmpl_resp_create(&p, byte_tok, "cmpl-s", 9);
    struct stream_seen s;
    memset(&s, 0, sizeof s);
    size_t len;
    /* Sequence 0's first token releases no text, yet the echo goes out at once. */
    char *out = cmpl_resp_event(
        r, 0, &(struct req_event){.seq = 0, .token = 199, .text = ""}, &len);
    EXPECT(out != NULL);
    take_chunk(out, len, &s, false);
    EXPECT_STR(s.text[0], "Hi");
    EXPECT_EQ(s.n_tokens[0], 4); /* </s> H i, and the held token */
    out = cmpl_resp_event(r, 0,
                          &(struct req_event){.seq = 0,
                                              .token = 203,
                                              .text = "\xc3\xa9",
                                              .text_len = 2,
                                              .finish = REQ_FINISH_LENGTH},
                          &len);
    /* Character offsets: é is one character at offset 2, however many bytes. */
    EXPECT(out && strstr(out, "\"text_offset\":[2]") != NULL);
    take_chunk(out, len, &s, false);
    out = cmpl_resp_event(
        r, 0,
        &(struct req_event){.seq = 1, .token = -1, .text = "", .finish = REQ_FINISH_LENGTH},
        &len);
    take_chunk(out, len, &s, false);
    EXPECT_STR(s.text[0], "Hi\xc3\xa9");
    EXPECT_STR(s.text[1], "Hi");
    EXPECT_EQ(s.n_finish[0], 1);
    EXPECT_EQ(s.n_finish[1], 1);
    EXPECT_EQ(s.n_tokens[1], 3);
    EXPECT(cmpl_resp_done(r));
    char *tail = cmpl_resp_stream_tail(r, &len);
    EXPECT_STR(tail, "data: [DONE]\n\n");
    EXPECT_EQ(len, 14);
    free(tail);
    cmpl_resp_destroy(r);
    cmpl_params_free(&p);
}

TEST(json_helpers)
{
    /* Floats print with the fewest digits that read back as the same float. */
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, json_float(-0.1f));
    cJSON_AddItemToArray(a, json_float(-1.5f));
    cJSON_AddItemToArray(a, json_float(-12.345678f));
    cJSON_AddItemToArray(a, json_float(0.0f));
    cJSON_AddItemToArray(a, json_float(-0.0f));
    cJSON_AddItemToArray(a, json_float(-3.0f));
    cJSON_AddItemToArray(a, json_float(-1.5e-5f));
    cJSON_AddItemToArray(a, json_float(3e9f));
    cJSON_AddItemToArray(a, json_float(NAN));
    char *s = json_print(a, NULL);
    EXPECT_STR(s, "[-0.1,-1.5,-12.345678,0,0,-3,-1.5e-05,3000000000,null]");
    free(s);
    cJSON_Delete(a);
    /* Printed as cJSON prints the number the text denotes, and read back as the same
     * float: over logprob-like values and random finite bit patterns. */
    uint64_t rng = 0x9e3779b97f4a7c15u;
    int n_bad = 0;
    for (int i = 0; i < 200000; i++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        uint32_t bits = (uint32_t)(rng >> 32);
        float f;
        if (i % 2) f = -(float)(bits >> 8) / (float)(1 << 20); /* 0 .. -16 */
        else memcpy(&f, &bits, sizeof f);
        if (!isfinite(f)) continue;
        cJSON *item = json_float(f);
        char *got = cJSON_PrintUnformatted(item);
        cJSON *ref = cJSON_CreateNumber(strtod(got, NULL));
        char *want = cJSON_PrintUnformatted(ref);
        if (strcmp(got, want) != 0 || strtof(got, NULL) != f) {
            if (n_bad++ < 5) fprintf(stderr, "# %a: %s, cJSON %s\n", (double)f, got, want);
        }
        cJSON_free(got);
        cJSON_free(want);
        cJSON_Delete(item);
        cJSON_Delete(ref);
    }
    EXPECT_EQ(n_bad, 0);
    EXPECT(json_utf8_valid("h\xc3\xa9\xf0\x9f\x98\x80", 7));
    EXPECT(!json_utf8_valid("\xc0\xaf", 2));         /* overlong */
    EXPECT(!json_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    EXPECT(!json_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
    EXPECT(!json_utf8_valid("\xc3", 1));             /* cut short */
}

int main(void)
{
    if (api_testlib_init()) return 1;
    RUN(body_prompt_major_with_usage);
    RUN(body_best_of_picks_highest_mean_logprob);
    RUN(body_echo_and_logprobs_with_opt_tokens);
    RUN(body_echo_token_prompt_and_max_tokens_zero);
    RUN(body_sanitizes_bad_text_and_maps_cancel);
    RUN(engine_errors_are_remembered);
    RUN(stream_chunks_finish_last_and_usage_tail);
    RUN(stream_echo_in_first_chunk_and_plain_tail);
    RUN(json_helpers);
    api_testlib_done();
    return test_done();
}
