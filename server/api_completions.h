/*
 * api_completions.h - POST /v1/completions without the network: a request body in,
 * engine requests out; engine events in, response bytes out.
 *
 * The contract is OpenAI's legacy Completions API (REFERENCE.md section 1) plus four
 * extensions: top_k, ignore_eos, kv_cache and kv_min_budget; usage.kv_cache says
 * what the KV policy did. The HTTP layer calls, in order:
 *   cmpl_parse          body -> struct cmpl_params, or an api_error (400 / 404)
 *   cmpl_make_req       one struct req per prompt, submitted to the engine
 *   cmpl_resp_create    the response being assembled
 *   cmpl_resp_event     for every engine event; in streaming mode it returns the SSE
 *                       bytes to write at once
 *   cmpl_resp_done / cmpl_resp_error   whether to finish
 *   cmpl_resp_body      (non-streaming) the JSON body, or
 *   cmpl_resp_stream_tail (streaming) the usage chunk and [DONE], after
 *                       cmpl_resp_stream_error when the engine failed
 * Nothing here touches sockets or libuv, so the unit test drives it all with
 * hand-made events.
 *
 * The prefix is cmpl_ (not api_completions_) for the request's pieces, as the names
 * stay readable at every call site in the HTTP layer.
 * Thread: any; a cmpl_resp is used by one thread at a time.
 */
#ifndef H2O_SERVER_API_COMPLETIONS_H
#define H2O_SERVER_API_COMPLETIONS_H

#include "kv_budget.h"
#include "json.h"
#include "req.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
    int32_t max_prompts;         /* prompts per request */
    int32_t max_n;               /* the largest n (and best_of, with OpenAI's 20) */
    int32_t max_seqs;            /* prompts x max(n, best_of) per request; 0 = no limit */
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
const char *cmpl_finish_reason(enum req_finish f);

#endif
