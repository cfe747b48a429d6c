/*
 * cmpl_resp_chat.c - the chat shape of a response (cmpl_resp_impl.h): OpenAI's
 * chat.completion choices, deltas and logprobs.
 *
 * Decisions a client can see, also in docs/api.md:
 * - A stream's first chunk of a choice has delta {"role": "assistant", "content": ...}
 *   and the later ones {"content": ...}; the chunk that finishes a choice carries its
 *   last text with the finish_reason, as vLLM sends it, and a choice that finishes
 *   with no new text sends an empty delta {}.
 * - logprobs.content lists every generated token, the end-of-turn token included
 *   (it was sampled; its text is ""), each with its top_logprobs alternatives, and
 *   "bytes" the token's raw bytes (which may be part of a UTF-8 character).
 * Thread: the response's.
 */
#include "cmpl_resp_impl.h"

#include "cmpl_resp.h"

#include "json.h"
#include "tokenizer.h"

cJSON *cmpl_resp_chat_choice(const char *text, int64_t index, cJSON *logprobs,
                             enum req_finish f, enum cmpl_resp_chat_part part)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", (double)index);
    cJSON *m = cJSON_AddObjectToObject(c, part == CMPL_CHAT_MESSAGE ? "message" : "delta");
    if (part != CMPL_CHAT_DELTA) cJSON_AddStringToObject(m, "role", "assistant");
    if (part != CMPL_CHAT_DELTA || *text) cJSON_AddStringToObject(m, "content", text);
    cJSON_AddItemToObject(c, "logprobs", logprobs ? logprobs : cJSON_CreateNull());
    const char *fr = cmpl_resp_finish_reason(f);
    cJSON_AddItemToObject(c, "finish_reason",
                          fr ? cJSON_CreateString(fr) : cJSON_CreateNull());
    return c;
}

/* {"token", "logprob", "bytes"} of one id. */
static cJSON *token_object(const struct tokenizer *tok, int32_t id, float logprob)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "token", tokenizer_token_str(tok, id));
    cJSON_AddItemToObject(o, "logprob", json_float(logprob));
    size_t n;
    const unsigned char *b = (const unsigned char *)tokenizer_token_bytes(tok, id, &n);
    cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber(b[i]));
    return o;
}

cJSON *cmpl_resp_chat_logprobs(const struct tokenizer *tok, const struct lp_entry *lp,
                               int32_t n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *content = cJSON_AddArrayToObject(o, "content");
    for (int32_t k = 0; k < n; k++) {
        cJSON *e = token_object(tok, lp[k].token, lp[k].logprob);
        cJSON *tops = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int32_t j = 0; j < lp[k].n_top; j++)
            cJSON_AddItemToArray(
                tops, token_object(tok, lp[k].top_ids[j], lp[k].top_logprobs[j]));
        cJSON_AddItemToArray(content, e);
    }
    cJSON_AddNullToObject(o, "refusal");
    return o;
}
