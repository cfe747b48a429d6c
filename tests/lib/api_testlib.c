/*
 * api_testlib.c - the POST /v1/completions unit tests' model and bodies (api_testlib.h).
 */
#include "api_testlib.h"

#include <string.h>

struct tokenizer *byte_tok, *opt_tok;
struct api_model model;

void model_init(struct api_model *m, const struct tokenizer *tok)
{
    memset(m, 0, sizeof *m);
    m->id = "opt-test";
    m->max_model_len = 64;
    m->vocab_size = tokenizer_vocab_size(tok);
    m->tok = tok;
    kv_budget_spec_default(&m->kv_default);
    m->max_prompts = 4;
    m->max_n = 128;
}

const char *q(const char *s)
{
    static char buf[8192];
    size_t n = strlen(s);
    CHECK(n < sizeof buf);
    for (size_t i = 0; i <= n; i++)
        buf[i] = s[i] == '\'' ? '"' : s[i];
    return buf;
}

int parse_m(const struct api_model *m, const char *body, struct cmpl_params *p,
            struct api_error *e)
{
    const char *b = q(body);
    return cmpl_parse(b, strlen(b), m, p, e);
}

int parse(const char *body, struct cmpl_params *p, struct api_error *e)
{
    return parse_m(&model, body, p, e);
}

int api_testlib_init(void)
{
    byte_tok = tokenizer_create_bytes(512);
    if (opt_tokenizer_load(&opt_tok)) return 1;
    model_init(&model, byte_tok);
    return 0;
}

void api_testlib_done(void)
{
    tokenizer_destroy(byte_tok);
    tokenizer_destroy(opt_tok);
}
