/*
 * jobstore_pg_batch.c - the PostgreSQL job store's batches: the state machine
 * under a row lock, a batch's requests stored with one COPY, and its results
 * committed once each, with the request marked done in the same transaction
 * (jobstore_pg.h has why that needs no recovery).
 *
 * Invariant: a request counted in request_counts is not pending and has exactly
 * one h2o_batch_results row; the batch's output_bytes / error_bytes are the sum
 * of its lines' lengths + 1.
 * Thread: the store's owner.
 */
#include "jobstore_pg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH_COLS                                                                         \
    "id, input_file_id, endpoint, completion_window, status, created_at,"                  \
    " in_progress_at, expires_at, finalizing_at, completed_at, failed_at, expired_at,"     \
    " cancelling_at, cancelled_at, total, completed, failed, prompt_tokens,"               \
    " completion_tokens, output_file_id, error_file_id, metadata, errors"
#define UNFINISHED "('validating','in_progress','finalizing','cancelling')"

/* The column stamped when a batch enters each state (validating: created_at). */
static const char *const status_columns[] = {
    [JOBSTORE_VALIDATING] = "created_at",      [JOBSTORE_FAILED] = "failed_at",
    [JOBSTORE_IN_PROGRESS] = "in_progress_at", [JOBSTORE_FINALIZING] = "finalizing_at",
    [JOBSTORE_COMPLETED] = "completed_at",     [JOBSTORE_EXPIRED] = "expired_at",
    [JOBSTORE_CANCELLING] = "cancelling_at",   [JOBSTORE_CANCELLED] = "cancelled_at",
};

/* A status this build does not know means the row was not written by us: a damaged
 * database is an error to report, never a crash. */
static int batch_from_row(const PGresult *r, int row, struct jobstore_batch *b)
{
    memset(b, 0, sizeof *b);
    const char *status = PQgetvalue(r, row, 4);
    if (jobstore_status_parse(status, &b->status) != 0)
        return err_set(ENG_EFORMAT, "h2o_batches: unknown status '%s'", status);
    jobstore_pg_get_copy(r, row, 0, b->id, sizeof b->id);
    jobstore_pg_get_copy(r, row, 1, b->input_file_id, sizeof b->input_file_id);
    b->endpoint = jobstore_pg_get_dup(r, row, 2);
    jobstore_pg_get_copy(r, row, 3, b->completion_window, sizeof b->completion_window);
    int64_t *times[] = {&b->created_at,    &b->in_progress_at,   &b->expires_at,
                        &b->finalizing_at, &b->completed_at,     &b->failed_at,
                        &b->expired_at,    &b->cancelling_at,    &b->cancelled_at,
                        &b->total,         &b->completed,        &b->failed,
                        &b->prompt_tokens, &b->completion_tokens};
    for (size_t i = 0; i < ARRAY_LEN(times); i++)
        *times[i] = jobstore_pg_get_i64(r, row, 5 + (int)i); /* NULL reads as 0 */
    jobstore_pg_get_copy(r, row, 19, b->output_file_id, sizeof b->output_file_id);
    jobstore_pg_get_copy(r, row, 20, b->error_file_id, sizeof b->error_file_id);
    b->metadata = jobstore_pg_get_dup(r, row, 21);
    b->errors = jobstore_pg_get_dup(r, row, 22);
    return 0;
}

/* Run a SELECT of BATCH_COLS, collecting up to `limit` rows (and noting whether
 * another follows). */
static int batch_query(struct jobstore_pg *js, const char *sql, int n_args,
                       const char *const *args, int limit, struct jobstore_batch **out,
                       int *n, bool *has_more)
{
    PGresult *r;
    int err = jobstore_pg_query(js->conn, sql, n_args, args, &r, "list batches");
    if (err) return err;
    const int rows = PQntuples(r), k = MIN(rows, limit);
    struct jobstore_batch *bs =
        k ? xcalloc((size_t)k, sizeof *bs) : NULL; /* NULL for none, as SQLite */
    int i = 0;
    for (; i < k && !err; i++)
        err = batch_from_row(r, i, &bs[i]);
    PQclear(r);
    if (err) {
        jobstore_batches_free(bs, i - 1);
        return err;
    }
    *out = bs;
    *n = k;
    if (has_more) *has_more = rows > limit;
    return 0;
}

/* The batch row, locked FOR UPDATE when `lock` (inside the caller's transaction). */
static int get_batch(struct jobstore_pg *js, const char *id, bool lock,
                     struct jobstore_batch *out)
{
    struct jobstore_batch *bs;
    int n;
    int err =
        batch_query(js,
                    lock ? "SELECT " BATCH_COLS " FROM h2o_batches WHERE id=$1 FOR UPDATE"
                         : "SELECT " BATCH_COLS " FROM h2o_batches WHERE id=$1",
                    1, (const char *[]){id}, 1, &bs, &n, NULL);
    if (err) return err;
    if (n == 1) *out = bs[0];
    free(bs);
    return n == 1 ? 0 : err_set(ENG_ENOTFOUND, "no such batch: '%s'", id);
}

int jobstore_pg_batch_get(struct jobstore *base, const char *id, struct jobstore_batch *out)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    int err = jobstore_pg_ready(js);
    return err ? err : get_batch(js, id, false, out);
}

int jobstore_pg_batch_create(struct jobstore *base, const char *input_file_id,
                             const char *endpoint, const char *completion_window,
                             int64_t hours, const char *metadata, int64_t expires_in_s,
                             struct jobstore_batch *out)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    struct jobstore_file f;
    int err = jobstore_pg_file_get(base, input_file_id, &f); /* reconnects if needed */
    if (err) return err;
    jobstore_file_deinit(&f);
    char id[JOBSTORE_ID_MAX];
    jobstore_new_id("batch_", id, sizeof id);
    const int64_t now = jobstore_now(base);
    char c[24], e[24];
    const char *vals[] = {
        id,
        input_file_id,
        endpoint,
        completion_window,
        jobstore_pg_i64(now, c),
        jobstore_pg_i64(now + (expires_in_s > 0 ? expires_in_s : hours * 3600), e),
        metadata};
    err = jobstore_pg_query(js->conn,
                            "INSERT INTO h2o_batches(id, input_file_id, endpoint,"
                            " completion_window, status, created_at, expires_at, metadata)"
                            " VALUES($1, $2, $3, $4, 'validating', $5, $6, $7)",
                            7, vals, NULL, "insert batch");
    if (err) return err;
    return out ? get_batch(js, id, false, out) : 0;
}

int jobstore_pg_batch_list(struct jobstore *base, const char *after, int limit,
                           bool ascending, struct jobstore_batch **out, int *n,
                           bool *has_more)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    int64_t seq = 0;
    int err = jobstore_pg_ready(js);
    if (!err) err = jobstore_pg_after_seq(js, "h2o_batches", after, ascending, &seq);
    if (err) return err;
    char s[24], l[24];
    const char *args[] = {jobstore_pg_i64(seq, s), jobstore_pg_i64(limit + 1, l)};
    return batch_query(js,
                       ascending ? "SELECT " BATCH_COLS " FROM h2o_batches WHERE seq>$1"
                                   " ORDER BY seq ASC LIMIT $2"
                                 : "SELECT " BATCH_COLS " FROM h2o_batches WHERE seq<$1"
                                   " ORDER BY seq DESC LIMIT $2",
                       2, args, limit, out, n, has_more);
}

int jobstore_pg_unfinished_batches(struct jobstore *base, struct jobstore_batch **out,
                                   int *n)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    int err = jobstore_pg_ready(js);
    if (err) return err;
    return batch_query(js,
                       "SELECT " BATCH_COLS " FROM h2o_batches WHERE status IN " UNFINISHED
                       " ORDER BY seq",
                       0, NULL, INT32_MAX, out, n, NULL);
}

/* Insert the files row of a batch's output or error file (inside the caller's
 * transaction): its body is the batch's result lines, `bytes` long. */
static int publish_output(struct jobstore_pg *js, const char *batch_id, const char *file_id,
                          bool ok, int64_t bytes)
{
    if (!file_id[0]) return 0;
    char filename[JOBSTORE_ID_MAX + 32], b[24], now[24];
    snprintf(filename, sizeof filename, "%s_%s.jsonl", batch_id, ok ? "output" : "error");
    const char *vals[] = {file_id,
                          jobstore_pg_i64(bytes, b),
                          jobstore_pg_i64(jobstore_now(&js->base), now),
                          filename,
                          batch_id,
                          ok ? "t" : "f"};
    return jobstore_pg_query(
        js->conn,
        "INSERT INTO h2o_files(id, bytes, created_at, filename, purpose,"
        " status, batch_id, batch_ok) VALUES($1, $2, $3, $4,"
        " 'batch_output', 'processed', $5, $6)",
        6, vals, NULL, "publish output");
}

int jobstore_pg_batch_set_status(struct jobstore *base, const char *id,
                                 enum jobstore_status to, const char *errors)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    int err = jobstore_pg_ready(js);
    if (!err) err = jobstore_pg_begin(js->conn);
    if (err) return err;
    struct jobstore_batch b = {0};
    /* Locked: another replica's cancel and this one's completion are one after
     * the other, and the loser finds the state it must refuse. */
    err = get_batch(js, id, true, &b);
    if (!err && !jobstore_transition_legal(b.status, to))
        err = err_set(ENG_EINVAL, "batch %s: cannot go from %s to %s", id,
                      jobstore_status_names[b.status], jobstore_status_names[to]);
    char sql[192], now[24];
    snprintf(sql, sizeof sql,
             "UPDATE h2o_batches SET status=$1, %s=$2, errors=coalesce($3, errors)"
             " WHERE id=$4 RETURNING output_bytes, error_bytes",
             status_columns[to]);
    const char *vals[] = {jobstore_status_names[to],
                          jobstore_pg_i64(jobstore_now(base), now), errors, id};
    PGresult *r = NULL;
    if (!err) err = jobstore_pg_query(js->conn, sql, 4, vals, &r, "update batch");
    /* A batch failing in validation has no output; one failing later keeps what it
     * wrote, published like a completed batch's. */
    if (!err && (to == JOBSTORE_COMPLETED || to == JOBSTORE_CANCELLED ||
                 to == JOBSTORE_EXPIRED || to == JOBSTORE_FAILED)) {
        const int64_t out_bytes = jobstore_pg_get_i64(r, 0, 0);
        const int64_t err_bytes = jobstore_pg_get_i64(r, 0, 1);
        err = publish_output(js, id, b.output_file_id, true, out_bytes);
        if (!err) err = publish_output(js, id, b.error_file_id, false, err_bytes);
    }
    if (r) PQclear(r);
    if (!err) err = jobstore_pg_commit(js->conn);
    if (err) jobstore_pg_rollback(js->conn);
    jobstore_batch_deinit(&b);
    return err;
}

/* ---- requests ---- */

/* Append `s` to a COPY text row, escaping what COPY's text format reserves. */
static void copy_field(char **buf, size_t *len, size_t *cap, const char *s)
{
    for (; *s; s++) {
        if (*len + 3 > *cap) {
            *cap = MAX(2 * *cap, (size_t)4096);
            *buf = xrealloc(*buf, *cap);
        }
        const char c = *s;
        const char esc = c == '\\'   ? '\\'
                         : c == '\n' ? 'n'
                         : c == '\r' ? 'r'
                         : c == '\t' ? 't'
                                     : 0;
        if (esc) {
            (*buf)[(*len)++] = '\\';
            (*buf)[(*len)++] = esc;
        } else {
            (*buf)[(*len)++] = c;
        }
    }
}

static void copy_char(char **buf, size_t *len, size_t *cap, char c)
{
    if (*len + 1 > *cap) {
        *cap = MAX(2 * *cap, (size_t)4096);
        *buf = xrealloc(*buf, *cap);
    }
    (*buf)[(*len)++] = c;
}

static int cmp_by_custom_id(const void *a, const void *b)
{
    const struct jobstore_request *x = *(const struct jobstore_request *const *)a;
    const struct jobstore_request *y = *(const struct jobstore_request *const *)b;
    int c = strcmp(x->custom_id, y->custom_id);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* After a unique violation: the message names the line, as SQLite's does (the
 * database's own names only the key). */
static int duplicate_error(const struct jobstore_request *reqs, int n)
{
    const struct jobstore_request **p = xcalloc((size_t)n, sizeof *p);
    for (int i = 0; i < n; i++)
        p[i] = &reqs[i];
    qsort(p, (size_t)n, sizeof *p, cmp_by_custom_id);
    const struct jobstore_request *dup = NULL;
    for (int i = 1; i < n; i++)
        if (strcmp(p[i]->custom_id, p[i - 1]->custom_id) == 0 &&
            (!dup || p[i]->line < dup->line))
            dup = p[i];
    int err =
        dup ? err_set(ENG_EINVAL, "line %lld: duplicate custom_id '%s' or line number",
                      (long long)dup->line, dup->custom_id)
            : err_set(ENG_EINVAL, "duplicate custom_id or line number");
    free(p);
    return err;
}

/* Send the n requests with COPY (one round trip for the lot, not one per line). */
static int copy_requests(struct jobstore_pg *js, const char *batch_id,
                         const struct jobstore_request *reqs, int n)
{
    PGresult *r =
        PQexec(js->conn, "COPY h2o_batch_requests(batch_id, line, custom_id, body)"
                         " FROM STDIN");
    if (!r || PQresultStatus(r) != PGRES_COPY_IN)
        return jobstore_pg_fail(js->conn, r, "store requests");
    PQclear(r);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    bool sent = true;
    for (int i = 0; i < n && sent; i++) {
        char line[24];
        copy_field(&buf, &len, &cap, batch_id);
        copy_char(&buf, &len, &cap, '\t');
        copy_field(&buf, &len, &cap, jobstore_pg_i64(reqs[i].line, line));
        copy_char(&buf, &len, &cap, '\t');
        copy_field(&buf, &len, &cap, reqs[i].custom_id);
        copy_char(&buf, &len, &cap, '\t');
        copy_field(&buf, &len, &cap, reqs[i].body);
        copy_char(&buf, &len, &cap, '\n');
        if (len >= 256 * 1024 || i == n - 1) {
            sent = PQputCopyData(js->conn, buf, (int)len) == 1;
            len = 0;
        }
    }
    free(buf);
    int err = 0;
    if (PQputCopyEnd(js->conn, sent ? NULL : "client failed") != 1)
        err = jobstore_pg_fail(js->conn, NULL, "store requests");
    while ((r = PQgetResult(js->conn)) != NULL) {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        if (!err && PQresultStatus(r) != PGRES_COMMAND_OK) {
            const bool unique = state && strcmp(state, "23505") == 0;
            err = unique ? (PQclear(r), duplicate_error(reqs, n))
                         : jobstore_pg_fail(js->conn, r, "store requests");
        } else {
            PQclear(r);
        }
    }
    return err;
}

int jobstore_pg_batch_add_requests(struct jobstore *base, const char *batch_id,
                                   const struct jobstore_request *reqs, int n)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    int err = jobstore_pg_ready(js);
    if (!err) err = jobstore_pg_begin(js->conn);
    if (err) return err;
    struct jobstore_batch b = {0};
    err = get_batch(js, batch_id, true, &b);
    PGresult *r = NULL;
    if (!err)
        err = jobstore_pg_query(js->conn,
                                "SELECT count(*) FROM h2o_batch_requests WHERE batch_id=$1",
                                1, (const char *[]){batch_id}, &r, "count requests");
    if (!err) {
        const bool once = b.status == JOBSTORE_VALIDATING && b.total == 0 &&
                          jobstore_pg_get_i64(r, 0, 0) == 0;
        if (!once)
            err =
                err_set(ENG_EINVAL,
                        "batch %s: requests can be added once, while validating", batch_id);
    }
    if (r) PQclear(r);
    jobstore_batch_deinit(&b);
    if (!err && n) err = copy_requests(js, batch_id, reqs, n);
    char total[24];
    if (!err)
        err = jobstore_pg_query(js->conn, "UPDATE h2o_batches SET total=$1 WHERE id=$2", 2,
                                (const char *[]){jobstore_pg_i64(n, total), batch_id}, NULL,
                                "update total");
    if (!err) err = jobstore_pg_commit(js->conn);
    if (err) jobstore_pg_rollback(js->conn);
    return err;
}

int jobstore_pg_batch_pending(struct jobstore *base, const char *batch_id,
                              int64_t after_line, int max, struct jobstore_request **out,
                              int *n)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    int err = jobstore_pg_ready(js);
    if (err) return err;
    char a[24], m[24];
    const char *vals[] = {batch_id, jobstore_pg_i64(after_line, a),
                          jobstore_pg_i64(max, m)};
    PGresult *r;
    err = jobstore_pg_query(js->conn,
                            "SELECT line, custom_id, body FROM h2o_batch_requests WHERE"
                            " batch_id=$1 AND state='pending' AND line>$2 ORDER BY line"
                            " LIMIT $3",
                            3, vals, &r, "pending");
    if (err) return err;
    const int k = PQntuples(r);
    /* None pending: NULL, as the SQLite store returns, so a caller that stops at
     * n == 0 has nothing to free. */
    struct jobstore_request *rs = k ? xcalloc((size_t)k, sizeof *rs) : NULL;
    for (int i = 0; i < k; i++) {
        rs[i].line = jobstore_pg_get_i64(r, i, 0);
        rs[i].custom_id = jobstore_pg_get_dup(r, i, 1);
        rs[i].body = jobstore_pg_get_dup(r, i, 2);
    }
    PQclear(r);
    *out = rs;
    *n = k;
    return 0;
}

/* ---- results ---- */

/* Mark one request answered and store its line at offset `off`, if it is still
 * pending; otherwise say why not (no such custom_id, or already answered). */
static int commit_one(struct jobstore_pg *js, const char *batch_id,
                      const struct jobstore_result *res, int64_t off)
{
    char o[24];
    const char *vals[] = {batch_id,
                          res->custom_id,
                          res->ok ? "done" : "failed",
                          res->ok ? "t" : "f",
                          jobstore_pg_i64(off, o),
                          res->line};
    PGresult *r;
    int err =
        jobstore_pg_query(js->conn,
                          "WITH u AS (UPDATE h2o_batch_requests SET state=$3 WHERE"
                          " batch_id=$1 AND custom_id=$2 AND state='pending' RETURNING 1)"
                          " INSERT INTO h2o_batch_results(batch_id, ok, off, custom_id,"
                          " line) SELECT $1, $4::boolean, $5, $2, $6 FROM u",
                          6, vals, &r, "commit result");
    if (err) return err;
    const bool marked = strcmp(PQcmdTuples(r), "1") == 0;
    PQclear(r);
    if (marked) return 0;
    err = jobstore_pg_query(js->conn,
                            "SELECT 1 FROM h2o_batch_requests WHERE batch_id=$1 AND"
                            " custom_id=$2",
                            2, vals, &r, "request state");
    if (err) return err;
    const bool exists = PQntuples(r) == 1;
    PQclear(r);
    /* A second line for a custom_id would be a second answer in the output. */
    return exists ? err_set(ENG_EINVAL, "batch %s: custom_id '%s' is already answered",
                            batch_id, res->custom_id)
                  : err_set(ENG_ENOTFOUND, "batch %s: no request with custom_id '%s'",
                            batch_id, res->custom_id);
}

int jobstore_pg_batch_append_results(struct jobstore *base, const char *batch_id,
                                     const struct jobstore_result *rs, const int64_t *usage,
                                     int n)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    int err = jobstore_pg_ready(js);
    if (!err) err = jobstore_pg_begin(js->conn);
    if (err) return err;
    /* The row lock orders every replica's results for this batch: the offsets below
     * are read and advanced by one transaction at a time. */
    struct jobstore_batch b = {0};
    err = get_batch(js, batch_id, true, &b);
    if (!err && b.status != JOBSTORE_IN_PROGRESS && b.status != JOBSTORE_CANCELLING)
        err = err_set(ENG_EINVAL, "batch %s is %s: no more results", batch_id,
                      jobstore_status_names[b.status]);
    PGresult *r = NULL;
    if (!err)
        err = jobstore_pg_query(
            js->conn, "SELECT output_bytes, error_bytes FROM h2o_batches WHERE id=$1", 1,
            (const char *[]){batch_id}, &r, "result offsets");
    int64_t bytes[2] = {0, 0}; /* [0] error file, [1] output file */
    if (!err) {
        bytes[1] = jobstore_pg_get_i64(r, 0, 0);
        bytes[0] = jobstore_pg_get_i64(r, 0, 1);
        PQclear(r);
    }
    int64_t n_ok = 0, prompt = 0, completion = 0;
    for (int i = 0; i < n && !err; i++) {
        const int k = rs[i].ok;
        err = commit_one(js, batch_id, &rs[i], bytes[k]);
        bytes[k] += (int64_t)strlen(rs[i].line) + 1;
        n_ok += k;
        prompt += usage[2 * i];
        completion += usage[2 * i + 1];
    }
    /* The file ids are made with the first line of each, as SQLite's are. */
    if (!err && !b.output_file_id[0] && n_ok)
        jobstore_new_id("file-", b.output_file_id, sizeof b.output_file_id);
    if (!err && !b.error_file_id[0] && n_ok < n)
        jobstore_new_id("file-", b.error_file_id, sizeof b.error_file_id);
    char v[6][24];
    const char *vals[] = {batch_id,
                          jobstore_pg_i64(n_ok, v[0]),
                          jobstore_pg_i64(n - n_ok, v[1]),
                          jobstore_pg_i64(prompt, v[2]),
                          jobstore_pg_i64(completion, v[3]),
                          jobstore_pg_i64(bytes[1], v[4]),
                          jobstore_pg_i64(bytes[0], v[5]),
                          b.output_file_id,
                          b.error_file_id};
    if (!err)
        err = jobstore_pg_query(js->conn,
                                "UPDATE h2o_batches SET completed=completed+$2,"
                                " failed=failed+$3, prompt_tokens=prompt_tokens+$4,"
                                " completion_tokens=completion_tokens+$5, output_bytes=$6,"
                                " error_bytes=$7, output_file_id=nullif($8, ''),"
                                " error_file_id=nullif($9, '') WHERE id=$1",
                                9, vals, NULL, "count results");
    if (!err) err = jobstore_pg_commit(js->conn);
    if (err) jobstore_pg_rollback(js->conn);
    jobstore_batch_deinit(&b);
    return err;
}

int jobstore_pg_batch_recover(struct jobstore *base, const char *batch_id)
{
    /* Nothing to reconcile (a result is one transaction): recount from the states,
     * which is what the SQLite store ends its recovery with, so the call keeps its
     * meaning for the caller that runs it after a failure. */
    struct jobstore_pg *js = jobstore_pg_of(base);
    int err = jobstore_pg_ready(js);
    if (err) return err;
    PGresult *r;
    err = jobstore_pg_query(js->conn,
                            "UPDATE h2o_batches SET"
                            " completed=(SELECT count(*) FROM h2o_batch_requests"
                            "  WHERE batch_id=$1 AND state='done'),"
                            " failed=(SELECT count(*) FROM h2o_batch_requests"
                            "  WHERE batch_id=$1 AND state='failed') WHERE id=$1",
                            1, (const char *[]){batch_id}, &r, "recount");
    if (err) return err;
    const bool found = strcmp(PQcmdTuples(r), "1") == 0;
    PQclear(r);
    return found ? 0 : err_set(ENG_ENOTFOUND, "no such batch: '%s'", batch_id);
}
