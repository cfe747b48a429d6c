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
static inline int opt_tokenizer_load(struct tokenizer **out)
{
    /* test_data returns a static buffer, so the first path is copied. */
    char vocab[4096];
    snprintf(vocab, sizeof vocab, "%s", test_data("opt-tokenizer/vocab.json"));
    int err = tokenizer_load(out, vocab, test_data("opt-tokenizer/merges.txt"));
    if (err) printf("Bail out! %s\n", err_msg());
    return err;
}

#endif
