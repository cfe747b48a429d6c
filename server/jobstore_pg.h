/*
 * jobstore_pg.h - the PostgreSQL job store (issue 22): what its files share
 * (jobstore_pg.c: the connection, errors, open and the schema;
 * jobstore_pg_files.c: uploads, files and their bodies; jobstore_pg_batch.c:
 * batches, their requests and results; jobstore_pg_claim.c: the leases under
 * which replicas share a batch's requests). Private to those files.
 *
 * How jobstore.h's rules map onto one database that many replicas share:
 *  - Everything is a table (prefixed h2o_, so the database may hold others):
 *    file bodies too, as h2o_file_chunks rows of JOBSTORE_PG_CHUNK bytes (the
 *    last one shorter), so no replica needs a shared file system.
 *  - Upload: each upload runs in a transaction of its own, on a connection of its
 *    own (the store's connection keeps serving other calls meanwhile); chunks are
 *    inserted as the body streams in, the files row last, then COMMIT. A file is
 *    visible only with all its bytes, and a crash, a cut connection or an abort
 *    rolls all of it back: there is no garbage to collect at open.
 *  - Result: one transaction locks the batch row (FOR UPDATE), marks each request
 *    done only if it is still pending, inserts its line into h2o_batch_results at
 *    the next byte offset of its output (or error) file, and adds to the counts.
 *    The row lock serialises the results of one batch across replicas, so offsets
 *    never collide, and the pending check makes a second answer for a custom_id
 *    fail (ENG_EINVAL) whoever sends it. There is no file append to reconcile:
 *    jobstore_batch_recover only recounts.
 *  - An output or error file is not copied anywhere at the end: its files row
 *    (published in the transaction that enters the final state, as with SQLite)
 *    names the batch, and its body is read from h2o_batch_results by offset.
 *  - Durability: every transaction commits with synchronous_commit=on (set on each
 *    connection), so a commit that returned is on the server's disk; the server's
 *    own settings (fsync, replication) decide the rest.
 *  - Schema: h2o_schema holds the version; created at open under an advisory lock
 *    (replicas may start together); a newer version is refused, as with SQLite.
 *
 * Errors: SQLSTATE 53100 (disk full) is JOBSTORE_EFULL; data exceptions and
 * constraint violations are ENG_EINVAL (bad input never reaches a crash); a lost
 * or refused connection, a server shutting down and a transaction the server
 * aborted (serialization, deadlock) are ENG_EUNAVAILABLE: the call did nothing, or
 * (a commit whose answer was lost) possibly all of it, and the same call may be
 * made again; the next call reconnects. Anything else is ENG_EIO.
 * Thread: the store's owner; calls block on the database's network round trips.
 */
#ifndef H2O_JOBSTORE_PG_H
#define H2O_JOBSTORE_PG_H

#include "jobstore.h"
#include "jobstore_impl.h"

#include "err.h"
#include "util.h"

#include <libpq-fe.h>

#include <stdbool.h>
#include <stdint.h>

#define JOBSTORE_PG_SCHEMA_VERSION 1
#define JOBSTORE_PG_CHUNK (1 << 20) /* bytes per h2o_file_chunks row */

struct jobstore_pg {
    struct jobstore base; /* first: the table and the clock */
    PGconn *conn;
    char *conninfo; /* the URI as given (may hold a password: never logged) */
    int64_t retry_after_ms; /* a reconnect failed: none before this (monotonic ms) */
};

struct jobstore_pg_upload {
    struct jobstore_upload base; /* first */
    struct jobstore_pg *js;
    PGconn *conn; /* its own, inside its one transaction */
    char id[JOBSTORE_ID_MAX];
    char *buf; /* [JOBSTORE_PG_CHUNK]: the chunk being filled */
    size_t fill;
    int32_t next_seq;
    int64_t bytes;
    int failed; /* 0, or the code of the write that failed */
};

static inline struct jobstore_pg *jobstore_pg_of(struct jobstore *js)
{
    return (struct jobstore_pg *)js;
}

/* Text of an int64 parameter: buf must hold 24 bytes. Returns buf. */
const char *jobstore_pg_i64(int64_t v, char *buf);

/* A new connection for `conninfo`, set up as every store connection is
 * (synchronous_commit=on, UTF8, notices dropped). ENG_EIO with libpq's reason. */
int jobstore_pg_connect(const char *conninfo, PGconn **out);

/* Reconnect the store's connection if it was lost. ENG_EIO if that fails, and at
 * once, without trying, for a second after a failed try. */
int jobstore_pg_ready(struct jobstore_pg *js);

/* err_set for a failed call on `c`, from `r` (cleared here; may be NULL). */
int jobstore_pg_fail(PGconn *c, PGresult *r, const char *what);

/*
 * Run `sql` on `c` with `n` text parameters (NULL entries are SQL NULL). Returns 0
 * with *out the result (caller PQclears; out may be NULL) or the mapped error.
 */
int jobstore_pg_query(PGconn *c, const char *sql, int n, const char *const *vals,
                      PGresult **out, const char *what);

int jobstore_pg_begin(PGconn *c);
int jobstore_pg_commit(PGconn *c);
void jobstore_pg_rollback(PGconn *c); /* best effort: a lost connection rolls back too */

/* Column (row, col) of r: int64 (NULL reads as 0), a heap copy (NULL stays NULL),
 * or copied into buf (NULL is ""). */
int64_t jobstore_pg_get_i64(const PGresult *r, int row, int col);
char *jobstore_pg_get_dup(const PGresult *r, int row, int col);
void jobstore_pg_get_copy(const PGresult *r, int row, int col, char *buf, size_t size);

/* The list position (seq) of `after` in `table`, or the open end when NULL.
 * ENG_ENOTFOUND when after names nothing. */
int jobstore_pg_after_seq(struct jobstore_pg *js, const char *table, const char *after,
                          bool ascending, int64_t *seq);

/* The backend's entries of the table (jobstore_impl.h says what each may assume);
 * the table itself is in jobstore_pg.c. Thread: the store's owner. */
int jobstore_pg_upload_begin(struct jobstore *js, struct jobstore_upload **out);
int jobstore_pg_upload_write(struct jobstore_upload *u, const void *data, size_t len);
int jobstore_pg_upload_commit(struct jobstore_upload *u, const char *filename,
                              const char *purpose, struct jobstore_file *out);
void jobstore_pg_upload_abort(struct jobstore_upload *u);
int jobstore_pg_file_get(struct jobstore *js, const char *id, struct jobstore_file *out);
int jobstore_pg_file_list(struct jobstore *js, const char *purpose, const char *after,
                          int limit, bool ascending, struct jobstore_file **out, int *n,
                          bool *has_more);
int jobstore_pg_file_delete(struct jobstore *js, const char *id);
int jobstore_pg_file_open(struct jobstore *js, const char *id, FILE **out, int64_t *bytes);
int jobstore_pg_file_read(struct jobstore *js, const char *id, int64_t offset, void *buf,
                          size_t len, size_t *got);
int jobstore_pg_batch_create(struct jobstore *js, const char *input_file_id,
                             const char *endpoint, const char *completion_window,
                             int64_t hours, const char *metadata, int64_t expires_in_s,
                             struct jobstore_batch *out);
int jobstore_pg_batch_get(struct jobstore *js, const char *id, struct jobstore_batch *out);
int jobstore_pg_batch_list(struct jobstore *js, const char *after, int limit,
                           bool ascending, struct jobstore_batch **out, int *n,
                           bool *has_more);
int jobstore_pg_unfinished_batches(struct jobstore *js, struct jobstore_batch **out,
                                   int *n);
int jobstore_pg_batch_set_status(struct jobstore *js, const char *id,
                                 enum jobstore_status to, const char *errors);
int jobstore_pg_batch_add_requests(struct jobstore *js, const char *batch_id,
                                   const struct jobstore_request *reqs, int n);
int jobstore_pg_batch_pending(struct jobstore *js, const char *batch_id, int64_t after_line,
                              int max, struct jobstore_request **out, int *n);
int jobstore_pg_batch_append_results(struct jobstore *js, const char *batch_id,
                                     const struct jobstore_result *rs, const int64_t *usage,
                                     int n);
int jobstore_pg_batch_recover(struct jobstore *js, const char *batch_id);
int jobstore_pg_batch_claim(struct jobstore *js, const char *batch_id, const char *owner,
                            int64_t lease_s, int max, struct jobstore_request **out,
                            int *n);
int jobstore_pg_batch_renew(struct jobstore *js, const char *batch_id, const char *owner,
                            int64_t lease_s, int64_t *renewed,
                            enum jobstore_status *status);
int jobstore_pg_batch_release(struct jobstore *js, const char *batch_id, const char *owner,
                              int64_t *released);

#endif
