/*
 * test_opt_config.c - OPT configurations (engine/model/opt_config.c): the built-in
 * dummy sizes and config.json parsing, including each way a config.json can be wrong.
 */
#include "err.h"
#include "opt_config.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmp_dir[] = "/tmp/h2o_test_config_XXXXXX";

/* Write `json` as tmp_dir/config.json. */
static void write_config(const char *json)
{
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", tmp_dir);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    fputs(json, f);
    fclose(f);
}

/* facebook/opt-125m's config.json as published (transformers 4.21). */
static const char opt_125m_json[] =
    "{\"_name_or_path\": \"facebook/opt-125m\", \"_remove_final_layer_norm\": false,"
    " \"activation_dropout\": 0.0, \"activation_function\": \"relu\","
    " \"architectures\": [\"OPTForCausalLM\"], \"attention_dropout\": 0.0, "
    "\"bos_token_id\": 2,"
    " \"do_layer_norm_before\": true, \"dropout\": 0.1, \"eos_token_id\": 2, \"ffn_dim\": "
    "3072,"
    " \"hidden_size\": 768, \"init_std\": 0.02, \"layerdrop\": 0.0,"
    " \"max_position_embeddings\": 2048, \"model_type\": \"opt\", \"num_attention_heads\": "
    "12,"
    " \"num_hidden_layers\": 12, \"pad_token_id\": 1, \"prefix\": \"</s>\","
    " \"torch_dtype\": \"float16\", \"transformers_version\": \"4.21.0.dev0\","
    " \"use_cache\": true, \"vocab_size\": 50272, \"word_embed_proj_dim\": 768}";

TEST(dummy_configs_have_real_shapes)
{
    /* REFERENCE section 5: name, layers, hidden, heads, ffn. */
    static const struct {
        const char *name;
        int layers, hidden, heads, ffn;
    } sizes[] = {
        {"dummy:opt-125m", 12, 768, 12, 3072},   {"dummy:opt-350m", 24, 1024, 16, 4096},
        {"dummy:opt-1.3b", 24, 2048, 32, 8192},  {"dummy:opt-2.7b", 32, 2560, 32, 10240},
        {"dummy:opt-6.7b", 32, 4096, 32, 16384}, {"dummy:opt-13b", 40, 5120, 40, 20480},
        {"dummy:opt-30b", 48, 7168, 56, 28672},  {"dummy:opt-66b", 64, 9216, 72, 36864},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        struct opt_config c;
        EXPECT_EQ(opt_config_dummy(&c, sizes[i].name), 0);
        EXPECT_STR(c.name, sizes[i].name);
        EXPECT_EQ(c.n_layer, sizes[i].layers);
        EXPECT_EQ(c.hidden, sizes[i].hidden);
        EXPECT_EQ(c.n_head, sizes[i].heads);
        EXPECT_EQ(c.ffn, sizes[i].ffn);
        EXPECT_EQ(c.head_dim * c.n_head, c.hidden);
        EXPECT_EQ(c.vocab_size, 50272);
        EXPECT_EQ(c.max_pos, 2048);
        EXPECT(c.tied_lm_head);
        EXPECT_EQ(c.bos_id, 2);
        EXPECT_EQ(c.eos_id, 2);
        EXPECT_EQ(c.pad_id, 1);
        int is_350m = strcmp(sizes[i].name, "dummy:opt-350m") == 0;
        EXPECT_EQ(c.word_embed_proj_dim, is_350m ? 512 : c.hidden);
        EXPECT_EQ(c.ln_before, !is_350m);
    }
    struct opt_config c;
    opt_config_dummy(&c, "dummy:opt-6.7b");
    EXPECT_EQ(c.head_dim, 128); /* 128 from 6.7B up */
}

TEST(dummy_tiny_fits_the_byte_tokenizer)
{
    struct opt_config c;
    EXPECT_EQ(opt_config_dummy(&c, "dummy:tiny"), 0);
    EXPECT_EQ(c.n_layer, 2);
    EXPECT_EQ(c.hidden, 64);
    EXPECT_EQ(c.n_head, 4);
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.ffn, 256);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT(c.vocab_size >= 260);
    EXPECT_EQ(c.max_pos, 2048);
    EXPECT_EQ(c.word_embed_proj_dim, 64);
    EXPECT(c.ln_before);
}

TEST(unknown_dummy_is_not_found)
{
    struct opt_config c;
    EXPECT_EQ(opt_config_dummy(&c, "dummy:opt-7b"), ENG_ENOTFOUND);
    EXPECT(strstr(err_msg(), "dummy:opt-7b"));
    EXPECT_EQ(opt_config_dummy(&c, "opt-125m"), ENG_ENOTFOUND);
}

TEST(hf_config_json_loads)
{
    write_config(opt_125m_json);
    struct opt_config c;
    EXPECT_EQ(opt_config_load(&c, tmp_dir), 0);
    EXPECT_STR(c.name, strrchr(tmp_dir, '/') + 1);
    EXPECT_EQ(c.hidden, 768);
    EXPECT_EQ(c.n_layer, 12);
    EXPECT_EQ(c.n_head, 12);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.ffn, 3072);
    EXPECT_EQ(c.vocab_size, 50272);
    EXPECT_EQ(c.max_pos, 2048);
    EXPECT_EQ(c.word_embed_proj_dim, 768);
    EXPECT(c.ln_before);
    EXPECT(c.tied_lm_head);
    EXPECT_EQ(c.bos_id, 2);
    EXPECT_EQ(c.eos_id, 2);
    EXPECT_EQ(c.pad_id, 1);

    /* A trailing slash does not change the name. */
    char dir[300];
    snprintf(dir, sizeof dir, "%s/", tmp_dir);
    EXPECT_EQ(opt_config_load(&c, dir), 0);
    EXPECT_STR(c.name, strrchr(tmp_dir, '/') + 1);

    /* From inside the folder, "." still names it. */
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd) || chdir(tmp_dir) != 0) abort();
    EXPECT_EQ(opt_config_load(&c, "."), 0);
    EXPECT_STR(c.name, strrchr(tmp_dir, '/') + 1);
    if (chdir(cwd) != 0) abort();
}

TEST(optional_fields_take_opt_defaults)
{
    /* OPT-350m's quirks plus the minimum: every optional field absent or null. */
    write_config(
        "{\"hidden_size\": 1024, \"num_hidden_layers\": 24, \"num_attention_heads\": 16,"
        " \"ffn_dim\": 4096, \"vocab_size\": 50272, \"max_position_embeddings\": 2048,"
        " \"word_embed_proj_dim\": 512, \"do_layer_norm_before\": false,"
        " \"pad_token_id\": null}");
    struct opt_config c;
    EXPECT_EQ(opt_config_load(&c, tmp_dir), 0);
    EXPECT_EQ(c.word_embed_proj_dim, 512);
    EXPECT(!c.ln_before);
    EXPECT(c.tied_lm_head);
    EXPECT_EQ(c.bos_id, 2);
    EXPECT_EQ(c.eos_id, 2);
    EXPECT_EQ(c.pad_id, 1);

    write_config(
        "{\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
        " \"ffn_dim\": 256, \"vocab_size\": 300, \"max_position_embeddings\": 100,"
        " \"tie_word_embeddings\": false, \"bos_token_id\": 0, \"eos_token_id\": 299}");
    EXPECT_EQ(opt_config_load(&c, tmp_dir), 0);
    EXPECT_EQ(c.word_embed_proj_dim, 64);
    EXPECT(c.ln_before);
    EXPECT(!c.tied_lm_head);
    EXPECT_EQ(c.bos_id, 0);
    EXPECT_EQ(c.eos_id, 299);
}

TEST(missing_config_is_an_io_error)
{
    struct opt_config c;
    EXPECT_EQ(opt_config_load(&c, "/nonexistent/h2o-model"), ENG_EIO);
    EXPECT(strstr(err_msg(), "/nonexistent/h2o-model/config.json"));
}

/* Replace `field`'s value in the opt-125m config by `value` ("" deletes the field),
 * load it and check the code and that the message names the file and `field`. */
static void expect_bad(const char *field, const char *value, int code, int line)
{
    char json[4096], key[128];
    snprintf(key, sizeof key, "\"%s\": ", field);
    const char *at = strstr(opt_125m_json, key);
    if (!at) abort();
    const char *end = at + strlen(key);
    while (*end != ',' && *end != '}')
        end++;
    if (*value)
        snprintf(json, sizeof json, "%.*s%s%s%s", (int)(at - opt_125m_json), opt_125m_json,
                 key, value, end);
    else
        snprintf(json, sizeof json, "%.*s\"unused\": 0%s", (int)(at - opt_125m_json),
                 opt_125m_json, end);
    write_config(json);
    struct opt_config c;
    int err = opt_config_load(&c, tmp_dir);
    if (err != code || !strstr(err_msg(), "config.json") || !strstr(err_msg(), field))
        TEST_FAIL("line %d: %s = %s gave %s: %s", line, field, value, err_name(err),
                  err_msg());
}

#define EXPECT_BAD(field, value, code) expect_bad(field, value, code, __LINE__)

TEST(each_config_error_names_the_field)
{
    EXPECT_BAD("hidden_size", "", ENG_EFORMAT);        /* missing */
    EXPECT_BAD("hidden_size", "\"768\"", ENG_EFORMAT); /* wrong type */
    EXPECT_BAD("hidden_size", "768.5", ENG_EFORMAT);   /* not an integer */
    EXPECT_BAD("hidden_size", "0", ENG_EFORMAT);       /* non-positive */
    EXPECT_BAD("hidden_size", "-768", ENG_EFORMAT);
    EXPECT_BAD("hidden_size", "770", ENG_EFORMAT);  /* not divisible by 12 heads */
    EXPECT_BAD("hidden_size", "1e30", ENG_EFORMAT); /* absurd */
    EXPECT_BAD("num_hidden_layers", "0", ENG_EFORMAT);
    EXPECT_BAD("num_attention_heads", "null", ENG_EFORMAT); /* null required field */
    EXPECT_BAD("ffn_dim", "[3072]", ENG_EFORMAT);
    EXPECT_BAD("vocab_size", "-1", ENG_EFORMAT);
    EXPECT_BAD("max_position_embeddings", "0", ENG_EFORMAT);
    EXPECT_BAD("word_embed_proj_dim", "0", ENG_EFORMAT);
    EXPECT_BAD("do_layer_norm_before", "1", ENG_EFORMAT); /* bool, not int */
    EXPECT_BAD("eos_token_id", "50272", ENG_EFORMAT);     /* outside the vocabulary */
    EXPECT_BAD("pad_token_id", "\"<pad>\"", ENG_EFORMAT);
    EXPECT_BAD("activation_function", "\"gelu\"", ENG_EUNSUPPORTED);
    EXPECT_BAD("activation_function", "7", ENG_EFORMAT);
    EXPECT_BAD("model_type", "\"gpt2\"", ENG_EUNSUPPORTED);
}

TEST(bad_json_is_a_format_error)
{
    struct opt_config c;
    write_config("{\"hidden_size\": 768,");
    EXPECT_EQ(opt_config_load(&c, tmp_dir), ENG_EFORMAT);
    EXPECT(strstr(err_msg(), "config.json"));
    EXPECT(strstr(err_msg(), "JSON"));
    write_config("[768, 12]");
    EXPECT_EQ(opt_config_load(&c, tmp_dir), ENG_EFORMAT);
    EXPECT(strstr(err_msg(), "config.json"));
    write_config("");
    EXPECT_EQ(opt_config_load(&c, tmp_dir), ENG_EFORMAT);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(dummy_configs_have_real_shapes);
    RUN(dummy_tiny_fits_the_byte_tokenizer);
    RUN(unknown_dummy_is_not_found);
    RUN(hf_config_json_loads);
    RUN(optional_fields_take_opt_defaults);
    RUN(missing_config_is_an_io_error);
    RUN(each_config_error_names_the_field);
    RUN(bad_json_is_a_format_error);
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", tmp_dir);
    unlink(path);
    rmdir(tmp_dir);
    return test_done();
}
