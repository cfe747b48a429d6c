/*
 * cmpl_resp.h - a /v1/completions response assembled from engine events, without the
 * network: the non-streaming body, the SSE chunks, usage and the KV report (the
 * request side and the order of the calls are in cmpl.h).
 * Thread: any; a cmpl_resp is used by one thread at a time.
 */
#ifndef H2O_SERVER_CMPL_RESP_H
#define H2O_SERVER_CMPL_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmpl.h"
#include "json.h"
#include "kv_budget.h"
#include "req.h"

struct tokenizer;

/* A response being assembled from engine events. */
struct cmpl_resp;

/*
 * Start the response of request `p` (borrowed: it must outlive the response; so must
 * `tok`, which names tokens for logprobs and decodes token prompts for echo). `id` is
 * the response id ("cmpl-..."; copied), `created` the Unix time in seconds.
 * Owns: the result (cmpl_resp_destroy). Thread: any.
 */
struct cmpl_resp *cmpl_resp_create(const struct cmpl_params *p, const struct tokenizer *tok,
                                   const char *id, int64_t created);

/* The system_fingerprint every object of the response carries (copied; NULL, the
 * default, is JSON null): cfg_fingerprint's. Thread: the response's. */
void cmpl_resp_set_fingerprint(struct cmpl_resp *r, const char *fingerprint);

/* Free a response. NULL is fine. Thread: the response's. */
void cmpl_resp_destroy(struct cmpl_resp *r);

/*
 * Take one engine event of prompt `prompt_index` (the caller maps req ids to prompt
 * indices). Borrows ev; the caller still frees it.
 * Streaming: returns the bytes to write now, "data: {chunk}\n\n", or NULL when this
 * event gives the client nothing yet. A chunk goes out when the event releases text,
 * finishes its sequence, or is the first of its choice with echo (the first chunk of
 * each choice carries the prompt). A token that releases no text yet (half of a UTF-8
 * character, a possible stop-string prefix) sends nothing: its logprobs ride on the
 * next chunk of that choice, so no token is lost and arrays stay in text order.
 * Non-streaming: collects the event and returns NULL.
 * An error event (finish ERROR) ends the prompt's sequences and is remembered for
 * cmpl_resp_error. Events for sequences that already finished, or for an unknown
 * prompt or sequence, are ignored.
 * Owns: the result (caller frees). Thread: the response's.
 */
char *cmpl_resp_event(struct cmpl_resp *r, int32_t prompt_index, const struct req_event *ev,
                      size_t *len);

/* Whether every sequence of every prompt has finished (an error finishes all of its
 * prompt's sequences). Thread: the response's. */
bool cmpl_resp_done(const struct cmpl_resp *r);

/*
 * The first engine error, or NULL. Mapping of the engine codes: ENG_EINVAL and
 * ENG_ENOSPC (a request that can never fit the KV pool) -> 400, ENG_EUNAVAILABLE
 * (loading, stopping) -> 503, anything else -> 500. The HTTP layer then cancels the
 * other prompts and answers with this error (non-streaming), or ends the stream with
 * cmpl_resp_stream_error then cmpl_resp_stream_tail. Valid until the response is
 * destroyed.
 */
const struct api_error *cmpl_resp_error(const struct cmpl_resp *r);

/* Token counts so far: prompt tokens (each prompt once, BOS included) and completion
 * tokens (every generated token, best_of candidates that were not returned included:
 * they were computed). */
void cmpl_resp_usage(const struct cmpl_resp *r, int64_t *prompt_tokens,
                     int64_t *completion_tokens);

/*
 * What the KV policy did so far, as usage.kv_cache reports it: the request's policy;
 * heavy and recent after ratios, clamps and the floor (the largest over the request's
 * prompts: each prompt gets its own budget; 0 for full); evicted_tokens sums, over
 * every sequence, the tokens each layer and head dropped. A prompt whose budget
 * reached prompt + max_tokens evicts nothing, exactly as full would.
 * Thread: the response's.
 */
void cmpl_resp_kv_usage(const struct cmpl_resp *r, struct kv_budget *budget,
                        int64_t *evicted_tokens);

/*
 * The non-streaming body once cmpl_resp_done (and no error): choices in prompt-major
 * order, index = prompt_index * n + j; with best_of > n each prompt returns its n
 * sequences with the highest mean token logprob, best first (ties: the lower
 * sequence). *len (may be NULL) gets the length. Owns: the result (caller frees).
 */
char *cmpl_resp_body(struct cmpl_resp *r, size_t *len);

/*
 * The end of a stream: the usage chunk ({"choices":[],"usage":{...}}) when
 * stream_options.include_usage and the engine did not fail, then "data: [DONE]\n\n".
 * After an engine error the caller writes cmpl_resp_stream_error(cmpl_resp_error(r))
 * first. Owns: the result (caller frees).
 */
char *cmpl_resp_stream_tail(struct cmpl_resp *r, size_t *len);

/* An error sent after the 200 of a stream: "data: {"error":{...}}\n\n". The caller
 * writes "data: [DONE]\n\n" after it. Owns: the result. Thread: any. */
char *cmpl_resp_stream_error(const struct api_error *e, size_t *len);

/* OpenAI's finish_reason for an engine finish: "stop", "length", or NULL (JSON
 * null) while running. CANCELLED gives "length": the text was cut short before its
 * natural end, like a max_tokens cut, and OpenAI's enum has no better word. */
const char *cmpl_resp_finish_reason(enum req_finish f);

#endif
