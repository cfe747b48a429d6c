/*
 * chat.h - POST /v1/chat/completions without the network, the request side: a chat
 * body in, the same struct cmpl_params a completions request gives (with .chat set,
 * so the response takes the chat shape), or an api_error.
 *
 * The messages become one prompt through the model's chat template (a render
 * function the caller supplies: the template engine is not this module's), the
 * prompt becomes token ids with special tokens parsed (the template writes them as
 * text, "<|eot_id|>", and bos_token itself) and no BOS added, and every sampling
 * field is checked by cmpl_parse_json exactly as /v1/completions checks it. The
 * contract is OpenAI's Chat Completions API; docs/api.md lists the fields and what
 * is refused (tools, images, audio, JSON modes).
 * Thread: any.
 */
#ifndef H2O_SERVER_CHAT_H
#define H2O_SERVER_CHAT_H

#include "api_error.h"
#include "chat_template.h"
#include "cmpl.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Messages per request: far beyond any conversation, bounded for a hostile body. */
#define CHAT_MAX_MESSAGES 4096

/* A message reaches the template as a struct chat_message (chat_template.h): role
 * "system", "user" or "assistant" ("developer" reads as "system"), content the text
 * (parts joined by "\n"), valid UTF-8 without NUL. */

/*
 * Render messages into the prompt text. add_generation_prompt: end with the
 * assistant's header, so the model writes the next turn. Returns 0 with *prompt (heap,
 * caller frees), or -1 with *error (heap, caller frees; one line, e.g. the template's
 * raise_exception message).
 */
typedef int (*chat_render_fn)(const void *ctx, const struct chat_message *msgs, int32_t n,
                              bool add_generation_prompt, char **prompt, char **error);

/* The served model as a chat endpoint sees it; borrowed, as struct api_model. */
struct chat_model {
    const struct api_model *m;
    chat_render_fn render; /* NULL: the model has no chat template (400) */
    const void *ctx;
};

/*
 * Parse and check a chat body against cm, render and tokenize its messages.
 * Returns 0 with *out filled (cmpl_params_free; one prompt, out->chat true), or -1
 * with *out zeroed and *err set: 400 naming the param (messages[2].content, tools,
 * top_logprobs, ...), 404 model_not_found, 400 "no chat template" when cm->render is
 * NULL, 400 with the template's own message when it refuses the conversation.
 * Owns: nothing of body or cm. Thread: any.
 */
int chat_parse(const char *body, size_t len, const struct chat_model *cm,
               struct cmpl_params *out, struct api_error *err);

/*
 * Set err to the 400 a chat request gets from a model without a chat template,
 * worded like vLLM's: shared by /v1/chat/completions and the chat form of /tokenize.
 * Returns -1. Thread: any.
 */
int chat_no_template(struct api_error *err, const char *model_id);

/*
 * The token ids of root's "messages" (with its add_generation_prompt, default true)
 * through cm's template: the prompt chat_parse would run, also what /tokenize gives
 * for a chat. Returns 0 with *ids (heap, caller frees) and *n_ids >= 1, or -1 with
 * *err set as chat_parse sets it for the messages and the template. Thread: any.
 */
int chat_prompt_ids(const cJSON *root, const struct chat_model *cm, int32_t **ids,
                    int32_t *n_ids, struct api_error *err);

/* chat_parse for an object already parsed by json_parse_checked (a Batch line's
 * body). Returns and owns as chat_parse; root stays the caller's. Thread: any. */
int chat_parse_json(const cJSON *root, const struct chat_model *cm, struct cmpl_params *out,
                    struct api_error *err);

/*
 * A Batch line's body by its endpoint (batch_line_parse's *chat): chat_parse_json
 * against cm, else cmpl_parse_json against cm->m. Returns and owns as chat_parse.
 * Thread: any.
 */
int chat_parse_batch_body(const cJSON *body, bool chat, const struct chat_model *cm,
                          struct cmpl_params *out, struct api_error *err);

#endif
