/*
 * api_vllm.c - the endpoints a vLLM server has outside /v1: POST /tokenize, POST
 * /detokenize and GET /version. The bodies are api_tokenize.c's; this file is the
 * HTTP side.
 *
 * Why outside /v1, and without the API key: that is where vLLM serves them, and
 * vLLM's --api-key guards only paths under /v1, so a client (or a proxy's health
 * probe) written for vLLM calls them bare. They read the tokenizer alone, which is
 * loaded before the server listens, so they answer while the model is still loading
 * (or failed to load) and while the server drains: none of them touches the engine.
 * Tokenizing runs on the loop thread, as it does for /v1/completions prompts.
 * Thread: loop.
 */
#include "api_vllm.h"

#include "api_tokenize.h"
#include "reply.h"
#include "srv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The h2oserve version, meson's project version (server/meson.build). */
#ifndef H2O_VERSION
#error "H2O_VERSION must be defined by the build"
#endif

typedef char *(*body_fn)(const char *body, size_t len, const struct api_model *m,
                         size_t *out_len, struct api_error *err);

static void handle_body(struct exch *x, body_fn fn)
{
    struct api_error e = {0};
    size_t len = 0;
    char *out = fn(x->req->body ? x->req->body : "", x->req->body_len, &x->c->s->model, &len, &e);
    if (!out) {
        conn_error(x, &e);
        return;
    }
    conn_respond(x, 200, "application/json", out, len, NULL);
    free(out);
}

static void handle_version(struct exch *x)
{
    /* {"version": "..."}, as vLLM answers; the version is ours, not vLLM's. */
    cJSON *v = cJSON_CreateObject();
    cJSON_AddStringToObject(v, "version", H2O_VERSION);
    reply_json(x, v);
}

bool api_vllm_route(struct exch *x)
{
    const char *p = x->req->path;
    if (strcmp(p, "/tokenize") == 0) {
        if (reply_method_is(x, "POST")) handle_body(x, api_tokenize);
    } else if (strcmp(p, "/detokenize") == 0) {
        if (reply_method_is(x, "POST")) handle_body(x, api_tokenize_detokenize);
    } else if (strcmp(p, "/version") == 0) {
        if (reply_method_is(x, "GET")) handle_version(x);
    } else {
        return false;
    }
    return true;
}
