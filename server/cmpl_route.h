/*
 * cmpl_route.h - POST /v1/completions and /v1/chat/completions between an exchange
 * and the engine
 * (cmpl_route.c). Owns: the completion state it hangs on the exchange.
 * Thread: loop.
 */
#ifndef H2O_SERVER_CMPL_ROUTE_H
#define H2O_SERVER_CMPL_ROUTE_H

#include "conn.h"

/* POST /v1/completions (after the API key and method checks): parse, submit one
 * engine request per prompt through the bridge, then answer as the events come:
 * SSE chunks, or one JSON body at the end. Thread: loop. */
void cmpl_route(struct exch *x);

/* POST /v1/chat/completions (after the same checks): chat_parse (the messages
 * through the model's chat template), then exactly as cmpl_route, answering in the
 * chat shape. Thread: loop. */
void cmpl_route_chat(struct exch *x);

#endif
