/*
 * api_testlib.h - what the POST /v1/completions unit tests share: the "opt-test"
 * model (byte tokenizer: byte b = id 4 + b, BOS = EOS = 2; a context of 64 tokens,
 * at most 4 prompts, n <= 128), the real OPT tokenizer for token strings, and
 * bodies written with single quotes for readability (q() turns them into JSON).
 */
#ifndef H2O_TEST_API_TESTLIB_H
#define H2O_TEST_API_TESTLIB_H

#include "api_completions.h"
#include "opt_tokenizer.h"
#include "test.h"
#include "tokenizer.h"
#include "util.h"

#include <stdint.h>

static struct tokenizer *byte_tok, *opt_tok;
static struct api_model model;

static inline void model_init(struct api_model *m, const struct tokenizer *tok)
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
static inline const char *q(const char *s)
{
    static char buf[8192];
    size_t n = strlen(s);
    CHECK(n < sizeof buf);
    for (size_t i = 0; i <= n; i++)
        buf[i] = s[i] == '\'' ? '"' : s[i];
    return buf;
}

static inline int parse_m(const struct api_model *m, const char *body, struct cmpl_params *p,
                   struct api_error *e)
{
    const char *b = q(body);
    return cmpl_parse(b, strlen(b), m, p, e);
}

static inline int parse(const char *body, struct cmpl_params *p, struct api_error *e)
{
    return parse_m(&model, body, p, e);
}

/* The model field of every test body. */
#define M "'model':'opt-test'"

/* Load both tokenizers and the model; returns non-zero when the OPT files are
 * missing (the test then bails out). */
static inline int api_testlib_init(void)
{
    byte_tok = tokenizer_create_bytes(512);
    if (opt_tokenizer_load(&opt_tok)) return 1;
    model_init(&model, byte_tok);
    return 0;
}

static inline void api_testlib_done(void)
{
    tokenizer_destroy(byte_tok);
    tokenizer_destroy(opt_tok);
}

#endif
