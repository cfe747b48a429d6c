/*
 * api_batches.h - the OpenAI Batches API (api_batches.c); batchrun.c does the work.
 * Owns: nothing beyond one request. Thread: loop.
 */
#ifndef H2O_SERVER_API_BATCHES_H
#define H2O_SERVER_API_BATCHES_H

#include "conn.h"

/* /v1/batches and below (`rest` as for api_files_route). Thread: loop. */
void api_batches_route(struct exch *x, const char *rest);

#endif
