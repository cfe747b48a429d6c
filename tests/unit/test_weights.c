/*
 * test_weights.c - checkpoint reading: safetensors (written here), sharded indexes,
 * the torch.save fixtures of tests/data/weights (made by make_weight_fixtures.py), the
 * golden transformers checkpoints, and reading a window of a tensor from each.
 *
 * The torch zip and pickle error cases live in test_weights_torch.c, the dummy
 * generator (weights_dummy.c) in test_weights_dummy.c. Every bad
 * checkpoint must give the expected code and a one-line message naming the file and,
 * where there is one, the tensor.
 */
#include "err.h"
#include "model.h"
#include "test.h"
#include "weights.h"
#include "weights_impl.h" /* white-box: walk the tensor table */
#include "weights_testlib.h"

#include <cjson/cJSON.h>
#include <stdint.h>

/* ---- safetensors written by the test ---- */

struct st_tensor {
    const char *name, *dtype;
    int ndim;
    int64_t shape[4];
    const void *data;
    size_t nbytes;
};

/* A safetensors file of `n` tensors packed back to back (no alignment padding). */
static void st_build(struct tbuf *out, const struct st_tensor *t, int n)
{
    struct tbuf hdr = {0};
    size_t off = 0;
    tbuf_printf(&hdr, "{\"__metadata__\": {\"format\": \"pt\"}");
    for (int i = 0; i < n; i++) {
        tbuf_printf(&hdr, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [", t[i].name,
                    t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++)
            tbuf_printf(&hdr, "%s%lld", d ? ", " : "", (long long)t[i].shape[d]);
        tbuf_printf(&hdr, "], \"data_offsets\": [%zu, %zu]}", off, off + t[i].nbytes);
        off += t[i].nbytes;
    }
    tbuf_printf(&hdr, "}");
    st_build_raw(out, (const char *)hdr.p, hdr.n);
    for (int i = 0; i < n; i++)
        tbuf_add(out, t[i].data, t[i].nbytes);
    free(hdr.p);
}

static const float f32_vals[6] = {1.5f, -2.25f, 0.0f, 3.0e-5f, -1.0e4f, 7.0f};
static uint16_t f16_vals[8], bf16_vals[3];
static const uint16_t one_f16 = 0x3c00; /* 1.0 */

static void init_halves(void)
{
    for (int i = 0; i < 8; i++)
        f16_vals[i] = f32_to_f16((float)i * 0.5f - 1.75f);
    for (int i = 0; i < 3; i++)
        bf16_vals[i] = f32_to_bf16((float)(i + 1) * -0.375f);
}

/* One tensor of each dtype, with every prefix spelling; the 2-byte first tensor
 * leaves the fp32 data at an unaligned address. */
static const struct st_tensor st_good[] = {
    {"model.final_layer_norm.bias", "F16", 1, {1}, &one_f16, 2},
    {"model.decoder.layers.0.fc1.weight", "F32", 2, {2, 3}, f32_vals, sizeof f32_vals},
    {"decoder.embed_tokens.weight", "F16", 2, {4, 2}, f16_vals, sizeof f16_vals},
    {"lm_head.weight", "BF16", 1, {3}, bf16_vals, sizeof bf16_vals},
};

static void expect_good_values(const struct weights *w)
{
    float v[8];
    EXPECT_EQ(weights_read_f32(w, "layers.0.fc1.weight", 2, (int64_t[]){2, 3}, v), 0);
    for (int i = 0; i < 6; i++)
        EXPECT_EQ(memcmp(&v[i], &f32_vals[i], 4), 0);
    EXPECT_EQ(weights_read_f32(w, "embed_tokens.weight", 2, (int64_t[]){4, 2}, v), 0);
    for (int i = 0; i < 8; i++)
        EXPECT_EQ(v[i], (float)i * 0.5f - 1.75f);
    EXPECT_EQ(weights_read_f32(w, "lm_head.weight", 1, (int64_t[]){3}, v), 0);
    for (int i = 0; i < 3; i++)
        EXPECT_EQ(v[i], (float)(i + 1) * -0.375f);
    EXPECT_EQ(weights_read_f32(w, "final_layer_norm.bias", 1, (int64_t[]){1}, v), 0);
    EXPECT_EQ(v[0], 1.0f);
}

TEST(safetensors_reads_fp32_fp16_bf16_under_one_spelling)
{
    const char *dir = tdir_new();
    struct tbuf b = {0};
    st_build(&b, st_good, 4);
    tfile_write(dir, "model.safetensors", b.p, b.n);
    struct weights *w = NULL;
    EXPECT_EQ(weights_open(&w, dir), 0);
    if (!w) return;
    expect_good_values(w);
    EXPECT(weights_has(w, "layers.0.fc1.weight"));
    EXPECT(!weights_has(w, "model.decoder.layers.0.fc1.weight")); /* stored prefix-free */
    EXPECT(!weights_has(w, "__metadata__"));
    weights_close(w);
    free(b.p);
}

TEST(read_checks_name_and_shape)
{
    const char *dir = tdir_new();
    struct tbuf b = {0};
    st_build(&b, st_good, 4);
    tfile_write(dir, "model.safetensors", b.p, b.n);
    struct weights *w = NULL;
    EXPECT_EQ(weights_open(&w, dir), 0);
    if (!w) return;
    float v[8];
    EXPECT_EQ(weights_read_f32(w, "layers.0.fc2.weight", 2, (int64_t[]){2, 3}, v),
              ENG_ENOTFOUND);
    EXPECT_MSG("model.safetensors", "layers.0.fc2.weight");
    EXPECT_EQ(weights_read_f32(w, "layers.0.fc1.weight", 2, (int64_t[]){3, 2}, v),
              ENG_EFORMAT);
    EXPECT_MSG("model.safetensors", "layers.0.fc1.weight");
    EXPECT(strstr(err_msg(), "[2, 3]") && strstr(err_msg(), "[3, 2]"));
    EXPECT_EQ(weights_read_f32(w, "layers.0.fc1.weight", 1, (int64_t[]){6}, v),
              ENG_EFORMAT);
    weights_close(w);
    free(b.p);
}

TEST(safetensors_shards_follow_the_index)
{
    const char *dir = tdir_new();
    struct tbuf a = {0}, b = {0};
    st_build(&a, st_good, 2);
    st_build(&b, st_good + 2, 2);
    tfile_write(dir, "model-00001-of-00002.safetensors", a.p, a.n);
    tfile_write(dir, "model-00002-of-00002.safetensors", b.p, b.n);
    const char *index =
        "{\"metadata\": {\"total_size\": 72}, \"weight_map\": {"
        "\"model.final_layer_norm.bias\": \"model-00001-of-00002.safetensors\","
        "\"model.decoder.layers.0.fc1.weight\": \"model-00001-of-00002.safetensors\","
        "\"decoder.embed_tokens.weight\": \"model-00002-of-00002.safetensors\","
        "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}";
    tfile_write(dir, "model.safetensors.index.json", index, strlen(index));
    struct weights *w = NULL;
    EXPECT_EQ(weights_open(&w, dir), 0);
    if (w) expect_good_values(w);
    float v[6];
    if (w)
        EXPECT_EQ(weights_read_f32(w, "layers.0.fc1.weight", 1, (int64_t[]){6}, v),
                  ENG_EFORMAT);
    EXPECT_MSG("model-00001-of-00002.safetensors",
               "layers.0.fc1.weight"); /* names the shard */
    weights_close(w);
    free(a.p);
    free(b.p);
}

TEST(shard_index_errors_name_index_shard_and_tensor)
{
    struct tbuf a = {0};
    st_build(&a, st_good, 2);
    const char *dir = tdir_new();
    tfile_write(dir, "model-00001-of-00002.safetensors", a.p, a.n);
    const char *missing = "{\"weight_map\": {\"model.final_layer_norm.bias\": "
                          "\"model-00001-of-00002.safetensors\", \"lm_head.weight\": "
                          "\"model-00002-of-00002.safetensors\"}}";
    tfile_write(dir, "model.safetensors.index.json", missing, strlen(missing));
    EXPECT_OPEN_FAILS(dir, ENG_ENOTFOUND, "model-00002-of-00002.safetensors",
                      "lm_head.weight");
    EXPECT(strstr(err_msg(), "model.safetensors.index.json"));

    const char *stale = "{\"weight_map\": {\"model.final_layer_norm.bias\": "
                        "\"model-00001-of-00002.safetensors\", \"lm_head.weight\": "
                        "\"model-00001-of-00002.safetensors\"}}";
    tfile_write(dir, "model.safetensors.index.json", stale, strlen(stale));
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "model.safetensors.index.json", "lm_head.weight");

    const char *escape =
        "{\"weight_map\": {\"lm_head.weight\": \"../secret.safetensors\"}}";
    tfile_write(dir, "model.safetensors.index.json", escape, strlen(escape));
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "model.safetensors.index.json", "lm_head.weight");

    tfile_write(dir, "model.safetensors.index.json", "{\"weight_map\": ", 15);
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "model.safetensors.index.json", "JSON");
    tfile_write(dir, "model.safetensors.index.json", "{\"weight_map\": {}}", 18);
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "model.safetensors.index.json", "weight_map");
    free(a.p);
}

TEST(folder_without_checkpoint_is_not_found)
{
    const char *dir = tdir_new();
    EXPECT_OPEN_FAILS(dir, ENG_ENOTFOUND, dir, "model.safetensors");
    EXPECT_OPEN_FAILS("/nonexistent/h2o", ENG_ENOTFOUND, "/nonexistent/h2o",
                      "pytorch_model.bin");
}

/* Write `hdr` as a safetensors header followed by `data_len` zero bytes, open it, and
 * check the code and that the message names the file and `what`. */
static void bad_header(const char *hdr, size_t data_len, int code, const char *what,
                       int line)
{
    const char *dir = tdir_new();
    struct tbuf b = {0};
    st_build_raw(&b, hdr, strlen(hdr));
    for (size_t i = 0; i < data_len; i++)
        tbuf_add(&b, "", 1);
    tfile_write(dir, "model.safetensors", b.p, b.n);
    expect_open_fails(dir, code, "model.safetensors", what, line);
    free(b.p);
}

#define BAD_HEADER(hdr, n, code, what) bad_header(hdr, n, code, what, __LINE__)

TEST(bad_safetensors_headers)
{
    BAD_HEADER("[1, 2]", 0, ENG_EFORMAT, "not a JSON object");
    BAD_HEADER("{\"w\": ", 0, ENG_EFORMAT, "JSON");
    BAD_HEADER("{\"w\": 3}", 0, ENG_EFORMAT, "w");
    BAD_HEADER("{\"w\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", 8, ENG_EFORMAT, "w");
    BAD_HEADER("{\"w8\": {\"dtype\": \"I8\", \"shape\": [2], \"data_offsets\": [0, 2]}}", 2,
               ENG_EUNSUPPORTED, "w8");
    BAD_HEADER("{\"w64\": {\"dtype\": \"F64\", \"shape\": [2], \"data_offsets\": [0, 16]}}",
               16, ENG_EUNSUPPORTED, "w64");
    BAD_HEADER("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 800]}}",
               8, ENG_EFORMAT, "w");
    BAD_HEADER("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 8,
               ENG_EFORMAT, "w");
    BAD_HEADER("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", 8,
               ENG_EFORMAT, "w");
    BAD_HEADER("{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0]}}", 8,
               ENG_EFORMAT, "w");
    BAD_HEADER("{\"w\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}",
               8, ENG_EFORMAT, "w");
    BAD_HEADER("{\"w\": {\"dtype\": \"F32\", \"shape\": [2.5], \"data_offsets\": [0, 10]}}",
               10, ENG_EFORMAT, "w");
    BAD_HEADER("{\"w\": {\"dtype\": \"F32\", \"shape\": \"2\", \"data_offsets\": [0, 8]}}",
               8, ENG_EFORMAT, "w");
    BAD_HEADER("{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], "
               "\"data_offsets\": [0, 4]}}",
               4, ENG_EFORMAT, "w");
    BAD_HEADER("{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296], "
               "\"data_offsets\": [0, 4]}}",
               4, ENG_EFORMAT, "w");
    /* Two spellings of one tensor would make lookups ambiguous. */
    BAD_HEADER(
        "{\"model.decoder.w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, "
        "4]},"
        " \"decoder.w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
        4, ENG_EFORMAT, "decoder.w");
    BAD_HEADER("{\"__metadata__\": {}}", 0, ENG_EFORMAT, "no tensors");
}

/* GPT-NeoX's causal-mask buffers (bool) are skipped; the weights beside them load,
 * and a bool tensor under any other name is still refused. */
TEST(neox_mask_buffers_are_skipped)
{
    const char *dir = tdir_new();
    const char *hdr =
        "{\"gpt_neox.layers.0.attention.bias\": {\"dtype\": \"BOOL\", \"shape\": [2, 2],"
        " \"data_offsets\": [0, 4]},"
        " \"gpt_neox.layers.0.attention.dense.weight\": {\"dtype\": \"F32\","
        " \"shape\": [1], \"data_offsets\": [4, 8]}}";
    struct tbuf b = {0};
    st_build_raw(&b, hdr, strlen(hdr));
    for (int i = 0; i < 8; i++)
        tbuf_add(&b, "", 1);
    tfile_write(dir, "model.safetensors", b.p, b.n);
    struct weights *w = NULL;
    EXPECT_EQ(weights_open(&w, dir), 0);
    EXPECT(weights_has(w, "layers.0.attention.dense.weight"));
    EXPECT(!weights_has(w, "layers.0.attention.bias"));
    weights_close(w);
    free(b.p);
    BAD_HEADER("{\"layers.0.mask\": {\"dtype\": \"BOOL\", \"shape\": [2],"
               " \"data_offsets\": [0, 2]}}",
               2, ENG_EUNSUPPORTED, "layers.0.mask");
}

TEST(truncated_safetensors)
{
    struct tbuf b = {0};
    st_build(&b, st_good, 4);
    const char *dir = tdir_new();
    /* Cut inside the last tensor's data: its offsets now pass the end of the file. */
    tfile_write(dir, "model.safetensors", b.p, b.n - 1);
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "model.safetensors", "lm_head.weight");
    /* Cut inside the header: the length prefix promises more than there is. */
    tfile_write(dir, "model.safetensors", b.p, 40);
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "model.safetensors", "header length");
    tfile_write(dir, "model.safetensors", b.p, 5);
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "model.safetensors", "too short");
    tfile_write(dir, "model.safetensors", b.p, 0);
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "model.safetensors", "empty");
    /* A garbage length prefix. */
    memset(b.p, 0xff, 8);
    tfile_write(dir, "model.safetensors", b.p, b.n);
    EXPECT_OPEN_FAILS(dir, ENG_EFORMAT, "model.safetensors", "header length");
    free(b.p);
}

/* ---- fixtures from make_weight_fixtures.py ---- */

static cJSON *load_expected(void)
{
    char *text = NULL;
    size_t len = 0;
    if (util_read_file(test_data("weights/expected.json"), &text, &len)) return NULL;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    return j;
}

/* Open tests/data/<rel> and compare every tensor of expected.json's `section`. */
static void check_fixture(const char *rel, const char *section)
{
    cJSON *exp = load_expected();
    EXPECT(exp != NULL);
    struct weights *w = NULL;
    int err = weights_open(&w, test_data(rel));
    if (err) TEST_FAIL("%s: %s", rel, err_msg());
    const cJSON *t;
    int n = 0;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(exp, section))
    {
        if (!w) break;
        int64_t shape[8];
        int ndim = 0;
        const cJSON *d;
        cJSON_ArrayForEach(d, cJSON_GetObjectItem(t, "shape")) shape[ndim++] =
            (int64_t)d->valuedouble;
        const cJSON *vals = cJSON_GetObjectItem(t, "values");
        int nv = cJSON_GetArraySize(vals);
        float *v = calloc((size_t)nv + 1, sizeof *v);
        if (weights_read_f32(w, t->string, ndim, shape, v)) {
            TEST_FAIL("%s: %s", rel, err_msg());
        } else {
            int i = 0;
            cJSON_ArrayForEach(d, vals)
            {
                if (v[i] != (float)d->valuedouble)
                    TEST_FAIL("%s: %s[%d] = %g, expected %g", rel, t->string, i, v[i],
                              d->valuedouble);
                i++;
            }
        }
        free(v);
        n++;
    }
    EXPECT(n > 0);
    if (w) EXPECT_EQ(w->n_tensors, n); /* nothing extra, such as the non-tensor entries */
    weights_close(w);
    cJSON_Delete(exp);
}

TEST(torch_bin_fixture_matches_torch)
{
    /* Tied lm_head (one storage), views at storage offsets, fp16/bf16/fp32, a 0-d tensor,
     * an nn.Parameter, a non-tensor entry and _metadata (BUILD). */
    check_fixture("weights/bin", "main");
}

TEST(torch_sharded_bin_fixture_matches_torch)
{
    check_fixture("weights/bin_sharded", "main");
}
TEST(torch_zip64_fixture_matches_torch)
{
    check_fixture("weights/bin_zip64", "main");
}
TEST(torch_v3_untyped_storage_fixture)
{
    check_fixture("weights/bin_v3", "v3");
}
TEST(python_written_safetensors_matches_torch)
{
    check_fixture("weights/safetensors", "main");
}

TEST(unsupported_torch_fixtures)
{
    EXPECT_OPEN_FAILS(test_data("weights/bin_deflated"), ENG_EUNSUPPORTED,
                      "pytorch_model.bin", "compressed");
    EXPECT_OPEN_FAILS(test_data("weights/bin_f64"), ENG_EUNSUPPORTED, "pytorch_model.bin",
                      "layers.0.fc1.weight");
    EXPECT(strstr(err_msg(), "DoubleStorage"));
    EXPECT_OPEN_FAILS(test_data("weights/bin_noncontig"), ENG_EUNSUPPORTED,
                      "pytorch_model.bin", "layers.0.fc1.weight");
    EXPECT(strstr(err_msg(), "contiguous"));
}

/* The transformers checkpoints of tests/data/golden: .bin and .safetensors agree on
 * every tensor, and only the .bin spells out the tied lm_head. */
TEST(golden_bin_and_safetensors_agree)
{
    static const char *const pairs[][2] = {
        {"golden/tiny-opt", "golden/tiny-opt-bin"},
        {"golden/tiny-opt-350m", "golden/tiny-opt-350m-bin"}};
    for (size_t p = 0; p < 2; p++) {
        struct weights *st = NULL, *bin = NULL;
        struct opt_config cfg;
        EXPECT_EQ(opt_config_load(&cfg, test_data(pairs[p][0])), 0);
        EXPECT_EQ(weights_open(&st, test_data(pairs[p][0])), 0);
        EXPECT_EQ(weights_open(&bin, test_data(pairs[p][1])), 0);
        if (!st || !bin) {
            TEST_FAIL("%s", err_msg());
            weights_close(st);
            weights_close(bin);
            continue;
        }
        EXPECT(!weights_has(st, "lm_head.weight"));
        EXPECT(weights_has(bin, "lm_head.weight"));
        EXPECT_EQ(bin->n_tensors, st->n_tensors + 1);
        /* The dummy table lists exactly the tensors transformers saves. */
        struct weights *dummy = NULL;
        weights_open_dummy(&dummy, &cfg, 0);
        EXPECT_EQ(dummy->n_tensors, st->n_tensors);
        for (int32_t i = 0; i < st->n_tensors; i++) {
            const struct weights_tensor *t = &st->tensors[i];
            EXPECT(weights_has(dummy, t->name));
            float *a = malloc((size_t)t->numel * 4), *b = malloc((size_t)t->numel * 4);
            EXPECT_EQ(weights_read_f32(dummy, t->name, t->ndim, t->shape, b), 0);
            EXPECT_EQ(weights_read_f32(st, t->name, t->ndim, t->shape, a), 0);
            EXPECT_EQ(weights_read_f32(bin, t->name, t->ndim, t->shape, b), 0);
            if (memcmp(a, b, (size_t)t->numel * 4)) TEST_FAIL("%s differs", t->name);
            free(a);
            free(b);
        }
        const struct weights_tensor *e = weights_find(bin, "embed_tokens.weight");
        const struct weights_tensor *l = weights_find(bin, "lm_head.weight");
        EXPECT(e && l && e->data == l->data); /* one storage, not a copy */
        weights_close(dummy);
        weights_close(st);
        weights_close(bin);
    }
}

/* A window must equal that slice of the whole tensor, for every storage kind: mapped
 * fp32 (golden safetensors), a torch zip (.bin), generated dummy values, and the
 * ones/zeros of dummy LayerNorms. Windows: row ranges, column ranges and both, the
 * way tensor-parallel ranks cut q/k/v and fc1 (rows) and out_proj and fc2 (columns). */
static void expect_windows_match(const struct weights *w)
{
    for (int32_t i = 0; i < w->n_tensors; i++) {
        const struct weights_tensor *t = &w->tensors[i];
        if (t->ndim > 2) continue;
        const int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
        float *whole = xmalloc((size_t)t->numel * 4), *part = xmalloc((size_t)t->numel * 4);
        EXPECT_EQ(weights_read_f32(w, t->name, t->ndim, t->shape, whole), 0);
        for (int k = 1; k <= 4; k++) {
            /* Part k of 4 in rows, and part k of 4 in columns (matrices only). */
            const int64_t r0 = rows * (k - 1) / 4, nr = rows * k / 4 - r0;
            const int64_t c0 = t->ndim == 2 ? cols * (k - 1) / 4 : 0;
            const int64_t nc = t->ndim == 2 ? cols * k / 4 - c0 : 1;
            EXPECT_EQ(weights_read_f32_part(w, t->name, t->ndim, t->shape, r0, nr, 0, cols,
                                            part), 0);
            if (memcmp(part, whole + r0 * cols, (size_t)(nr * cols) * 4))
                TEST_FAIL("%s rows %lld+%lld differ", t->name, (long long)r0, (long long)nr);
            EXPECT_EQ(weights_read_f32_part(w, t->name, t->ndim, t->shape, r0, nr, c0, nc,
                                            part), 0);
            for (int64_t r = 0; r < nr; r++)
                if (memcmp(part + r * nc, whole + (r0 + r) * cols + c0, (size_t)nc * 4)) {
                    TEST_FAIL("%s window row %lld differs", t->name, (long long)(r0 + r));
                    break;
                }
        }
        free(whole);
        free(part);
    }
}

TEST(read_part_equals_the_slice_of_the_whole)
{
    static const char *const dirs[] = {"golden/tiny-opt", "golden/tiny-opt-bin",
                                       "golden/tiny-opt-350m-bin"};
    for (size_t d = 0; d < ARRAY_LEN(dirs); d++) {
        struct weights *w = NULL;
        EXPECT_EQ(weights_open(&w, test_data(dirs[d])), 0);
        if (!w) continue;
        expect_windows_match(w);
        weights_close(w);
    }
    struct opt_config cfg;
    EXPECT_EQ(opt_config_dummy(&cfg, "dummy:tiny"), 0);
    struct weights *w = NULL;
    EXPECT_EQ(weights_open_dummy(&w, &cfg, 7), 0);
    expect_windows_match(w);
    /* The shape check still applies to the whole tensor. */
    float v[4];
    EXPECT_EQ(weights_read_f32_part(w, "layers.0.fc1.weight", 2, (int64_t[]){64, 256}, 0, 1,
                                    0, 4, v), ENG_EFORMAT);
    EXPECT_EQ(weights_read_f32_part(w, "layers.9.fc1.weight", 2, (int64_t[]){256, 64}, 0, 1,
                                    0, 4, v), ENG_ENOTFOUND);
    weights_close(w);
}

int main(void)
{
    init_halves();
    RUN(safetensors_reads_fp32_fp16_bf16_under_one_spelling);
    RUN(neox_mask_buffers_are_skipped);
    RUN(read_checks_name_and_shape);
    RUN(safetensors_shards_follow_the_index);
    RUN(shard_index_errors_name_index_shard_and_tensor);
    RUN(folder_without_checkpoint_is_not_found);
    RUN(bad_safetensors_headers);
    RUN(truncated_safetensors);
    RUN(torch_bin_fixture_matches_torch);
    RUN(torch_sharded_bin_fixture_matches_torch);
    RUN(torch_zip64_fixture_matches_torch);
    RUN(torch_v3_untyped_storage_fixture);
    RUN(python_written_safetensors_matches_torch);
    RUN(unsupported_torch_fixtures);
    RUN(golden_bin_and_safetensors_agree);
    RUN(read_part_equals_the_slice_of_the_whole);
    tdir_cleanup();
    return test_done();
}
