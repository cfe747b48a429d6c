/*
 * api_files.h - the OpenAI Files API (api_files.c).
 * Owns: nothing beyond one request. Thread: loop.
 */
#ifndef H2O_SERVER_API_FILES_H
#define H2O_SERVER_API_FILES_H

#include "conn.h"

/* /v1/files and below (`rest` is the path after "/v1/files": "", "/{id}",
 * "/{id}/content"). Thread: loop. */
void api_files_route(struct exch *x, const char *rest);

#endif
