/*
 * jobstore_sqlite_claim.c - the SQLite job store's claims (jobstore.h, "claims").
 * One process holds a data dir, so a claim only ever competes with its own
 * owner's earlier claims; the rules are PostgreSQL's all the same, so that the
 * batch runner is one piece of code over both backends. Leases taken before a
 * crash are cleared when the store opens (jobstore_sqlite_open): their owner is
 * gone, and nobody else could hold them.
 * Thread: the store's owner.
 */
#include "jobstore_sqlite.h"

/* The batch's status, inside the caller's transaction. */
static int batch_status(struct jobstore_sqlite *js, const char *batch_id,
                        enum jobstore_status *status)
{
    sqlite3_stmt *st;
    int err = jobstore_sqlite_db_prepare(js, "SELECT status FROM batches WHERE id=?", &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, batch_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        err = jobstore_status_parse((const char *)sqlite3_column_text(st, 0), status);
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) return err_set(ENG_ENOTFOUND, "no such batch: '%s'", batch_id);
    if (rc != SQLITE_ROW) return jobstore_sqlite_db_fail(js, rc, "batch status");
    return err ? err_set(ENG_EFORMAT, "batch table: unknown status") : 0;
}

int jobstore_sqlite_batch_claim(struct jobstore *base, const char *batch_id,
                                const char *owner, int64_t lease_s, int max,
                                struct jobstore_request **out, int *n)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    const int64_t now = jobstore_now(base);
    /* IMMEDIATE: the rows picked are the rows leased, with nothing in between. */
    int err = jobstore_sqlite_db_begin(js);
    if (err) return err;
    enum jobstore_status status;
    err = batch_status(js, batch_id, &status);
    struct jobstore_request *rs = NULL;
    int k = 0;
    sqlite3_stmt *st = NULL;
    if (!err && status == JOBSTORE_IN_PROGRESS)
        err = jobstore_sqlite_db_prepare(
            js,
            "SELECT line, custom_id, body FROM batch_requests WHERE"
            " batch_id=? AND state='pending' AND (lease_until IS NULL"
            " OR lease_until <= ?) ORDER BY line LIMIT ?",
            &st);
    if (st) {
        jobstore_sqlite_bind_text(st, 1, batch_id);
        sqlite3_bind_int64(st, 2, now);
        sqlite3_bind_int(st, 3, max);
        rs = xcalloc((size_t)max, sizeof *rs);
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            rs[k].line = sqlite3_column_int64(st, 0);
            rs[k].custom_id = jobstore_sqlite_col_dup(st, 1);
            rs[k].body = jobstore_sqlite_col_dup(st, 2);
            k++;
        }
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE) err = jobstore_sqlite_db_fail(js, rc, "claim");
    }
    if (!err && k) {
        err = jobstore_sqlite_db_prepare(
            js,
            "UPDATE batch_requests SET lease_owner=?, lease_until=?"
            " WHERE batch_id=? AND line=?",
            &st);
        for (int i = 0; !err && i < k; i++) {
            sqlite3_reset(st);
            jobstore_sqlite_bind_text(st, 1, owner);
            sqlite3_bind_int64(st, 2, now + lease_s);
            jobstore_sqlite_bind_text(st, 3, batch_id);
            sqlite3_bind_int64(st, 4, rs[i].line);
            int rc = sqlite3_step(st);
            if (rc != SQLITE_DONE) err = jobstore_sqlite_db_fail(js, rc, "claim");
        }
        if (st) sqlite3_finalize(st);
    }
    if (!err) err = jobstore_sqlite_db_commit(js);
    if (err) {
        jobstore_sqlite_db_rollback(js);
        jobstore_requests_free(rs, k);
        return err;
    }
    *out = rs;
    *n = k;
    return 0;
}

/* Run an UPDATE of the owner's pending requests' leases; *changed: rows. */
static int update_leases(struct jobstore_sqlite *js, const char *sql, const char *batch_id,
                         const char *owner, const int64_t *args, int n_args,
                         int64_t *changed)
{
    sqlite3_stmt *st;
    int err = jobstore_sqlite_db_prepare(js, sql, &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, batch_id);
    jobstore_sqlite_bind_text(st, 2, owner);
    for (int i = 0; i < n_args; i++)
        sqlite3_bind_int64(st, 3 + i, args[i]);
    err = jobstore_sqlite_db_step_done(js, st, "lease");
    if (!err) *changed = sqlite3_changes(js->db);
    return err;
}

int jobstore_sqlite_batch_renew(struct jobstore *base, const char *batch_id,
                                const char *owner, int64_t lease_s, int64_t *renewed,
                                enum jobstore_status *status)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    const int64_t now = jobstore_now(base);
    const int64_t args[] = {now + lease_s, now};
    int err = batch_status(js, batch_id, status);
    if (!err)
        err = update_leases(js,
                            "UPDATE batch_requests SET lease_until=?3 WHERE batch_id=?1 AND"
                            " lease_owner=?2 AND state='pending' AND lease_until > ?4",
                            batch_id, owner, args, 2, renewed);
    return err;
}

int jobstore_sqlite_batch_release(struct jobstore *base, const char *batch_id,
                                  const char *owner, int64_t *released)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    enum jobstore_status status;
    int err = batch_status(js, batch_id, &status);
    if (!err)
        err = update_leases(js,
                            "UPDATE batch_requests SET lease_owner=NULL, lease_until=NULL"
                            " WHERE batch_id=?1 AND lease_owner=?2 AND state='pending'",
                            batch_id, owner, NULL, 0, released);
    return err;
}
