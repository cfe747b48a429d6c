/*
 * test_cmpl.c - POST /v1/completions bodies without the network (server/cmpl.c):
 * the request parser against tables of valid and invalid bodies, the limits that come
 * from the model, the error body, robustness against garbage, and the engine
 * requests the parsed body becomes.
 *
 * This file is just over 600 lines because it is one parser's specification: most of
 * it is the two tables of bodies (valid, invalid with the error each must give),
 * which read best side by side with the module's validation order.
 */
#include "api_testlib.h"
#include "cmpl_resp.h"
#include "rnd.h"

/* ---- valid requests ---- */

struct good_case {
    const char *body;
    int32_t n_prompts, max_tokens, n, best_of, logprobs;
};

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
    EXPECT_EQ(p.kv.min_budget, model.kv_default.min_budget); /* the server's floor */
    cmpl_params_free(&p);

    /* The floor: top-level kv_min_budget, or min_budget in the kv_cache object (the
     * two must agree); either way over any policy spelling. */
    EXPECT_EQ(parse("{" M ",'prompt':'hi','kv_min_budget':0}", &p, &e), 0);
    EXPECT_EQ(p.kv.min_budget, 0);
    EXPECT_EQ(p.kv.policy, model.kv_default.policy);
    cmpl_params_free(&p);
    EXPECT_EQ(parse("{" M ",'prompt':'hi','kv_cache':'local','kv_min_budget':300}", &p, &e), 0);
    EXPECT_EQ(p.kv.min_budget, 300);
    EXPECT_EQ(p.kv.policy, KV_POLICY_LOCAL);
    cmpl_params_free(&p);
    EXPECT_EQ(parse("{" M ",'prompt':'hi','kv_cache':{'policy':'h2o','min_budget':64}}", &p,
                    &e),
              0);
    EXPECT_EQ(p.kv.min_budget, 64);
    cmpl_params_free(&p);
    EXPECT_EQ(parse("{" M ",'prompt':'hi','kv_cache':{'policy':'h2o','min_budget':64},"
                    "'kv_min_budget':64}",
                    &p, &e),
              0);
    EXPECT_EQ(p.kv.min_budget, 64);
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
    /* strings: the member at fault is the param */
    {"{" M ",'prompt':'\xff\xfe'}", 400, "prompt", NULL},     /* invalid UTF-8 */
    {"{" M ",'prompt':'\xed\xa0\x80'}", 400, "prompt", NULL}, /* a UTF-8 surrogate */
    {"{" M ",'prompt':'\xc0\xaf'}", 400, "prompt", NULL},     /* an overlong '/' */
    {"{" M ",'prompt':'a\\u0000b'}", 400, "prompt", NULL},    /* NUL inside a string */
    {"{" M ",'prompt':['ok','a\\u0000']}", 400, "prompt[1]", NULL},
    {"{" M ",'prompt':'hi','stop':['\\u0000']}", 400, "stop[0]", NULL},
    {"{" M ",'prompt':'hi','x\\u0000':1}", 400, NULL, NULL},  /* in a member name */
    {"{" M ",'prompt':'hi','\xff':1}", 400, NULL, NULL},
    {"{" M ",'prompt':'\xff'", 400, NULL, NULL},              /* cut short, not UTF-8 */
    {"{" M ",'prompt':'hi'}\x01", 400, NULL, NULL},           /* a control byte after */
    {"{" M ",\x01'prompt':'hi'}", 400, NULL, NULL},           /* and between tokens */
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
    {"{" M ",'prompt':'hi','kv_min_budget':-1}", 400, "kv_min_budget", NULL},
    {"{" M ",'prompt':'hi','kv_min_budget':2.5}", 400, "kv_min_budget", NULL},
    {"{" M ",'prompt':'hi','kv_min_budget':'64'}", 400, "kv_min_budget", NULL},
    {"{" M ",'prompt':'hi','kv_min_budget':3000000000}", 400, "kv_min_budget", NULL},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':'h2o','min_budget':-5}}", 400,
     "kv_cache.min_budget", NULL},
    {"{" M ",'prompt':'hi','kv_cache':{'policy':'h2o','min_budget':64},'kv_min_budget':32}",
     400, "kv_min_budget", NULL},
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

TEST(kv_cache_dtype_may_only_repeat_the_servers)
{
    /* The pool holds one dtype (--kv-cache-dtype): a request may confirm it or say
     * auto; anything else is a 400 that names the server's dtype and the flag. */
    struct api_model m;
    model_init(&m, byte_tok);
    m.kv_dtype = "int8";
    struct cmpl_params p;
    struct api_error e = {0};
    EXPECT_EQ(parse_m(&m, "{" M ",'prompt':'a','kv_cache':{'policy':'h2o','dtype':'int8'}}",
                      &p, &e),
              0);
    EXPECT_EQ(p.kv.policy, KV_POLICY_H2O);
    cmpl_params_free(&p);
    EXPECT_EQ(parse_m(&m,
                      "{" M ",'prompt':'a','kv_cache':{'policy':'full','dtype':'auto'}}",
                      &p, &e),
              0);
    EXPECT_EQ(p.kv.policy, KV_POLICY_FULL);
    cmpl_params_free(&p);
    EXPECT_EQ(parse_m(&m, "{" M ",'prompt':'a','kv_cache':{'policy':'h2o','dtype':'bf16'}}",
                      &p, &e),
              -1);
    EXPECT_EQ(e.status, 400);
    EXPECT_STR(e.param, "kv_cache.dtype");
    EXPECT(e.message && strstr(e.message, "(int8)") &&
           strstr(e.message, "--kv-cache-dtype") && strstr(e.message, "\"bf16\""));
    api_error_clear(&e);
    EXPECT_EQ(
        parse_m(&m, "{" M ",'prompt':'a','kv_cache':{'policy':'h2o','dtype':8}}", &p, &e),
        -1);
    EXPECT_STR(e.param, "kv_cache.dtype");
    api_error_clear(&e);
    /* A server whose dtype the parser does not know accepts auto only. */
    m.kv_dtype = NULL;
    EXPECT_EQ(parse_m(&m, "{" M ",'prompt':'a','kv_cache':{'policy':'h2o','dtype':'int8'}}",
                      &p, &e),
              -1);
    EXPECT_STR(e.param, "kv_cache.dtype");
    api_error_clear(&e);
}

TEST(a_model_without_a_tokenizer_takes_token_ids_only)
{
    /* A folder with no tokenizer files (tokenizer_create_none): token prompts work,
     * text prompts and stop strings are a 400 that says why, not a 500 or a
     * silently ignored stop. */
    struct tokenizer *none = tokenizer_create_none(512, 2, 2);
    struct api_model m;
    model_init(&m, none);
    struct cmpl_params p;
    struct api_error e = {0};
    EXPECT_EQ(parse_m(&m, "{" M ",'prompt':[2,40,41],'max_tokens':3}", &p, &e), 0);
    EXPECT_EQ(p.prompts[0].n_ids, 3);
    cmpl_params_free(&p);
    EXPECT_EQ(parse_m(&m, "{" M ",'prompt':'hello'}", &p, &e), -1);
    EXPECT_EQ(e.status, 400);
    EXPECT_STR(e.param, "prompt");
    EXPECT(e.message && strstr(e.message, "has no tokenizer") != NULL);
    api_error_clear(&e);
    EXPECT_EQ(parse_m(&m, "{" M ",'prompt':[2,40],'stop':'x'}", &p, &e), -1);
    EXPECT_EQ(e.status, 400);
    EXPECT_STR(e.param, "stop");
    api_error_clear(&e);
    tokenizer_destroy(none);
}

TEST(an_empty_prompt_without_bos_is_refused)
{
    /* Qwen2's tokenizer adds no BOS: "" would be a prompt of no tokens. */
    struct tokenizer *qwen;
    EXPECT_EQ(tokenizer_load_dir(&qwen, test_data("tokenizers/qwen2")), 0);
    struct api_model m;
    model_init(&m, qwen);
    struct cmpl_params p;
    struct api_error e = {0};
    EXPECT_EQ(parse_m(&m, "{" M ",'prompt':['hi','']}", &p, &e), -1);
    EXPECT_EQ(e.status, 400);
    EXPECT_STR(e.param, "prompt");
    EXPECT(e.message && strstr(e.message, "empty") != NULL);
    api_error_clear(&e);
    EXPECT_EQ(parse_m(&m, "{" M ",'prompt':'hi'}", &p, &e), 0);
    EXPECT(p.prompts[0].n_ids >= 1 && p.prompts[0].ids[0] != tokenizer_bos(qwen));
    cmpl_params_free(&p);
    tokenizer_destroy(qwen);
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
int main(void)
{
    if (api_testlib_init()) return 1;
    RUN(parse_valid_table);
    RUN(parse_defaults_and_fields);
    RUN(parse_invalid_table);
    RUN(parse_limits_from_the_model);
    RUN(kv_cache_dtype_may_only_repeat_the_servers);
    RUN(a_model_without_a_tokenizer_takes_token_ids_only);
    RUN(an_empty_prompt_without_bos_is_refused);
    RUN(error_body_has_all_four_keys);
    RUN(parse_survives_garbage);
    RUN(make_req_copies_everything);
    printf("# %zu valid and %zu invalid request cases\n", ARRAY_LEN(good), ARRAY_LEN(bad));
    api_testlib_done();
    return test_done();
}
