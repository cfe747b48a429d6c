/*
 * jobstore.c - the durable store behind the Files and Batches API (see jobstore.h
 * for the layout and the crash-ordering rules this file implements).
 *
 * Owns: the SQLite handle, the data-dir lock and the files/ directory.
 * Invariants: every files row has a body on disk; a request counted in a batch's
 * request_counts has its line, synced, in the batch's output or error file; no
 * custom_id has more than one line across the two files.
 * Thread: the store's owner only (jobstore.h).
 */
#include "jobstore.h"

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

#define SCHEMA_VERSION 1
#define APPLICATION_ID 0x68326f73 /* "h2os" */
#define LIST_MAX 10000

struct jobstore {
    sqlite3 *db;
    char *dir, *files_dir, *db_path;
    int lock_fd;
    int64_t fixed_time; /* jobstore_set_time; 0 = the real clock */
    bool broken;        /* an output write failed: refuse writes until a restart */
};

struct jobstore_upload {
    struct jobstore *js;
    char id[JOBSTORE_ID_MAX];
    char *tmp_path;
    int fd;
    int64_t bytes;
    bool failed;
};

static const char *const status_names[] = {
    [JOBSTORE_VALIDATING] = "validating",   [JOBSTORE_FAILED] = "failed",
    [JOBSTORE_IN_PROGRESS] = "in_progress", [JOBSTORE_FINALIZING] = "finalizing",
    [JOBSTORE_COMPLETED] = "completed",     [JOBSTORE_EXPIRED] = "expired",
    [JOBSTORE_CANCELLING] = "cancelling",   [JOBSTORE_CANCELLED] = "cancelled",
};

/* The column stamped when a batch enters each state (validating: created_at). */
static const char *const status_columns[] = {
    [JOBSTORE_VALIDATING] = "created_at",      [JOBSTORE_FAILED] = "failed_at",
    [JOBSTORE_IN_PROGRESS] = "in_progress_at", [JOBSTORE_FINALIZING] = "finalizing_at",
    [JOBSTORE_COMPLETED] = "completed_at",     [JOBSTORE_EXPIRED] = "expired_at",
    [JOBSTORE_CANCELLING] = "cancelling_at",   [JOBSTORE_CANCELLED] = "cancelled_at",
};

static const char schema_sql[] =
    "CREATE TABLE files("
    " seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, bytes INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL, filename TEXT NOT NULL, purpose TEXT NOT NULL,"
    " status TEXT NOT NULL);"
    "CREATE TABLE batches("
    " seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, input_file_id TEXT NOT NULL,"
    " endpoint TEXT NOT NULL, completion_window TEXT NOT NULL, status TEXT NOT NULL,"
    " created_at INTEGER NOT NULL, in_progress_at INTEGER, expires_at INTEGER,"
    " finalizing_at INTEGER, completed_at INTEGER, failed_at INTEGER,"
    " expired_at INTEGER, cancelling_at INTEGER, cancelled_at INTEGER,"
    " total INTEGER NOT NULL DEFAULT 0, completed INTEGER NOT NULL DEFAULT 0,"
    " failed INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,"
    " completion_tokens INTEGER NOT NULL DEFAULT 0, output_file_id TEXT,"
    " error_file_id TEXT, metadata TEXT, errors TEXT);"
    "CREATE INDEX batches_status ON batches(status);"
    /* The whole input line is kept so that a resume never needs the input file,
     * which the user may delete while the batch runs. */
    "CREATE TABLE batch_requests("
    " batch_id TEXT NOT NULL, line INTEGER NOT NULL, custom_id TEXT NOT NULL,"
    " body TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'pending',"
    " PRIMARY KEY(batch_id, line), UNIQUE(batch_id, custom_id));";

#define BATCH_COLS                                                                         \
    "id, input_file_id, endpoint, completion_window, status, created_at,"                  \
    " in_progress_at, expires_at, finalizing_at, completed_at, failed_at, expired_at,"     \
    " cancelling_at, cancelled_at, total, completed, failed, prompt_tokens,"               \
    " completion_tokens, output_file_id, error_file_id, metadata, errors"
#define FILE_COLS "id, bytes, created_at, filename, purpose, status"
#define UNFINISHED "('validating','in_progress','finalizing','cancelling')"

/* ---- small helpers ---- */

static int64_t js_now(const struct jobstore *js)
{
    return js->fixed_time ? js->fixed_time : (int64_t)time(NULL);
}

/* SQLite's verdict as an engine code: a damaged file is a format error, a broken
 * constraint is the caller's argument, everything else is the disk. */
static int db_code(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT: return ENG_EFORMAT;
    case SQLITE_CONSTRAINT: return ENG_EINVAL;
    default: return ENG_EIO;
    }
}

static int db_fail(struct jobstore *js, int rc, const char *what)
{
    return err_set(db_code(rc), "%s: %s: %s", js->db_path, what,
                   js->db ? sqlite3_errmsg(js->db) : sqlite3_errstr(rc));
}

static int db_exec(struct jobstore *js, const char *sql)
{
    int rc = sqlite3_exec(js->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : db_fail(js, rc, sql);
}

static int db_prepare(struct jobstore *js, const char *sql, sqlite3_stmt **st)
{
    int rc = sqlite3_prepare_v2(js->db, sql, -1, st, NULL);
    return rc == SQLITE_OK ? 0 : db_fail(js, rc, "prepare");
}

/* IMMEDIATE takes the write lock up front: a transaction that reads, checks and
 * then writes must not find the data changed under it. */
static int db_begin(struct jobstore *js)
{
    return db_exec(js, "BEGIN IMMEDIATE");
}

static int db_commit(struct jobstore *js)
{
    return db_exec(js, "COMMIT");
}

static void db_rollback(struct jobstore *js)
{
    if (!sqlite3_get_autocommit(js->db)) sqlite3_exec(js->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Run a statement that returns no rows; finalizes it. */
static int db_step_done(struct jobstore *js, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : db_fail(js, rc, what);
}

static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

static void col_copy(sqlite3_stmt *st, int i, char *buf, size_t size)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    snprintf(buf, size, "%s", s ? (const char *)s : "");
}

static char *col_dup(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? xstrdup((const char *)s) : NULL;
}

static int fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(ENG_EIO, "%s: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    return rc == 0 ? 0 : err_set(ENG_EIO, "%s: fsync: %s", path, strerror(e));
}

static int write_all(int fd, const void *data, size_t len)
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
static int make_dir(const char *path)
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
            err = fsync_path("/");
        else if (slash) {
            *slash = '\0';
            err = fsync_path(parent);
        } else
            err = fsync_path(".");
        free(parent);
        return err;
    }
    struct stat sb;
    if (errno == EEXIST && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return 0;
    return err_set(ENG_EIO, "%s: cannot create directory: %s", path, strerror(errno));
}

/* An id we generated: prefix + 24 lowercase hex digits. Only such names in files/
 * are ever deleted by the garbage collection. */
static bool is_our_id(const char *s, const char *prefix)
{
    size_t p = strlen(prefix);
    if (strncmp(s, prefix, p) != 0 || strlen(s) != p + 24) return false;
    for (const char *c = s + p; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) return false;
    return true;
}

/* ---- public small things ---- */

const char *jobstore_status_name(enum jobstore_status s)
{
    CHECK((unsigned)s < ARRAY_LEN(status_names));
    return status_names[s];
}

int jobstore_status_parse(const char *s, enum jobstore_status *out)
{
    for (size_t i = 0; i < ARRAY_LEN(status_names); i++)
        if (s && strcmp(s, status_names[i]) == 0) {
            *out = (enum jobstore_status)i;
            return 0;
        }
    return err_set(ENG_EINVAL, "unknown batch status '%s'", s ? s : "(null)");
}

int jobstore_new_id(const char *prefix, char *buf, size_t size)
{
    size_t p = strlen(prefix);
    if (size < p + 25) return err_set(ENG_EINVAL, "id buffer too small");
    unsigned char rnd[12];
    size_t got = 0;
    while (got < sizeof rnd) {
        ssize_t r = getrandom(rnd + got, sizeof rnd - got, 0);
        CHECK(r > 0 || errno == EINTR); /* getrandom cannot fail once the pool is up */
        if (r > 0) got += (size_t)r;
    }
    memcpy(buf, prefix, p);
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(buf + p + 2 * i, 3, "%02x", rnd[i]);
    return 0;
}

void jobstore_set_time(struct jobstore *js, int64_t t)
{
    js->fixed_time = t;
}

/* ---- open / close ---- */

static int pragma_int(struct jobstore *js, const char *sql, int64_t *out)
{
    sqlite3_stmt *st;
    int err = db_prepare(js, sql, &st);
    if (err) return err;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *out = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : db_fail(js, rc, sql);
}

static int db_open(struct jobstore *js)
{
    int rc = sqlite3_open_v2(js->db_path, &js->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) return db_fail(js, rc, "open");
    sqlite3_extended_result_codes(js->db, 1);
    sqlite3_busy_timeout(js->db, 5000);

    /* The first statement reads the header: a garbage file fails here. */
    int64_t app_id, version, n_tables;
    int err = pragma_int(js, "PRAGMA application_id", &app_id);
    if (err) return err;
    err = pragma_int(js, "PRAGMA user_version", &version);
    if (err) return err;
    if (version > SCHEMA_VERSION)
        return err_set(ENG_EUNSUPPORTED,
                       "%s: schema version %lld is newer than this build's %d; "
                       "use a newer h2oserve or another --data-dir",
                       js->db_path, (long long)version, SCHEMA_VERSION);
    if (app_id != 0 && app_id != APPLICATION_ID)
        return err_set(ENG_EFORMAT, "%s: not an h2oserve database (application_id %lld)",
                       js->db_path, (long long)app_id);

    sqlite3_stmt *st;
    err = db_prepare(js, "PRAGMA journal_mode=WAL", &st);
    if (err) return err;
    rc = sqlite3_step(st);
    bool wal =
        rc == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW) return db_fail(js, rc, "journal_mode=WAL");
    if (!wal) return err_set(ENG_EIO, "%s: cannot switch to WAL mode", js->db_path);
    err = db_exec(js, "PRAGMA synchronous=FULL");
    if (err) return err;

    if (version == SCHEMA_VERSION) {
        if (app_id != APPLICATION_ID)
            return err_set(ENG_EFORMAT, "%s: not an h2oserve database", js->db_path);
        return 0;
    }
    /* version 0: a new database, unless someone else's tables are in it. */
    err = pragma_int(js, "SELECT count(*) FROM sqlite_master", &n_tables);
    if (err) return err;
    if (n_tables)
        return err_set(ENG_EFORMAT, "%s: not an h2oserve database (no schema version)",
                       js->db_path);
    err = db_begin(js);
    if (err) return err;
    char pragmas[128];
    snprintf(pragmas, sizeof pragmas, "PRAGMA application_id=%d; PRAGMA user_version=%d",
             APPLICATION_ID, SCHEMA_VERSION);
    err = db_exec(js, schema_sql);
    if (!err) err = db_exec(js, pragmas);
    if (!err) err = db_commit(js);
    if (err) db_rollback(js);
    return err;
}

static int take_lock(struct jobstore *js)
{
    char *path = util_path_join(js->dir, "lock");
    js->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    int err = 0;
    if (js->lock_fd < 0)
        err = err_set(ENG_EIO, "%s: %s", path, strerror(errno));
    else if (flock(js->lock_fd, LOCK_EX | LOCK_NB) != 0)
        err = err_set(ENG_EIO, "%s: the data dir is in use by another process (%s)",
                      js->dir, strerror(errno));
    free(path);
    return err;
}

/* Is `name` a body the database still needs: a file row, or the output or error
 * file of a batch that has not published it yet? */
static int body_referenced(struct jobstore *js, const char *name, bool *out)
{
    sqlite3_stmt *st;
    int err = db_prepare(js,
                         "SELECT 1 FROM files WHERE id=?1 UNION ALL SELECT 1 FROM batches"
                         " WHERE status IN " UNFINISHED
                         " AND (output_file_id=?1 OR error_file_id=?1)",
                         &st);
    if (err) return err;
    bind_text(st, 1, name);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return db_fail(js, rc, "gc");
    *out = rc == SQLITE_ROW;
    return 0;
}

/* Delete what interrupted uploads (.tmp) and deletes (a body whose row is gone)
 * left behind. Only names of our own id shape are touched. */
static int collect_garbage(struct jobstore *js)
{
    DIR *d = opendir(js->files_dir);
    if (!d) return err_set(ENG_EIO, "%s: %s", js->files_dir, strerror(errno));
    int err = 0;
    struct dirent *e;
    while (!err && (e = readdir(d)) != NULL) {
        char name[256];
        snprintf(name, sizeof name, "%s", e->d_name);
        size_t len = strlen(name);
        bool tmp = len > 4 && strcmp(name + len - 4, ".tmp") == 0;
        if (tmp) name[len - 4] = '\0';
        if (!is_our_id(name, "file-")) continue;
        bool keep = false;
        if (!tmp) err = body_referenced(js, name, &keep);
        if (err || keep) continue;
        char *path = util_path_join(js->files_dir, e->d_name);
        if (unlink(path) == 0) log_info("jobstore: removed leftover %s", path);
        free(path);
    }
    closedir(d);
    return err;
}

int jobstore_open(struct jobstore **out, const char *data_dir)
{
    *out = NULL;
    struct jobstore *js = xcalloc(1, sizeof *js);
    js->lock_fd = -1;
    js->dir = xstrdup(data_dir);
    js->files_dir = util_path_join(data_dir, "files");
    js->db_path = util_path_join(data_dir, "h2oserve.db");
    struct jobstore_batch *bs = NULL;
    int n = 0;
    int err = make_dir(data_dir);
    if (!err) err = make_dir(js->files_dir);
    if (!err) err = take_lock(js);
    if (!err) err = db_open(js);
    if (!err) err = collect_garbage(js);
    if (!err) err = jobstore_unfinished_batches(js, &bs, &n);
    for (int i = 0; !err && i < n; i++)
        err = jobstore_batch_recover(js, bs[i].id);
    jobstore_batches_free(bs, n);
    if (err) {
        jobstore_close(js);
        return err;
    }
    *out = js;
    return 0;
}

void jobstore_close(struct jobstore *js)
{
    if (!js) return;
    if (js->db) sqlite3_close_v2(js->db);     /* checkpoints the WAL when last */
    if (js->lock_fd >= 0) close(js->lock_fd); /* releases the flock */
    free(js->dir);
    free(js->files_dir);
    free(js->db_path);
    free(js);
}

/* ---- files ---- */

static char *body_path(const struct jobstore *js, const char *id)
{
    return util_path_join(js->files_dir, id);
}

int jobstore_upload_begin(struct jobstore *js, struct jobstore_upload **out)
{
    struct jobstore_upload *u = xcalloc(1, sizeof *u);
    u->js = js;
    jobstore_new_id("file-", u->id, sizeof u->id);
    char name[JOBSTORE_ID_MAX + 8];
    snprintf(name, sizeof name, "%s.tmp", u->id);
    u->tmp_path = util_path_join(js->files_dir, name);
    u->fd = open(u->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (u->fd < 0) {
        int err = err_set(ENG_EIO, "%s: %s", u->tmp_path, strerror(errno));
        free(u->tmp_path);
        free(u);
        *out = NULL;
        return err;
    }
    *out = u;
    return 0;
}

int jobstore_upload_write(struct jobstore_upload *u, const void *data, size_t len)
{
    if (u->failed) return err_set(ENG_EIO, "%s: an earlier write failed", u->tmp_path);
    if (write_all(u->fd, data, len) != 0) {
        u->failed = true;
        return err_set(ENG_EIO, "%s: write: %s", u->tmp_path, strerror(errno));
    }
    u->bytes += (int64_t)len;
    return 0;
}

void jobstore_upload_abort(struct jobstore_upload *u)
{
    if (!u) return;
    if (u->fd >= 0) close(u->fd);
    unlink(u->tmp_path);
    free(u->tmp_path);
    free(u);
}

static void file_from_row(sqlite3_stmt *st, struct jobstore_file *f)
{
    memset(f, 0, sizeof *f);
    col_copy(st, 0, f->id, sizeof f->id);
    f->bytes = sqlite3_column_int64(st, 1);
    f->created_at = sqlite3_column_int64(st, 2);
    f->filename = col_dup(st, 3);
    col_copy(st, 4, f->purpose, sizeof f->purpose);
    col_copy(st, 5, f->status, sizeof f->status);
}

static int file_insert(struct jobstore *js, const char *id, int64_t bytes,
                       const char *filename, const char *purpose)
{
    sqlite3_stmt *st;
    int err =
        db_prepare(js,
                   "INSERT INTO files(id, bytes, created_at, filename, purpose, status)"
                   " VALUES(?, ?, ?, ?, ?, 'processed')",
                   &st);
    if (err) return err;
    bind_text(st, 1, id);
    sqlite3_bind_int64(st, 2, bytes);
    sqlite3_bind_int64(st, 3, js_now(js));
    bind_text(st, 4, filename);
    bind_text(st, 5, purpose);
    return db_step_done(js, st, "insert file");
}

int jobstore_upload_commit(struct jobstore_upload *u, const char *filename,
                           const char *purpose, struct jobstore_file *out)
{
    struct jobstore *js = u->js;
    char *path = NULL;
    int err = 0;
    if (!filename || !purpose || strlen(filename) > 4096 || strlen(purpose) >= 32) {
        err = err_set(ENG_EINVAL, "file name or purpose missing or too long");
        goto fail;
    }
    if (u->failed) {
        err = err_set(ENG_EIO, "%s: an earlier write failed", u->tmp_path);
        goto fail;
    }
    if (fsync(u->fd) != 0) {
        err = err_set(ENG_EIO, "%s: fsync: %s", u->tmp_path, strerror(errno));
        goto fail;
    }
    close(u->fd);
    u->fd = -1;
    path = body_path(js, u->id);
    if (rename(u->tmp_path, path) != 0) {
        err = err_set(ENG_EIO, "%s: rename: %s", path, strerror(errno));
        goto fail;
    }
    /* The body's directory entry must be on disk before the row can point at it. */
    err = fsync_path(js->files_dir);
    if (!err) err = file_insert(js, u->id, u->bytes, filename, purpose);
    if (err) {
        unlink(path);
        goto fail;
    }
    free(path);
    free(u->tmp_path);
    char id[JOBSTORE_ID_MAX];
    memcpy(id, u->id, sizeof id);
    free(u);
    return out ? jobstore_file_get(js, id, out) : 0;
fail:
    free(path);
    jobstore_upload_abort(u);
    return err;
}

int jobstore_file_create(struct jobstore *js, const char *filename, const char *purpose,
                         const void *data, size_t len, struct jobstore_file *out)
{
    struct jobstore_upload *u;
    int err = jobstore_upload_begin(js, &u);
    if (err) return err;
    err = jobstore_upload_write(u, data, len);
    if (err) {
        jobstore_upload_abort(u);
        return err;
    }
    return jobstore_upload_commit(u, filename, purpose, out);
}

int jobstore_file_get(struct jobstore *js, const char *id, struct jobstore_file *out)
{
    sqlite3_stmt *st;
    int err = db_prepare(js, "SELECT " FILE_COLS " FROM files WHERE id=?", &st);
    if (err) return err;
    bind_text(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) file_from_row(st, out);
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) return err_set(ENG_ENOTFOUND, "no such file: '%s'", id);
    return rc == SQLITE_ROW ? 0 : db_fail(js, rc, "get file");
}

/* The list position (seq) of `after` in `table`, or the open end when NULL. */
static int after_seq(struct jobstore *js, const char *table, const char *after,
                     bool ascending, int64_t *seq)
{
    if (!after) {
        *seq = ascending ? -1 : INT64_MAX;
        return 0;
    }
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT seq FROM %s WHERE id=?", table);
    sqlite3_stmt *st;
    int err = db_prepare(js, sql, &st);
    if (err) return err;
    bind_text(st, 1, after);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *seq = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) return err_set(ENG_ENOTFOUND, "after: no such id '%s'", after);
    return rc == SQLITE_ROW ? 0 : db_fail(js, rc, "list");
}

int jobstore_file_list(struct jobstore *js, const char *purpose, const char *after,
                       int limit, bool ascending, struct jobstore_file **out, int *n,
                       bool *has_more)
{
    *out = NULL;
    *n = 0;
    *has_more = false;
    if (limit < 1 || limit > LIST_MAX) return err_set(ENG_EINVAL, "limit out of range");
    int64_t seq;
    int err = after_seq(js, "files", after, ascending, &seq);
    if (err) return err;
    sqlite3_stmt *st;
    err = db_prepare(js,
                     ascending ? "SELECT " FILE_COLS " FROM files WHERE (?1 IS NULL OR"
                                 " purpose=?1) AND seq>?2 ORDER BY seq ASC LIMIT ?3"
                               : "SELECT " FILE_COLS " FROM files WHERE (?1 IS NULL OR"
                                 " purpose=?1) AND seq<?2 ORDER BY seq DESC LIMIT ?3",
                     &st);
    if (err) return err;
    bind_text(st, 1, purpose);
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
        return db_fail(js, rc, "list files");
    }
    *out = fs;
    *n = k;
    return 0;
}

int jobstore_file_delete(struct jobstore *js, const char *id)
{
    sqlite3_stmt *st;
    int err = db_prepare(js, "DELETE FROM files WHERE id=?", &st);
    if (err) return err;
    bind_text(st, 1, id);
    err = db_step_done(js, st, "delete file");
    if (err) return err;
    if (sqlite3_changes(js->db) == 0)
        return err_set(ENG_ENOTFOUND, "no such file: '%s'", id);
    /* The row is gone, so the file is gone for every reader; a crash before the
     * unlink leaves an orphan body that the next open removes. */
    char *path = body_path(js, id);
    if (unlink(path) != 0 && errno != ENOENT)
        log_warn("jobstore: %s: unlink: %s", path, strerror(errno));
    free(path);
    return 0;
}

int jobstore_file_path(struct jobstore *js, const char *id, char **path)
{
    struct jobstore_file f;
    *path = NULL;
    int err = jobstore_file_get(js, id, &f);
    if (err) return err;
    *path = body_path(js, f.id);
    jobstore_file_deinit(&f);
    return 0;
}

void jobstore_file_deinit(struct jobstore_file *f)
{
    if (!f) return;
    free(f->filename);
    f->filename = NULL;
}

void jobstore_files_free(struct jobstore_file *fs, int n)
{
    for (int i = 0; i < n; i++)
        jobstore_file_deinit(&fs[i]);
    free(fs);
}

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
                          const char *metadata, struct jobstore_batch *out)
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
    sqlite3_bind_int64(st, 6, now + (int64_t)hours * 3600);
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
    int err = after_seq(js, "batches", after, ascending, &args[0]);
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
    char *path = body_path(js, file_id);
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
    return file_insert(js, file_id, (int64_t)sb.st_size, filename, "batch_output");
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

/* Append `line` + '\n' to `path` and make it durable. On a failed write the file
 * is cut back to its old length, so no torn line stays in the middle of it. */
static int append_line(struct jobstore *js, const char *path, const char *line)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return err_set(ENG_EIO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = err_set(ENG_EIO, "%s: %s", path, strerror(errno));
        close(fd);
        return err;
    }
    size_t len = strlen(line);
    char *buf = xmalloc(len + 1);
    memcpy(buf, line, len);
    buf[len] = '\n';
    int err = 0;
    if (write_all(fd, buf, len + 1) != 0) {
        err = err_set(ENG_EIO, "%s: write: %s", path, strerror(errno));
        if (ftruncate(fd, sb.st_size) != 0) err = poison(js, err);
    } else if (fsync(fd) != 0) {
        err = poison(js, err_set(ENG_EIO, "%s: fsync: %s", path, strerror(errno)));
    } else if (sb.st_size == 0) {
        /* A new file: its directory entry must be durable too. */
        err = fsync_path(js->files_dir);
        if (err) err = poison(js, err);
    }
    free(buf);
    close(fd);
    return err;
}

int jobstore_batch_append_result(struct jobstore *js, const char *batch_id,
                                 const char *custom_id, bool ok, const char *json_line)
{
    if (js->broken)
        return err_set(ENG_EIO, "%s: an earlier write failed; restart to recover", js->dir);
    if (!custom_id || !json_line || strchr(json_line, '\n'))
        return err_set(ENG_EINVAL, "result line missing or not a single line");
    char *line_cid;
    int64_t prompt, completion;
    if (!parse_result_line(json_line, strlen(json_line), &line_cid, &prompt, &completion))
        return err_set(ENG_EINVAL, "result line is not a JSON object with a custom_id");
    bool same = strcmp(line_cid, custom_id) == 0;
    free(line_cid);
    if (!same) return err_set(ENG_EINVAL, "result line's custom_id is not '%s'", custom_id);

    struct jobstore_batch b;
    int err = jobstore_batch_get(js, batch_id, &b);
    if (err) return err;
    char file_id[JOBSTORE_ID_MAX];
    char *path = NULL;
    bool pending = false;
    if (b.status != JOBSTORE_IN_PROGRESS && b.status != JOBSTORE_CANCELLING) {
        err = err_set(ENG_EINVAL, "batch %s is %s: no more results", batch_id,
                      status_names[b.status]);
        goto out;
    }
    /* Checked before writing: a second line for a custom_id would be a second
     * answer that no recovery could take back. */
    err = request_state(js, batch_id, custom_id, &pending);
    if (!err && !pending)
        err = err_set(ENG_EINVAL, "batch %s: custom_id '%s' is already answered", batch_id,
                      custom_id);
    if (!err) err = ensure_output_id(js, &b, ok, file_id, sizeof file_id);
    if (err) goto out;
    path = body_path(js, file_id);
    err = append_line(js, path, json_line);
    if (err) goto out;

    /* The line is durable; from here a failure leaves it uncounted, which only the
     * recovery at the next open can settle, so it poisons the store. */
    bool marked = false;
    err = db_begin(js);
    if (!err) err = mark_request(js, batch_id, custom_id, ok, prompt, completion, &marked);
    if (!err) {
        sqlite3_stmt *st;
        err = db_prepare(js,
                         ok ? "UPDATE batches SET completed=completed+1 WHERE id=?"
                            : "UPDATE batches SET failed=failed+1 WHERE id=?",
                         &st);
        if (!err) {
            bind_text(st, 1, batch_id);
            err = db_step_done(js, st, "count result");
        }
    }
    if (!err) err = db_commit(js);
    if (err) {
        db_rollback(js);
        err = poison(js, err);
    }
    CHECK(err || marked); /* it was pending a moment ago and we are its only writer */
out:
    free(path);
    jobstore_batch_deinit(&b);
    return err;
}

/* Read one output or error file back: mark every complete line's custom_id, cut
 * everything from the first torn or unparsable line on. Only the last append can
 * be damaged (each is synced before the next starts), so nothing counted is cut. */
static int recover_file(struct jobstore *js, const char *batch_id, const char *file_id,
                        bool ok)
{
    char *path = body_path(js, file_id);
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
