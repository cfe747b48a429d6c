/*
 * jobstore_batch.c - the job store's batches: the OpenAI Batch state machine,
 * per-request progress, result lines appended and fsynced before they count, and
 * recovery after a crash (see jobstore.h for the durability argument).
 * Thread: the store's owner.
 */
#include "jobstore_impl.h"

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
    col_copy(st, 0, b->id, sizeof b->id);
    col_copy(st, 1, b->input_file_id, sizeof b->input_file_id);
    b->endpoint = col_dup(st, 2);
    col_copy(st, 3, b->completion_window, sizeof b->completion_window);
    int64_t *times[] = {&b->created_at,    &b->in_progress_at,   &b->expires_at,
                        &b->finalizing_at, &b->completed_at,     &b->failed_at,
                        &b->expired_at,    &b->cancelling_at,    &b->cancelled_at,
                        &b->total,         &b->completed,        &b->failed,
                        &b->prompt_tokens, &b->completion_tokens};
    for (size_t i = 0; i < ARRAY_LEN(times); i++)
        *times[i] = sqlite3_column_int64(st, 5 + (int)i); /* NULL reads as 0 */
    col_copy(st, 19, b->output_file_id, sizeof b->output_file_id);
    col_copy(st, 20, b->error_file_id, sizeof b->error_file_id);
    b->metadata = col_dup(st, 21);
    b->errors = col_dup(st, 22);
    return 0;
}

int jobstore_batch_get(struct jobstore *js, const char *id, struct jobstore_batch *out)
{
    sqlite3_stmt *st;
    int err = db_prepare(js, "SELECT " BATCH_COLS " FROM batches WHERE id=?", &st);
    if (err) return err;
    bind_text(st, 1, id);
    int rc = sqlite3_step(st);
    err = rc == SQLITE_ROW ? batch_from_row(st, out) : 0;
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) return err_set(ENG_ENOTFOUND, "no such batch: '%s'", id);
    return rc == SQLITE_ROW ? err : db_fail(js, rc, "get batch");
}

int jobstore_batch_create(struct jobstore *js, const char *input_file_id,
                          const char *endpoint, const char *completion_window,
                          const char *metadata, int64_t expires_in_s,
                          struct jobstore_batch *out)
{
    if (!input_file_id || !endpoint || !completion_window)
        return err_set(ENG_EINVAL, "batch: input_file_id, endpoint and "
                                   "completion_window are required");
    char *end;
    errno = 0;
    long hours = strtol(completion_window, &end, 10);
    if (completion_window[0] < '0' || completion_window[0] > '9' || strcmp(end, "h") != 0 ||
        errno || hours < 1 || hours > 24 * 365 || strlen(completion_window) >= 16)
        return err_set(ENG_EINVAL, "completion_window '%s' is not '<hours>h'",
                       completion_window);
    struct jobstore_file f;
    int err = jobstore_file_get(js, input_file_id, &f);
    if (err) return err;
    jobstore_file_deinit(&f);

    char id[JOBSTORE_ID_MAX];
    jobstore_new_id("batch_", id, sizeof id);
    int64_t now = js_now(js);
    sqlite3_stmt *st;
    err = db_prepare(js,
                     "INSERT INTO batches(id, input_file_id, endpoint, completion_window,"
                     " status, created_at, expires_at, metadata)"
                     " VALUES(?, ?, ?, ?, 'validating', ?, ?, ?)",
                     &st);
    if (err) return err;
    bind_text(st, 1, id);
    bind_text(st, 2, input_file_id);
    bind_text(st, 3, endpoint);
    bind_text(st, 4, completion_window);
    sqlite3_bind_int64(st, 5, now);
    sqlite3_bind_int64(st, 6, now + (expires_in_s > 0 ? expires_in_s : (int64_t)hours * 3600));
    bind_text(st, 7, metadata);
    err = db_step_done(js, st, "insert batch");
    if (err) return err;
    return out ? jobstore_batch_get(js, id, out) : 0;
}

/* Run a SELECT of BATCH_COLS with int64 parameters, collecting up to `limit` rows
 * (and noting whether another follows). */
static int batch_query(struct jobstore *js, const char *sql, const int64_t *args,
                       int n_args, int limit, struct jobstore_batch **out, int *n,
                       bool *has_more)
{
    *out = NULL;
    *n = 0;
    if (has_more) *has_more = false;
    sqlite3_stmt *st;
    int err = db_prepare(js, sql, &st);
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
        return err ? err : db_fail(js, rc, "list batches");
    }
    *out = bs;
    *n = k;
    return 0;
}

int jobstore_batch_list(struct jobstore *js, const char *after, int limit, bool ascending,
                        struct jobstore_batch **out, int *n, bool *has_more)
{
    *out = NULL;
    *n = 0;
    *has_more = false;
    if (limit < 1 || limit > LIST_MAX) return err_set(ENG_EINVAL, "limit out of range");
    int64_t args[2];
    int err = jobstore_after_seq(js, "batches", after, ascending, &args[0]);
    if (err) return err;
    args[1] = limit + 1;
    return batch_query(js,
                       ascending ? "SELECT " BATCH_COLS " FROM batches WHERE seq>?1"
                                   " ORDER BY seq ASC LIMIT ?2"
                                 : "SELECT " BATCH_COLS " FROM batches WHERE seq<?1"
                                   " ORDER BY seq DESC LIMIT ?2",
                       args, 2, limit, out, n, has_more);
}

int jobstore_unfinished_batches(struct jobstore *js, struct jobstore_batch **out, int *n)
{
    return batch_query(js,
                       "SELECT " BATCH_COLS " FROM batches WHERE status IN " UNFINISHED
                       " ORDER BY seq",
                       NULL, 0, INT32_MAX, out, n, NULL);
}

static bool transition_legal(enum jobstore_status from, enum jobstore_status to)
{
    switch (from) {
    case JOBSTORE_VALIDATING:
        return to == JOBSTORE_FAILED || to == JOBSTORE_IN_PROGRESS ||
               to == JOBSTORE_CANCELLING;
    case JOBSTORE_IN_PROGRESS:
        return to == JOBSTORE_FINALIZING || to == JOBSTORE_CANCELLING ||
               to == JOBSTORE_EXPIRED;
    case JOBSTORE_FINALIZING: return to == JOBSTORE_COMPLETED;
    case JOBSTORE_CANCELLING: return to == JOBSTORE_CANCELLED;
    default: return false; /* failed, completed, expired, cancelled are final */
    }
}

/* Insert the row of a batch's output or error file (inside the caller's
 * transaction). A body that was never created (the id was committed, then the
 * process died before the first write) is created empty, so the row has a body. */
static int publish_output(struct jobstore *js, const char *batch_id, const char *file_id,
                          const char *kind)
{
    if (!file_id[0]) return 0;
    char *path = jobstore_body_path(js, file_id);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    struct stat sb;
    int err = 0;
    if (fd < 0 || fstat(fd, &sb) != 0)
        err = err_set(ENG_EIO, "%s: %s", path, strerror(errno));
    else if (sb.st_size == 0 && (fsync(fd) != 0 || fsync_path(js->files_dir) != 0))
        err = err_set(ENG_EIO, "%s: fsync failed", path);
    if (fd >= 0) close(fd);
    free(path);
    if (err) return err;
    char filename[JOBSTORE_ID_MAX + 32];
    snprintf(filename, sizeof filename, "%s_%s.jsonl", batch_id, kind);
    return jobstore_file_insert(js, file_id, (int64_t)sb.st_size, filename, "batch_output");
}

int jobstore_batch_set_status(struct jobstore *js, const char *id, enum jobstore_status to,
                              const char *errors)
{
    CHECK((unsigned)to < ARRAY_LEN(status_names));
    int err = db_begin(js);
    if (err) return err;
    struct jobstore_batch b;
    err = jobstore_batch_get(js, id, &b);
    if (err) goto fail;
    if (!transition_legal(b.status, to)) {
        err = err_set(ENG_EINVAL, "batch %s: cannot go from %s to %s", id,
                      status_names[b.status], status_names[to]);
        goto fail_b;
    }
    char sql[160];
    snprintf(sql, sizeof sql,
             "UPDATE batches SET status=?1, %s=?2, errors=coalesce(?3, errors) WHERE id=?4",
             status_columns[to]);
    sqlite3_stmt *st;
    err = db_prepare(js, sql, &st);
    if (err) goto fail_b;
    bind_text(st, 1, status_names[to]);
    sqlite3_bind_int64(st, 2, js_now(js));
    bind_text(st, 3, errors);
    bind_text(st, 4, id);
    err = db_step_done(js, st, "update batch");
    if (!err &&
        (to == JOBSTORE_COMPLETED || to == JOBSTORE_CANCELLED || to == JOBSTORE_EXPIRED)) {
        err = publish_output(js, id, b.output_file_id, "output");
        if (!err) err = publish_output(js, id, b.error_file_id, "error");
    }
    if (!err) err = db_commit(js);
    if (err) goto fail_b;
    jobstore_batch_deinit(&b);
    return 0;
fail_b:
    jobstore_batch_deinit(&b);
fail:
    db_rollback(js);
    return err;
}

int jobstore_batch_add_requests(struct jobstore *js, const char *batch_id,
                                const struct jobstore_request *reqs, int n)
{
    if (n < 0) return err_set(ENG_EINVAL, "negative request count");
    int err = db_begin(js);
    if (err) return err;
    struct jobstore_batch b;
    err = jobstore_batch_get(js, batch_id, &b);
    if (err) goto fail;
    bool ok = b.status == JOBSTORE_VALIDATING && b.total == 0;
    jobstore_batch_deinit(&b);
    int64_t have = 0;
    char count_sql[] = "SELECT count(*) FROM batch_requests WHERE batch_id=?";
    sqlite3_stmt *st;
    if (ok) {
        err = db_prepare(js, count_sql, &st);
        if (err) goto fail;
        bind_text(st, 1, batch_id);
        if (sqlite3_step(st) == SQLITE_ROW) have = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    if (!ok || have) {
        err = err_set(ENG_EINVAL, "batch %s: requests can be added once, while validating",
                      batch_id);
        goto fail;
    }
    err = db_prepare(js,
                     "INSERT INTO batch_requests(batch_id, line, custom_id, body)"
                     " VALUES(?, ?, ?, ?)",
                     &st);
    if (err) goto fail;
    for (int i = 0; i < n && !err; i++) {
        if (!reqs[i].custom_id || !reqs[i].body) {
            err = err_set(ENG_EINVAL, "line %lld: custom_id and body are required",
                          (long long)reqs[i].line);
            break;
        }
        sqlite3_reset(st);
        bind_text(st, 1, batch_id);
        sqlite3_bind_int64(st, 2, reqs[i].line);
        bind_text(st, 3, reqs[i].custom_id);
        bind_text(st, 4, reqs[i].body);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY)
            err = err_set(ENG_EINVAL, "line %lld: duplicate custom_id '%s' or line number",
                          (long long)reqs[i].line, reqs[i].custom_id);
        else if (rc != SQLITE_DONE)
            err = db_fail(js, rc, "insert request");
    }
    sqlite3_finalize(st);
    if (err) goto fail;
    err = db_prepare(js, "UPDATE batches SET total=? WHERE id=?", &st);
    if (err) goto fail;
    sqlite3_bind_int64(st, 1, n);
    bind_text(st, 2, batch_id);
    err = db_step_done(js, st, "update total");
    if (!err) err = db_commit(js);
    if (err) goto fail;
    return 0;
fail:
    db_rollback(js);
    return err;
}

int jobstore_batch_pending(struct jobstore *js, const char *batch_id, int64_t after_line,
                           int max, struct jobstore_request **out, int *n)
{
    *out = NULL;
    *n = 0;
    if (max < 1) return err_set(ENG_EINVAL, "max must be positive");
    sqlite3_stmt *st;
    int err = db_prepare(js,
                         "SELECT line, custom_id, body FROM batch_requests WHERE"
                         " batch_id=? AND state='pending' AND line>? ORDER BY line LIMIT ?",
                         &st);
    if (err) return err;
    bind_text(st, 1, batch_id);
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
        rs[k].custom_id = col_dup(st, 1);
        rs[k].body = col_dup(st, 2);
        k++;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        jobstore_requests_free(rs, k);
        return db_fail(js, rc, "pending");
    }
    *out = rs;
    *n = k;
    return 0;
}

void jobstore_requests_free(struct jobstore_request *reqs, int n)
{
    for (int i = 0; i < n; i++) {
        free(reqs[i].custom_id);
        free(reqs[i].body);
    }
    free(reqs);
}

/* ---- results and recovery ---- */

/* Read custom_id and the usage of one output line; false when it is not an object
 * with a string custom_id. */
static bool parse_result_line(const char *s, size_t len, char **custom_id, int64_t *prompt,
                              int64_t *completion)
{
    cJSON *root = cJSON_ParseWithLength(s, len);
    const cJSON *cid = cJSON_GetObjectItemCaseSensitive(root, "custom_id");
    bool ok = cJSON_IsObject(root) && cJSON_IsString(cid);
    *custom_id = ok ? xstrdup(cid->valuestring) : NULL;
    *prompt = *completion = 0;
    const cJSON *resp = cJSON_GetObjectItemCaseSensitive(root, "response");
    const cJSON *body = cJSON_GetObjectItemCaseSensitive(resp, "body");
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(body, "usage");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
    if (cJSON_IsNumber(pt)) *prompt = (int64_t)pt->valuedouble;
    if (cJSON_IsNumber(ct)) *completion = (int64_t)ct->valuedouble;
    cJSON_Delete(root);
    return ok;
}

/* Mark a pending request done or failed and add its usage; *marked says whether it
 * was pending. Inside the caller's transaction; counts are the caller's. */
static int mark_request(struct jobstore *js, const char *batch_id, const char *custom_id,
                        bool ok, int64_t prompt, int64_t completion, bool *marked)
{
    sqlite3_stmt *st;
    int err = db_prepare(js,
                         "UPDATE batch_requests SET state=? WHERE batch_id=? AND"
                         " custom_id=? AND state='pending'",
                         &st);
    if (err) return err;
    bind_text(st, 1, ok ? "done" : "failed");
    bind_text(st, 2, batch_id);
    bind_text(st, 3, custom_id);
    err = db_step_done(js, st, "mark request");
    if (err) return err;
    *marked = sqlite3_changes(js->db) == 1;
    if (!*marked) return 0;
    err = db_prepare(js,
                     "UPDATE batches SET prompt_tokens=prompt_tokens+?,"
                     " completion_tokens=completion_tokens+? WHERE id=?",
                     &st);
    if (err) return err;
    sqlite3_bind_int64(st, 1, prompt);
    sqlite3_bind_int64(st, 2, completion);
    bind_text(st, 3, batch_id);
    return db_step_done(js, st, "add usage");
}

/* Recount request_counts from the requests' states. */
static int recount(struct jobstore *js, const char *batch_id)
{
    sqlite3_stmt *st;
    int err = db_prepare(js,
                         "UPDATE batches SET"
                         " completed=(SELECT count(*) FROM batch_requests"
                         "  WHERE batch_id=?1 AND state='done'),"
                         " failed=(SELECT count(*) FROM batch_requests"
                         "  WHERE batch_id=?1 AND state='failed') WHERE id=?1",
                         &st);
    if (err) return err;
    bind_text(st, 1, batch_id);
    return db_step_done(js, st, "recount");
}

/* The state of one request: "pending", "done", "failed"; ENG_ENOTFOUND. */
static int request_state(struct jobstore *js, const char *batch_id, const char *custom_id,
                         bool *pending)
{
    sqlite3_stmt *st;
    int err = db_prepare(js,
                         "SELECT state='pending' FROM batch_requests WHERE batch_id=? AND"
                         " custom_id=?",
                         &st);
    if (err) return err;
    bind_text(st, 1, batch_id);
    bind_text(st, 2, custom_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *pending = sqlite3_column_int(st, 0) != 0;
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE)
        return err_set(ENG_ENOTFOUND, "batch %s: no request with custom_id '%s'", batch_id,
                       custom_id);
    return rc == SQLITE_ROW ? 0 : db_fail(js, rc, "request state");
}

static int poison(struct jobstore *js, int err)
{
    js->broken = true;
    log_error("jobstore: %s; refusing further results until a restart", err_msg());
    return err;
}

/* Commit a new output or error file id for the batch before anything is written to
 * it, so that recovery always knows which file to read. */
static int ensure_output_id(struct jobstore *js, const struct jobstore_batch *b, bool ok,
                            char *id, size_t size)
{
    const char *have = ok ? b->output_file_id : b->error_file_id;
    if (have[0]) {
        snprintf(id, size, "%s", have);
        return 0;
    }
    jobstore_new_id("file-", id, size);
    sqlite3_stmt *st;
    int err = db_prepare(js,
                         ok ? "UPDATE batches SET output_file_id=? WHERE id=?"
                            : "UPDATE batches SET error_file_id=? WHERE id=?",
                         &st);
    if (err) return err;
    bind_text(st, 1, id);
    bind_text(st, 2, b->id);
    return db_step_done(js, st, "set output file");
}

/* Append `len` bytes (whole lines) to `path` and make them durable. On a failed
 * write the file is cut back to its old length, so no torn line stays in the
 * middle of it. */
static int append_bytes(struct jobstore *js, const char *path, const char *buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return err_set(ENG_EIO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = err_set(ENG_EIO, "%s: %s", path, strerror(errno));
        close(fd);
        return err;
    }
    int err = 0;
    if (write_all(fd, buf, len) != 0) {
        err = err_set(ENG_EIO, "%s: write: %s", path, strerror(errno));
        if (ftruncate(fd, sb.st_size) != 0) err = poison(js, err);
    } else if (fsync(fd) != 0) {
        err = poison(js, err_set(ENG_EIO, "%s: fsync: %s", path, strerror(errno)));
    } else if (sb.st_size == 0) {
        /* A new file: its directory entry must be durable too. */
        err = fsync_path(js->files_dir);
        if (err) err = poison(js, err);
    }
    close(fd);
    return err;
}

/* The checks of one result before anything is written: a single line whose
 * custom_id is the result's, not answered yet, not twice in this call. */
static int check_result(struct jobstore *js, const char *batch_id,
                        const struct jobstore_result *rs, int i, int64_t *prompt,
                        int64_t *completion)
{
    const struct jobstore_result *r = &rs[i];
    if (!r->custom_id || !r->line || strchr(r->line, '\n'))
        return err_set(ENG_EINVAL, "result line missing or not a single line");
    char *line_cid;
    if (!parse_result_line(r->line, strlen(r->line), &line_cid, prompt, completion))
        return err_set(ENG_EINVAL, "result line is not a JSON object with a custom_id");
    bool same = strcmp(line_cid, r->custom_id) == 0;
    free(line_cid);
    if (!same) return err_set(ENG_EINVAL, "result line's custom_id is not '%s'", r->custom_id);
    for (int k = 0; k < i; k++)
        if (strcmp(rs[k].custom_id, r->custom_id) == 0)
            return err_set(ENG_EINVAL, "custom_id '%s' is twice in one append", r->custom_id);
    /* A second line for a custom_id would be a second answer that no recovery could
     * take back. */
    bool pending = false;
    int err = request_state(js, batch_id, r->custom_id, &pending);
    if (!err && !pending)
        err = err_set(ENG_EINVAL, "batch %s: custom_id '%s' is already answered", batch_id,
                      r->custom_id);
    return err;
}

int jobstore_batch_append_results(struct jobstore *js, const char *batch_id,
                                  const struct jobstore_result *rs, int n)
{
    if (js->broken)
        return err_set(ENG_EIO, "%s: an earlier write failed; restart to recover", js->dir);
    if (n <= 0) return n == 0 ? 0 : err_set(ENG_EINVAL, "negative result count");
    struct jobstore_batch b;
    int err = jobstore_batch_get(js, batch_id, &b);
    if (err) return err;
    int64_t *usage = xcalloc((size_t)n * 2, sizeof *usage);
    char *buf[2] = {NULL, NULL}; /* [0] error lines, [1] output lines */
    size_t len[2] = {0, 0}, cap[2] = {0, 0};
    int appended = 0;
    if (b.status != JOBSTORE_IN_PROGRESS && b.status != JOBSTORE_CANCELLING) {
        err = err_set(ENG_EINVAL, "batch %s is %s: no more results", batch_id,
                      status_names[b.status]);
        goto out;
    }
    for (int i = 0; i < n && !err; i++) {
        err = check_result(js, batch_id, rs, i, &usage[2 * i], &usage[2 * i + 1]);
        if (err) break;
        const int k = rs[i].ok;
        size_t l = strlen(rs[i].line);
        if (len[k] + l + 1 > cap[k]) {
            cap[k] = MAX(2 * cap[k], len[k] + l + 1);
            buf[k] = xrealloc(buf[k], cap[k]);
        }
        memcpy(buf[k] + len[k], rs[i].line, l);
        buf[k][len[k] + l] = '\n';
        len[k] += l + 1;
    }
    for (int k = 1; k >= 0 && !err; k--) { /* each file: one append, one fsync */
        if (!len[k]) continue;
        char file_id[JOBSTORE_ID_MAX];
        err = ensure_output_id(js, &b, k, file_id, sizeof file_id);
        if (err) break;
        char *path = jobstore_body_path(js, file_id);
        err = append_bytes(js, path, buf[k], len[k]);
        free(path);
        if (!err) appended++;
    }
    /* Once a line is durable, a failure leaves it uncounted, which only the recovery
     * at the next open can settle, so it poisons the store. */
    if (err) {
        if (appended) err = poison(js, err);
        goto out;
    }
    int64_t n_ok = 0;
    err = db_begin(js);
    for (int i = 0; i < n && !err; i++) {
        bool marked = false;
        err = mark_request(js, batch_id, rs[i].custom_id, rs[i].ok, usage[2 * i],
                           usage[2 * i + 1], &marked);
        CHECK(err || marked); /* pending a moment ago, and we are its only writer */
        n_ok += rs[i].ok;
    }
    if (!err) {
        sqlite3_stmt *st;
        err = db_prepare(js, "UPDATE batches SET completed=completed+?, failed=failed+? WHERE id=?",
                         &st);
        if (!err) {
            sqlite3_bind_int64(st, 1, n_ok);
            sqlite3_bind_int64(st, 2, n - n_ok);
            bind_text(st, 3, batch_id);
            err = db_step_done(js, st, "count results");
        }
    }
    if (!err) err = db_commit(js);
    if (err) {
        db_rollback(js);
        err = poison(js, err);
    }
out:
    free(buf[0]);
    free(buf[1]);
    free(usage);
    jobstore_batch_deinit(&b);
    return err;
}

int jobstore_batch_append_result(struct jobstore *js, const char *batch_id,
                                 const char *custom_id, bool ok, const char *json_line)
{
    const struct jobstore_result r = {.custom_id = custom_id, .ok = ok, .line = json_line};
    return jobstore_batch_append_results(js, batch_id, &r, 1);
}

/* Read one output or error file back: mark every complete line's custom_id, cut
 * everything from the first torn or unparsable line on. Only the last append can
 * be damaged (each is synced before the next starts), so nothing counted is cut. */
static int recover_file(struct jobstore *js, const char *batch_id, const char *file_id,
                        bool ok)
{
    char *path = jobstore_body_path(js, file_id);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        /* ENOENT: the id was committed but the process died before the first
         * write, so there is nothing to recover. */
        int err = errno == ENOENT ? 0 : err_set(ENG_EIO, "%s: %s", path, strerror(errno));
        free(path);
        return err;
    }
    int err = 0;
    int fd2 = dup(fd);
    FILE *f = fd2 >= 0 ? fdopen(fd2, "r") : NULL;
    if (!f) {
        err = err_set(ENG_EIO, "%s: %s", path, strerror(errno));
        if (fd2 >= 0) close(fd2);
        goto out;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    off_t good = 0;
    while (!err && (len = getline(&line, &cap, f)) > 0) {
        char *cid;
        int64_t prompt, completion;
        if (line[len - 1] != '\n' ||
            !parse_result_line(line, (size_t)len - 1, &cid, &prompt, &completion))
            break;
        bool marked;
        err = mark_request(js, batch_id, cid, ok, prompt, completion, &marked);
        if (!err && marked)
            log_info("jobstore: %s: recovered '%s' from %s", batch_id, cid, path);
        free(cid);
        good += len;
    }
    free(line);
    fclose(f);
    struct stat sb;
    if (!err && fstat(fd, &sb) == 0 && sb.st_size > good) {
        log_warn("jobstore: %s: cutting %lld bytes of an unfinished line", path,
                 (long long)(sb.st_size - good));
        if (ftruncate(fd, good) != 0 || fsync(fd) != 0)
            err = err_set(ENG_EIO, "%s: truncate: %s", path, strerror(errno));
    }
out:
    close(fd);
    free(path);
    return err;
}

int jobstore_batch_recover(struct jobstore *js, const char *batch_id)
{
    struct jobstore_batch b;
    int err = jobstore_batch_get(js, batch_id, &b);
    if (err) return err;
    err = db_begin(js);
    if (!err && b.output_file_id[0])
        err = recover_file(js, batch_id, b.output_file_id, true);
    if (!err && b.error_file_id[0])
        err = recover_file(js, batch_id, b.error_file_id, false);
    /* Recounted from the states rather than incremented: the counts then agree
     * with the files whatever the crash interrupted. */
    if (!err) err = recount(js, batch_id);
    if (!err) err = db_commit(js);
    if (err) db_rollback(js);
    jobstore_batch_deinit(&b);
    return err;
}

void jobstore_batch_deinit(struct jobstore_batch *b)
{
    if (!b) return;
    free(b->endpoint);
    free(b->metadata);
    free(b->errors);
    b->endpoint = b->metadata = b->errors = NULL;
}

void jobstore_batches_free(struct jobstore_batch *bs, int n)
{
    for (int i = 0; i < n; i++)
        jobstore_batch_deinit(&bs[i]);
    free(bs);
}

