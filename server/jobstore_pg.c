/*
 * jobstore_pg.c - the PostgreSQL job store's connection and life: connecting,
 * SQLSTATEs mapped to the store's codes, small libpq helpers, the schema made or
 * checked at open, and the backend's table (jobstore_pg.h has the design).
 *
 * Owns: the store's connection and its conninfo, from jobstore_pg_open to close.
 * Thread: the store's owner.
 */
#include "jobstore_pg.h"

#include <inttypes.h>
#include <poll.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "h2os", as the SQLite store's application_id: the key of the advisory lock that
 * makes concurrent opens create the schema once. */
#define SCHEMA_LOCK_KEY "1748135795"

static const char schema_sql[] =
    "CREATE TABLE h2o_schema(version integer NOT NULL);"
    "CREATE TABLE h2o_files("
    " seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id text NOT NULL UNIQUE,"
    " bytes bigint NOT NULL, created_at bigint NOT NULL, filename text NOT NULL,"
    " purpose text NOT NULL, status text NOT NULL,"
    /* set for a batch's output (batch_ok) or error file: the body is that batch's
     * h2o_batch_results lines, not chunks */
    " batch_id text, batch_ok boolean);"
    "CREATE TABLE h2o_file_chunks("
    " file_id text NOT NULL, seq integer NOT NULL, data bytea NOT NULL,"
    " PRIMARY KEY(file_id, seq));"
    "CREATE TABLE h2o_batches("
    " seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id text NOT NULL UNIQUE,"
    " input_file_id text NOT NULL, endpoint text NOT NULL,"
    " completion_window text NOT NULL, status text NOT NULL,"
    " created_at bigint NOT NULL, in_progress_at bigint, expires_at bigint,"
    " finalizing_at bigint, completed_at bigint, failed_at bigint, expired_at bigint,"
    " cancelling_at bigint, cancelled_at bigint,"
    " total bigint NOT NULL DEFAULT 0, completed bigint NOT NULL DEFAULT 0,"
    " failed bigint NOT NULL DEFAULT 0, prompt_tokens bigint NOT NULL DEFAULT 0,"
    " completion_tokens bigint NOT NULL DEFAULT 0, output_file_id text,"
    " error_file_id text, metadata text, errors text,"
    /* the lengths of the output and error files so far: the next line's offset */
    " output_bytes bigint NOT NULL DEFAULT 0, error_bytes bigint NOT NULL DEFAULT 0);"
    "CREATE INDEX h2o_batches_status ON h2o_batches(status);"
    /* The whole input line is kept so that a resume never needs the input file,
     * which the user may delete while the batch runs. */
    "CREATE TABLE h2o_batch_requests("
    " batch_id text NOT NULL, line bigint NOT NULL, custom_id text NOT NULL,"
    " body text NOT NULL, state text NOT NULL DEFAULT 'pending',"
    /* the replica running it and until when (jobstore_batch_claim); NULL: nobody */
    " lease_owner text, lease_until bigint,"
    " PRIMARY KEY(batch_id, line), UNIQUE(batch_id, custom_id));"
    "CREATE INDEX h2o_batch_requests_pending ON h2o_batch_requests(batch_id, line)"
    " WHERE state='pending';"
    /* One row per answered request: `off` is its line's byte offset in the output
     * (ok) or error file, which is the concatenation of these lines, each + '\n'. */
    "CREATE TABLE h2o_batch_results("
    " batch_id text NOT NULL, ok boolean NOT NULL, off bigint NOT NULL,"
    " custom_id text NOT NULL, line text NOT NULL, PRIMARY KEY(batch_id, ok, off));";

/* ---- helpers ---- */

const char *jobstore_pg_i64(int64_t v, char *buf)
{
    snprintf(buf, 24, "%" PRId64, v);
    return buf;
}

/* Notices (a table that already exists, an implicit index) are for a person at a
 * psql prompt; the store reports what matters through its return codes. */
static void drop_notice(void *arg, const char *message)
{
    (void)arg, (void)message;
}

/* libpq's message without its trailing newline, in buf. */
static const char *one_line(const char *msg, char *buf, size_t size)
{
    snprintf(buf, size, "%s", msg && msg[0] ? msg : "unknown error");
    size_t len = strlen(buf);
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
        buf[--len] = '\0';
    for (char *p = buf; *p; p++)
        if (*p == '\n') *p = ' ';
    return buf;
}

/* A failure whose cause may pass by itself: the connection (lost, refused, the
 * server shutting down or starting) or a transaction the server chose to abort
 * (serialization, deadlock). */
static bool transient(PGconn *c, const char *state)
{
    if (!c || PQstatus(c) != CONNECTION_OK) return true;
    if (!state) return false;
    return strncmp(state, "08", 2) == 0 ||  /* connection exception */
           strncmp(state, "57P", 3) == 0 || /* admin/crash shutdown, cannot connect now */
           strcmp(state, "40001") == 0 ||   /* serialization failure */
           strcmp(state, "40P01") == 0;     /* deadlock detected */
}

int jobstore_pg_fail(PGconn *c, PGresult *r, const char *what)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    int code = ENG_EIO;
    if (transient(c, state))
        code = ENG_EUNAVAILABLE;
    else if (state && strcmp(state, "53100") == 0)
        code = JOBSTORE_EFULL; /* disk_full */
    else if (state && (strncmp(state, "22", 2) == 0 || strncmp(state, "23", 2) == 0 ||
                       strncmp(state, "54", 2) == 0))
        code = ENG_EINVAL; /* data exception, constraint, program limit */
    char msg[512];
    one_line(r && PQresultErrorMessage(r)[0] ? PQresultErrorMessage(r)
             : c                             ? PQerrorMessage(c)
                                             : NULL,
             msg, sizeof msg);
    if (r) PQclear(r);
    return err_set(code, "postgresql: %s: %s%s", what, msg,
                   code == JOBSTORE_EFULL ? " (no space left)" : "");
}

int jobstore_pg_query(PGconn *c, const char *sql, int n, const char *const *vals,
                      PGresult **out, const char *what)
{
    if (out) *out = NULL;
    PGresult *r = PQexecParams(c, sql, n, NULL, vals, NULL, NULL, 0);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        return jobstore_pg_fail(c, r, what);
    if (out)
        *out = r;
    else
        PQclear(r);
    return 0;
}

int jobstore_pg_begin(PGconn *c)
{
    return jobstore_pg_query(c, "BEGIN", 0, NULL, NULL, "begin");
}

int jobstore_pg_commit(PGconn *c)
{
    return jobstore_pg_query(c, "COMMIT", 0, NULL, NULL, "commit");
}

void jobstore_pg_rollback(PGconn *c)
{
    if (PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) != PQTRANS_IDLE)
        PQclear(PQexec(c, "ROLLBACK"));
}

int64_t jobstore_pg_get_i64(const PGresult *r, int row, int col)
{
    if (PQgetisnull(r, row, col)) return 0;
    return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

char *jobstore_pg_get_dup(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : xstrdup(PQgetvalue(r, row, col));
}

void jobstore_pg_get_copy(const PGresult *r, int row, int col, char *buf, size_t size)
{
    snprintf(buf, size, "%s", PQgetisnull(r, row, col) ? "" : PQgetvalue(r, row, col));
}

int jobstore_pg_after_seq(struct jobstore_pg *js, const char *table, const char *after,
                          bool ascending, int64_t *seq)
{
    if (!after) {
        *seq = ascending ? -1 : INT64_MAX;
        return 0;
    }
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT seq FROM %s WHERE id=$1", table);
    PGresult *r;
    int err = jobstore_pg_query(js->conn, sql, 1, (const char *[]){after}, &r, "list");
    if (err) return err;
    bool found = PQntuples(r) == 1;
    if (found) *seq = jobstore_pg_get_i64(r, 0, 0);
    PQclear(r);
    return found ? 0 : err_set(ENG_ENOTFOUND, "after: no such id '%s'", after);
}

/* ---- connections ---- */

int jobstore_pg_connect(const char *conninfo, PGconn **out)
{
    /* Later entries win: the URI's own settings replace these defaults, which bound
     * how long a call can wait on a database that does not answer: connect_timeout
     * for a server that is not there, and on TCP tcp_user_timeout (sent data not
     * acknowledged) and keepalives (an idle connection whose peer vanished) for a
     * network cut under an open connection, which the kernel alone would notice
     * only after many minutes. A store call that waits is a batch runner job on
     * the thread pool, or an API call on the loop (docs/deploy.md). */
    const char *const keys[] = {"connect_timeout", "tcp_user_timeout", "keepalives",
                                "keepalives_idle", "keepalives_interval", "keepalives_count",
                                "application_name", "dbname", NULL};
    const char *const vals[] = {"10", "10000", "1", "10", "5", "2", "h2oserve", conninfo, NULL};
    *out = NULL;
    /* A URI libpq cannot read is the operator's to fix, not a database that is away. */
    char *why = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &why);
    if (!opts) {
        int err = err_set(ENG_EINVAL, "postgresql: the job store URI is not one libpq reads: %s",
                          why ? why : "out of memory");
        PQfreemem(why);
        return err;
    }
    PQconninfoFree(opts);
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (!c) return err_set(ENG_EIO, "postgresql: out of memory");
    if (PQstatus(c) != CONNECTION_OK) {
        int err = jobstore_pg_fail(c, NULL, "connect");
        PQfinish(c);
        return err;
    }
    PQsetNoticeProcessor(c, drop_notice, NULL);
    /* Byte offsets of output lines are counted on our side of the wire: the text
     * must cross it unconverted. */
    const char *enc = PQparameterStatus(c, "server_encoding");
    if (!enc || strcmp(enc, "UTF8") != 0) {
        int err = err_set(ENG_EUNSUPPORTED,
                          "postgresql: the database's encoding is %s; h2oserve needs UTF8 "
                          "(CREATE DATABASE ... ENCODING 'UTF8')",
                          enc ? enc : "unknown");
        PQfinish(c);
        return err;
    }
    int err = PQsetClientEncoding(c, "UTF8") == 0
                  ? 0
                  : err_set(ENG_EIO, "postgresql: cannot set the client encoding");
    /* A commit that returned must be on the server's disk (jobstore.h): a client
     * told "file-abc" exists must find it after any crash. */
    if (!err)
        err = jobstore_pg_query(c, "SET synchronous_commit = on", 0, NULL, NULL, "connect");
    if (err) {
        PQfinish(c);
        return err;
    }
    *out = c;
    return 0;
}

static int64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether the server sent anything on an idle connection. We never LISTEN, so
 * what comes unasked is, in practice, its goodbye: it restarted, or an admin ended
 * the session, and the socket holds the error and the end of the stream. (A stray
 * notice costs a reconnect, nothing more.) */
static bool server_spoke(PGconn *c)
{
    struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
    return p.fd >= 0 && poll(&p, 1, 0) > 0;
}

int jobstore_pg_ready(struct jobstore_pg *js)
{
    /* A connection the server closed while we sat idle is found here, before a
     * query is sent on it, so the call reconnects instead of failing. */
    bool ok = PQstatus(js->conn) == CONNECTION_OK;
    if (ok && PQtransactionStatus(js->conn) == PQTRANS_IDLE && server_spoke(js->conn))
        ok = false;
    if (ok) return 0;
    /* The owner's thread serves everything else too (interactive requests): while
     * the database is away, a call fails at once rather than waiting out a connect
     * timeout every time. */
    const int64_t now = monotonic_ms();
    if (now < js->retry_after_ms)
        return err_set(ENG_EUNAVAILABLE, "postgresql: the database is unreachable "
                                         "(retrying each second)");
    /* A fresh connection rather than PQreset: it gets the session settings again. */
    PGconn *c;
    int err = jobstore_pg_connect(js->conninfo, &c);
    if (err) {
        js->retry_after_ms = monotonic_ms() + 1000;
        return err;
    }
    PQfinish(js->conn);
    js->conn = c;
    log_info("jobstore: reconnected to postgresql");
    return 0;
}

/* ---- the schema ---- */

static int check_schema(PGconn *c)
{
    PGresult *r;
    int err = jobstore_pg_query(c,
                                "SELECT to_regclass('h2o_schema') IS NOT NULL,"
                                " to_regclass('h2o_files') IS NOT NULL",
                                0, NULL, &r, "schema");
    if (err) return err;
    const bool have_schema = PQgetvalue(r, 0, 0)[0] == 't';
    const bool have_files = PQgetvalue(r, 0, 1)[0] == 't';
    PQclear(r);
    if (!have_schema) {
        if (have_files)
            return err_set(ENG_EFORMAT, "postgresql: the database has an h2o_files table "
                                        "but no h2o_schema: not an h2oserve database");
        /* PQexec: the one call that runs several statements (no parameters). */
        PGresult *cr = PQexec(c, schema_sql);
        err = cr && PQresultStatus(cr) == PGRES_COMMAND_OK
                  ? (PQclear(cr), 0)
                  : jobstore_pg_fail(c, cr, "create schema");
        char v[24];
        if (!err)
            err = jobstore_pg_query(
                c, "INSERT INTO h2o_schema VALUES($1)", 1,
                (const char *[]){jobstore_pg_i64(JOBSTORE_PG_SCHEMA_VERSION, v)}, NULL,
                "create schema");
        return err;
    }
    err = jobstore_pg_query(c, "SELECT version FROM h2o_schema", 0, NULL, &r, "schema");
    if (err) return err;
    const int rows = PQntuples(r);
    const int64_t version = rows == 1 ? jobstore_pg_get_i64(r, 0, 0) : -1;
    PQclear(r);
    if (rows != 1 || version < 1)
        return err_set(ENG_EFORMAT, "postgresql: h2o_schema holds no single version: "
                                    "not an h2oserve database");
    if (version > JOBSTORE_PG_SCHEMA_VERSION)
        return err_set(ENG_EUNSUPPORTED,
                       "postgresql: schema version %lld is newer than this build's %d; "
                       "use a newer h2oserve or another database",
                       (long long)version, JOBSTORE_PG_SCHEMA_VERSION);
    return 0;
}

/* Make or check the schema in one transaction, under a lock that replicas opening
 * at the same moment queue on (the loser then finds the tables made). */
static int open_schema(PGconn *c)
{
    int err = jobstore_pg_begin(c);
    if (!err)
        err = jobstore_pg_query(c, "SELECT pg_advisory_xact_lock(" SCHEMA_LOCK_KEY ")", 0,
                                NULL, NULL, "schema lock");
    if (!err) err = check_schema(c);
    if (!err) err = jobstore_pg_commit(c);
    if (err) jobstore_pg_rollback(c);
    return err;
}

/* ---- life ---- */

static void pg_close(struct jobstore *base)
{
    struct jobstore_pg *js = jobstore_pg_of(base);
    if (js->conn) PQfinish(js->conn);
    free(js->conninfo);
    free(js);
}

static const struct jobstore_ops pg_ops = {
    .name = "postgresql",
    .shared = true,
    .close = pg_close,
    .release_reserve = NULL, /* the database server keeps its own margins */
    .upload_begin = jobstore_pg_upload_begin,
    .upload_write = jobstore_pg_upload_write,
    .upload_commit = jobstore_pg_upload_commit,
    .upload_abort = jobstore_pg_upload_abort,
    .file_get = jobstore_pg_file_get,
    .file_list = jobstore_pg_file_list,
    .file_delete = jobstore_pg_file_delete,
    .file_path = NULL, /* bodies are rows */
    .file_read = jobstore_pg_file_read,
    .file_open = jobstore_pg_file_open,
    .batch_create = jobstore_pg_batch_create,
    .batch_get = jobstore_pg_batch_get,
    .batch_list = jobstore_pg_batch_list,
    .unfinished_batches = jobstore_pg_unfinished_batches,
    .batch_set_status = jobstore_pg_batch_set_status,
    .batch_add_requests = jobstore_pg_batch_add_requests,
    .batch_pending = jobstore_pg_batch_pending,
    .batch_append_results = jobstore_pg_batch_append_results,
    .batch_recover = jobstore_pg_batch_recover,
    .batch_claim = jobstore_pg_batch_claim,
    .batch_renew = jobstore_pg_batch_renew,
    .batch_release = jobstore_pg_batch_release,
};

int jobstore_pg_open(struct jobstore **out, const char *uri)
{
    *out = NULL;
    struct jobstore_pg *js = xcalloc(1, sizeof *js);
    js->base.ops = &pg_ops;
    js->conninfo = xstrdup(uri);
    int err = jobstore_pg_connect(uri, &js->conn);
    if (!err) err = open_schema(js->conn);
    if (err) {
        pg_close(&js->base);
        return err;
    }
    *out = &js->base;
    return 0;
}
