/*
 * req.c - requests and events (see req.h).
 */
#include "req.h"

#include "util.h"

#include <stdlib.h>

struct req *req_new(uint64_t id, const struct kv_spec *kv)
{
    struct req *r = xcalloc(1, sizeof *r);
    r->id = id;
    r->n = 1;
    r->max_tokens = 16;
    sampler_params_default(&r->sp);
    r->kv = *kv;
    return r;
}

void req_free(struct req *r)
{
    if (!r) return;
    free(r->prompt);
    free(r->prompt_ids);
    free(r->bias_ids);
    free(r->bias_vals);
    for (int32_t i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r);
}

const char *req_finish_name(enum req_finish f)
{
    switch (f) {
    case REQ_FINISH_STOP: return "stop";
    case REQ_FINISH_LENGTH: return "length";
    case REQ_FINISH_CANCELLED: return "cancelled";
    case REQ_FINISH_ERROR: return "error";
    default: return "none";
    }
}

void req_event_free(struct req_event *ev)
{
    if (!ev) return;
    free(ev->text);
    free(ev->error);
    free(ev);
}
