/*
 * fuzz_opt.h - the served model the completions targets parse against: OPT's real
 * BPE tokenizer (tests/data/opt-tokenizer), OPT's context length and vocabulary,
 * the server's default KV spec and limits.
 * Thread: the fuzzer's (one).
 */
#ifndef H2O_FUZZ_OPT_H
#define H2O_FUZZ_OPT_H

#include "chat.h"
#include "cmpl.h"

#define FUZZ_OPT_VOCAB 50272

/* The model, loaded on the first call (aborts when the tokenizer cannot load: a
 * fuzz run without it would explore nothing). Lives until the process ends. */
const struct api_model *fuzz_opt_model(void);

/* The same model as a chat endpoint sees it, with Llama 3's real chat template
 * (tests/data/chat_templates/llama3.jinja, through chat_tmpl.h), so hostile messages
 * meet the Jinja renderer too. */
const struct chat_model *fuzz_opt_chat(void);

#endif
