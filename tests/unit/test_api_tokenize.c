/*
 * test_api_tokenize.c - vLLM's POST /tokenize and /detokenize bodies without the
 * network (server/api_tokenize.c): the fields and their defaults, the errors and
 * their params, the hand-written JSON read back by cJSON (escapes, UTF-8), round
 * trips on the byte and the OPT tokenizer, and bodies of millions of ids.
 */
#include "api_testlib.h"
#include "api_tokenize.h"
#include "chat.h"

/* A call's outcome: the status (200 or the error's) and the parsed body. */
struct res {
    int status;
    cJSON *body; /* the response, or the error object; NULL if not JSON */
    const char *param;
};

static struct res call_raw(char *(*fn)(const char *, size_t, const struct api_model *,
                                       size_t *, struct api_error *),
                           const struct api_model *m, const char *body, size_t len)
{
    static struct api_error e; /* kept until the next call, for .param */
    api_error_clear(&e);
    struct res r = {0};
    size_t out_len = 0;
    char *out = fn(body, len, m, &out_len, &e);
    if (out) {
        r.status = 200;
        r.body = cJSON_ParseWithLength(out, out_len);
        if (!r.body || strlen(out) != out_len) TEST_FAIL("not one JSON value: %.200s", out);
        if (!json_utf8_valid(out, out_len)) TEST_FAIL("response is not UTF-8");
        free(out);
    } else {
        r.status = e.status;
        r.param = e.param;
        char *j = api_error_json(&e, NULL);
        r.body = cJSON_Parse(j);
        free(j);
    }
    return r;
}

static struct res tok_m(const struct api_model *m, const char *body)
{
    const char *b = q(body);
    return call_raw(api_tokenize, m, b, strlen(b));
}

static struct res detok_m(const struct api_model *m, const char *body)
{
    const char *b = q(body);
    return call_raw(api_tokenize_detokenize, m, b, strlen(b));
}

/* The ints of array `key` of r's body, into ids (at most cap); returns the count or -1. */
static int ints(const struct res *r, const char *key, int32_t *ids, int cap)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(r->body, key);
    if (!cJSON_IsArray(a)) return -1;
    int n = 0;
    for (const cJSON *c = a->child; c && n < cap; c = c->next)
        ids[n++] = (int32_t)c->valuedouble;
    return n;
}

static const char *str(const struct res *r, const char *key)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(r->body, key);
    return cJSON_IsString(s) ? s->valuestring : NULL;
}

TEST(tokenize_fields_and_defaults)
{
    struct res r = tok_m(&model, "{'prompt':'Hi'}"); /* model is optional */
    int32_t ids[16];
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(ints(&r, "tokens", ids, 16), 3);
    EXPECT(ids[0] == 2 && ids[1] == 4 + 'H' && ids[2] == 4 + 'i'); /* BOS first */
    EXPECT_EQ(cJSON_GetObjectItem(r.body, "count")->valuedouble, 3);
    EXPECT_EQ(cJSON_GetObjectItem(r.body, "max_model_len")->valuedouble, 64);
    EXPECT(cJSON_IsNull(cJSON_GetObjectItem(r.body, "token_strs")));
    /* vLLM's field order. */
    EXPECT_STR(r.body->child->string, "count");
    EXPECT_STR(r.body->child->next->string, "max_model_len");
    EXPECT_STR(r.body->child->next->next->string, "tokens");
    EXPECT_STR(r.body->child->next->next->next->string, "token_strs");
    cJSON_Delete(r.body);

    r = tok_m(&model, "{" M ",'prompt':'Hi','add_special_tokens':false,"
                      "'return_token_strs':null,'unknown':[1]}");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(ints(&r, "tokens", ids, 16), 2);
    EXPECT_EQ(ids[0], 4 + 'H');
    cJSON_Delete(r.body);

    r = tok_m(&model, "{'model':null,'prompt':'','add_special_tokens':null}");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(ints(&r, "tokens", ids, 16), 1); /* just BOS */
    cJSON_Delete(r.body);

    r = tok_m(&model, "{'prompt':'','add_special_tokens':false,'return_token_strs':true}");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(ints(&r, "tokens", ids, 16), 0);
    EXPECT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(r.body, "token_strs")), 0);
    cJSON_Delete(r.body);
}

TEST(tokenize_token_strs_spell_the_vocabulary)
{
    struct api_model m;
    model_init(&m, opt_tok);
    struct res r = tok_m(&m, "{'prompt':'Hello world\\n','return_token_strs':true}");
    EXPECT_EQ(r.status, 200);
    const cJSON *s = cJSON_GetObjectItem(r.body, "token_strs");
    static const char *const want[] = {"</s>", "Hello", "\xC4\xA0world", "\xC4\x8A"};
    EXPECT_EQ(cJSON_GetArraySize(s), 4);
    int i = 0;
    for (const cJSON *c = s ? s->child : NULL; c && i < 4; c = c->next, i++)
        EXPECT_STR(c->valuestring, want[i]);
    cJSON_Delete(r.body);

    /* Escapes: quote, backslash, controls (the byte tokenizer names bytes by their
     * display string), read back as the same strings. */
    r = tok_m(&model, "{'prompt':'\\\"\\\\\\n\\u0001\\u001f~','add_special_tokens':false,"
                      "'return_token_strs':true}");
    EXPECT_EQ(r.status, 200);
    static const char *const esc[] = {"\"", "\\", "\n", "\x01", "\x1f", "~"};
    s = cJSON_GetObjectItem(r.body, "token_strs");
    EXPECT_EQ(cJSON_GetArraySize(s), 6);
    i = 0;
    for (const cJSON *c = s ? s->child : NULL; c && i < 6; c = c->next, i++)
        EXPECT_STR(c->valuestring, esc[i]);
    cJSON_Delete(r.body);
}

/* A bad body: its status, its param (NULL: none) and a word of its message. */
struct bad_case {
    int detok; /* 0: /tokenize, 1: /detokenize */
    const char *body;
    int status;
    const char *param, *says;
};

static const struct bad_case bad[] = {
    {0, "", 400, NULL, "empty"},
    {0, "nope", 400, NULL, "parse"},
    {0, "[1]", 400, NULL, "JSON object"},
    {0, "{'prompt':'a'} x", 400, NULL, "parse"},
    {0, "{'prompt':'a\\u0000b'}", 400, "prompt", "U+0000"},
    {0, "{}", 400, "prompt", "must provide a prompt"},
    {0, "{'prompt':null}", 400, "prompt", "must provide a prompt"},
    {0, "{'prompt':5}", 400, "prompt", "expected a string"},
    {0, "{'prompt':[1,2]}", 400, "prompt", "expected a string"},
    {0, "{'prompt':'a','add_special_tokens':1}", 400, "add_special_tokens", "boolean"},
    {0, "{'prompt':'a','return_token_strs':'yes'}", 400, "return_token_strs", "boolean"},
    {0, "{'prompt':'a','model':'other'}", 404, "model", "does not exist"},
    {0, "{'prompt':'a','model':''}", 404, "model", "does not exist"},
    {0, "{'prompt':'a','model':7}", 400, "model", "expected a string"},
    {0, "{'messages':[{'role':'user','content':'hi'}]}", 400, NULL, "chat template"},
    {0, "{'messages':{}}", 400, "messages", "an array"},
    {0, "{'messages':[],'model':'other'}", 404, "model", "does not exist"},
    {0, "{'messages':[],'prompt':'a'}", 400, "messages", "not both"},
    {1, "", 400, NULL, "empty"},
    {1, "{'tokens':[1,2}", 400, NULL, "parse"},
    {1, "{}", 400, "tokens", "must provide a tokens"},
    {1, "{'tokens':'1 2'}", 400, "tokens", "an array of token ids"},
    {1, "{'tokens':[-1]}", 400, "tokens", "-1 is not a token id"},
    {1, "{'tokens':[512]}", 400, "tokens", "512 is not a token id in 0..511"},
    {1, "{'tokens':[1000000000]}", 400, "tokens", "1000000000 is not"},
    {1, "{'tokens':[5,1.5]}", 400, "tokens", "'tokens[1]': 1.5 is not"},
    {1, "{'tokens':[1e400]}", 400, "tokens", "not a token id"},
    {1, "{'tokens':[5,'x']}", 400, "tokens", "got a string"},
    {1, "{'tokens':[null]}", 400, "tokens", "got null"},
    {1, "{'tokens':[[5]]}", 400, "tokens", "got an array"},
    {1, "{'tokens':[5],'model':'other'}", 404, "model", "does not exist"},
};

TEST(bad_bodies_name_their_param)
{
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        const struct bad_case *c = &bad[i];
        struct res r = c->detok ? detok_m(&model, c->body) : tok_m(&model, c->body);
        const cJSON *err = cJSON_GetObjectItem(r.body, "error");
        const cJSON *msg = cJSON_GetObjectItem(err, "message");
        const bool ok = r.status == c->status &&
                        (c->param ? r.param && strcmp(r.param, c->param) == 0 : !r.param) &&
                        cJSON_IsString(msg) && strstr(msg->valuestring, c->says) &&
                        cJSON_GetObjectItem(err, "type") &&
                        cJSON_HasObjectItem(err, "code");
        if (!ok)
            TEST_FAIL("case %zu %s: status %d param %s message %s", i, c->body, r.status,
                      r.param ? r.param : "null",
                      cJSON_IsString(msg) ? msg->valuestring : "(none)");
        cJSON_Delete(r.body);
    }
}

/* decode(encode(text) without BOS) == text, through both endpoints' bodies. */
static bool round_trip(const struct api_model *m, const char *text)
{
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "prompt", text);
    cJSON_AddFalseToObject(req, "add_special_tokens");
    char *b = json_print(req, NULL);
    cJSON_Delete(req);
    struct res r = call_raw(api_tokenize, m, b, strlen(b));
    free(b);
    cJSON *tokens = cJSON_DetachItemFromObject(r.body, "tokens");
    cJSON_Delete(r.body);
    if (r.status != 200 || !tokens) return false;
    req = cJSON_CreateObject();
    cJSON_AddItemToObject(req, "tokens", tokens);
    b = json_print(req, NULL);
    cJSON_Delete(req);
    r = call_raw(api_tokenize_detokenize, m, b, strlen(b));
    free(b);
    const char *got = str(&r, "prompt");
    const bool ok = r.status == 200 && got && strcmp(got, text) == 0;
    if (!ok) TEST_FAIL("round trip of \"%s\" gave \"%s\"", text, got ? got : "(error)");
    cJSON_Delete(r.body);
    return ok;
}

TEST(no_tokenizer_is_a_400_both_ways)
{
    struct tokenizer *none = tokenizer_create_none(512, 2, 2);
    struct api_model m;
    model_init(&m, none);
    static const char *const bodies[2] = {"{\"prompt\":\"hi\"}", "{\"tokens\":[2,5]}"};
    for (int k = 0; k < 2; k++) {
        struct api_error e = {0};
        size_t len = 0;
        char *out =
            k == 0 ? api_tokenize(bodies[k], strlen(bodies[k]), &m, &len, &e)
                   : api_tokenize_detokenize(bodies[k], strlen(bodies[k]), &m, &len, &e);
        EXPECT(out == NULL);
        EXPECT_EQ(e.status, 400);
        EXPECT(e.message && strstr(e.message, "has no tokenizer") != NULL);
        free(out);
        api_error_clear(&e);
    }
    tokenizer_destroy(none);
}

TEST(detokenize_round_trips)
{
    struct api_model m;
    model_init(&m, opt_tok);
    static const char *const texts[] = {
        "Hello, world",
        "The Linux kernel\n\tschedules",
        "",
        /* héllo → 世界 🎉: two, three and four bytes a character */
        "h\xC3\xA9llo \xE2\x86\x92 \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x8E\x89",
        "quote \" and backslash \\ and </s> as text",
    };
    for (size_t i = 0; i < ARRAY_LEN(texts); i++) {
        EXPECT(round_trip(&model, texts[i]));
        EXPECT(round_trip(&m, texts[i]));
    }
}

TEST(detokenize_specials_padding_and_bytes)
{
    /* Special tokens as names (vLLM's decode keeps them); half a character and the
     * byte 0x00 become U+FFFD; a control byte is escaped and reads back. */
    struct res r = detok_m(&model, "{'tokens':[2,76,109,0,199,4,5]}");
    EXPECT_EQ(r.status, 200);
    EXPECT_STR(str(&r, "prompt"), "</s>Hi<s>\xEF\xBF\xBD\xEF\xBF\xBD\x01");
    cJSON_Delete(r.body);
    r = detok_m(&model, "{" M ",'tokens':[]}");
    EXPECT_EQ(r.status, 200);
    EXPECT_STR(str(&r, "prompt"), "");
    cJSON_Delete(r.body);

    /* The model's embedding may have rows past the tokenizer's vocabulary (OPT: 50272
     * vs 50265). Those ids are valid, as in a token prompt, and stand for no text. */
    struct api_model m;
    model_init(&m, opt_tok);
    m.vocab_size = tokenizer_vocab_size(opt_tok) + 7;
    r = detok_m(&m, "{'tokens':[31414,50271,6]}");
    EXPECT_EQ(r.status, 200);
    EXPECT_STR(str(&r, "prompt"), "Hello,");
    cJSON_Delete(r.body);
    r = detok_m(&m, "{'tokens':[50272]}");
    EXPECT_EQ(r.status, 400);
    cJSON_Delete(r.body);
}

TEST(millions_of_ids)
{
    /* 2 M ids ("[101,102,...]", 8 MiB; a cJSON tree of 160 MiB on the way in). */
    const size_t n = 2u << 20;
    char *b = xmalloc(4 * n + 64); /* ",101" at most per id */
    size_t len = (size_t)sprintf(b, "{\"tokens\":[");
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(b + len, i ? ",%d" : "%d", 4 + 'a' + (int)(i % 26));
    len += (size_t)sprintf(b + len, "]}");
    struct res r = call_raw(api_tokenize_detokenize, &model, b, len);
    EXPECT_EQ(r.status, 200);
    const char *p = str(&r, "prompt");
    EXPECT(p && strlen(p) == n && p[0] == 'a' && p[25] == 'z' && p[26] == 'a');
    cJSON_Delete(r.body);

    /* And back: 2 MiB of text, 2 M + 1 ids and their strings. */
    len = (size_t)sprintf(b, "{\"return_token_strs\":true,\"prompt\":\"");
    for (size_t i = 0; i < n; i++)
        b[len++] = (char)('a' + i % 26);
    len += (size_t)sprintf(b + len, "\"}");
    r = call_raw(api_tokenize, &model, b, len);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(cJSON_GetObjectItem(r.body, "count")->valuedouble, (double)(n + 1));
    EXPECT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(r.body, "token_strs")), (int)(n + 1));
    cJSON_Delete(r.body);
    free(b);
}

TEST(chat_template_error)
{
    struct api_error e = {0};
    EXPECT_EQ(chat_no_template(&e, "default"), -1);
    EXPECT_EQ(e.status, 400);
    EXPECT_STR(e.type, API_ERR_INVALID);
    EXPECT(e.param == NULL && e.code == NULL);
    EXPECT(strstr(e.message, "`default` has no chat template"));
    EXPECT(strstr(e.message, "As of transformers v4.44") ||
           strstr(e.message, "as of transformers v4.44"));
    api_error_clear(&e);
}

int main(void)
{
    if (api_testlib_init()) return 1;
    RUN(tokenize_fields_and_defaults);
    RUN(tokenize_token_strs_spell_the_vocabulary);
    RUN(bad_bodies_name_their_param);
    RUN(no_tokenizer_is_a_400_both_ways);
    RUN(detokenize_round_trips);
    RUN(detokenize_specials_padding_and_bytes);
    RUN(millions_of_ids);
    RUN(chat_template_error);
    printf("# %zu invalid bodies\n", ARRAY_LEN(bad));
    api_testlib_done();
    return test_done();
}
