/*
 * req.h - what a client asks of the engine (a request) and what it hears back
 * (events).
 *
 * A request is one prompt completed n times (n sequences forked after the prompt);
 * the server splits an OpenAI request with several prompts into several requests.
 * Requests and events own every byte they point to, so they can cross threads:
 * the submitter hands a request over whole, and each event is handed to whoever
 * drains the outbox.
 * Thread: any (plain data).
 */
#ifndef H2O_REQ_H
#define H2O_REQ_H

#include "kv_budget.h"
#include "sampler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REQ_MAX_STOPS 4

enum req_priority {
    REQ_PRIO_INTERACTIVE = 0, /* scheduled first */
    REQ_PRIO_BATCH = 1,
};

/* Intrusive singly linked list node (first member of whatever is queued). */
struct req_node {
    struct req_node *next;
};

struct req {
    struct req_node node;
    uint64_t id;                 /* chosen by the submitter, unique among live requests */
    enum req_priority prio;
    char *prompt;                /* text (BOS is added), or NULL and: */
    size_t prompt_len;
    int32_t *prompt_ids;         /* token ids as given */
    int32_t n_prompt_ids;
    int32_t n;                   /* sequences (completions) for this prompt, >= 1 */
    int32_t max_tokens;
    struct sampler_params sp;    /* sp.bias_ids / bias_vals point into bias_* below */
    int32_t *bias_ids;
    float *bias_vals;
    uint64_t seed;               /* sequence i samples with seed + i */
    char *stops[REQ_MAX_STOPS];
    int32_t n_stops;
    bool ignore_eos;
    bool prompt_logprobs;        /* also score the prompt's tokens (echo + logprobs) */
    struct kv_spec kv;
    double t_submit;             /* time_now() when submitted, for queue time */
};

/* A zeroed request with OpenAI's defaults (n 1, max_tokens 16, temperature 1, the
 * given KV spec). Owns: the result (req_free). Thread: any. */
struct req *req_new(uint64_t id, const struct kv_spec *kv);

/* Free a request and everything it owns. NULL is fine. Thread: any. */
void req_free(struct req *r);

enum req_finish {
    REQ_FINISH_NONE = 0,   /* still running */
    REQ_FINISH_STOP,       /* EOS or a stop string */
    REQ_FINISH_LENGTH,     /* max_tokens, or the context length */
    REQ_FINISH_CANCELLED,  /* cancelled by the client or by shutdown */
    REQ_FINISH_ERROR,      /* the request could not run; see error */
};

const char *req_finish_name(enum req_finish f);

/*
 * What one sequence of one request did in one engine step: usually one token and
 * its text delta; on the last event of a sequence, the finish reason. An error
 * event (finish ERROR, seq -1) ends the whole request before any token.
 */
struct req_event {
    struct req_node node;
    uint64_t req_id;
    int32_t seq;                 /* 0..n-1, or -1 for the whole request */
    int32_t token;               /* -1 when this event carries no token */
    float logprob;
    int32_t n_top;
    int32_t top_ids[SAMPLER_MAX_LOGPROBS];
    float top_logprobs[SAMPLER_MAX_LOGPROBS];
    char *text;                  /* text delta (NUL-terminated), may be "" */
    size_t text_len;
    size_t text_offset;          /* offset of this delta in the sequence's text */
    enum req_finish finish;
    int32_t prompt_tokens;       /* usage, on finishing events */
    int32_t completion_tokens;
    int64_t kv_evicted;          /* tokens this sequence evicted (all layers, heads) */
    int64_t kv_evicted_tokens;   /* kv_evicted / (n_layer * n_kv_head): the tokens each
                                    (layer, head) dropped, the same in every head */
    int32_t kv_blocks;           /* KV blocks the sequence holds after this step */
    double queue_s;              /* on a request's first token event: seconds from
                                    t_submit to admission (-1 elsewhere) */
    int32_t prompt_pos;          /* > 0: a prompt-token event (prompt_logprobs): `token`
                                    is prompt token prompt_pos, with its logprob and
                                    top alternatives given the tokens before it;
                                    these come before the request's first generated
                                    token. 0 otherwise. */
    int32_t kv_budget_blocks;    /* ceil(B / block_size), or 0 for the full policy */
    struct kv_budget kv_budget;  /* the budget the request runs with (policy, H, R:
                                    after ratios, clamps and the floor); zero on
                                    error events */
    char *error;                 /* message when finish == REQ_FINISH_ERROR */
    int error_code;              /* ENG_* */
};

/* Free an event. NULL is fine. Thread: any. */
void req_event_free(struct req_event *ev);

#endif
