/*
 * golden.c - the golden fixtures of golden.h and the backend tests' model loader.
 */
#include "golden.h"

#include "test.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static int32_t *golden_ints(const cJSON *arr, int32_t *n)
{
    *n = cJSON_GetArraySize(arr);
    int32_t *v = xmalloc((size_t)(*n ? *n : 1) * sizeof *v);
    for (int32_t i = 0; i < *n; i++)
        v[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return v;
}

void golden_load(struct golden *g, const char *name)
{
    char path[512];
    char *text = NULL, *bin = NULL;
    size_t bin_len = 0;
    /* "tiny-opt" is golden/tiny-opt; a name with a folder ("golden-arch/tiny-llama")
     * is that folder of the test data. */
    const char *dir = strchr(name, '/') ? "" : "golden/";
    snprintf(path, sizeof path, "%s%s/golden.json", dir, name);
    CHECK(util_read_file(test_data(path), &text, NULL) == 0);
    snprintf(path, sizeof path, "%s%s/golden.bin", dir, name);
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

void golden_free(struct golden *g)
{
    for (int32_t i = 0; i < g->n_prompts; i++) {
        free(g->p[i].tokens);
        free(g->p[i].decode);
    }
    free(g->data);
}

double max_abs_diff(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as a failure */
    }
    return m;
}

int32_t argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

struct model *test_model(const char *rel, enum dtype dt, int32_t n_blocks,
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
