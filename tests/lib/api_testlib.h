/*
 * api_testlib.h - what the POST /v1/completions unit tests share: the "opt-test"
 * model (byte tokenizer: byte b = id 4 + b, BOS = EOS = 2; a context of 64 tokens,
 * at most 4 prompts, n <= 128), the real OPT tokenizer for token strings, and
 * bodies written with single quotes for readability (q() turns them into JSON).
 */
#ifndef H2O_TEST_API_TESTLIB_H
#define H2O_TEST_API_TESTLIB_H

#include "cmpl.h"
#include "opt_tokenizer.h"
#include "test.h"
#include "tokenizer.h"
#include "util.h"

#include <stdint.h>

/* The byte tokenizer, the real OPT one, and the "opt-test" model on the byte one:
 * made by api_testlib_init, freed by api_testlib_done. */
extern struct tokenizer *byte_tok, *opt_tok;
extern struct api_model model;

void model_init(struct api_model *m, const struct tokenizer *tok);

/* The body with ' replaced by " (static buffer, one at a time). */
const char *q(const char *s);

int parse_m(const struct api_model *m, const char *body, struct cmpl_params *p,
            struct api_error *e);

int parse(const char *body, struct cmpl_params *p, struct api_error *e);

/* The model field of every test body. */
#define M "'model':'opt-test'"

/* Load both tokenizers and the model; returns non-zero when the OPT files are
 * missing (the test then bails out). */
int api_testlib_init(void);

void api_testlib_done(void);

#endif
