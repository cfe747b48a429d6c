/*
 * opt_tokenizer.h - load the real OPT tokenizer from tests/data/opt-tokenizer for
 * the tests that need it.
 */
#ifndef H2O_TEST_OPT_TOKENIZER_H
#define H2O_TEST_OPT_TOKENIZER_H

#include "err.h"
#include "test.h"
#include "tokenizer.h"

/* Returns 0, or prints a TAP "Bail out!" line and returns the error. */
int opt_tokenizer_load(struct tokenizer **out);

#endif
