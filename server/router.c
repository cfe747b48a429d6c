/*
 * router.c - what each request gets: authentication, CORS preflights, and the
 * route to its handler (api_admin.c, api_vllm.c, api_files.c, api_batches.c,
 * cmpl_route.c for completions and chat).
 *
 * Owns: nothing beyond one request. The order of the checks is the contract:
 * OPTIONS (with CORS on), then the paths that need no API key (/health, /metrics,
 * vLLM's /tokenize, /detokenize and /version), then the key for all of /v1.
 * Thread: loop.
 */
#include "router.h"

#include "api_admin.h"
#include "api_batches.h"
#include "api_files.h"
#include "api_vllm.h"
#include "cmpl_route.h"
#include "reply.h"
#include "srv.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Constant-time string comparison: the API key check must not leak, through its
 * timing, how many leading characters a guess got right. */
static bool secret_equal(const char *a, size_t na, const char *b, size_t nb)
{
    unsigned char diff = (unsigned char)(na != nb);
    for (size_t i = 0; i < na; i++) diff |= (unsigned char)(a[i] ^ b[i % (nb ? nb : 1)]);
    return diff == 0;
}

static bool authorized(const struct exch *x)
{
    const char *key = x->c->s->cfg->api_key;
    if (!key || !*key) return true;
    const char *h = http_request_header(x->req, "authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    const char *tok = h + 7;
    return secret_equal(tok, strlen(tok), key, strlen(key));
}

/* Whether `v` is a list of header names ("x-stainless-os, Content-Type"): tokens
 * (RFC 9110 5.6.2), commas and spaces, so that echoing it back can never inject
 * anything into the response head. */
static bool header_name_list(const char *v)
{
    if (!*v || strlen(v) > 2048) return false;
    for (const unsigned char *c = (const unsigned char *)v; *c; c++)
        if (!(isalnum(*c) || strchr("!#$%&'*+-.^_`|~, ", *c))) return false;
    return true;
}

/* A CORS preflight: the methods the API uses, and the request headers the browser
 * asks for (Access-Control-Request-Headers), whatever they are, as vLLM's
 * allow_headers=["*"] does: client libraries send their own (the openai-node
 * client's x-stainless-*), and the API key check does not depend on any of them. */
static void cors_preflight(struct exch *x)
{
    const char *want = http_request_header(x->req, "access-control-request-headers");
    char extra[2300];
    snprintf(extra, sizeof extra,
             "Access-Control-Allow-Methods: GET, POST, DELETE, OPTIONS\r\n"
             "Access-Control-Allow-Headers: %s\r\n"
             "Access-Control-Max-Age: 86400\r\n",
             want && header_name_list(want) ? want : "Authorization, Content-Type");
    conn_respond(x, 204, "text/plain", "", 0, extra);
}

void router_dispatch(struct exch *x)
{
    struct srv *s = x->c->s;
    const struct http_request *r = x->req;
    s->m.requests_total++;
    /* HEAD is GET without the body (RFC 9110 9.3.2): routed as GET, and the
     * connection writes the head alone. Rewritten in place ("HEAD" has room). */
    if (strcmp(r->method, "HEAD") == 0) {
        x->head_only = true;
        memcpy(x->req->method, "GET", 4);
    }
    const bool get = strcmp(r->method, "GET") == 0, post = strcmp(r->method, "POST") == 0;
    if (strcmp(r->method, "OPTIONS") == 0 && s->cfg->cors_allow_origin) {
        cors_preflight(x);
        return;
    }
    const char *p = r->path;
    if (strcmp(p, "/health") == 0) {
        if (!get) reply_error(x, 405, NULL, "Method %s not allowed here", r->method);
        else api_admin_health(x);
        return;
    }
    if (strcmp(p, "/metrics") == 0) {
        if (!get) reply_error(x, 405, NULL, "Method %s not allowed here", r->method);
        else api_admin_metrics(x);
        return;
    }
    if (api_vllm_route(x)) return; /* /tokenize, /detokenize, /version: no API key */
    if (strncmp(p, "/v1/", 4) != 0) {
        reply_error(x, 404, NULL, "No route for %s", p);
        return;
    }
    if (!authorized(x)) {
        reply_error(x, 401, "invalid_api_key", "Incorrect or missing API key%s", "");
        return;
    }
    if (strcmp(p, "/v1/models") == 0 || strncmp(p, "/v1/models/", 11) == 0) {
        if (!get) reply_error(x, 405, NULL, "Method %s not allowed here", r->method);
        else api_admin_models(x, p[10] == '/' ? p + 11 : NULL);
        return;
    }
    if (strcmp(p, "/v1/files") == 0 || strncmp(p, "/v1/files/", 10) == 0) {
        api_files_route(x, p + 9);
        return;
    }
    if (strcmp(p, "/v1/batches") == 0 || strncmp(p, "/v1/batches/", 12) == 0) {
        if (!x->c->s->js) reply_store_closed(x); /* the data dir was full at start */
        else api_batches_route(x, p + 11);
        return;
    }
    if (strcmp(p, "/v1/chat/completions") == 0) {
        if (!post)
            reply_error(x, 405, NULL, "Method %s not allowed here", r->method);
        else
            cmpl_route_chat(x);
        return;
    }
    if (strcmp(p, "/v1/completions") == 0) {
        if (!post) reply_error(x, 405, NULL, "Method %s not allowed here", r->method);
        else cmpl_route(x);
        return;
    }
    reply_error(x, 404, NULL, "No route for %s", p);
}
