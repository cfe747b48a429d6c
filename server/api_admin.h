/*
 * api_admin.h - the admin endpoints (api_admin.c): health, models, metrics.
 * Owns: nothing beyond one request (the metrics label is made once into struct
 * srv). Thread: loop.
 */
#ifndef H2O_SERVER_API_ADMIN_H
#define H2O_SERVER_API_ADMIN_H

#include "conn.h"

/* GET /health: 200 {"status":"ready"} only while the engine is ready and the
 * server is not draining, else 503 with the state. Thread: loop. */
void api_admin_health(struct exch *x);

/* GET /v1/models (id NULL) or /v1/models/{id}. Thread: loop. */
void api_admin_models(struct exch *x, const char *id);

/* GET /metrics in Prometheus' text format, vLLM's names under h2oserve:.
 * Thread: loop. */
void api_admin_metrics(struct exch *x);

#endif
