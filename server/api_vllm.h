/*
 * api_vllm.h - vLLM's endpoints outside /v1 (api_vllm.c).
 * Owns: nothing beyond one request. Thread: loop.
 */
#ifndef H2O_SERVER_API_VLLM_H
#define H2O_SERVER_API_VLLM_H

#include "conn.h"

#include <stdbool.h>

/* POST /tokenize, POST /detokenize, GET /version: answers x and returns true when
 * x's path is one of them, else returns false and leaves x alone. No API key (vLLM
 * guards /v1 only); they work while the model loads. Thread: loop. */
bool api_vllm_route(struct exch *x);

#endif
