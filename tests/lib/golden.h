/*
 * golden.h - read the golden logits that tests/data/make_golden.py saved from
 * Hugging Face transformers, and small helpers shared by the backend tests.
 */
#ifndef H2O_TEST_GOLDEN_H
#define H2O_TEST_GOLDEN_H

#include "batch.h"
#include "err.h"
#include "kv_pool.h"
#include "kv_seq.h"
#include "model.h"
#include "util.h"

#include <stdlib.h>

#define GOLDEN_MAX_PROMPTS 8

struct golden_prompt {
    int32_t *tokens, n_tok;
    int32_t *decode, n_decode;
    const float *prefill; /* [n_tok, vocab] */
    const float *logits;  /* [n_decode, vocab]: after feeding decode[k] */
};

struct golden {
    int32_t vocab, n_prompts;
    struct golden_prompt p[GOLDEN_MAX_PROMPTS];
    float *data;
};

/* Load tests/data/golden/<name>/golden.{json,bin}, or tests/data/<name>/... when
 * name has a folder ("golden-arch/tiny-llama"). Aborts on malformed fixtures. */
void golden_load(struct golden *g, const char *name);

void golden_free(struct golden *g);

double max_abs_diff(const float *a, const float *b, int64_t n);

int32_t argmax(const float *x, int32_t n);

/* Load a model from tests/data/<rel> (or "dummy:NAME") in `dt`, with a KV pool. */
struct model *test_model(const char *rel, enum dtype dt, int32_t n_blocks,
                         int32_t block_size);

#endif
