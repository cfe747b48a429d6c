/*
 * query.h - the query string of the list endpoints (?limit=2&after=file-abc).
 * Owns: nothing. Thread: loop (query_id_ok: any).
 */
#ifndef H2O_SERVER_QUERY_H
#define H2O_SERVER_QUERY_H

#include "conn.h"

#include <stdbool.h>
#include <stddef.h>

/*
 * The value of query parameter `name` in x's request, percent-decoded ('+' is a
 * space) into buf. Returns 1 when present, 0 when absent, -1 when malformed or
 * longer than size - 1. Thread: loop.
 */
int query_get(const struct exch *x, const char *name, char *buf, size_t size);

/* The list parameters OpenAI's list endpoints share. */
struct query_list {
    int limit;              /* default_limit unless given */
    char after[64];         /* "" when absent */
    bool ascending;         /* order=asc; default desc (newest first) */
};

/* Parse limit (1..max_limit), after and order; on a bad value answer 400 and
 * return -1. Thread: loop. */
int query_list_params(struct exch *x, int default_limit, int max_limit, struct query_list *q);

/* Whether `id` (len bytes, from a path or a cursor) can be a store id: 1 to
 * JOBSTORE_ID_MAX - 1 characters of [A-Za-z0-9_-]. Anything else names nothing,
 * and is never looked up or echoed. Thread: any. */
bool query_id_ok(const char *id, size_t len);

#endif
