/*
 * jobstore_sqlite_batch.c - the SQLite job store's batches: the OpenAI Batch state
 * machine and the stored requests of each batch (jobstore_sqlite_result.c records
 * their results).
 * Thread: the store's owner.
 */
#include "jobstore_sqlite.h"

/* ---- batches ---- */

/* A status this build does not know means the row was not written by us: a damaged
 * database is an error to report, never a crash. */
static int batch_from_row(sqlite3_stmt *st, struct jobstore_batch *b)
{
    memset(b, 0, sizeof *b);
    const char *status = (const char *)sqlite3_column_text(st, 4);
    if (jobstore_status_parse(status, &b->status) != 0)
        return err_set(ENG_EFORMAT, "batch table: unknown status '%s'",
                       status ? status : "(null)");
    jobstore_sqlite_col_copy(st, 0, b->id, sizeof b->id);
    jobstore_sqlite_col_copy(st, 1, b->input_file_id, sizeof b->input_file_id);
    b->endpoint = jobstore_sqlite_col_dup(st, 2);
    jobstore_sqlite_col_copy(st, 3, b->completion_window, sizeof b->completion_window);
    int64_t *times[] = {&b->created_at,    &b->in_progress_at,   &b->expires_at,
                        &b->finalizing_at, &b->completed_at,     &b->failed_at,
                        &b->expired_at,    &b->cancelling_at,    &b->cancelled_at,
                        &b->total,         &b->completed,        &b->failed,
                        &b->prompt_tokens, &b->completion_tokens};
    for (size_t i = 0; i < ARRAY_LEN(times); i++)
        *times[i] = sqlite3_column_int64(st, 5 + (int)i); /* NULL reads as 0 */
    jobstore_sqlite_col_copy(st, 19, b->output_file_id, sizeof b->output_file_id);
    jobstore_sqlite_col_copy(st, 20, b->error_file_id, sizeof b->error_file_id);
    b->metadata = jobstore_sqlite_col_dup(st, 21);
    b->errors = jobstore_sqlite_col_dup(st, 22);
    return 0;
}

int jobstore_sqlite_batch_get(struct jobstore *base, const char *id,
                              struct jobstore_batch *out)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    sqlite3_stmt *st;
    int err = jobstore_sqlite_db_prepare(
        js, "SELECT " BATCH_COLS " FROM batches WHERE id=?", &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, id);
    int rc = sqlite3_step(st);
    err = rc == SQLITE_ROW ? batch_from_row(st, out) : 0;
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) return err_set(ENG_ENOTFOUND, "no such batch: '%s'", id);
    return rc == SQLITE_ROW ? err : jobstore_sqlite_db_fail(js, rc, "get batch");
}

int jobstore_sqlite_batch_create(struct jobstore *base, const char *input_file_id,
                                 const char *endpoint, const char *completion_window,
                                 int64_t hours, const char *metadata, int64_t expires_in_s,
                                 struct jobstore_batch *out)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    struct jobstore_file f;
    int err = jobstore_sqlite_file_get(base, input_file_id, &f);
    if (err) return err;
    jobstore_file_deinit(&f);

    char id[JOBSTORE_ID_MAX];
    jobstore_new_id("batch_", id, sizeof id);
    int64_t now = jobstore_now(base);
    sqlite3_stmt *st;
    err = jobstore_sqlite_db_prepare(
        js,
        "INSERT INTO batches(id, input_file_id, endpoint, completion_window,"
        " status, created_at, expires_at, metadata)"
        " VALUES(?, ?, ?, ?, 'validating', ?, ?, ?)",
        &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, id);
    jobstore_sqlite_bind_text(st, 2, input_file_id);
    jobstore_sqlite_bind_text(st, 3, endpoint);
    jobstore_sqlite_bind_text(st, 4, completion_window);
    sqlite3_bind_int64(st, 5, now);
    sqlite3_bind_int64(st, 6, now + (expires_in_s > 0 ? expires_in_s : hours * 3600));
    jobstore_sqlite_bind_text(st, 7, metadata);
    err = jobstore_sqlite_db_step_done(js, st, "insert batch");
    if (err) return err;
    return out ? jobstore_sqlite_batch_get(base, id, out) : 0;
}

/* Run a SELECT of BATCH_COLS with int64 parameters, collecting up to `limit` rows
 * (and noting whether another follows). */
static int batch_query(struct jobstore_sqlite *js, const char *sql, const int64_t *args,
                       int n_args, int limit, struct jobstore_batch **out, int *n,
                       bool *has_more)
{
    *out = NULL;
    *n = 0;
    if (has_more) *has_more = false;
    sqlite3_stmt *st;
    int err = jobstore_sqlite_db_prepare(js, sql, &st);
    if (err) return err;
    for (int i = 0; i < n_args; i++)
        sqlite3_bind_int64(st, i + 1, args[i]);
    int cap = 0, k = 0, rc;
    struct jobstore_batch *bs = NULL;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (k == limit) {
            if (has_more) *has_more = true;
            continue;
        }
        if (k == cap) {
            cap = cap ? 2 * cap : 16;
            bs = xrealloc(bs, (size_t)cap * sizeof *bs);
        }
        err = batch_from_row(st, &bs[k]);
        if (err) break;
        k++;
    }
    sqlite3_finalize(st);
    if (err || rc != SQLITE_DONE) {
        jobstore_batches_free(bs, k);
        if (has_more) *has_more = false;
        return err ? err : jobstore_sqlite_db_fail(js, rc, "list batches");
    }
    *out = bs;
    *n = k;
    return 0;
}

int jobstore_sqlite_batch_list(struct jobstore *base, const char *after, int limit,
                               bool ascending, struct jobstore_batch **out, int *n,
                               bool *has_more)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    int64_t args[2];
    int err = jobstore_sqlite_after_seq(js, "batches", after, ascending, &args[0]);
    if (err) return err;
    args[1] = limit + 1;
    return batch_query(js,
                       ascending ? "SELECT " BATCH_COLS " FROM batches WHERE seq>?1"
                                   " ORDER BY seq ASC LIMIT ?2"
                                 : "SELECT " BATCH_COLS " FROM batches WHERE seq<?1"
                                   " ORDER BY seq DESC LIMIT ?2",
                       args, 2, limit, out, n, has_more);
}

int jobstore_sqlite_unfinished_batches(struct jobstore *base, struct jobstore_batch **out,
                                       int *n)
{
    return batch_query(jobstore_sqlite_of(base),
                       "SELECT " BATCH_COLS " FROM batches WHERE status IN " UNFINISHED
                       " ORDER BY seq",
                       NULL, 0, INT32_MAX, out, n, NULL);
}

/* Insert the row of a batch's output or error file (inside the caller's
 * transaction). A body that was never created (the id was committed, then the
 * process died before the first write) is created empty, so the row has a body. */
static int publish_output(struct jobstore_sqlite *js, const char *batch_id,
                          const char *file_id, const char *kind)
{
    if (!file_id[0]) return 0;
    char *path = jobstore_sqlite_body_path(js, file_id);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    struct stat sb;
    int err = 0;
    if (fd < 0 || fstat(fd, &sb) != 0)
        err = err_set(jobstore_sqlite_errno_code(errno), "%s: %s", path, strerror(errno));
    else if (sb.st_size == 0 &&
             (fsync(fd) != 0 || jobstore_sqlite_fsync_path(js->files_dir) != 0))
        err = err_set(ENG_EIO, "%s: fsync failed", path);
    if (fd >= 0) close(fd);
    free(path);
    if (err) return err;
    char filename[JOBSTORE_ID_MAX + 32];
    snprintf(filename, sizeof filename, "%s_%s.jsonl", batch_id, kind);
    return jobstore_sqlite_file_insert(js, file_id, (int64_t)sb.st_size, filename,
                                       "batch_output");
}

int jobstore_sqlite_batch_set_status(struct jobstore *base, const char *id,
                                     enum jobstore_status to, const char *errors)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    int err = jobstore_sqlite_db_begin(js);
    if (err) return err;
    struct jobstore_batch b;
    err = jobstore_sqlite_batch_get(base, id, &b);
    if (err) goto fail;
    if (!jobstore_transition_legal(b.status, to)) {
        err = err_set(ENG_EINVAL, "batch %s: cannot go from %s to %s", id,
                      jobstore_status_names[b.status], jobstore_status_names[to]);
        goto fail_b;
    }
    char sql[160];
    snprintf(sql, sizeof sql,
             "UPDATE batches SET status=?1, %s=?2, errors=coalesce(?3, errors) WHERE id=?4",
             status_columns[to]);
    sqlite3_stmt *st;
    err = jobstore_sqlite_db_prepare(js, sql, &st);
    if (err) goto fail_b;
    jobstore_sqlite_bind_text(st, 1, jobstore_status_names[to]);
    sqlite3_bind_int64(st, 2, jobstore_now(base));
    jobstore_sqlite_bind_text(st, 3, errors);
    jobstore_sqlite_bind_text(st, 4, id);
    err = jobstore_sqlite_db_step_done(js, st, "update batch");
    /* A batch failing in validation has no output; one failing later keeps what it
     * wrote, published like a completed batch's. */
    if (!err && (to == JOBSTORE_COMPLETED || to == JOBSTORE_CANCELLED ||
                 to == JOBSTORE_EXPIRED || to == JOBSTORE_FAILED)) {
        err = publish_output(js, id, b.output_file_id, "output");
        if (!err) err = publish_output(js, id, b.error_file_id, "error");
    }
    if (!err) err = jobstore_sqlite_db_commit(js);
    if (err) goto fail_b;
    jobstore_batch_deinit(&b);
    return 0;
fail_b:
    jobstore_batch_deinit(&b);
fail:
    jobstore_sqlite_db_rollback(js);
    return err;
}

int jobstore_sqlite_batch_add_requests(struct jobstore *base, const char *batch_id,
                                       const struct jobstore_request *reqs, int n)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    int err = jobstore_sqlite_db_begin(js);
    if (err) return err;
    struct jobstore_batch b;
    err = jobstore_sqlite_batch_get(base, batch_id, &b);
    if (err) goto fail;
    bool ok = b.status == JOBSTORE_VALIDATING && b.total == 0;
    jobstore_batch_deinit(&b);
    int64_t have = 0;
    char count_sql[] = "SELECT count(*) FROM batch_requests WHERE batch_id=?";
    sqlite3_stmt *st;
    if (ok) {
        err = jobstore_sqlite_db_prepare(js, count_sql, &st);
        if (err) goto fail;
        jobstore_sqlite_bind_text(st, 1, batch_id);
        if (sqlite3_step(st) == SQLITE_ROW) have = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    if (!ok || have) {
        err = err_set(ENG_EINVAL, "batch %s: requests can be added once, while validating",
                      batch_id);
        goto fail;
    }
    err = jobstore_sqlite_db_prepare(
        js,
        "INSERT INTO batch_requests(batch_id, line, custom_id, body)"
        " VALUES(?, ?, ?, ?)",
        &st);
    if (err) goto fail;
    for (int i = 0; i < n && !err; i++) {
        sqlite3_reset(st);
        jobstore_sqlite_bind_text(st, 1, batch_id);
        sqlite3_bind_int64(st, 2, reqs[i].line);
        jobstore_sqlite_bind_text(st, 3, reqs[i].custom_id);
        jobstore_sqlite_bind_text(st, 4, reqs[i].body);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY)
            err = err_set(ENG_EINVAL, "line %lld: duplicate custom_id '%s' or line number",
                          (long long)reqs[i].line, reqs[i].custom_id);
        else if (rc != SQLITE_DONE)
            err = jobstore_sqlite_db_fail(js, rc, "insert request");
    }
    sqlite3_finalize(st);
    if (err) goto fail;
    err = jobstore_sqlite_db_prepare(js, "UPDATE batches SET total=? WHERE id=?", &st);
    if (err) goto fail;
    sqlite3_bind_int64(st, 1, n);
    jobstore_sqlite_bind_text(st, 2, batch_id);
    err = jobstore_sqlite_db_step_done(js, st, "update total");
    if (!err) err = jobstore_sqlite_db_commit(js);
    if (err) goto fail;
    return 0;
fail:
    jobstore_sqlite_db_rollback(js);
    return err;
}

int jobstore_sqlite_batch_pending(struct jobstore *base, const char *batch_id,
                                  int64_t after_line, int max,
                                  struct jobstore_request **out, int *n)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    sqlite3_stmt *st;
    int err = jobstore_sqlite_db_prepare(
        js,
        "SELECT line, custom_id, body FROM batch_requests WHERE"
        " batch_id=? AND state='pending' AND line>? ORDER BY line LIMIT ?",
        &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, batch_id);
    sqlite3_bind_int64(st, 2, after_line);
    sqlite3_bind_int(st, 3, max);
    struct jobstore_request *rs = NULL;
    int cap = 0, k = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (k == cap) {
            cap = cap ? 2 * cap : 16;
            rs = xrealloc(rs, (size_t)cap * sizeof *rs);
        }
        rs[k].line = sqlite3_column_int64(st, 0);
        rs[k].custom_id = jobstore_sqlite_col_dup(st, 1);
        rs[k].body = jobstore_sqlite_col_dup(st, 2);
        k++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        jobstore_requests_free(rs, k);
        return jobstore_sqlite_db_fail(js, rc, "pending");
    }
    *out = rs;
    *n = k;
    return 0;
}
