/*
 * cmpl_resp_impl.h - what cmpl_resp.c shares with cmpl_resp_chat.c, which writes
 * the chat shape of a response (POST /v1/chat/completions): the same events, the same
 * sequences and usage, other JSON. Internal to the response module.
 * Thread: the response's.
 */
#ifndef H2O_SERVER_CMPL_RESP_IMPL_H
#define H2O_SERVER_CMPL_RESP_IMPL_H

#include "cmpl.h"
#include "req.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

struct tokenizer;

/* One generated token as logprobs reports it. */
struct lp_entry {
    int32_t token;
    float logprob;
    int32_t n_top;
    int32_t top_ids[CMPL_MAX_LOGPROBS];
    float top_logprobs[CMPL_MAX_LOGPROBS];
    int64_t offset; /* characters of generated text before this token's text */
};

/* Which chat choice object: the whole message (a body), or a stream's delta (the
 * first of a choice carries the role). */
enum cmpl_resp_chat_part { CMPL_CHAT_MESSAGE, CMPL_CHAT_FIRST_DELTA, CMPL_CHAT_DELTA };

/*
 * A chat choice: {"index", "message": {"role": "assistant", "content"}} or
 * {"index", "delta": {...}}, then "logprobs" (taken; NULL -> null) and
 * "finish_reason". Returns a new object (the caller adds it to its choices).
 */
cJSON *cmpl_resp_chat_choice(const char *text, int64_t index, cJSON *logprobs,
                             enum req_finish f, enum cmpl_resp_chat_part part);

/*
 * The chat logprobs object of entries lp[0..n): {"content": [{"token", "logprob",
 * "bytes", "top_logprobs": [...]}...], "refusal": null}, with each entry's n_top
 * alternatives (OpenAI's top_logprobs) in order. Returns a new object.
 */
cJSON *cmpl_resp_chat_logprobs(const struct tokenizer *tok, const struct lp_entry *lp,
                               int32_t n);

#endif
