/*
 * fuzz_opt.c - the served model of the completions targets (fuzz_opt.h).
 */
#include "fuzz_opt.h"

#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FUZZ_OPT_TOKENIZER
#error "FUZZ_OPT_TOKENIZER: the folder with OPT's vocab.json and merges.txt"
#endif

const struct api_model *fuzz_opt_model(void)
{
    static struct api_model m;
    static struct tokenizer *tok;
    if (tok) return &m;
    if (tokenizer_load(&tok, FUZZ_OPT_TOKENIZER "/vocab.json",
                       FUZZ_OPT_TOKENIZER "/merges.txt")) {
        fprintf(stderr, "fuzz: cannot load the tokenizer in %s\n", FUZZ_OPT_TOKENIZER);
        abort();
    }
    m.id = "opt-fuzz";
    m.max_model_len = 2048;
    m.vocab_size = FUZZ_OPT_VOCAB;
    m.tok = tok;
    kv_budget_spec_default(&m.kv_default);
    m.max_prompts = 8;
    m.max_n = 8;
    m.max_seqs = 32;
    return &m;
}

static int toy_render(const void *ctx, const struct chat_message *msgs, int32_t n,
                      bool add_generation_prompt, char **prompt, char **error)
{
    (void)ctx;
    if (n > 0 && strcmp(msgs[0].role, "assistant") == 0) {
        *error = strdup("the conversation must start with system or user");
        return -1;
    }
    size_t len = 0;
    for (int32_t i = 0; i < n; i++)
        len += strlen(msgs[i].role) + strlen(msgs[i].content) + 8;
    char *out = malloc(len + 16), *p = out;
    for (int32_t i = 0; i < n; i++)
        p += sprintf(p, "%s\n%s</s>", msgs[i].role, msgs[i].content);
    strcpy(p, add_generation_prompt ? "assistant\n" : "");
    *prompt = out;
    return 0;
}

const struct chat_model *fuzz_opt_chat(void)
{
    static struct chat_model c;
    c.m = fuzz_opt_model();
    c.render = toy_render;
    return &c;
}
