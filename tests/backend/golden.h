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

#include <cjson/cJSON.h>
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

static inline int32_t *golden_ints(const cJSON *arr, int32_t *n)
{
    *n = cJSON_GetArraySize(arr);
    int32_t *v = xmalloc((size_t)(*n ? *n : 1) * sizeof *v);
    for (int32_t i = 0; i < *n; i++) v[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return v;
}

/* Load tests/data/golden/<name>/golden.{json,bin}. Aborts on malformed fixtures. */
static inline void golden_load(struct golden *g, const char *name)
{
    char path[512];
    char *text = NULL, *bin = NULL;
    size_t bin_len = 0;
    snprintf(path, sizeof path, "golden/%s/golden.json", name);
    CHECK(util_read_file(test_data(path), &text, NULL) == 0);
    snprintf(path, sizeof path, "golden/%s/golden.bin", name);
    CHECK(util_read_file(test_data(path), &bin, &bin_len) == 0);
    cJSON *j = cJSON_Parse(text);
    CHECK(j);
    g->vocab = cJSON_GetObjectItem(j, "vocab")->valueint;
    g->data = (float *)bin;
    const cJSON *ps = cJSON_GetObjectItem(j, "prompts");
    g->n_prompts = cJSON_GetArraySize(ps);
    CHECK(g->n_prompts <= GOLDEN_MAX_PROMPTS);
    for (int32_t i = 0; i < g->n_prompts; i++) {
        const cJSON *p = cJSON_GetArrayItem(ps, i);
        struct golden_prompt *gp = &g->p[i];
        gp->tokens = golden_ints(cJSON_GetObjectItem(p, "tokens"), &gp->n_tok);
        gp->decode = golden_ints(cJSON_GetObjectItem(p, "decode_tokens"), &gp->n_decode);
        size_t po = (size_t)cJSON_GetObjectItem(p, "prefill_offset")->valuedouble;
        size_t dof = (size_t)cJSON_GetObjectItem(p, "decode_offset")->valuedouble;
        CHECK((po + (size_t)gp->n_tok * g->vocab) * 4 <= bin_len);
        CHECK((dof + (size_t)gp->n_decode * g->vocab) * 4 <= bin_len);
        gp->prefill = g->data + po;
        gp->logits = g->data + dof;
    }
    cJSON_Delete(j);
    free(text);
}

static inline void golden_free(struct golden *g)
{
    for (int32_t i = 0; i < g->n_prompts; i++) {
        free(g->p[i].tokens);
        free(g->p[i].decode);
    }
    free(g->data);
}

static inline double max_abs_diff(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as a failure */
    }
    return m;
}

static inline int32_t argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Load a model from tests/data/<rel> (or "dummy:NAME") in `dt`, with a KV pool. */
static inline struct model *test_model(const char *rel, enum dtype dt, int32_t n_blocks,
                                int32_t block_size)
{
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = dt;
    struct model *m = NULL;
    const char *path = strncmp(rel, "dummy:", 6) == 0 ? rel : test_data(rel);
    int err = model_load(&m, path, &mo);
    if (err) {
        printf("# model_load(%s): %s\n", path, err_msg());
        return NULL;
    }
    CHECK(m->be.ops->kv_alloc(m->be.ctx, n_blocks, block_size) == 0);
    return m;
}

#endif
