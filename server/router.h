/*
 * router.h - what each request gets (router.c): authentication, CORS and the
 * routes. Owns: nothing beyond one request. Thread: loop.
 */
#ifndef H2O_SERVER_ROUTER_H
#define H2O_SERVER_ROUTER_H

#include "conn.h"

/* Handle one complete request: the handler every connection is given
 * (conn_handler_fn). Thread: loop. */
void router_dispatch(struct exch *x);

#endif
