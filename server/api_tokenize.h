/*
 * api_tokenize.h - vLLM's POST /tokenize and POST /detokenize without the network: a
 * request body in, a response body or an API error out.
 *
 * The contract is vLLM's (vllm/entrypoints/openai/protocol.py: TokenizeCompletionRequest,
 * TokenizeResponse, DetokenizeRequest, DetokenizeResponse), so clients written for a
 * vLLM server work here; where we differ, docs/api.md says so and why:
 *   /tokenize    {"model"?, "prompt", "add_special_tokens"? = true,
 *                 "return_token_strs"? = false}
 *             -> {"count", "max_model_len", "tokens", "token_strs" (null unless asked)}
 *   /detokenize  {"model"?, "tokens": [id, ...]}  ->  {"prompt": text}
 * "model" is optional, as in vLLM; when given it must name the served model (404
 * model_not_found otherwise, as /v1/completions answers). vLLM's chat form of
 * /tokenize ({"messages": [...]}) renders them through the model's chat template
 * (chat_prompt_ids, chat.h); a model without one gets chat_no_template's 400, the
 * same answer as /v1/chat/completions.
 *
 * The responses are written by hand rather than through a cJSON tree: a body at the
 * limit (32 MiB by default) can hold tens of millions of ids, and a cJSON node per id
 * would cost some 80 bytes each.
 * Thread: any (no state); the tokenizer is read-only.
 */
#ifndef H2O_SERVER_API_TOKENIZE_H
#define H2O_SERVER_API_TOKENIZE_H

#include "cmpl.h"
#include "json.h"

#include <stddef.h>

/*
 * POST /tokenize: `body` (len bytes) against the served model m (id, max_model_len,
 * tok). Text is encoded as /v1/completions encodes prompts: with add_special_tokens,
 * BOS (</s> for OPT) first. token_strs spell each token as the vocabulary does
 * (tokenizer_token_name: "ĠHello", as vLLM's convert_ids_to_tokens).
 * Returns the response body (heap, NUL-terminated, caller frees; *out_len its length),
 * or NULL with err set: 400 (bad body or field, the chat form), 404 (another model).
 * Thread: any.
 */
char *api_tokenize(const char *body, size_t len, const struct api_model *m, size_t *out_len,
                   struct api_error *err);

/*
 * POST /detokenize: the ids of "tokens" (each an integer in 0..m->vocab_size-1, the
 * range /v1/completions accepts in a token prompt) back to text. Special tokens are
 * written as their names ("</s>"), as vLLM's decode does; ids past the tokenizer's
 * vocabulary (rows of the model's padded embedding) stand for no text; invalid UTF-8
 * becomes U+FFFD, as in every text the server returns.
 * Returns the response body as api_tokenize does, or NULL with err set (400, 404).
 * Thread: any.
 */
char *api_tokenize_detokenize(const char *body, size_t len, const struct api_model *m,
                              size_t *out_len, struct api_error *err);

#endif
