/*
 * chat_tmpl.h - the served model's chat template for chat.h: found (--chat-template,
 * else the model folder's chat_template.jinja or tokenizer_config.json), compiled once
 * (engine/text/chat_template.h), and rendered as the chat_render_fn that the server
 * and `h2oserve run-batch` give chat_parse.
 * Thread: open and free on one thread; render from any (a compiled template is
 * read-only).
 */
#ifndef H2O_SERVER_CHAT_TMPL_H
#define H2O_SERVER_CHAT_TMPL_H

#include "chat.h"

struct chat_tmpl;
struct tokenizer;

/*
 * Find and compile the chat template of a model: the Jinja file `file` when not NULL
 * (--chat-template), else the template of model folder `model_dir` (NULL for the
 * built-in and dummy models, which have none). bos_token / eos_token are
 * tokenizer_config.json's strings, else the tokenizer's BOS and EOS names.
 * Returns 0 with *out, NULL when the model has no template (chat requests then get
 * the no-template 400), or an engine error with err_msg naming the file: a
 * --chat-template file that cannot be read or compiled, or a model folder whose
 * tokenizer_config.json cannot be read. A folder's template that this Jinja subset
 * cannot compile is not an error (completions still serve): it is logged as a warning
 * and every chat request gets a 400 with the reason.
 * Owns: *out (chat_tmpl_free); tok is borrowed for the call. Thread: any.
 */
int chat_tmpl_open(const char *model_dir, const char *file, const struct tokenizer *tok,
                   struct chat_tmpl **out);

/*
 * chat_tmpl_open for model `name` as --model gives it: a folder (or "default",
 * resolved as the loader resolves it) is read for its template, a dummy model has
 * none. Returns as chat_tmpl_open. Thread: any.
 */
int chat_tmpl_open_model(const char *name, const char *file, const struct tokenizer *tok,
                         struct chat_tmpl **out);

/* Free t; NULL is fine. Thread: the owner's, once no render uses it. */
void chat_tmpl_free(struct chat_tmpl *t);

/* The chat endpoint's view of model m with template t (NULL: none). Both are
 * borrowed by the result and must outlive it. Thread: any. */
struct chat_model chat_tmpl_model(const struct chat_tmpl *t, const struct api_model *m);

#endif
