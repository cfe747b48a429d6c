/*
 * jobstore_pg_claim.c - the PostgreSQL job store's claims: replicas taking chunks
 * of one batch's pending requests under leases they renew (jobstore.h, "claims").
 *
 * Why SKIP LOCKED: replicas claim at the same moment all the time (each asks for
 * its next chunk as one drains); with plain FOR UPDATE the second would wait for
 * the first's transaction and then find its rows taken, and with no lock at all
 * both would take the same rows. SKIP LOCKED hands each the next rows nobody is
 * touching, without waiting. The claim is one statement, so its transaction is
 * only that statement's.
 * Invariant: a request's lease is only ever set by a claim of pending rows, so a
 * done request keeps whatever lease it had, and no claim returns it again.
 * Thread: the store's owner.
 */
#include "jobstore_pg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The batch's status; ENG_ENOTFOUND when there is no such batch. */
static int batch_status(struct jobstore_pg *js, const char *batch_id,
                        enum jobstore_status *status)
{
    PGresult *r;
    int err = jobstore_pg_query(js->conn, "SELECT status FROM h2o_batches WHERE id=$1", 1,
                                (const char *[]){batch_id}, &r, "batch status");
    if (err) return err;
    if (PQntuples(r) != 1) {
        PQclear(r);
        return err_set(ENG_ENOTFOUND, "no such batch: '%s'", batch_id);
    }
    err = jobstore_status_parse(PQgetvalue(r, 0, 0), status);
    PQclear(r);
    return err ? err_set(ENG_EFORMAT, "h2o_batches: unknown status") : 0;
}

static int by_line(const void *a, const void *b)
{
    const int64_t x = ((const struct jobstore_request *)a)->line;
    const int64_t y = ((const struct jobstore_request *)b)->line;
    return (x > y) - (x < y);
}

int jobstore_pg_batch_claim(struct jobstore *base, const char *batch_id, const char *owner,
                            int64_t lease_s, int max, struct jobstore_request **out, int *n)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    enum jobstore_status status;
    int err = jobstore_pg_ready(js);
    if (!err) err = batch_status(js, batch_id, &status);
    if (err || status != JOBSTORE_IN_PROGRESS) return err;
    const int64_t now = jobstore_now(base);
    char until[24], t[24], m[24];
    const char *vals[] = {batch_id, owner, jobstore_pg_i64(now + lease_s, until),
                          jobstore_pg_i64(now, t), jobstore_pg_i64(max, m)};
    /* The status is checked again inside the statement: a cancel committed between
     * the check above and this claim must win. */
    PGresult *r;
    err =
        jobstore_pg_query(js->conn,
                          "WITH c AS (SELECT line FROM h2o_batch_requests"
                          "  WHERE batch_id=$1 AND state='pending'"
                          "  AND (lease_until IS NULL OR lease_until <= $4)"
                          "  AND EXISTS (SELECT 1 FROM h2o_batches"
                          "   WHERE id=$1 AND status='in_progress')"
                          "  ORDER BY line LIMIT $5 FOR UPDATE SKIP LOCKED)"
                          " UPDATE h2o_batch_requests r SET lease_owner=$2, lease_until=$3"
                          " FROM c WHERE r.batch_id=$1 AND r.line=c.line"
                          " RETURNING r.line, r.custom_id, r.body",
                          5, vals, &r, "claim");
    if (err) return err;
    const int k = PQntuples(r);
    struct jobstore_request *rs =
        k ? xcalloc((size_t)k, sizeof *rs) : NULL; /* NULL for none, as SQLite */
    for (int i = 0; i < k; i++) {
        rs[i].line = jobstore_pg_get_i64(r, i, 0);
        rs[i].custom_id = jobstore_pg_get_dup(r, i, 1);
        rs[i].body = jobstore_pg_get_dup(r, i, 2);
    }
    PQclear(r);
    /* RETURNING keeps no order; the caller runs them in line order. */
    if (k > 1) qsort(rs, (size_t)k, sizeof *rs, by_line);
    *out = rs;
    *n = k;
    return 0;
}

int jobstore_pg_batch_renew(struct jobstore *base, const char *batch_id, const char *owner,
                            int64_t lease_s, int64_t *renewed, enum jobstore_status *status)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    int err = jobstore_pg_ready(js);
    if (!err) err = batch_status(js, batch_id, status);
    if (err) return err;
    const int64_t now = jobstore_now(base);
    char until[24], t[24];
    const char *vals[] = {batch_id, owner, jobstore_pg_i64(now + lease_s, until),
                          jobstore_pg_i64(now, t)};
    PGresult *r;
    err = jobstore_pg_query(js->conn,
                            "UPDATE h2o_batch_requests SET lease_until=$3 WHERE batch_id=$1"
                            " AND lease_owner=$2 AND state='pending' AND lease_until > $4",
                            4, vals, &r, "renew");
    if (err) return err;
    *renewed = strtoll(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    return 0;
}

int jobstore_pg_batch_release(struct jobstore *base, const char *batch_id,
                              const char *owner, int64_t *released)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    enum jobstore_status status;
    int err = jobstore_pg_ready(js);
    if (!err) err = batch_status(js, batch_id, &status);
    if (err) return err;
    PGresult *r;
    err =
        jobstore_pg_query(js->conn,
                          "UPDATE h2o_batch_requests SET lease_owner=NULL, lease_until=NULL"
                          " WHERE batch_id=$1 AND lease_owner=$2 AND state='pending'",
                          2, (const char *[]){batch_id, owner}, &r, "release");
    if (err) return err;
    *released = strtoll(PQcmdTuples(r), NULL, 10);
    PQclear(r);
    return 0;
}
