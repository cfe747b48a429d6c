/*
 * opt_tokenizer.c - the real OPT tokenizer of tests/data/opt-tokenizer (opt_tokenizer.h).
 */
#include "opt_tokenizer.h"

#include <stdio.h>

int opt_tokenizer_load(struct tokenizer **out)
{
    /* test_data returns a static buffer, so the first path is copied. */
    char vocab[4096];
    snprintf(vocab, sizeof vocab, "%s", test_data("opt-tokenizer/vocab.json"));
    int err = tokenizer_load(out, vocab, test_data("opt-tokenizer/merges.txt"));
    if (err) printf("Bail out! %s\n", err_msg());
    return err;
}
