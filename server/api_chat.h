/*
 * api_chat.h - POST /v1/chat/completions for models without a chat template
 * (api_chat.c). Owns: nothing beyond one request. Thread: loop.
 */
#ifndef H2O_SERVER_API_CHAT_H
#define H2O_SERVER_API_CHAT_H

#include "conn.h"

/* POST /v1/chat/completions (after the API key check): 400, the model has no chat
 * template. Thread: loop. */
void api_chat_route(struct exch *x);

#endif
