/*
 * cmpl.h - POST /v1/completions without the network, the request side: a request
 * body in, engine requests out. The response side (engine events in, response bytes
 * out) is cmpl_resp.h; the glue between an exchange and the engine is cmpl_route.h.
 *
 * The contract is OpenAI's legacy Completions API (REFERENCE.md section 1) plus four
 * extensions: top_k, ignore_eos, kv_cache and kv_min_budget; usage.kv_cache says
 * what the KV policy did. The HTTP layer calls, in order:
 *   cmpl_parse          body -> struct cmpl_params, or an api_error (400 / 404)
 *   cmpl_make_req       one struct req per prompt, submitted to the engine
 *   cmpl_resp_create    the response being assembled (cmpl_resp.h)
 *   cmpl_resp_event     for every engine event; in streaming mode it returns the SSE
 *                       bytes to write at once
 *   cmpl_resp_done / cmpl_resp_error   whether to finish
 *   cmpl_resp_body      (non-streaming) the JSON body, or
 *   cmpl_resp_stream_tail (streaming) the usage chunk and [DONE], after
 *                       cmpl_resp_stream_error when the engine failed
 * Nothing here touches sockets or libuv, so the unit tests drive it all with
 * hand-made events.
 * Thread: any.
 */
#ifndef H2O_SERVER_CMPL_H
#define H2O_SERVER_CMPL_H

#include "kv_budget.h"
#include "json.h"
#include "req.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct chat_model;
struct tokenizer;

/* OpenAI's limits. */
#define CMPL_MAX_BEST_OF 20
#define CMPL_MAX_LOGPROBS 5 /* = SAMPLER_MAX_LOGPROBS */
/* A stop string longer than this is refused: the detokenizer holds back text that
 * may begin a stop string, so a huge one would delay the stream for no use. */
#define CMPL_MAX_STOP_BYTES 1024

/* What the parser needs to know about the served model and the server's limits.
 * Borrowed: everything must outlive the calls that take it. */
struct api_model {
    const char *id;              /* the name clients pass as "model" */
    int32_t max_model_len;       /* context length: prompt + max_tokens must fit */
    int32_t vocab_size;          /* valid token ids are 0..vocab_size-1 */
    const struct tokenizer *tok; /* counts the tokens of text prompts */
    struct kv_spec kv_default;   /* the KV policy of requests that name none */
    /* The KV pool's storage dtype ("bf16", "int8", ...: dtype_name), set per server
     * (--kv-cache-dtype); a request's kv_cache.dtype may only repeat it or say
     * "auto". NULL: unknown, so only "auto" is accepted. */
    const char *kv_dtype;
    int32_t max_prompts;         /* prompts per request */
    int32_t max_n;               /* the largest n (and best_of, with OpenAI's 20) */
    int32_t max_seqs;            /* prompts x max(n, best_of) per request; 0 = no limit */
    const struct chat_model *chat; /* the chat endpoint's view (chat.h), for /tokenize's
                                      messages; NULL: the model cannot chat */
};

/* One prompt. Text prompts keep their text (for echo) and get ids too: the tokens
 * the engine will see, BOS first, exactly as the engine would tokenize them. */
struct cmpl_prompt {
    char *text; /* the prompt as given, or NULL for a token prompt */
    size_t text_len;
    int32_t *ids;  /* [n_ids] token ids (BOS included for text prompts) */
    int32_t n_ids; /* >= 1 */
};

/* A parsed request: every field of REFERENCE section 1, defaults filled in. */
struct cmpl_params {
    char *model;
    struct cmpl_prompt *prompts; /* [n_prompts], prompt-major order of the choices */
    int32_t n_prompts;
    int32_t max_tokens; /* default 16 */
    float temperature;  /* 0..2, default 1 */
    float top_p;        /* 0..1, default 1 */
    int32_t top_k;      /* extension; 0 = off (-1 is accepted as off) */
    int32_t n;          /* choices per prompt, 1..max_n, default 1 */
    int32_t best_of;    /* sequences generated per prompt (>= n), default n */
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    int32_t logprobs;   /* 0..5, or -1 for null (no logprobs) */
    bool echo;
    char *stops[REQ_MAX_STOPS]; /* non-empty strings */
    int32_t n_stops;
    float presence_penalty;  /* -2..2 */
    float frequency_penalty; /* -2..2 */
    int32_t *bias_ids;       /* [n_bias] logit_bias token ids, no duplicates */
    float *bias_vals;        /* [n_bias] -100..100 */
    int32_t n_bias;
    bool has_seed;
    int64_t seed;
    char *user;        /* accepted and kept for logs; NULL when absent */
    bool ignore_eos;   /* extension */
    struct kv_spec kv; /* kv_cache and kv_min_budget (extensions), else the
                          server's default */
    bool chat;         /* answer in the chat shape (POST /v1/chat/completions:
                          chat.completion objects); set by the chat parser */
};

/*
 * Parse and validate a request body against model `m`. Every optional field may be
 * null, meaning its default. Unknown fields are ignored, as OpenAI's own server does,
 * so that clients sending newer fields keep working; the kv_cache extension object
 * is ours and is strict about its keys instead.
 * Returns 0 with *out filled (free it with cmpl_params_free), or -1 with *out zeroed
 * and *err set: 400 invalid_request_error naming the param (bad JSON, bad types,
 * ranges, unsupported suffix, context_length_exceeded); 404 code model_not_found
 * when model is not m->id. Text prompts are tokenized here (linear in their size).
 * Owns: nothing of body or m. Thread: any.
 */
int cmpl_parse(const char *body, size_t len, const struct api_model *m,
               struct cmpl_params *out, struct api_error *err);

/*
 * cmpl_parse for an object already parsed by json_parse_checked (a Batch line's
 * "body", batch_line.h): the same validation, without printing the body and parsing it
 * again. Returns and owns as cmpl_parse; root stays the caller's. Thread: any.
 */
int cmpl_parse_json(const cJSON *root, const struct api_model *m, struct cmpl_params *out,
                    struct api_error *err);

/* Free what *p owns and zero it. A zeroed struct is fine. Thread: any. */
void cmpl_params_free(struct cmpl_params *p);

/* Sequences the engine generates per prompt: best_of (n when best_of <= n). */
int32_t cmpl_params_seqs(const struct cmpl_params *p);

/*
 * The engine request for prompt `prompt_index`: n = cmpl_params_seqs(p) sequences,
 * the prompt's token ids, max_tokens, sampling settings (logprobs as n_logprobs; with
 * best_of > n at least 0, so each token's logprob is computed for the ranking), logit
 * bias, stop strings, ignore_eos, the KV spec, interactive priority. The seed is the
 * request's, or `seed` when it gave none (the caller draws a random one, once per
 * HTTP request, so that the prompts of one request differ only by their text).
 * Owns: the result (req_free, or hand it to the engine); copies everything it needs
 * from p. Thread: any.
 */
struct req *cmpl_make_req(const struct cmpl_params *p, int32_t prompt_index, uint64_t id,
                          uint64_t seed);

#endif
