/*
 * jobstore_sqlite.h - what the SQLite job store's files share (jobstore_sqlite.c:
 * files, jobstore_sqlite_open.c: open and recovery at start,
 * jobstore_sqlite_batch.c: batches, jobstore_sqlite_result.c: results): the
 * backend's struct, its entries of the table (jobstore_impl.h), column lists, and
 * small SQLite and file helpers. Private to those files.
 */
#ifndef H2O_JOBSTORE_SQLITE_H
#define H2O_JOBSTORE_SQLITE_H

#include "jobstore.h"
#include "jobstore_impl.h"

#include "err.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* 1: issue 5's; 2: batch_requests' lease columns (jobstore_batch_claim), added to a
 * version 1 database at open. */
#define SCHEMA_VERSION 2
#define APPLICATION_ID 0x68326f73 /* "h2os" */

struct jobstore_sqlite {
    struct jobstore base; /* first: the table and the clock */
    sqlite3 *db;
    char *dir, *files_dir, *db_path;
    int lock_fd;
    bool broken; /* an output write failed: refuse writes until a restart */
};

struct jobstore_sqlite_upload {
    struct jobstore_upload base; /* first */
    struct jobstore_sqlite *js;
    char id[JOBSTORE_ID_MAX];
    char *tmp_path;
    int fd;
    int64_t bytes;
    int failed; /* 0, or the code of the write that failed (JOBSTORE_EFULL, ENG_EIO) */
};

/* The column stamped when a batch enters each state (validating: created_at). */
__attribute__((unused)) static const char *const status_columns[] = {
    [JOBSTORE_VALIDATING] = "created_at",      [JOBSTORE_FAILED] = "failed_at",
    [JOBSTORE_IN_PROGRESS] = "in_progress_at", [JOBSTORE_FINALIZING] = "finalizing_at",
    [JOBSTORE_COMPLETED] = "completed_at",     [JOBSTORE_EXPIRED] = "expired_at",
    [JOBSTORE_CANCELLING] = "cancelling_at",   [JOBSTORE_CANCELLED] = "cancelled_at",
};

#define BATCH_COLS                                                                         \
    "id, input_file_id, endpoint, completion_window, status, created_at,"                  \
    " in_progress_at, expires_at, finalizing_at, completed_at, failed_at, expired_at,"     \
    " cancelling_at, cancelled_at, total, completed, failed, prompt_tokens,"               \
    " completion_tokens, output_file_id, error_file_id, metadata, errors"
#define FILE_COLS "id, bytes, created_at, filename, purpose, status"
#define UNFINISHED "('validating','in_progress','finalizing','cancelling')"

/* ---- small helpers ---- */

/* The SQLite store behind a struct jobstore whose table is this backend's. */
static inline struct jobstore_sqlite *jobstore_sqlite_of(struct jobstore *js)
{
    return (struct jobstore_sqlite *)js;
}

/* Is errno `e` "no room": the disk, the quota, or the process's file size limit
 * (RLIMIT_FSIZE; the server ignores SIGXFSZ so that it sees EFBIG instead of
 * dying)? All three mean the same to a user: free space, then try again. */
static inline bool jobstore_sqlite_errno_full(int e)
{
    return e == ENOSPC || e == EDQUOT || e == EFBIG;
}

/* The code for a failed file operation with errno `e`. */
static inline int jobstore_sqlite_errno_code(int e)
{
    return jobstore_sqlite_errno_full(e) ? JOBSTORE_EFULL : ENG_EIO;
}

/* Does the data dir lack room for the database to grow: a probe write there fails
 * for want of space, or one of the database's files is at the process's file size
 * limit? For SQLite I/O errors whose errno SQLite did not keep (jobstore.c). */
bool jobstore_sqlite_db_no_room(const struct jobstore_sqlite *js);

/* SQLite's verdict as an engine code: a damaged file is a format error, a broken
 * constraint is the caller's argument, no room is JOBSTORE_EFULL, everything else
 * is the disk. SQLite reports ENOSPC as SQLITE_FULL, but EFBIG and EDQUOT (and
 * ENOSPC while growing the -shm file) as an I/O error, often without the errno
 * (sqlite3_system_errno is 0 once its rollback has run), so an I/O error on a
 * write is "full" when the errno says so or, lacking one, when the data dir has
 * no room (jobstore_sqlite_db_no_room). */
static inline int jobstore_sqlite_db_code(const struct jobstore_sqlite *js, int rc,
                                          int sys_errno)
{
    switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT: return ENG_EFORMAT;
    case SQLITE_CONSTRAINT: return ENG_EINVAL;
    case SQLITE_FULL: return JOBSTORE_EFULL;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
        if (jobstore_sqlite_errno_full(sys_errno)) return JOBSTORE_EFULL;
        if (sys_errno == 0 &&
            (rc == SQLITE_IOERR_WRITE || rc == SQLITE_IOERR_SHMSIZE ||
             rc == SQLITE_IOERR_FSYNC || rc == SQLITE_IOERR ||
             rc == SQLITE_IOERR_TRUNCATE) &&
            jobstore_sqlite_db_no_room(js))
            return JOBSTORE_EFULL;
        return ENG_EIO;
    default: return ENG_EIO;
    }
}

static inline int jobstore_sqlite_db_fail(struct jobstore_sqlite *js, int rc,
                                          const char *what)
{
    const int e = js->db ? sqlite3_system_errno(js->db) : 0;
    /* sqlite3_exec's code is not the extended one that says which I/O failed. */
    if (js->db && (sqlite3_extended_errcode(js->db) & 0xff) == (rc & 0xff))
        rc = sqlite3_extended_errcode(js->db);
    const int code = jobstore_sqlite_db_code(js, rc, e);
    return err_set(code, "%s: %s: %s%s", js->db_path, what,
                   js->db ? sqlite3_errmsg(js->db) : sqlite3_errstr(rc),
                   code == JOBSTORE_EFULL && (rc & 0xff) != SQLITE_FULL ? " (no space left)"
                                                                        : "");
}

static inline int jobstore_sqlite_db_exec(struct jobstore_sqlite *js, const char *sql)
{
    int rc = sqlite3_exec(js->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : jobstore_sqlite_db_fail(js, rc, sql);
}

static inline int jobstore_sqlite_db_prepare(struct jobstore_sqlite *js, const char *sql,
                                             sqlite3_stmt **st)
{
    int rc = sqlite3_prepare_v2(js->db, sql, -1, st, NULL);
    return rc == SQLITE_OK ? 0 : jobstore_sqlite_db_fail(js, rc, "prepare");
}

/* IMMEDIATE takes the write lock up front: a transaction that reads, checks and
 * then writes must not find the data changed under it. */
static inline int jobstore_sqlite_db_begin(struct jobstore_sqlite *js)
{
    return jobstore_sqlite_db_exec(js, "BEGIN IMMEDIATE");
}

static inline int jobstore_sqlite_db_commit(struct jobstore_sqlite *js)
{
    return jobstore_sqlite_db_exec(js, "COMMIT");
}

static inline void jobstore_sqlite_db_rollback(struct jobstore_sqlite *js)
{
    if (!sqlite3_get_autocommit(js->db)) sqlite3_exec(js->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Run a statement that returns no rows; finalizes it. */
static inline int jobstore_sqlite_db_step_done(struct jobstore_sqlite *js, sqlite3_stmt *st,
                                               const char *what)
{
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : jobstore_sqlite_db_fail(js, rc, what);
}

static inline void jobstore_sqlite_bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

static inline void jobstore_sqlite_col_copy(sqlite3_stmt *st, int i, char *buf, size_t size)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    snprintf(buf, size, "%s", s ? (const char *)s : "");
}

static inline char *jobstore_sqlite_col_dup(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? xstrdup((const char *)s) : NULL;
}

static inline int jobstore_sqlite_fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(ENG_EIO, "%s: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    return rc == 0
               ? 0
               : err_set(jobstore_sqlite_errno_code(e), "%s: fsync: %s", path, strerror(e));
}

static inline int jobstore_sqlite_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* mkdir -p for one level, then fsync the parent so the new entry survives a crash. */
static inline int jobstore_sqlite_make_dir(const char *path)
{
    if (mkdir(path, 0755) == 0) {
        char *parent = xstrdup(path);
        char *slash = strrchr(parent, '/');
        while (slash && slash > parent && slash[1] == '\0') { /* trailing '/' */
            *slash = '\0';
            slash = strrchr(parent, '/');
        }
        int err = 0;
        if (slash == parent)
            err = jobstore_sqlite_fsync_path("/");
        else if (slash) {
            *slash = '\0';
            err = jobstore_sqlite_fsync_path(parent);
        } else
            err = jobstore_sqlite_fsync_path(".");
        free(parent);
        return err;
    }
    struct stat sb;
    if (errno == EEXIST && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return 0;
    return err_set(ENG_EIO, "%s: cannot create directory: %s", path, strerror(errno));
}

/* files/<id> under the data dir (caller frees). Thread: the store's. */
char *jobstore_sqlite_body_path(const struct jobstore_sqlite *js, const char *id);

/* The seq of row `after` in `table` (0 when after is NULL), for pagination. */
int jobstore_sqlite_after_seq(struct jobstore_sqlite *js, const char *table,
                              const char *after, bool ascending, int64_t *out);

/* Insert a file row (the body is already on disk). */
int jobstore_sqlite_file_insert(struct jobstore_sqlite *js, const char *id, int64_t bytes,
                                const char *filename, const char *purpose);

/* The backend's entries of the table (jobstore_impl.h says what each may assume);
 * the table itself is in jobstore_sqlite_open.c. Thread: the store's owner. */
int jobstore_sqlite_upload_begin(struct jobstore *js, struct jobstore_upload **out);
int jobstore_sqlite_upload_write(struct jobstore_upload *u, const void *data, size_t len);
int jobstore_sqlite_upload_commit(struct jobstore_upload *u, const char *filename,
                                  const char *purpose, struct jobstore_file *out);
void jobstore_sqlite_upload_abort(struct jobstore_upload *u);
int jobstore_sqlite_file_get(struct jobstore *js, const char *id,
                             struct jobstore_file *out);
int jobstore_sqlite_file_list(struct jobstore *js, const char *purpose, const char *after,
                              int limit, bool ascending, struct jobstore_file **out, int *n,
                              bool *has_more);
int jobstore_sqlite_file_delete(struct jobstore *js, const char *id);
int jobstore_sqlite_file_path(struct jobstore *js, const char *id, char **path);
int jobstore_sqlite_file_open(struct jobstore *js, const char *id, FILE **out,
                              int64_t *bytes);
int jobstore_sqlite_file_read(struct jobstore *js, const char *id, int64_t offset,
                              void *buf, size_t len, size_t *got);
int jobstore_sqlite_batch_create(struct jobstore *js, const char *input_file_id,
                                 const char *endpoint, const char *completion_window,
                                 int64_t hours, const char *metadata, int64_t expires_in_s,
                                 struct jobstore_batch *out);
int jobstore_sqlite_batch_get(struct jobstore *js, const char *id,
                              struct jobstore_batch *out);
int jobstore_sqlite_batch_list(struct jobstore *js, const char *after, int limit,
                               bool ascending, struct jobstore_batch **out, int *n,
                               bool *has_more);
int jobstore_sqlite_unfinished_batches(struct jobstore *js, struct jobstore_batch **out,
                                       int *n);
int jobstore_sqlite_batch_set_status(struct jobstore *js, const char *id,
                                     enum jobstore_status to, const char *errors);
int jobstore_sqlite_batch_add_requests(struct jobstore *js, const char *batch_id,
                                       const struct jobstore_request *reqs, int n);
int jobstore_sqlite_batch_pending(struct jobstore *js, const char *batch_id,
                                  int64_t after_line, int max,
                                  struct jobstore_request **out, int *n);
int jobstore_sqlite_batch_append_results(struct jobstore *js, const char *batch_id,
                                         const struct jobstore_result *rs,
                                         const int64_t *usage, int n);
int jobstore_sqlite_batch_recover(struct jobstore *js, const char *batch_id);
int jobstore_sqlite_batch_claim(struct jobstore *js, const char *batch_id,
                                const char *owner, int64_t lease_s, int max,
                                struct jobstore_request **out, int *n);
int jobstore_sqlite_batch_renew(struct jobstore *js, const char *batch_id,
                                const char *owner, int64_t lease_s, int64_t *renewed,
                                enum jobstore_status *status);
int jobstore_sqlite_batch_release(struct jobstore *js, const char *batch_id,
                                  const char *owner, int64_t *released);

#endif
