/*
 * chat_template.h - a model's chat template: read it from the model folder, compile it
 * once, render a conversation into the prompt text, as transformers'
 * apply_chat_template(messages, tokenize=False) does.
 *
 * The template language is the Jinja subset of jinja.h (docs/chat-templates.md). The
 * rendered text still holds the special tokens as text (<|eot_id|>, <s>): encode it with
 * TOKENIZER_ENCODE_SPECIAL and without adding a BOS, since the template writes its own.
 * Thread: a compiled template is read-only; render it from any thread.
 */
#ifndef H2O_CHAT_TEMPLATE_H
#define H2O_CHAT_TEMPLATE_H

#include "jinja.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;
struct chat_template;

/* What a model folder says about its template (chat_template_read_dir). */
struct chat_template_src {
    char *text;      /* the Jinja source */
    char *origin;    /* "chat_template.jinja" or "tokenizer_config.json" */
    char *bos_token; /* tokenizer_config.json's bos_token / eos_token strings, or NULL */
    char *eos_token;
};

/*
 * Read the chat template of model folder `dir`: the file chat_template.jinja when there
 * is one (transformers lets it override the config), else tokenizer_config.json's
 * "chat_template": a string, or a list of {"name", "template"} where the one named
 * "default" is used. Also reads bos_token / eos_token (a string or {"content": ...}).
 * Returns 0 with *out filled (release with chat_template_src_clear), ENG_ENOTFOUND when
 * the folder has no template (a model without one: chat requests are refused), or
 * ENG_EIO / ENG_EFORMAT with *err malloc'd naming the file (caller frees).
 * Thread: any.
 */
int chat_template_read_dir(const char *dir, struct chat_template_src *out, char **err);

/* Free what chat_template_read_dir filled and zero it. Thread: any. */
void chat_template_src_clear(struct chat_template_src *src);

/*
 * Compile a template (NUL-terminated UTF-8). Returns 0 with *out owned by the caller
 * (chat_template_free), or ENG_EFORMAT / ENG_EUNSUPPORTED with *err malloc'd, "line L,
 * column C: ..." naming the construct (caller frees). Thread: any.
 */
int chat_template_compile(const char *src, struct chat_template **out, char **err);

/* Free a compiled template; NULL is fine. Thread: any, once no render uses it. */
void chat_template_free(struct chat_template *t);

struct chat_message {
    const char *role;    /* "system", "user", "assistant", ... */
    const char *content; /* UTF-8 text */
};

struct chat_render_opts {
    const char *bos_token; /* NULL: the variable is undefined, as for a tokenizer without */
    const char *eos_token;
    bool add_generation_prompt;
    int64_t now;                /* strftime_now's clock (seconds since the epoch); 0: now */
    const struct cJSON *extra;  /* NULL or an object: more variables (tools, date_string) */
    struct jinja_limits limits; /* zeros: jinja.h's defaults */
};

/*
 * Render `n` messages with `o` (NULL: no tokens, no generation prompt). `tools` and
 * `documents` are none unless `extra` sets them, as transformers passes them.
 * Returns 0 with *out (malloc'd, NUL-terminated, *len bytes; caller frees), or, with
 * *err malloc'd (caller frees): ENG_EINVAL when the template refuses the conversation
 * (raise_exception: *err is its message, e.g. "Conversation roles must alternate
 * user/assistant/user/assistant/...") or fails on it, ENG_EUNSUPPORTED for a construct
 * outside the subset met at render time, ENG_ENOSPC when a limit was reached.
 * Thread: any.
 */
int chat_template_render(const struct chat_template *t, const struct chat_message *msgs,
                         int n, const struct chat_render_opts *o, char **out, size_t *len,
                         char **err);

/*
 * The same with the messages as a JSON array of objects, as a client sent them (content
 * parts, tool_calls and names reach the template as they are). Thread: any.
 */
int chat_template_render_json(const struct chat_template *t, const struct cJSON *messages,
                              const struct chat_render_opts *o, char **out, size_t *len,
                              char **err);

#endif
