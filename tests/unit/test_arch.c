/*
 * test_arch.c - the model families (engine/model/arch.c) and their config.json
 * (engine/model/opt_config.c): each family's published config parses into the
 * description the forward reads, values this build cannot run are clear load errors,
 * the rotary frequencies are transformers', and the dummy shapes are the real ones.
 */
#include "arch.h"
#include "err.h"
#include "opt_config.h"
#include "test.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmp_dir[] = "/tmp/h2o_test_arch_XXXXXX";

/* Write `json` as tmp_dir/config.json and parse it; returns opt_config_load's code. */
static int load(const char *json, struct opt_config *c)
{
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", tmp_dir);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    fputs(json, f);
    fclose(f);
    return opt_config_load(c, tmp_dir);
}

/* meta-llama/Llama-3.1-8B's config.json (the fields that matter). */
static const char llama31_json[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
    " \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009],"
    " \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"intermediate_size\": 14336,"
    " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"
    " \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": "
    "1.0,"
    " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192,"
    " \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"vocab_size\": 128256}";

TEST(llama31_config)
{
    struct opt_config c;
    EXPECT_EQ(load(llama31_json, &c), 0);
    EXPECT_EQ(c.arch.family, ARCH_LLAMA);
    EXPECT_EQ(c.n_head, 32);
    EXPECT_EQ(c.n_kv_head, 8);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.ffn, 14336);
    EXPECT_EQ(c.eos_id, 128001); /* the first of the list */
    EXPECT_EQ(c.bos_id, 128000);
    EXPECT(!c.tied_lm_head);
    EXPECT_EQ(c.arch.norm, ARCH_NORM_RMSNORM);
    EXPECT(fabsf(c.arch.norm_eps - 1e-5f) < 1e-12f);
    EXPECT_EQ(c.arch.mlp, ARCH_MLP_SWIGLU);
    EXPECT_EQ(c.arch.pos, ARCH_POS_ROTARY);
    EXPECT_EQ(c.arch.rope.dims, 128);
    EXPECT_EQ(c.arch.rope.scaling, ARCH_ROPE_LLAMA3);
    EXPECT_EQ(c.arch.rope.original_max_pos, 8192);
    EXPECT(!c.arch.qkv_bias && !c.arch.o_bias && !c.arch.parallel_residual);
    EXPECT_EQ(c.arch.sliding_window, 0);
}

/* inv_freq of Llama 3.1 8B as transformers 4.46's _compute_llama3_parameters gives
 * them (fp32), and without the scaling (_compute_default_rope_parameters): the high
 * frequencies are kept, the low ones divided by 8, the band between blended. */
TEST(rope_llama3_frequencies_are_transformers)
{
    struct opt_config c;
    EXPECT_EQ(load(llama31_json, &c), 0);
    float f[64];
    arch_rope_inv_freq(&c.arch.rope, f);
    static const struct {
        int i;
        double scaled, plain;
    } want[] = {{0, 1.0, 1.0},
                {20, 0.016560440883040428, 0.016560440883040428},
                {30, 0.0013718936825171113, 0.002131119603291154},
                {40, 3.428102354519069e-05, 0.00027424818836152554},
                {45, 1.2297638932068367e-05, 9.838111145654693e-05},
                {50, 4.411534519022098e-06, 3.529227615217678e-05},
                {63, 3.068925877869333e-07, 2.4551407022954663e-06}};
    for (size_t k = 0; k < ARRAY_LEN(want); k++)
        if (fabs(f[want[k].i] - want[k].scaled) > 1e-6 * want[k].scaled)
            TEST_FAIL("llama3 inv_freq[%d] = %.9g, transformers %.9g", want[k].i,
                      f[want[k].i], want[k].scaled);
    c.arch.rope.scaling = ARCH_ROPE_NONE;
    arch_rope_inv_freq(&c.arch.rope, f);
    for (size_t k = 0; k < ARRAY_LEN(want); k++)
        if (fabs(f[want[k].i] - want[k].plain) > 1e-6 * want[k].plain)
            TEST_FAIL("inv_freq[%d] = %.9g, transformers %.9g", want[k].i, f[want[k].i],
                      want[k].plain);
}

TEST(mistral_qwen2_neox_configs)
{
    struct opt_config c;
    /* mistralai/Mistral-7B-v0.1 */
    EXPECT_EQ(load("{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 4096,"
                   " \"intermediate_size\": 14336, \"max_position_embeddings\": 32768,"
                   " \"num_attention_heads\": 32, \"num_hidden_layers\": 32,"
                   " \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05,"
                   " \"rope_theta\": 10000.0, \"sliding_window\": 4096,"
                   " \"vocab_size\": 32000}",
                   &c),
              0);
    EXPECT_EQ(c.arch.family, ARCH_MISTRAL);
    EXPECT_EQ(c.arch.sliding_window, 4096);
    EXPECT_EQ(c.n_kv_head, 8);
    /* Mistral v0.2+: "sliding_window": null is no window. */
    EXPECT_EQ(load("{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 64,"
                   " \"intermediate_size\": 128, \"max_position_embeddings\": 64,"
                   " \"num_attention_heads\": 4, \"num_hidden_layers\": 1,"
                   " \"sliding_window\": null, \"vocab_size\": 300}",
                   &c),
              0);
    EXPECT_EQ(c.arch.sliding_window, 0);
    EXPECT_EQ(c.n_kv_head, 4); /* num_key_value_heads absent: no GQA */
    /* No sliding_window key at all: MistralConfig's default, 4096. */
    EXPECT_EQ(load("{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 64,"
                   " \"intermediate_size\": 128, \"max_position_embeddings\": 64,"
                   " \"num_attention_heads\": 4, \"num_hidden_layers\": 1,"
                   " \"vocab_size\": 300}",
                   &c),
              0);
    EXPECT_EQ(c.arch.sliding_window, 4096);
    EXPECT_EQ(c.eos_id, 2);
    /* Qwen/Qwen2-0.5B: q/k/v bias, tied, sliding_window present but unused. */
    EXPECT_EQ(load("{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 896,"
                   " \"intermediate_size\": 4864, \"max_position_embeddings\": 131072,"
                   " \"num_attention_heads\": 14, \"num_hidden_layers\": 24,"
                   " \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06,"
                   " \"rope_theta\": 1000000.0, \"sliding_window\": 131072,"
                   " \"use_sliding_window\": false, \"tie_word_embeddings\": true,"
                   " \"vocab_size\": 151936}",
                   &c),
              0);
    EXPECT_EQ(c.arch.family, ARCH_QWEN2);
    EXPECT(c.arch.qkv_bias && !c.arch.o_bias && c.tied_lm_head);
    EXPECT_EQ(c.arch.sliding_window, 0);
    EXPECT_EQ(c.head_dim, 64);
    /* EleutherAI/pythia-160m */
    EXPECT_EQ(load("{\"architectures\": [\"GPTNeoXForCausalLM\"], \"hidden_size\": 768,"
                   " \"intermediate_size\": 3072, \"max_position_embeddings\": 2048,"
                   " \"num_attention_heads\": 12, \"num_hidden_layers\": 12,"
                   " \"rotary_pct\": 0.25, \"rotary_emb_base\": 10000,"
                   " \"use_parallel_residual\": true, \"hidden_act\": \"gelu\","
                   " \"layer_norm_eps\": 1e-05, \"bos_token_id\": 0, \"eos_token_id\": 0,"
                   " \"tie_word_embeddings\": false, \"vocab_size\": 50304}",
                   &c),
              0);
    EXPECT_EQ(c.arch.family, ARCH_GPT_NEOX);
    EXPECT_EQ(c.arch.rope.dims, 16); /* int(64 * 0.25) */
    EXPECT_EQ(c.arch.qkv, ARCH_QKV_FUSED_HEADS);
    EXPECT(c.arch.parallel_residual && c.arch.qkv_bias && c.arch.mlp_bias);
    EXPECT_EQ(c.arch.norm, ARCH_NORM_LAYERNORM);
    EXPECT_EQ(c.arch.act, ARCH_ACT_GELU);
    EXPECT_EQ(c.n_kv_head, 12);
}

/* What this build cannot run is refused at load, naming the field. */
TEST(unsupported_values_are_load_errors)
{
    static const struct {
        const char *json, *needle;
        int code;
    } bad[] = {
        {"{\"architectures\": [\"FalconForCausalLM\"]}", "FalconForCausalLM",
         ENG_EUNSUPPORTED},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64,"
         " \"intermediate_size\": 128, \"max_position_embeddings\": 64,"
         " \"num_attention_heads\": 4, \"num_hidden_layers\": 1, \"vocab_size\": 300,"
         " \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}",
         "yarn", ENG_EUNSUPPORTED},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64,"
         " \"intermediate_size\": 128, \"max_position_embeddings\": 64,"
         " \"num_attention_heads\": 4, \"num_hidden_layers\": 1, \"vocab_size\": 300,"
         " \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}}",
         "dynamic", ENG_EUNSUPPORTED},
        {"{\"architectures\": [\"GPTNeoXForCausalLM\"], \"hidden_size\": 64,"
         " \"intermediate_size\": 128, \"max_position_embeddings\": 64,"
         " \"num_attention_heads\": 4, \"num_hidden_layers\": 1, \"vocab_size\": 300,"
         " \"hidden_act\": \"quick_gelu\"}",
         "quick_gelu", ENG_EUNSUPPORTED},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64,"
         " \"intermediate_size\": 128, \"max_position_embeddings\": 64,"
         " \"num_attention_heads\": 4, \"num_hidden_layers\": 1, \"vocab_size\": 300,"
         " \"hidden_act\": \"gelu\"}",
         "silu", ENG_EUNSUPPORTED},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64,"
         " \"intermediate_size\": 128, \"max_position_embeddings\": 64,"
         " \"num_attention_heads\": 4, \"num_key_value_heads\": 3,"
         " \"num_hidden_layers\": 1, \"vocab_size\": 300}",
         "num_key_value_heads", ENG_EFORMAT},
        {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 64,"
         " \"intermediate_size\": 128, \"max_position_embeddings\": 64,"
         " \"num_attention_heads\": 4, \"num_hidden_layers\": 1, \"vocab_size\": 300,"
         " \"use_sliding_window\": true}",
         "use_sliding_window", ENG_EUNSUPPORTED},
        {"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64,"
         " \"intermediate_size\": 128, \"max_position_embeddings\": 64,"
         " \"num_attention_heads\": 4, \"num_hidden_layers\": 1, \"vocab_size\": 300,"
         " \"mlp_bias\": true}",
         "mlp_bias", ENG_EUNSUPPORTED},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        struct opt_config c;
        int err = load(bad[i].json, &c);
        if (err != bad[i].code || !strstr(err_msg(), bad[i].needle))
            TEST_FAIL("case %zu: error %d \"%s\", want %d naming %s", i, err, err_msg(),
                      bad[i].code, bad[i].needle);
    }
}

TEST(dummy_families_have_real_shapes)
{
    static const struct {
        const char *name;
        enum arch_family fam;
        int layers, hidden, heads, kv_heads, ffn, vocab;
    } sizes[] = {
        {"dummy:llama-3-8b", ARCH_LLAMA, 32, 4096, 32, 8, 14336, 128256},
        {"dummy:llama-2-7b", ARCH_LLAMA, 32, 4096, 32, 32, 11008, 32000},
        {"dummy:qwen2-7b", ARCH_QWEN2, 28, 3584, 28, 4, 18944, 152064},
        {"dummy:gpt-neox-20b", ARCH_GPT_NEOX, 44, 6144, 64, 64, 24576, 50432},
        {"dummy:tinyllama-1.1b", ARCH_LLAMA, 22, 2048, 32, 4, 5632, 32000},
        {"dummy:llama-tiny", ARCH_LLAMA, 2, 128, 4, 2, 256, 512},
    };
    for (size_t i = 0; i < ARRAY_LEN(sizes); i++) {
        struct opt_config c;
        EXPECT_EQ(opt_config_dummy(&c, sizes[i].name), 0);
        EXPECT_EQ(c.arch.family, sizes[i].fam);
        EXPECT_EQ(c.n_layer, sizes[i].layers);
        EXPECT_EQ(c.hidden, sizes[i].hidden);
        EXPECT_EQ(c.n_head, sizes[i].heads);
        EXPECT_EQ(c.n_kv_head, sizes[i].kv_heads);
        EXPECT_EQ(c.ffn, sizes[i].ffn);
        EXPECT_EQ(c.vocab_size, sizes[i].vocab);
    }
    struct opt_config c;
    EXPECT_EQ(opt_config_dummy(&c, "dummy:gpt-neox-20b"), 0);
    EXPECT_EQ(c.arch.rope.dims, 24); /* 96 * 0.25 */
    EXPECT_EQ(opt_config_dummy(&c, "dummy:llama-3-8b"), 0);
    EXPECT_EQ(c.arch.rope.scaling, ARCH_ROPE_LLAMA3);
    EXPECT_EQ(opt_config_dummy(&c, "dummy:opt-125m"), 0);
    EXPECT_EQ(c.arch.family, ARCH_OPT);
    EXPECT_EQ(c.n_kv_head, 12);
}

/* The published parameter counts: Llama 3 8B 8,030,261,248; TinyLlama 1.1B
 * 1,100,048,384; OPT-125m as the OPT count always was (tied head once). */
TEST(parameter_counts)
{
    struct opt_config c;
    EXPECT_EQ(opt_config_dummy(&c, "dummy:llama-3-8b"), 0);
    EXPECT_EQ(opt_config_param_count(&c), 8030261248LL);
    EXPECT_EQ(opt_config_dummy(&c, "dummy:tinyllama-1.1b"), 0);
    EXPECT_EQ(opt_config_param_count(&c), 1100048384LL);
    EXPECT_EQ(opt_config_dummy(&c, "dummy:opt-125m"), 0);
    EXPECT_EQ(opt_config_param_count(&c), 125239296LL);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) abort();
    RUN(llama31_config);
    RUN(rope_llama3_frequencies_are_transformers);
    RUN(mistral_qwen2_neox_configs);
    RUN(unsupported_values_are_load_errors);
    RUN(dummy_families_have_real_shapes);
    RUN(parameter_counts);
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", tmp_dir);
    unlink(path);
    rmdir(tmp_dir);
    return test_done();
}
