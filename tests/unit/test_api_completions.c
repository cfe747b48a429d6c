/*
 * test_api_completions.c - POST /v1/completions without the network: the request
 * parser against tables of valid and invalid bodies, robustness against garbage, the
 * engine requests it makes, and the response assembled from hand-made engine events
 * (non-streaming body, SSE chunks, usage, best_of, echo, logprobs).
 *
 * Bodies are written with single quotes for readability; q() turns them into JSON.
 * The model "opt-test" uses the byte tokenizer (byte b = id 4 + b, BOS = EOS = 2), a
 * context of 64 tokens, at most 4 prompts and n <= 128; the echo and logprobs tests
 * use the real OPT tokenizer for token strings.
 */
#include "api_completions.h"
#include "opt_tokenizer.h"
#include "test.h"
#include "tokenizer.h"
#include "util.h"

#include <stdint.h>

static struct tokenizer *byte_tok, *opt_tok;
static struct api_model model;

static void model_init(struct api_model *m, const struct tokenizer *tok)
{
    memset(m, 0, sizeof *m);
    m->id = "opt-test";
    m->max_model_len = 64;
    m->vocab_size = tokenizer_vocab_size(tok);
    m->tok = tok;
    kv_spec_default(&m->kv_default);
    m->max_prompts = 4;
    m->max_n = 128;
}

/* The body with ' replaced by " (static buffer, one at a time). */
static const char *q(const char *s)
{
    static char buf[8192];
    size_t n = strlen(s);
    CHECK(n < sizeof buf);
    for (size_t i = 0; i <= n; i++)
        buf[i] = s[i] == '\'' ? '"' : s[i];
    return buf;
}

static int parse_m(const struct api_model *m, const char *body, struct cmpl_params *p,
                   struct api_error *e)
{
    const char *b = q(body);
    return cmpl_parse(b, strlen(b), m, p, e);
}

static int parse(const char *body, struct cmpl_params *p, struct api_error *e)
{
    return parse_m(&model, body, p, e);
}

/* ---- valid requests ---- */

struct good_case {
    const char *body;
    int32_t n_prompts, max_tokens, n, best_of, logprobs;
};

#define M "'model':'opt-test'"
static const struct good_case good[] = {
    {"{" M ",'prompt':'hi'}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','max_tokens':null,'temperature':null,'top_p':null,'n':null,"
     "'best_of':null,'stream':null,'stream_options':null,'logprobs':null,'echo':null,"
     "'stop':null,'presence_penalty':null,'frequency_penalty':null,'logit_bias':null,"
     "'seed':null,'user':null,'suffix':null,'top_k':null,'ignore_eos':null,'kv_cache':"
     "null}",
     1, 16, 1, 1, -1},
    {"{" M ",'prompt':['a','b']}", 2, 16, 1, 1, -1},
    {"{" M ",'prompt':['a','b','c','d']}", 4, 16, 1, 1, -1},
    {"{" M ",'prompt':[5,6,7]}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':[[5],[6,7]]}", 2, 16, 1, 1, -1},
    {"{" M ",'prompt':''}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':['']}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','max_tokens':0}", 1, 0, 1, 1, -1},
    {"{" M ",'prompt':'hi','max_tokens':61}", 1, 61, 1, 1, -1}, /* 3 + 61 = 64 fits */
    {"{" M ",'prompt':[5],'max_tokens':63}", 1, 63, 1, 1, -1},
    {"{" M ",'prompt':'hi','temperature':0}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','temperature':2,'top_p':0}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','n':128}", 1, 16, 128, 128, -1},
    {"{" M ",'prompt':'hi','n':3,'best_of':20}", 1, 16, 3, 20, -1},
    {"{" M ",'prompt':'hi','n':2,'best_of':2,'stream':true}", 1, 16, 2, 2, -1},
    {"{" M ",'prompt':'hi','stream':true,'stream_options':{'include_usage':true}}", 1, 16,
     1, 1, -1},
    {"{" M ",'prompt':'hi','stream':true,'stream_options':{'include_obfuscation':false}}",
     1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','stream':false,'stream_options':null}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','logprobs':0}", 1, 16, 1, 1, 0},
    {"{" M ",'prompt':'hi','logprobs':5,'echo':true}", 1, 16, 1, 1, 5},
    {"{" M ",'prompt':'hi','stop':'x'}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','stop':['a','bb','\\n','dd']}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','presence_penalty':-2,'frequency_penalty':2}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','logit_bias':{'5':-100,'511':100,'0':0.5}}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','logit_bias':{}}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','seed':-9223372036854775808}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','seed':9223372036854775807}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','user':'someone','suffix':''}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','functions':{'x':[1,{'y':null}]},'foo':true}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','top_k':-1,'ignore_eos':true}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','top_k':40}", 1, 16, 1, 1, -1},
    {"{" M
     ",'prompt':'hi','kv_cache':{'policy':'h2o','heavy_ratio':0.2,'recent_ratio':0.1}}",
     1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':'h2o','heavy':8,'recent':4}}", 1, 16, 1, 1,
     -1},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':'full'}}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','kv_cache':'local'}", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':'local','recent':4,'heavy':null}}", 1, 16,
     1, 1, -1},
    {"{" M ",'prompt':'hi','n':2.0,'max_tokens':4.0}", 1, 4, 2, 2, -1},
    {"{" M ",'prompt':'hi','n':3,'n':2}", 1, 16, 2, 2, -1}, /* the last one wins */
    {"  {" M ",'prompt':'h\\u00e9llo \\ud83d\\ude00'}  \n\t", 1, 16, 1, 1, -1},
    {"{" M ",'prompt':'caf\xc3\xa9'}", 1, 16, 1, 1, -1},
};

TEST(parse_valid_table)
{
    for (size_t i = 0; i < ARRAY_LEN(good); i++) {
        const struct good_case *c = &good[i];
        const int before = test_cur_failed;
        test_cur_failed = 0;
        struct cmpl_params p;
        struct api_error e = {0};
        if (parse(c->body, &p, &e) != 0) {
            TEST_FAIL("good[%zu] %s: %d %s", i, c->body, e.status, e.message);
            api_error_clear(&e);
            test_cur_failed |= before;
            continue;
        }
        EXPECT_EQ(e.status, 0);
        EXPECT_EQ(p.n_prompts, c->n_prompts);
        EXPECT_EQ(p.max_tokens, c->max_tokens);
        EXPECT_EQ(p.n, c->n);
        EXPECT_EQ(cmpl_params_seqs(&p), c->best_of);
        EXPECT_EQ(p.logprobs, c->logprobs);
        EXPECT_STR(p.model, "opt-test");
        for (int32_t k = 0; k < p.n_prompts; k++)
            EXPECT(p.prompts[k].n_ids >= 1);
        if (test_cur_failed) printf("# in good[%zu]: %s\n", i, c->body);
        test_cur_failed |= before;
        cmpl_params_free(&p);
    }
}

TEST(parse_defaults_and_fields)
{
    struct cmpl_params p;
    struct api_error e = {0};
    EXPECT_EQ(parse("{" M ",'prompt':'hi'}", &p, &e), 0);
    EXPECT_NEAR(p.temperature, 1, 0);
    EXPECT_NEAR(p.top_p, 1, 0);
    EXPECT_EQ(p.top_k, 0);
    EXPECT(!p.stream && !p.include_usage && !p.echo && !p.has_seed && !p.ignore_eos);
    EXPECT_EQ(p.n_stops, 0);
    EXPECT_EQ(p.n_bias, 0);
    EXPECT(p.user == NULL);
    EXPECT_EQ(p.kv.policy, model.kv_default.policy);
    /* Text prompts carry the ids the engine will run: BOS, then one id per byte. */
    EXPECT_STR(p.prompts[0].text, "hi");
    EXPECT_EQ(p.prompts[0].n_ids, 3);
    EXPECT_EQ(p.prompts[0].ids[0], 2);
    EXPECT_EQ(p.prompts[0].ids[1], 'h' + 4);
    cmpl_params_free(&p);

    EXPECT_EQ(
        parse("{" M ",'prompt':[[5],[6,7]],'temperature':0.5,'top_p':0.9,'top_k':40,"
              "'n':2,'best_of':3,'logprobs':2,'echo':true,'stop':['a','bc'],"
              "'presence_penalty':0.5,'frequency_penalty':-1.5,'logit_bias':{'7':-100},"
              "'seed':-42,'user':'u1','ignore_eos':true,"
              "'kv_cache':{'policy':'h2o','heavy':8,'recent_ratio':0.25}}",
              &p, &e),
        0);
    EXPECT_EQ(p.n_prompts, 2);
    EXPECT(p.prompts[0].text == NULL);
    EXPECT_EQ(p.prompts[1].n_ids, 2);
    EXPECT_EQ(p.prompts[1].ids[1], 7);
    EXPECT_NEAR(p.temperature, 0.5, 1e-7);
    EXPECT_NEAR(p.top_p, 0.9, 1e-7);
    EXPECT_EQ(p.top_k, 40);
    EXPECT_EQ(p.n, 2);
    EXPECT_EQ(p.best_of, 3);
    EXPECT_EQ(p.logprobs, 2);
    EXPECT(p.echo);
    EXPECT_EQ(p.n_stops, 2);
    EXPECT_STR(p.stops[1], "bc");
    EXPECT_NEAR(p.frequency_penalty, -1.5, 0);
    EXPECT_EQ(p.n_bias, 1);
    EXPECT_EQ(p.bias_ids[0], 7);
    EXPECT_NEAR(p.bias_vals[0], -100, 0);
    EXPECT(p.has_seed);
    EXPECT_EQ(p.seed, -42);
    EXPECT_STR(p.user, "u1");
    EXPECT(p.ignore_eos);
    EXPECT_EQ(p.kv.policy, KV_POLICY_H2O);
    EXPECT_EQ(p.kv.heavy, 8);
    EXPECT_EQ(p.kv.recent, -1);
    EXPECT_NEAR(p.kv.recent_ratio, 0.25, 0);
    cmpl_params_free(&p);

    /* Seeds at the ends of int64 survive the trip through a double. */
    EXPECT_EQ(parse("{" M ",'prompt':'hi','seed':9223372036854775807}", &p, &e), 0);
    EXPECT(p.seed == INT64_MAX);
    cmpl_params_free(&p);
    EXPECT_EQ(parse("{" M ",'prompt':'hi','seed':-9223372036854775808}", &p, &e), 0);
    EXPECT(p.seed == INT64_MIN);
    cmpl_params_free(&p);

    /* stream_options.include_usage. */
    EXPECT_EQ(parse("{" M
                    ",'prompt':'hi','stream':true,'stream_options':{'include_usage':true}}",
                    &p, &e),
              0);
    EXPECT(p.stream && p.include_usage);
    cmpl_params_free(&p);

    /* "local" as a string takes the default's sizes. */
    EXPECT_EQ(parse("{" M ",'prompt':'hi','kv_cache':'local'}", &p, &e), 0);
    EXPECT_EQ(p.kv.policy, KV_POLICY_LOCAL);
    EXPECT_NEAR(p.kv.recent_ratio, model.kv_default.recent_ratio, 0);
    cmpl_params_free(&p);
}

/* ---- invalid requests ---- */

struct bad_case {
    const char *body;
    int status;
    const char *param; /* NULL: the error names no param */
    const char *code;  /* NULL: code is null */
};

static const struct bad_case bad[] = {
    /* the body itself */
    {"", 400, NULL, NULL},
    {"not json", 400, NULL, NULL},
    {"{", 400, NULL, NULL},
    {"{" M ",'prompt':'hi'} x", 400, NULL, NULL},
    {"{" M ",'prompt':'hi',}", 400, NULL, NULL},
    {"[1,2]", 400, NULL, NULL},
    {"'just a string'", 400, NULL, NULL},
    {"null", 400, NULL, NULL},
    {"{" M ",'prompt':'\xff\xfe'}", 400, NULL, NULL},     /* invalid UTF-8 */
    {"{" M ",'prompt':'\xed\xa0\x80'}", 400, NULL, NULL}, /* a UTF-8 surrogate */
    {"{" M ",'prompt':'a\\u0000b'}", 400, NULL, NULL},    /* NUL inside a string */
    {"{" M ",'prompt':'\\ud800'}", 400, NULL, NULL},      /* a lone surrogate escape */
    {"{" M ",'prompt':'hi','max_tokens':1"
     "000000000000000000000000000000000000000000000000000"
     "0000000000000000000000000000000000000000000000000000000000000000}",
     400, "max_tokens", NULL},
    /* model */
    {"{'prompt':'hi'}", 400, "model", NULL},
    {"{'model':null,'prompt':'hi'}", 400, "model", NULL},
    {"{'model':5,'prompt':'hi'}", 400, "model", NULL},
    {"{'model':'gpt-4','prompt':'hi'}", 404, "model", "model_not_found"},
    /* prompt */
    {"{" M "}", 400, "prompt", NULL},
    {"{" M ",'prompt':null}", 400, "prompt", NULL},
    {"{" M ",'prompt':5}", 400, "prompt", NULL},
    {"{" M ",'prompt':{}}", 400, "prompt", NULL},
    {"{" M ",'prompt':[]}", 400, "prompt", NULL},
    {"{" M ",'prompt':[[]]}", 400, "prompt", NULL},
    {"{" M ",'prompt':[[1],[]]}", 400, "prompt", NULL},
    {"{" M ",'prompt':[1,'a']}", 400, "prompt", NULL},
    {"{" M ",'prompt':['a',1]}", 400, "prompt", NULL},
    {"{" M ",'prompt':[[1],'a']}", 400, "prompt", NULL},
    {"{" M ",'prompt':[[1,[2]]]}", 400, "prompt", NULL},
    {"{" M ",'prompt':[-1]}", 400, "prompt", NULL},
    {"{" M ",'prompt':[512]}", 400, "prompt", NULL},
    {"{" M ",'prompt':[1.5]}", 400, "prompt", NULL},
    {"{" M ",'prompt':[true]}", 400, "prompt", NULL},
    {"{" M ",'prompt':[null]}", 400, "prompt", NULL},
    {"{" M ",'prompt':['a','b','c','d','e']}", 400, "prompt", NULL},
    {"{" M ",'prompt':[[1],[2],[3],[4],[5]]}", 400, "prompt", NULL},
    /* max_tokens and the context */
    {"{" M ",'prompt':'hi','max_tokens':-1}", 400, "max_tokens", NULL},
    {"{" M ",'prompt':'hi','max_tokens':1.5}", 400, "max_tokens", NULL},
    {"{" M ",'prompt':'hi','max_tokens':'16'}", 400, "max_tokens", NULL},
    {"{" M ",'prompt':'hi','max_tokens':1e400}", 400, "max_tokens", NULL},
    {"{" M ",'prompt':'hi','max_tokens':1180591620717411303424}", 400, "max_tokens", NULL},
    {"{" M ",'prompt':'hi','max_tokens':62}", 400, "prompt", "context_length_exceeded"},
    {"{" M ",'prompt':'hi','max_tokens':64}", 400, "max_tokens", "context_length_exceeded"},
    {"{" M ",'prompt':['a','hi'],'max_tokens':62}", 400, "prompt",
     "context_length_exceeded"},
    {"{" M
     ",'prompt':[5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,"
     "5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5],'max_tokens':0}",
     400, "prompt", "context_length_exceeded"},
    /* sampling */
    {"{" M ",'prompt':'hi','temperature':2.1}", 400, "temperature", NULL},
    {"{" M ",'prompt':'hi','temperature':-0.1}", 400, "temperature", NULL},
    {"{" M ",'prompt':'hi','temperature':'1'}", 400, "temperature", NULL},
    {"{" M ",'prompt':'hi','temperature':-1e400}", 400, "temperature", NULL},
    {"{" M ",'prompt':'hi','top_p':1.5}", 400, "top_p", NULL},
    {"{" M ",'prompt':'hi','top_p':[1]}", 400, "top_p", NULL},
    {"{" M ",'prompt':'hi','top_k':-2}", 400, "top_k", NULL},
    {"{" M ",'prompt':'hi','top_k':0.5}", 400, "top_k", NULL},
    {"{" M ",'prompt':'hi','presence_penalty':2.5}", 400, "presence_penalty", NULL},
    {"{" M ",'prompt':'hi','frequency_penalty':-3}", 400, "frequency_penalty", NULL},
    {"{" M ",'prompt':'hi','frequency_penalty':false}", 400, "frequency_penalty", NULL},
    /* n, best_of, stream */
    {"{" M ",'prompt':'hi','n':0}", 400, "n", NULL},
    {"{" M ",'prompt':'hi','n':129}", 400, "n", NULL},
    {"{" M ",'prompt':'hi','n':'2'}", 400, "n", NULL},
    {"{" M ",'prompt':'hi','best_of':21}", 400, "best_of", NULL},
    {"{" M ",'prompt':'hi','best_of':0}", 400, "best_of", NULL},
    {"{" M ",'prompt':'hi','n':2,'best_of':1}", 400, "best_of", NULL},
    {"{" M ",'prompt':'hi','best_of':3,'stream':true}", 400, "best_of", NULL},
    {"{" M ",'prompt':'hi','stream':'true'}", 400, "stream", NULL},
    {"{" M ",'prompt':'hi','stream':1}", 400, "stream", NULL},
    {"{" M ",'prompt':'hi','stream_options':{'include_usage':true}}", 400, "stream_options",
     NULL},
    {"{" M ",'prompt':'hi','stream':false,'stream_options':{}}", 400, "stream_options",
     NULL},
    {"{" M ",'prompt':'hi','stream':true,'stream_options':true}", 400, "stream_options",
     NULL},
    {"{" M ",'prompt':'hi','stream':true,'stream_options':{'include_usage':'yes'}}", 400,
     "stream_options.include_usage", NULL},
    /* logprobs, echo */
    {"{" M ",'prompt':'hi','logprobs':6}", 400, "logprobs", NULL},
    {"{" M ",'prompt':'hi','logprobs':-1}", 400, "logprobs", NULL},
    {"{" M ",'prompt':'hi','logprobs':true}", 400, "logprobs", NULL},
    {"{" M ",'prompt':'hi','echo':'yes'}", 400, "echo", NULL},
    /* stop */
    {"{" M ",'prompt':'hi','stop':''}", 400, "stop", NULL},
    {"{" M ",'prompt':'hi','stop':[]}", 400, "stop", NULL},
    {"{" M ",'prompt':'hi','stop':['a','b','c','d','e']}", 400, "stop", NULL},
    {"{" M ",'prompt':'hi','stop':[1]}", 400, "stop", NULL},
    {"{" M ",'prompt':'hi','stop':['a','']}", 400, "stop", NULL},
    {"{" M ",'prompt':'hi','stop':{'a':1}}", 400, "stop", NULL},
    /* logit_bias */
    {"{" M ",'prompt':'hi','logit_bias':[]}", 400, "logit_bias", NULL},
    {"{" M ",'prompt':'hi','logit_bias':{'abc':1}}", 400, "logit_bias", NULL},
    {"{" M ",'prompt':'hi','logit_bias':{'512':1}}", 400, "logit_bias", NULL},
    {"{" M ",'prompt':'hi','logit_bias':{'-1':1}}", 400, "logit_bias", NULL},
    {"{" M ",'prompt':'hi','logit_bias':{'':1}}", 400, "logit_bias", NULL},
    {"{" M ",'prompt':'hi','logit_bias':{'99999999999999999999':1}}", 400, "logit_bias",
     NULL},
    {"{" M ",'prompt':'hi','logit_bias':{'5':101}}", 400, "logit_bias", NULL},
    {"{" M ",'prompt':'hi','logit_bias':{'5':'x'}}", 400, "logit_bias", NULL},
    {"{" M ",'prompt':'hi','logit_bias':{'5':1,'05':2}}", 400, "logit_bias", NULL},
    /* seed, user, suffix, ignore_eos */
    {"{" M ",'prompt':'hi','seed':1.5}", 400, "seed", NULL},
    {"{" M ",'prompt':'hi','seed':'1'}", 400, "seed", NULL},
    {"{" M ",'prompt':'hi','seed':1e19}", 400, "seed", NULL},
    {"{" M ",'prompt':'hi','user':5}", 400, "user", NULL},
    {"{" M ",'prompt':'hi','suffix':'x'}", 400, "suffix", NULL},
    {"{" M ",'prompt':'hi','suffix':5}", 400, "suffix", NULL},
    {"{" M ",'prompt':'hi','ignore_eos':'no'}", 400, "ignore_eos", NULL},
    /* kv_cache */
    {"{" M ",'prompt':'hi','kv_cache':5}", 400, "kv_cache", NULL},
    {"{" M ",'prompt':'hi','kv_cache':'big'}", 400, "kv_cache.policy", NULL},
    {"{" M ",'prompt':'hi','kv_cache':{}}", 400, "kv_cache.policy", NULL},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':3}}", 400, "kv_cache.policy", NULL},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':'h2o','heavy_ration':0.1}}", 400,
     "kv_cache", NULL},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':'full','heavy':3}}", 400, "kv_cache.heavy",
     NULL},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':'local','heavy_ratio':0.1}}", 400,
     "kv_cache.heavy_ratio", NULL},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':'h2o','heavy':1,'heavy_ratio':0.1}}", 400,
     "kv_cache.heavy_ratio", NULL},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':'h2o','recent':0}}", 400, "kv_cache.recent",
     NULL},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':'h2o','heavy':-1}}", 400, "kv_cache.heavy",
     NULL},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':'h2o','recent_ratio':1.5}}", 400,
     "kv_cache.recent_ratio", NULL},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':'h2o','heavy':'8'}}", 400, "kv_cache.heavy",
     NULL},
};

TEST(parse_invalid_table)
{
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        const struct bad_case *c = &bad[i];
        const int before = test_cur_failed;
        test_cur_failed = 0;
        struct cmpl_params p;
        struct api_error e = {0};
        const int rc = parse(c->body, &p, &e);
        EXPECT_EQ(rc, -1);
        EXPECT_EQ(e.status, c->status);
        EXPECT_STR(e.type, "invalid_request_error");
        EXPECT(e.message && *e.message);
        if (c->param)
            EXPECT_STR(e.param, c->param);
        else
            EXPECT(e.param == NULL);
        if (c->code)
            EXPECT_STR(e.code, c->code);
        else
            EXPECT(e.code == NULL);
        /* A failed parse leaves nothing to free. */
        EXPECT(p.prompts == NULL && p.model == NULL && p.n_stops == 0 &&
               p.bias_ids == NULL);
        if (test_cur_failed)
            printf("# in bad[%zu]: %s -> %d %s: %s\n", i, c->body, e.status,
                   e.param ? e.param : "(null)", e.message ? e.message : "");
        test_cur_failed |= before;
        api_error_clear(&e);
        if (rc == 0) cmpl_params_free(&p);
    }
}

TEST(parse_limits_from_the_model)
{
    struct api_model m;
    model_init(&m, byte_tok);
    m.max_seqs = 4;
    struct cmpl_params p;
    struct api_error e = {0};
    /* 2 prompts x 2 = 4 sequences fit; 2 x best_of 3 = 6 do not. */
    EXPECT_EQ(parse_m(&m, "{" M ",'prompt':['a','b'],'n':2}", &p, &e), 0);
    cmpl_params_free(&p);
    EXPECT_EQ(parse_m(&m, "{" M ",'prompt':['a','b'],'best_of':3}", &p, &e), -1);
    EXPECT_EQ(e.status, 400);
    EXPECT_STR(e.param, "n");
    m.max_n = 4;
    EXPECT_EQ(parse_m(&m, "{" M ",'prompt':'a','n':5}", &p, &e), -1);
    EXPECT_STR(e.param, "n");
    EXPECT_EQ(parse_m(&m, "{" M ",'prompt':'a','best_of':5}", &p, &e), -1);
    EXPECT_STR(e.param, "best_of");
    api_error_clear(&e);
}

TEST(error_body_has_all_four_keys)
{
    struct api_error e = {0};
    api_error_set(&e, 400, API_ERR_INVALID, NULL, NULL, "bad %s", "thing");
    size_t len;
    char *s = api_error_json(&e, &len);
    EXPECT_EQ(len, strlen(s));
    EXPECT_STR(s,
               "{\"error\":{\"message\":\"bad thing\",\"type\":\"invalid_request_error\","
               "\"param\":null,\"code\":null}}");
    free(s);
    api_error_set(&e, 404, API_ERR_INVALID, "model", "model_not_found", "no");
    s = api_error_json(&e, NULL);
    EXPECT_STR(s, "{\"error\":{\"message\":\"no\",\"type\":\"invalid_request_error\","
                  "\"param\":\"model\",\"code\":\"model_not_found\"}}");
    free(s);
    s = cmpl_resp_stream_error(&e, &len);
    EXPECT(strncmp(s, "data: {\"error\":{", 16) == 0);
    EXPECT(len > 2 && s[len - 2] == '\n' && s[len - 1] == '\n');
    free(s);
    api_error_clear(&e);
    EXPECT(e.message == NULL && e.status == 0);
}

/* ---- robustness: nothing a client sends may crash or hang the parser ---- */

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* Parse len bytes; any outcome is fine but a crash, a leak, or an error without a
 * 4xx status and a message. */
static void parse_any(const char *body, size_t len)
{
    struct cmpl_params p;
    struct api_error e = {0};
    if (cmpl_parse(body, len, &model, &p, &e) == 0) {
        cmpl_params_free(&p);
        return;
    }
    if (e.status != 400 && e.status != 404) TEST_FAIL("status %d: %s", e.status, e.message);
    EXPECT(e.message != NULL);
    api_error_clear(&e);
}

TEST(parse_survives_garbage)
{
    /* Deep nesting: cJSON refuses past 1000 levels instead of recursing forever. */
    enum { depth = 100000 };
    static char deep[2 * depth + 64]; /* static: GCC's bounds check follows it */
    size_t n = (size_t)sprintf(deep, "{\"model\":\"opt-test\",\"prompt\":");
    memset(deep + n, '[', depth);
    memset(deep + n + depth, ']', depth);
    deep[n + 2 * depth] = '}';
    parse_any(deep, n + 2 * depth + 1);
    /* 900 levels parse as JSON but are no prompt. */
    n = (size_t)sprintf(deep, "{\"model\":\"opt-test\",\"x\":");
    memset(deep + n, '[', 900);
    memset(deep + n + 900, ']', 900);
    strcpy(deep + n + 1800, ",\"prompt\":\"hi\"}");
    struct cmpl_params p;
    struct api_error e = {0};
    EXPECT_EQ(cmpl_parse(deep, strlen(deep), &model, &p, &e), 0);
    cmpl_params_free(&p);

    /* Random bytes, and random mutations of a valid body with every field. */
    uint64_t seed = 12345;
    char buf[512];
    for (int it = 0; it < 3000; it++) {
        const size_t len = lcg(&seed) % sizeof buf;
        for (size_t i = 0; i < len; i++)
            buf[i] = (char)lcg(&seed);
        parse_any(buf, len);
    }
    const char *full =
        q("{" M ",'prompt':[[5,6],[7]],'max_tokens':3,'temperature':0.5,"
          "'top_p':0.9,'n':2,'best_of':3,'logprobs':2,'echo':true,'stop':['a'],"
          "'presence_penalty':0.1,'frequency_penalty':0.1,'logit_bias':{'5':1},"
          "'seed':7,'user':'u','kv_cache':{'policy':'h2o','heavy':2,'recent':2}}");
    const size_t flen = strlen(full);
    for (int it = 0; it < 20000; it++) {
        memcpy(buf, full, flen);
        size_t len = flen;
        const int edits = 1 + (int)(lcg(&seed) % 4);
        for (int k = 0; k < edits && len > 1; k++) {
            const size_t at = lcg(&seed) % len;
            static const char alphabet[] = "{}[]\",:0123456789.-+eE \\utrfn\xff\xc3";
            switch (lcg(&seed) % 3) {
            case 0: buf[at] = alphabet[lcg(&seed) % (sizeof alphabet - 1)]; break;
            case 1: memmove(buf + at, buf + at + 1, len - at - 1), len--; break;
            default: len = at + 1; break; /* truncate */
            }
        }
        parse_any(buf, len);
    }
    /* A large body: one 1 MiB prompt in 64 thousand token ids is over the context. */
    const size_t big = 1 << 20;
    char *b = malloc(big + 64);
    n = (size_t)sprintf(b, "{\"model\":\"opt-test\",\"prompt\":[");
    while (n < big)
        n += (size_t)sprintf(b + n, "17,");
    strcpy(b + n, "17]}");
    EXPECT_EQ(cmpl_parse(b, strlen(b), &model, &p, &e), -1);
    EXPECT_STR(e.code, "context_length_exceeded");
    api_error_clear(&e);
    free(b);
}

/* ---- engine requests ---- */

TEST(make_req_copies_everything)
{
    struct cmpl_params p;
    struct api_error e = {0};
    EXPECT_EQ(parse("{" M ",'prompt':[[7,8],[9,10,11]],'max_tokens':5,'temperature':0.5,"
                    "'top_p':0.8,'top_k':7,'n':2,'best_of':4,'stop':['x','yz'],"
                    "'presence_penalty':0.25,'frequency_penalty':-0.5,"
                    "'logit_bias':{'5':-100,'6':3},'ignore_eos':true,"
                    "'kv_cache':{'policy':'h2o','heavy':3,'recent':5}}",
                    &p, &e),
              0);
    struct req *r = cmpl_make_req(&p, 1, 77, 1234);
    EXPECT_EQ(r->id, 77);
    EXPECT_EQ(r->prio, REQ_PRIO_INTERACTIVE);
    EXPECT(r->prompt == NULL);
    EXPECT_EQ(r->n_prompt_ids, 3);
    EXPECT_EQ(r->prompt_ids[2], 11);
    EXPECT_EQ(r->n, 4); /* best_of sequences */
    EXPECT_EQ(r->max_tokens, 5);
    EXPECT_NEAR(r->sp.temperature, 0.5, 0);
    EXPECT_NEAR(r->sp.top_p, 0.8, 1e-7);
    EXPECT_EQ(r->sp.top_k, 7);
    EXPECT_NEAR(r->sp.presence_penalty, 0.25, 0);
    EXPECT_NEAR(r->sp.frequency_penalty, -0.5, 0);
    EXPECT_EQ(r->sp.n_logprobs, 0); /* best_of > n needs the chosen token's logprob */
    EXPECT_EQ(r->sp.n_bias, 2);
    EXPECT(r->sp.bias_ids == r->bias_ids && r->bias_ids != p.bias_ids);
    EXPECT_NEAR(r->sp.bias_vals[1], 3, 0);
    EXPECT_EQ(r->seed, 1234); /* none given: the caller's */
    EXPECT_EQ(r->n_stops, 2);
    EXPECT_STR(r->stops[1], "yz");
    EXPECT(r->stops[1] != p.stops[1]);
    EXPECT(r->ignore_eos);
    EXPECT_EQ(r->kv.policy, KV_POLICY_H2O);
    EXPECT_EQ(r->kv.heavy, 3);
    EXPECT_EQ(r->kv.recent, 5);
    req_free(r);
    r = cmpl_make_req(&p, 0, 78, 1234);
    EXPECT_EQ(r->n_prompt_ids, 2);
    EXPECT_EQ(r->prompt_ids[0], 7);
    req_free(r);
    cmpl_params_free(&p);

    /* A text prompt goes as the ids the engine would make of it: BOS + bytes. */
    EXPECT_EQ(parse("{" M ",'prompt':['ab','xyz']}", &p, &e), 0);
    r = cmpl_make_req(&p, 1, 79, 1);
    EXPECT(r->prompt == NULL);
    EXPECT_EQ(r->n_prompt_ids, 4);
    EXPECT_EQ(r->prompt_ids[0], 2);
    EXPECT_EQ(r->prompt_ids[3], 'z' + 4);
    req_free(r);
    cmpl_params_free(&p);

    EXPECT_EQ(parse("{" M ",'prompt':'a','seed':-1,'logprobs':3}", &p, &e), 0);
    r = cmpl_make_req(&p, 0, 1, 99);
    EXPECT(r->seed == UINT64_MAX); /* -1 as the engine's uint64 */
    EXPECT_EQ(r->sp.n_logprobs, 3);
    EXPECT_EQ(r->n, 1);
    EXPECT_EQ(r->kv.policy, model.kv_default.policy);
    req_free(r);
    cmpl_params_free(&p);

    EXPECT_EQ(parse("{" M ",'prompt':'a'}", &p, &e), 0);
    r = cmpl_make_req(&p, 0, 1, 99);
    EXPECT_EQ(r->sp.n_logprobs, -1);
    EXPECT_EQ(r->n_stops, 0);
    EXPECT(r->bias_ids == NULL);
    req_free(r);
    cmpl_params_free(&p);
}

/* ---- responses from hand-made events ---- */

/* A token event; text is borrowed (the response never frees events). */
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
    EXPECT(cmpl_finish_reason(REQ_FINISH_NONE) == NULL);
    EXPECT_STR(cmpl_finish_reason(REQ_FINISH_STOP), "stop");
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
    char *s = json_print(a, NULL);
    EXPECT_STR(s, "[-0.1,-1.5,-12.345678,0]");
    free(s);
    cJSON_Delete(a);
    EXPECT(json_utf8_valid("h\xc3\xa9\xf0\x9f\x98\x80", 7));
    EXPECT(!json_utf8_valid("\xc0\xaf", 2));         /* overlong */
    EXPECT(!json_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    EXPECT(!json_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
    EXPECT(!json_utf8_valid("\xc3", 1));             /* cut short */
    EXPECT(json_has_nul_escape("\"\\u0000\"", 8));
    EXPECT(!json_has_nul_escape("\"\\\\u0000\"", 9)); /* an escaped backslash, then text */
    EXPECT(!json_has_nul_escape("\"\\u00001\"", 3));
}

int main(void)
{
    byte_tok = tokenizer_create_bytes(512);
    if (opt_tokenizer_load(&opt_tok)) return 1;
    model_init(&model, byte_tok);
    RUN(parse_valid_table);
    RUN(parse_defaults_and_fields);
    RUN(parse_invalid_table);
    RUN(parse_limits_from_the_model);
    RUN(error_body_has_all_four_keys);
    RUN(parse_survives_garbage);
    RUN(make_req_copies_everything);
    RUN(body_prompt_major_with_usage);
    RUN(body_best_of_picks_highest_mean_logprob);
    RUN(body_echo_and_logprobs_with_opt_tokens);
    RUN(body_echo_token_prompt_and_max_tokens_zero);
    RUN(body_sanitizes_bad_text_and_maps_cancel);
    RUN(engine_errors_are_remembered);
    RUN(stream_chunks_finish_last_and_usage_tail);
    RUN(stream_echo_in_first_chunk_and_plain_tail);
    RUN(json_helpers);
    printf("# %zu valid and %zu invalid request cases\n", ARRAY_LEN(good), ARRAY_LEN(bad));
    tokenizer_destroy(byte_tok);
    tokenizer_destroy(opt_tok);
    return test_done();
}
