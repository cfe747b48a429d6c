/*
 * jobstore_sqlite_result.c - the SQLite job store's batch results: each line appended to
 * the batch's output or error file and fsynced before its request counts as done, and the
 * recovery after a crash that makes the files and the counts agree again (see jobstore.h
 * for the durability argument). Invariant: a request counted in request_counts has its
 * line, synced, in one of the two files; no custom_id has more than one line across them.
 * Thread: the store's owner.
 */
#include "jobstore_sqlite.h"

/* Mark a pending request done or failed and add its usage; *marked says whether it
 * was pending. Inside the caller's transaction; counts are the caller's. */
static int mark_request(struct jobstore_sqlite *js, const char *batch_id,
                        const char *custom_id, bool ok, int64_t prompt, int64_t completion,
                        bool *marked)
{
    sqlite3_stmt *st;
    int err =
        jobstore_sqlite_db_prepare(js,
                                   "UPDATE batch_requests SET state=? WHERE batch_id=? AND"
                                   " custom_id=? AND state='pending'",
                                   &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, ok ? "done" : "failed");
    jobstore_sqlite_bind_text(st, 2, batch_id);
    jobstore_sqlite_bind_text(st, 3, custom_id);
    err = jobstore_sqlite_db_step_done(js, st, "mark request");
    if (err) return err;
    *marked = sqlite3_changes(js->db) == 1;
    if (!*marked) return 0;
    err = jobstore_sqlite_db_prepare(js,
                                     "UPDATE batches SET prompt_tokens=prompt_tokens+?,"
                                     " completion_tokens=completion_tokens+? WHERE id=?",
                                     &st);
    if (err) return err;
    sqlite3_bind_int64(st, 1, prompt);
    sqlite3_bind_int64(st, 2, completion);
    jobstore_sqlite_bind_text(st, 3, batch_id);
    return jobstore_sqlite_db_step_done(js, st, "add usage");
}

/* Recount request_counts from the requests' states. */
static int recount(struct jobstore_sqlite *js, const char *batch_id)
{
    sqlite3_stmt *st;
    int err =
        jobstore_sqlite_db_prepare(js,
                                   "UPDATE batches SET"
                                   " completed=(SELECT count(*) FROM batch_requests"
                                   "  WHERE batch_id=?1 AND state='done'),"
                                   " failed=(SELECT count(*) FROM batch_requests"
                                   "  WHERE batch_id=?1 AND state='failed') WHERE id=?1",
                                   &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, batch_id);
    return jobstore_sqlite_db_step_done(js, st, "recount");
}

/* The state of one request: "pending", "done", "failed"; ENG_ENOTFOUND. */
static int request_state(struct jobstore_sqlite *js, const char *batch_id,
                         const char *custom_id, bool *pending)
{
    sqlite3_stmt *st;
    int err = jobstore_sqlite_db_prepare(
        js,
        "SELECT state='pending' FROM batch_requests WHERE batch_id=? AND"
        " custom_id=?",
        &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, batch_id);
    jobstore_sqlite_bind_text(st, 2, custom_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *pending = sqlite3_column_int(st, 0) != 0;
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE)
        return err_set(ENG_ENOTFOUND, "batch %s: no request with custom_id '%s'", batch_id,
                       custom_id);
    return rc == SQLITE_ROW ? 0 : jobstore_sqlite_db_fail(js, rc, "request state");
}

static int poison(struct jobstore_sqlite *js, int err)
{
    js->broken = true;
    log_error("jobstore: %s; refusing further results until a restart", err_msg());
    return err;
}

/* Commit a new output or error file id for the batch before anything is written to
 * it, so that recovery always knows which file to read. */
static int ensure_output_id(struct jobstore_sqlite *js, const struct jobstore_batch *b,
                            bool ok, char *id, size_t size)
{
    const char *have = ok ? b->output_file_id : b->error_file_id;
    if (have[0]) {
        snprintf(id, size, "%s", have);
        return 0;
    }
    jobstore_new_id("file-", id, size);
    sqlite3_stmt *st;
    int err =
        jobstore_sqlite_db_prepare(js,
                                   ok ? "UPDATE batches SET output_file_id=? WHERE id=?"
                                      : "UPDATE batches SET error_file_id=? WHERE id=?",
                                   &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, id);
    jobstore_sqlite_bind_text(st, 2, b->id);
    return jobstore_sqlite_db_step_done(js, st, "set output file");
}

/* Append `len` bytes (whole lines) to `path` and make them durable. On a failed
 * write the file is cut back to its old length, so no torn line stays in the
 * middle of it. */
static int append_bytes(struct jobstore_sqlite *js, const char *path, const char *buf,
                        size_t len)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return err_set(jobstore_sqlite_errno_code(errno), "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = err_set(ENG_EIO, "%s: %s", path, strerror(errno));
        close(fd);
        return err;
    }
    int err = 0;
    if (jobstore_sqlite_write_all(fd, buf, len) != 0) {
        /* No room (JOBSTORE_EFULL) is not poison once the file is cut back: the
         * file is as it was, and a later append after space is freed is fine. */
        err = err_set(jobstore_sqlite_errno_code(errno), "%s: write: %s", path,
                      strerror(errno));
        if (ftruncate(fd, sb.st_size) != 0) err = poison(js, err);
    } else if (fsync(fd) != 0) {
        err = poison(js, err_set(ENG_EIO, "%s: fsync: %s", path, strerror(errno)));
    } else if (sb.st_size == 0) {
        /* A new file: its directory entry must be durable too. */
        err = jobstore_sqlite_fsync_path(js->files_dir);
        if (err) err = poison(js, err);
    }
    close(fd);
    return err;
}

/* The check of one result that needs the database (jobstore.c made the others):
 * not answered yet. */
static int check_unanswered(struct jobstore_sqlite *js, const char *batch_id,
                            const struct jobstore_result *r)
{
    /* A second line for a custom_id would be a second answer that no recovery could
     * take back. */
    bool pending = false;
    int err = request_state(js, batch_id, r->custom_id, &pending);
    if (!err && !pending)
        err = err_set(ENG_EINVAL, "batch %s: custom_id '%s' is already answered", batch_id,
                      r->custom_id);
    return err;
}

int jobstore_sqlite_batch_append_results(struct jobstore *base, const char *batch_id,
                                         const struct jobstore_result *rs,
                                         const int64_t *usage, int n)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    if (js->broken)
        return err_set(ENG_EIO, "%s: an earlier write failed; restart to recover", js->dir);
    struct jobstore_batch b;
    int err = jobstore_sqlite_batch_get(base, batch_id, &b);
    if (err) return err;
    char *buf[2] = {NULL, NULL}; /* [0] error lines, [1] output lines */
    size_t len[2] = {0, 0}, cap[2] = {0, 0};
    int appended = 0;
    if (b.status != JOBSTORE_IN_PROGRESS && b.status != JOBSTORE_CANCELLING) {
        err = err_set(ENG_EINVAL, "batch %s is %s: no more results", batch_id,
                      jobstore_status_names[b.status]);
        goto out;
    }
    for (int i = 0; i < n && !err; i++) {
        err = check_unanswered(js, batch_id, &rs[i]);
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
        char *path = jobstore_sqlite_body_path(js, file_id);
        err = append_bytes(js, path, buf[k], len[k]);
        free(path);
        if (!err) appended++;
    }
    /* Once a line is durable, a failure leaves it uncounted, which only recovery can
     * settle. After an I/O error that is the next open's (the store is poisoned);
     * after no room the lines are synced and sound, so the caller's
     * jobstore_batch_recover settles them as soon as the database has room. */
    if (err) {
        if (appended && err != JOBSTORE_EFULL) err = poison(js, err);
        goto out;
    }
    int64_t n_ok = 0;
    err = jobstore_sqlite_db_begin(js);
    for (int i = 0; i < n && !err; i++) {
        bool marked = false;
        err = mark_request(js, batch_id, rs[i].custom_id, rs[i].ok, usage[2 * i],
                           usage[2 * i + 1], &marked);
        CHECK(err || marked); /* pending a moment ago, and we are its only writer */
        n_ok += rs[i].ok;
    }
    if (!err) {
        sqlite3_stmt *st;
        err = jobstore_sqlite_db_prepare(
            js, "UPDATE batches SET completed=completed+?, failed=failed+? WHERE id=?",
            &st);
        if (!err) {
            sqlite3_bind_int64(st, 1, n_ok);
            sqlite3_bind_int64(st, 2, n - n_ok);
            jobstore_sqlite_bind_text(st, 3, batch_id);
            err = jobstore_sqlite_db_step_done(js, st, "count results");
        }
    }
    if (!err) err = jobstore_sqlite_db_commit(js);
    if (err) {
        jobstore_sqlite_db_rollback(js);
        if (err != JOBSTORE_EFULL) err = poison(js, err);
    }
out:
    free(buf[0]);
    free(buf[1]);
    jobstore_batch_deinit(&b);
    return err;
}

/* Read one output or error file back: mark every complete line's custom_id, cut
 * everything from the first torn or unparsable line on. Only the last append can
 * be damaged (each is synced before the next starts), so nothing counted is cut. */
static int recover_file(struct jobstore_sqlite *js, const char *batch_id,
                        const char *file_id, bool ok)
{
    char *path = jobstore_sqlite_body_path(js, file_id);
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
            !jobstore_result_parse(line, (size_t)len - 1, &cid, &prompt, &completion))
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

int jobstore_sqlite_batch_recover(struct jobstore *base, const char *batch_id)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    struct jobstore_batch b;
    int err = jobstore_sqlite_batch_get(base, batch_id, &b);
    if (err) return err;
    err = jobstore_sqlite_db_begin(js);
    if (!err && b.output_file_id[0])
        err = recover_file(js, batch_id, b.output_file_id, true);
    if (!err && b.error_file_id[0])
        err = recover_file(js, batch_id, b.error_file_id, false);
    /* Recounted from the states rather than incremented: the counts then agree
     * with the files whatever the crash interrupted. */
    if (!err) err = recount(js, batch_id);
    if (!err) err = jobstore_sqlite_db_commit(js);
    if (err) jobstore_sqlite_db_rollback(js);
    jobstore_batch_deinit(&b);
    return err;
}
