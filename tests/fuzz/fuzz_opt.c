/*
 * fuzz_opt.c - the served model of the completions targets (fuzz_opt.h).
 */
#include "fuzz_opt.h"

#include "chat_tmpl.h"
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(FUZZ_OPT_TOKENIZER) || !defined(FUZZ_CHAT_TEMPLATE)
#error "FUZZ_OPT_TOKENIZER (OPT's vocab.json and merges.txt), FUZZ_CHAT_TEMPLATE (a .jinja)"
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

const struct chat_model *fuzz_opt_chat(void)
{
    static struct chat_model c;
    static struct chat_tmpl *t;
    if (t) return &c;
    if (chat_tmpl_open(NULL, FUZZ_CHAT_TEMPLATE, fuzz_opt_model()->tok, &t) || !t) {
        fprintf(stderr, "fuzz: cannot load the chat template %s\n", FUZZ_CHAT_TEMPLATE);
        abort();
    }
    c = chat_tmpl_model(t, fuzz_opt_model());
    return &c;
}
