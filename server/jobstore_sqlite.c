/*
 * jobstore_sqlite.c - the SQLite job store (see jobstore.h for the layout and the
 * crash-ordering rules): its files, whose bodies live under files/.
 * jobstore_sqlite_open.c opens the store, jobstore_sqlite_batch.c keeps the
 * batches and jobstore_sqlite_result.c their results; all of them build on this
 * file, never the other way round.
 *
 * Invariant: every files row has a body on disk (the body is written and synced
 * before its row).
 * Thread: the store's owner only (jobstore.h).
 */
#include "jobstore_sqlite.h"

#include <sys/resource.h>

bool jobstore_sqlite_db_no_room(const struct jobstore_sqlite *js)
{
    /* The process's file size limit: SQLite's files grow a page (or a WAL frame,
     * or a 32 KiB index region) at a time, so one within 64 KiB of it is full. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        static const char *const suffixes[] = {"", "-wal", "-shm"};
        for (size_t i = 0; i < ARRAY_LEN(suffixes); i++) {
            char path[4096];
            struct stat sb;
            snprintf(path, sizeof path, "%s%s", js->db_path, suffixes[i]);
            if (stat(path, &sb) == 0 && (rlim_t)sb.st_size + 65536 > rl.rlim_cur)
                return true;
        }
    }
    /* The disk or the quota: can 64 KiB be written next to the database? */
    char *probe = util_path_join(js->dir, "probe.tmp");
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool full = fd < 0 && jobstore_sqlite_errno_full(errno);
    if (fd >= 0) {
        static const char zeros[65536];
        full = jobstore_sqlite_write_all(fd, zeros, sizeof zeros) != 0 &&
               jobstore_sqlite_errno_full(errno);
        if (!full && fsync(fd) != 0) full = jobstore_sqlite_errno_full(errno);
        close(fd);
        unlink(probe);
    }
    free(probe);
    return full;
}

/* ---- files ---- */

char *jobstore_sqlite_body_path(const struct jobstore_sqlite *js, const char *id)
{
    return util_path_join(js->files_dir, id);
}

int jobstore_sqlite_upload_begin(struct jobstore *base, struct jobstore_upload **out)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    struct jobstore_sqlite_upload *u = xcalloc(1, sizeof *u);
    u->base.js = base;
    u->js = js;
    jobstore_new_id("file-", u->id, sizeof u->id);
    char name[JOBSTORE_ID_MAX + 8];
    snprintf(name, sizeof name, "%s.tmp", u->id);
    u->tmp_path = util_path_join(js->files_dir, name);
    u->fd = open(u->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (u->fd < 0) {
        int err = err_set(jobstore_sqlite_errno_code(errno), "%s: %s", u->tmp_path,
                          strerror(errno));
        free(u->tmp_path);
        free(u);
        *out = NULL;
        return err;
    }
    *out = &u->base;
    return 0;
}

int jobstore_sqlite_upload_write(struct jobstore_upload *ub, const void *data, size_t len)
{
    struct jobstore_sqlite_upload *u = (struct jobstore_sqlite_upload *)ub;
    if (u->failed) return err_set(u->failed, "%s: an earlier write failed", u->tmp_path);
    if (jobstore_sqlite_write_all(u->fd, data, len) != 0) {
        const int e = errno;
        u->failed = jobstore_sqlite_errno_code(e);
        return err_set(u->failed, "%s: write: %s", u->tmp_path, strerror(e));
    }
    u->bytes += (int64_t)len;
    return 0;
}

void jobstore_sqlite_upload_abort(struct jobstore_upload *ub)
{
    struct jobstore_sqlite_upload *u = (struct jobstore_sqlite_upload *)ub;
    if (u->fd >= 0) close(u->fd);
    unlink(u->tmp_path);
    free(u->tmp_path);
    free(u);
}

static void file_from_row(sqlite3_stmt *st, struct jobstore_file *f)
{
    memset(f, 0, sizeof *f);
    jobstore_sqlite_col_copy(st, 0, f->id, sizeof f->id);
    f->bytes = sqlite3_column_int64(st, 1);
    f->created_at = sqlite3_column_int64(st, 2);
    f->filename = jobstore_sqlite_col_dup(st, 3);
    jobstore_sqlite_col_copy(st, 4, f->purpose, sizeof f->purpose);
    jobstore_sqlite_col_copy(st, 5, f->status, sizeof f->status);
}

int jobstore_sqlite_file_insert(struct jobstore_sqlite *js, const char *id, int64_t bytes,
                                const char *filename, const char *purpose)
{
    sqlite3_stmt *st;
    int err = jobstore_sqlite_db_prepare(
        js,
        "INSERT INTO files(id, bytes, created_at, filename, purpose, status)"
        " VALUES(?, ?, ?, ?, ?, 'processed')",
        &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, id);
    sqlite3_bind_int64(st, 2, bytes);
    sqlite3_bind_int64(st, 3, jobstore_now(&js->base));
    jobstore_sqlite_bind_text(st, 4, filename);
    jobstore_sqlite_bind_text(st, 5, purpose);
    return jobstore_sqlite_db_step_done(js, st, "insert file");
}

int jobstore_sqlite_upload_commit(struct jobstore_upload *ub, const char *filename,
                                  const char *purpose, struct jobstore_file *out)
{
    struct jobstore_sqlite_upload *u = (struct jobstore_sqlite_upload *)ub;
    struct jobstore_sqlite *js = u->js;
    char *path = NULL;
    int err = 0;
    if (u->failed) {
        err = err_set(u->failed, "%s: an earlier write failed", u->tmp_path);
        goto fail;
    }
    /* ENOSPC from fsync: a filesystem that allocates late (NFS, delayed
     * allocation) learned only now that the body does not fit. */
    if (fsync(u->fd) != 0) {
        err = err_set(jobstore_sqlite_errno_code(errno), "%s: fsync: %s", u->tmp_path,
                      strerror(errno));
        goto fail;
    }
    close(u->fd);
    u->fd = -1;
    path = jobstore_sqlite_body_path(js, u->id);
    if (rename(u->tmp_path, path) != 0) {
        err = err_set(jobstore_sqlite_errno_code(errno), "%s: rename: %s", path,
                      strerror(errno));
        goto fail;
    }
    /* The body's directory entry must be on disk before the row can point at it. */
    err = jobstore_sqlite_fsync_path(js->files_dir);
    if (!err) err = jobstore_sqlite_file_insert(js, u->id, u->bytes, filename, purpose);
    if (err) {
        unlink(path);
        goto fail;
    }
    free(path);
    free(u->tmp_path);
    char id[JOBSTORE_ID_MAX];
    memcpy(id, u->id, sizeof id);
    free(u);
    return out ? jobstore_sqlite_file_get(&js->base, id, out) : 0;
fail:
    free(path);
    jobstore_sqlite_upload_abort(&u->base);
    return err;
}

int jobstore_sqlite_file_get(struct jobstore *base, const char *id,
                             struct jobstore_file *out)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    sqlite3_stmt *st;
    int err =
        jobstore_sqlite_db_prepare(js, "SELECT " FILE_COLS " FROM files WHERE id=?", &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) file_from_row(st, out);
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) return err_set(ENG_ENOTFOUND, "no such file: '%s'", id);
    return rc == SQLITE_ROW ? 0 : jobstore_sqlite_db_fail(js, rc, "get file");
}

/* The list position (seq) of `after` in `table`, or the open end when NULL. */
int jobstore_sqlite_after_seq(struct jobstore_sqlite *js, const char *table,
                              const char *after, bool ascending, int64_t *seq)
{
    if (!after) {
        *seq = ascending ? -1 : INT64_MAX;
        return 0;
    }
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT seq FROM %s WHERE id=?", table);
    sqlite3_stmt *st;
    int err = jobstore_sqlite_db_prepare(js, sql, &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, after);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *seq = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) return err_set(ENG_ENOTFOUND, "after: no such id '%s'", after);
    return rc == SQLITE_ROW ? 0 : jobstore_sqlite_db_fail(js, rc, "list");
}

int jobstore_sqlite_file_list(struct jobstore *base, const char *purpose, const char *after,
                              int limit, bool ascending, struct jobstore_file **out, int *n,
                              bool *has_more)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    int64_t seq;
    int err = jobstore_sqlite_after_seq(js, "files", after, ascending, &seq);
    if (err) return err;
    sqlite3_stmt *st;
    err = jobstore_sqlite_db_prepare(
        js,
        ascending ? "SELECT " FILE_COLS " FROM files WHERE (?1 IS NULL OR"
                    " purpose=?1) AND seq>?2 ORDER BY seq ASC LIMIT ?3"
                  : "SELECT " FILE_COLS " FROM files WHERE (?1 IS NULL OR"
                    " purpose=?1) AND seq<?2 ORDER BY seq DESC LIMIT ?3",
        &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, purpose);
    sqlite3_bind_int64(st, 2, seq);
    sqlite3_bind_int(st, 3, limit + 1); /* one more tells has_more */
    struct jobstore_file *fs = xcalloc((size_t)limit, sizeof *fs);
    int rc, k = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (k == limit) {
            *has_more = true;
            continue;
        }
        file_from_row(st, &fs[k++]);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        jobstore_files_free(fs, k);
        *has_more = false;
        return jobstore_sqlite_db_fail(js, rc, "list files");
    }
    *out = fs;
    *n = k;
    return 0;
}

int jobstore_sqlite_file_delete(struct jobstore *base, const char *id)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    sqlite3_stmt *st;
    int err = jobstore_sqlite_db_prepare(js, "DELETE FROM files WHERE id=?", &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, id);
    err = jobstore_sqlite_db_step_done(js, st, "delete file");
    if (err) return err;
    if (sqlite3_changes(js->db) == 0)
        return err_set(ENG_ENOTFOUND, "no such file: '%s'", id);
    /* The row is gone, so the file is gone for every reader; a crash before the
     * unlink leaves an orphan body that the next open removes. */
    char *path = jobstore_sqlite_body_path(js, id);
    if (unlink(path) != 0 && errno != ENOENT)
        log_warn("jobstore: %s: unlink: %s", path, strerror(errno));
    free(path);
    return 0;
}

int jobstore_sqlite_file_path(struct jobstore *base, const char *id, char **path)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    struct jobstore_file f;
    *path = NULL;
    int err = jobstore_sqlite_file_get(base, id, &f);
    if (err) return err;
    *path = jobstore_sqlite_body_path(js, f.id);
    jobstore_file_deinit(&f);
    return 0;
}

int jobstore_sqlite_file_read(struct jobstore *base, const char *id, int64_t offset,
                              void *buf, size_t len, size_t *got)
{
    char *path;
    int err = jobstore_sqlite_file_path(base, id, &path);
    if (err) return err;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err = err_set(ENG_EIO, "%s: %s", path, strerror(errno));
        free(path);
        return err;
    }
    /* Short reads only at the end: the caller reads on until *got is 0. */
    size_t have = 0;
    while (have < len) {
        ssize_t r =
            pread(fd, (char *)buf + have, len - have, (off_t)(offset + (int64_t)have));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            err = err_set(ENG_EIO, "%s: read: %s", path, strerror(errno));
            break;
        }
        if (r == 0) break;
        have += (size_t)r;
    }
    close(fd);
    free(path);
    *got = err ? 0 : have;
    return err;
}

int jobstore_sqlite_file_open(struct jobstore *base, const char *id, FILE **out,
                              int64_t *bytes)
{
    char *path;
    int err = jobstore_sqlite_file_path(base, id, &path);
    if (err) return err;
    FILE *f = fopen(path, "rb");
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) != 0) {
        err = err_set(ENG_EIO, "%s: %s", path, strerror(errno));
        if (f) fclose(f);
    } else {
        *out = f;
        *bytes = (int64_t)sb.st_size;
    }
    free(path);
    return err;
}
