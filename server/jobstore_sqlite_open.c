/*
 * jobstore_sqlite_open.c - opening and closing the SQLite job store: the data-dir lock, the
 * schema, the leftovers of a crash (uploads never committed, bodies no row names)
 * and the recovery of every unfinished batch, all before the store is handed out.
 *
 * Owns: the SQLite handle and the data-dir lock, from jobstore_open to
 * jobstore_close (struct jobstore_sqlite, jobstore_sqlite.h), and the backend's
 * table of functions.
 * Thread: the store's owner only (jobstore.h).
 */
#include "jobstore_sqlite.h"

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
    " lease_owner TEXT, lease_until INTEGER,"
    " PRIMARY KEY(batch_id, line), UNIQUE(batch_id, custom_id));";

/* From each version to the next, in one transaction with the new user_version. */
static const char migrate_1_to_2[] =
    "ALTER TABLE batch_requests ADD COLUMN lease_owner TEXT;"
    "ALTER TABLE batch_requests ADD COLUMN lease_until INTEGER;"
    "PRAGMA user_version=2";

static int pragma_int(struct jobstore_sqlite *js, const char *sql, int64_t *out)
{
    sqlite3_stmt *st;
    int err = jobstore_sqlite_db_prepare(js, sql, &st);
    if (err) return err;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *out = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : jobstore_sqlite_db_fail(js, rc, sql);
}

static int db_open(struct jobstore_sqlite *js)
{
    int rc = sqlite3_open_v2(js->db_path, &js->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) return jobstore_sqlite_db_fail(js, rc, "open");
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
    err = jobstore_sqlite_db_prepare(js, "PRAGMA journal_mode=WAL", &st);
    if (err) return err;
    rc = sqlite3_step(st);
    bool wal =
        rc == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW) return jobstore_sqlite_db_fail(js, rc, "journal_mode=WAL");
    if (!wal) return err_set(ENG_EIO, "%s: cannot switch to WAL mode", js->db_path);
    err = jobstore_sqlite_db_exec(js, "PRAGMA synchronous=FULL");
    if (err) return err;

    if (version > 0 && app_id != APPLICATION_ID)
        return err_set(ENG_EFORMAT, "%s: not an h2oserve database", js->db_path);
    if (version == SCHEMA_VERSION) return 0;
    if (version == 1) {
        err = jobstore_sqlite_db_begin(js);
        if (!err) err = jobstore_sqlite_db_exec(js, migrate_1_to_2);
        if (!err) err = jobstore_sqlite_db_commit(js);
        if (err) jobstore_sqlite_db_rollback(js);
        if (!err) log_info("jobstore: %s: schema version 1 -> 2", js->db_path);
        return err;
    }
    /* version 0: a new database, unless someone else's tables are in it. */
    err = pragma_int(js, "SELECT count(*) FROM sqlite_master", &n_tables);
    if (err) return err;
    if (n_tables)
        return err_set(ENG_EFORMAT, "%s: not an h2oserve database (no schema version)",
                       js->db_path);
    err = jobstore_sqlite_db_begin(js);
    if (err) return err;
    char pragmas[128];
    snprintf(pragmas, sizeof pragmas, "PRAGMA application_id=%d; PRAGMA user_version=%d",
             APPLICATION_ID, SCHEMA_VERSION);
    err = jobstore_sqlite_db_exec(js, schema_sql);
    if (!err) err = jobstore_sqlite_db_exec(js, pragmas);
    if (!err) err = jobstore_sqlite_db_commit(js);
    if (err) jobstore_sqlite_db_rollback(js);
    return err;
}

static int take_lock(struct jobstore_sqlite *js)
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
static int body_referenced(struct jobstore_sqlite *js, const char *name, bool *out)
{
    sqlite3_stmt *st;
    int err = jobstore_sqlite_db_prepare(
        js,
        "SELECT 1 FROM files WHERE id=?1 UNION ALL SELECT 1 FROM batches"
        " WHERE status IN " UNFINISHED " AND (output_file_id=?1 OR error_file_id=?1)",
        &st);
    if (err) return err;
    jobstore_sqlite_bind_text(st, 1, name);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return jobstore_sqlite_db_fail(js, rc, "gc");
    *out = rc == SQLITE_ROW;
    return 0;
}

/* Delete what interrupted uploads (.tmp) and deletes (a body whose row is gone)
 * left behind. Only names of our own id shape are touched. */
static int collect_garbage(struct jobstore_sqlite *js)
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
        if (!jobstore_is_our_id(name, "file-")) continue;
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

/* Make the reserve file (jobstore.h) unless it is there. Best effort: a disk with
 * no room for it opens anyway (the reserve is a margin, not a requirement), and a
 * half-written reserve is removed rather than kept as a promise it cannot keep. */
static void make_reserve(struct jobstore_sqlite *js)
{
    char *path = util_path_join(js->dir, "reserve");
    struct stat sb;
    if (stat(path, &sb) == 0 && sb.st_size == JOBSTORE_RESERVE_BYTES) {
        free(path);
        return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0;
    /* Written, not fallocated or truncated: a sparse file would reserve nothing. */
    static const char zeros[65536];
    for (int i = 0; ok && i < JOBSTORE_RESERVE_BYTES / (int)sizeof zeros; i++)
        ok = jobstore_sqlite_write_all(fd, zeros, sizeof zeros) == 0;
    if (ok) ok = fsync(fd) == 0;
    if (fd >= 0) close(fd);
    if (!ok) {
        log_warn("jobstore: %s: no room for the %d-byte reserve (%s)", path,
                 JOBSTORE_RESERVE_BYTES, strerror(errno));
        unlink(path);
    }
    free(path);
}

static bool release_reserve(struct jobstore *base)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    char *path = util_path_join(js->dir, "reserve");
    bool freed = unlink(path) == 0;
    if (freed) log_warn("jobstore: the disk is full; released the reserve %s", path);
    free(path);
    return freed;
}

static void sqlite_close(struct jobstore *base)
{
    struct jobstore_sqlite *js = jobstore_sqlite_of(base);
    if (js->db) sqlite3_close_v2(js->db);     /* checkpoints the WAL when last */
    if (js->lock_fd >= 0) close(js->lock_fd); /* releases the flock */
    free(js->dir);
    free(js->files_dir);
    free(js->db_path);
    free(js);
}

static const struct jobstore_ops sqlite_ops = {
    .name = "sqlite",
    .close = sqlite_close,
    .release_reserve = release_reserve,
    .upload_begin = jobstore_sqlite_upload_begin,
    .upload_write = jobstore_sqlite_upload_write,
    .upload_commit = jobstore_sqlite_upload_commit,
    .upload_abort = jobstore_sqlite_upload_abort,
    .file_get = jobstore_sqlite_file_get,
    .file_list = jobstore_sqlite_file_list,
    .file_delete = jobstore_sqlite_file_delete,
    .file_path = jobstore_sqlite_file_path,
    .file_read = jobstore_sqlite_file_read,
    .file_open = jobstore_sqlite_file_open,
    .batch_create = jobstore_sqlite_batch_create,
    .batch_get = jobstore_sqlite_batch_get,
    .batch_list = jobstore_sqlite_batch_list,
    .unfinished_batches = jobstore_sqlite_unfinished_batches,
    .batch_set_status = jobstore_sqlite_batch_set_status,
    .batch_add_requests = jobstore_sqlite_batch_add_requests,
    .batch_pending = jobstore_sqlite_batch_pending,
    .batch_append_results = jobstore_sqlite_batch_append_results,
    .batch_recover = jobstore_sqlite_batch_recover,
    .batch_claim = jobstore_sqlite_batch_claim,
    .batch_renew = jobstore_sqlite_batch_renew,
    .batch_release = jobstore_sqlite_batch_release,
};

int jobstore_sqlite_open(struct jobstore **out, const char *data_dir)
{
    *out = NULL;
    struct jobstore_sqlite *js = xcalloc(1, sizeof *js);
    js->base.ops = &sqlite_ops;
    js->lock_fd = -1;
    js->dir = xstrdup(data_dir);
    js->files_dir = util_path_join(data_dir, "files");
    js->db_path = util_path_join(data_dir, "h2oserve.db");
    struct jobstore_batch *bs = NULL;
    int n = 0;
    int err = jobstore_sqlite_make_dir(data_dir);
    if (!err) err = jobstore_sqlite_make_dir(js->files_dir);
    if (!err) err = take_lock(js);
    if (!err) err = db_open(js);
    if (!err) err = collect_garbage(js);
    if (!err) err = jobstore_sqlite_unfinished_batches(&js->base, &bs, &n);
    for (int i = 0; !err && i < n; i++)
        err = jobstore_sqlite_batch_recover(&js->base, bs[i].id);
    jobstore_batches_free(bs, n);
    /* Leases taken before a crash belong to a process that is gone (the lock says
     * this one is alone): give them back now, rather than make the restart wait a
     * lease before it resumes its own batches. */
    if (!err)
        err = jobstore_sqlite_db_exec(js, "UPDATE batch_requests SET lease_owner=NULL,"
                                          " lease_until=NULL WHERE lease_owner IS NOT NULL");
    if (err) {
        sqlite_close(&js->base);
        return err;
    }
    make_reserve(js);
    *out = &js->base;
    return 0;
}
