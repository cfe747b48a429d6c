/*
 * jobstore.h - the durable store behind the Files and Batches API (issue 5), one
 * interface with two backends (issue 22; jobstore_impl.h): SQLite under a data dir,
 * the embedded default described below, and PostgreSQL, which many replicas share
 * (jobstore_pg.h says how its rules map onto one database). Everything below
 * holds for both unless it names files or SQLite.
 *
 * Layout of --data-dir (SQLite):
 *   h2oserve.db       SQLite, WAL: files, batches and per-request progress
 *   files/<id>        file bodies, named by generated ids, never by user names
 *   files/<id>.tmp    an upload in progress (removed at the next open)
 *   lock              flock()ed while a store is open, so two servers never append
 *                     to the same output file
 *   reserve           JOBSTORE_RESERVE_BYTES of zeros, made at open when there is
 *                     room: space kept back so that a store whose disk filled up can
 *                     still record that (jobstore_release_reserve)
 *
 * Durability: synchronous=FULL, so every commit fsyncs the WAL before it returns.
 * NORMAL would survive kill -9 but a power cut could roll back the last commits,
 * and a client that was told "file-abc" exists must find it after any crash. The
 * cost is one fsync per commit; a batch result already pays one for its output
 * line, and inference takes far longer than two fsyncs.
 *
 * The ordering rules that make a crash at any point safe:
 *  - Upload: body to files/<id>.tmp, fsync, rename to files/<id>, fsync files/,
 *    then insert the row. A crash leaves at worst a body without a row, which the
 *    next open deletes; never a row without a body.
 *  - Delete: row first, then the body (an orphan body is again collected at open).
 *  - Result: the batch's output (or error) file id is committed before the file is
 *    first written; the JSON line is appended with O_APPEND and fsynced, and only
 *    then is the request marked done and counted, in one transaction. A crash
 *    between the two leaves a line in the file that the database does not count:
 *    jobstore_batch_recover (run by jobstore_open for every unfinished batch) reads
 *    the files back, cuts a torn last line, and marks every custom_id it finds, so
 *    a restart neither re-runs nor duplicates a custom_id and loses none.
 *  - A failed write or fsync of an output file poisons the store (every later
 *    write fails): after a failed fsync the kernel may have dropped the pages, and
 *    only a restart, whose recovery re-reads the file, knows what is on disk. A
 *    write that failed for want of space (JOBSTORE_EFULL) is cut back and does not:
 *    the file holds whole, synced lines only.
 *  - Terminal transitions (completed, cancelled, expired) publish the output and
 *    error files as rows of purpose "batch_output" in the same transaction, so
 *    they appear in GET /v1/files exactly when the batch says they exist.
 *
 * Batch states (OpenAI's): validating -> failed | in_progress | cancelling;
 * in_progress -> finalizing | cancelling | expired; finalizing -> completed;
 * cancelling -> cancelled. Anything else is refused with ENG_EINVAL.
 *
 * Lists go by creation order (an integer sequence, so ties within one second of
 * created_at keep their order) with an `after` id cursor, as OpenAI paginates.
 * Times are Unix seconds; 0 in a struct means null.
 *
 * Schema versioning: PRAGMA user_version holds the schema version and
 * application_id marks the file as ours; a database from a newer build, or one that
 * is not ours, is refused at open with a one-line message rather than touched.
 *
 * Errors: 0 or a negative ENG_* code (or JOBSTORE_EFULL) with a one-line err_set
 * message. A corrupt or foreign database fails jobstore_open cleanly (ENG_EFORMAT).
 * A write that does not fit fails with JOBSTORE_EFULL and leaves the store as it
 * was before the call (an upload's body is removed, an output append is cut back),
 * so a full disk never poisons the store; only a failed fsync does. A shared store
 * (PostgreSQL) whose database cannot be reached fails with ENG_EUNAVAILABLE: the
 * call may be made again (jobstore_pg.h); the HTTP layer answers it with 503.
 *
 * Thread: one thread owns a store at a time (the server's loop thread, or the
 * batch runner's queue: storeq.h); no call blocks on anything but the disk, or for
 * PostgreSQL the database's round trips (a lost database fails calls at once,
 * jobstore_pg.h). Nothing here is thread-safe; two
 * stores on one PostgreSQL database may live on two threads (streams from
 * jobstore_file_open are likewise their own).
 */
#ifndef H2O_JOBSTORE_H
#define H2O_JOBSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * The disk (or the user's quota, or RLIMIT_FSIZE) has no room for a write:
 * ENOSPC, EDQUOT and EFBIG from a file write, SQLITE_FULL or an I/O error whose
 * errno is one of those from the database. Distinct from ENG_EIO because nothing
 * is broken: whatever was stored is still there, and the same call succeeds once
 * space is freed. The HTTP layer answers it with 507 (docs/batch.md).
 */
#define JOBSTORE_EFULL (-1100)

/* "file-" / "batch_" + 24 hex digits + NUL fits with room to spare. */
#define JOBSTORE_ID_MAX 48

struct jobstore;
struct jobstore_upload;

enum jobstore_status {
    JOBSTORE_VALIDATING,
    JOBSTORE_FAILED,
    JOBSTORE_IN_PROGRESS,
    JOBSTORE_FINALIZING,
    JOBSTORE_COMPLETED,
    JOBSTORE_EXPIRED,
    JOBSTORE_CANCELLING,
    JOBSTORE_CANCELLED,
};

/* A File object. Caller-owned; jobstore_file_deinit frees filename. */
struct jobstore_file {
    char id[JOBSTORE_ID_MAX];
    int64_t bytes;
    int64_t created_at;
    char *filename; /* the user's name, only ever stored, never used as a path */
    char purpose[32];
    char status[16]; /* "processed" */
};

/* A Batch object. Caller-owned; jobstore_batch_deinit frees the heap strings. */
struct jobstore_batch {
    char id[JOBSTORE_ID_MAX];
    char input_file_id[JOBSTORE_ID_MAX];
    char *endpoint;
    char completion_window[16];
    enum jobstore_status status;
    int64_t created_at, in_progress_at, expires_at, finalizing_at, completed_at, failed_at,
        expired_at, cancelling_at, cancelled_at; /* 0 = null */
    int64_t total, completed, failed;            /* request_counts */
    int64_t prompt_tokens, completion_tokens;    /* usage, from the output lines */
    char output_file_id[JOBSTORE_ID_MAX];        /* "" = null */
    char error_file_id[JOBSTORE_ID_MAX];         /* "" = null */
    char *metadata;                              /* JSON text or NULL */
    char *errors; /* JSON text ({"object":"list","data":[...]}) or NULL */
};

/* One input request of a batch. Owned by whoever filled it (see each function). */
struct jobstore_request {
    int64_t line; /* 1-based line in the input file */
    char *custom_id;
    char *body; /* the whole input line, JSON */
};

/* OpenAI's status string ("in_progress"). Static. Thread: any. */
const char *jobstore_status_name(enum jobstore_status s);

/* Parse a status string; returns 0 or ENG_EINVAL. Thread: any. */
int jobstore_status_parse(const char *s, enum jobstore_status *out);

/*
 * Write `prefix` + 24 random hex digits (getrandom) to buf, e.g. "file-" or
 * "batch_req_". Returns 0, or ENG_EINVAL when buf is too small. Thread: any.
 */
int jobstore_new_id(const char *prefix, char *buf, size_t size);

/*
 * Open the store at `where`: a postgresql:// (or postgres://) URI opens the
 * PostgreSQL backend (jobstore_pg.h); anything else is a data dir for SQLite.
 * Returns what the backend's open returns (below for SQLite); ENG_EINVAL for an
 * empty location. Thread: the owning thread.
 *
 * SQLite: open (creating if needed) the store in `data_dir`: makes the directory and
 * files/, takes the lock, opens or creates the database, deletes leftovers of
 * interrupted uploads and deletes, and recovers every unfinished batch
 * (jobstore_batch_recover). On success *out is the caller's, freed with
 * jobstore_close. Errors: ENG_EIO (directory, lock held by another process),
 * ENG_EFORMAT (not a database, or not ours), ENG_EUNSUPPORTED (newer schema),
 * JOBSTORE_EFULL (no room even to open the WAL: the caller may try again later,
 * nothing was changed). Thread: the owning thread.
 */
int jobstore_open(struct jobstore **out, const char *where);

/* "sqlite" or "postgresql", for messages. Static. Thread: owner. */
const char *jobstore_backend(const struct jobstore *js);

/*
 * Whether other processes may use the same store at once (PostgreSQL: replicas on
 * one database), which also means that a failed call left nothing half-done (it
 * was one transaction), so the caller may simply try it again: nothing poisons a
 * shared store. SQLite: false (one process per data dir). Thread: owner.
 */
bool jobstore_shared(const struct jobstore *js);

/*
 * Space kept back for recording a failure caused by a full disk: moving a batch to
 * failed with the cause in its errors is a database write, which a full disk would
 * refuse too. 1 MiB holds hundreds of such commits (a few WAL pages each).
 */
#define JOBSTORE_RESERVE_BYTES (1 << 20)

/*
 * Delete the reserve file (if any), giving its space back to the disk, so that the
 * writes that record a JOBSTORE_EFULL failure can succeed. Returns true when space
 * was freed. The next jobstore_open makes the reserve again. Thread: owner.
 */
bool jobstore_release_reserve(struct jobstore *js);

/* Close the database and release the lock. NULL is a no-op. Thread: owner. */
void jobstore_close(struct jobstore *js);

/*
 * Make the store's clock return `t` (Unix seconds) from now on; 0 restores the
 * real clock. For tests of timestamps and ordering. Thread: owner.
 */
void jobstore_set_time(struct jobstore *js, int64_t t);

/* ---- files ---- */

/*
 * Start an upload: a new id and an open files/<id>.tmp. The upload is the
 * caller's until jobstore_upload_commit or jobstore_upload_abort, which free it.
 * Thread: owner.
 */
int jobstore_upload_begin(struct jobstore *js, struct jobstore_upload **out);

/* Append `len` bytes to the upload. Returns 0, JOBSTORE_EFULL or ENG_EIO.
 * Thread: owner. */
int jobstore_upload_write(struct jobstore_upload *u, const void *data, size_t len);

/*
 * Make the upload durable and visible as a file (see the ordering above) and fill
 * *out (caller deinits; may be NULL). Frees `u` whatever happens; on failure
 * nothing of it remains. `filename` and `purpose` are stored as given.
 * Thread: owner.
 */
int jobstore_upload_commit(struct jobstore_upload *u, const char *filename,
                           const char *purpose, struct jobstore_file *out);

/* Drop the upload and its temporary body; frees `u`. NULL is a no-op. */
void jobstore_upload_abort(struct jobstore_upload *u);

/* begin + write + commit for a body already in memory. Thread: owner. */
int jobstore_file_create(struct jobstore *js, const char *filename, const char *purpose,
                         const void *data, size_t len, struct jobstore_file *out);

/* Fill *out with file `id`. ENG_ENOTFOUND when there is none. Thread: owner. */
int jobstore_file_get(struct jobstore *js, const char *id, struct jobstore_file *out);

/*
 * List files in creation order, oldest first when `ascending`, newest first
 * otherwise, starting after the file `after` (NULL: from the start), at most
 * `limit` (1..10000), only those of `purpose` unless NULL. *out is a heap array
 * of *n files (free with jobstore_files_free); *has_more tells whether more
 * follow. ENG_ENOTFOUND when `after` names no file. Thread: owner.
 */
int jobstore_file_list(struct jobstore *js, const char *purpose, const char *after,
                       int limit, bool ascending, struct jobstore_file **out, int *n,
                       bool *has_more);

/* Delete file `id`: the row, then its body. ENG_ENOTFOUND. Thread: owner. */
int jobstore_file_delete(struct jobstore *js, const char *id);

/*
 * The path of file `id`'s body, for reading (GET content, the batch's input).
 * *path is a heap string the caller frees. ENG_ENOTFOUND; ENG_EUNSUPPORTED where
 * the backend keeps bodies in the database (PostgreSQL: use jobstore_file_read).
 * Thread: owner.
 */
int jobstore_file_path(struct jobstore *js, const char *id, char **path);

/*
 * Read up to `len` bytes of file `id`'s body from `offset` into buf; *got is how
 * many, fewer than len only at the end of the body (0 at or past it). Works on
 * every backend, for streaming a body in pieces. ENG_ENOTFOUND, ENG_EINVAL
 * (negative offset), ENG_EIO. Thread: owner.
 */
int jobstore_file_read(struct jobstore *js, const char *id, int64_t offset, void *buf,
                       size_t len, size_t *got);

/*
 * Open file `id`'s body as a stdio stream for reading from the start, and set
 * *bytes to its length. The stream is the caller's (fclose) and independent of
 * the store: it may be read on another thread (one at a time), e.g. a batch's
 * input checked on the thread pool (SQLite: its own fd; PostgreSQL: its own
 * connection). A read that fails sets ferror. ENG_ENOTFOUND, ENG_EIO.
 * Thread: owner (the stream: any one thread).
 */
int jobstore_file_open(struct jobstore *js, const char *id, FILE **out, int64_t *bytes);

void jobstore_file_deinit(struct jobstore_file *f);
void jobstore_files_free(struct jobstore_file *fs, int n);

/* ---- batches ---- */

/*
 * Create a batch in `validating` for an existing input file. completion_window is
 * "<N>h" (OpenAI accepts only "24h"; the caller checks that); expires_at is
 * created_at + N hours, or created_at + expires_in_s when that is positive (a
 * server whose batches run longer or shorter than the window they report; one
 * commit either way). metadata is JSON text or NULL, stored as given. Fills *out
 * (caller deinits; may be NULL). ENG_ENOTFOUND (no such input file), ENG_EINVAL.
 * Thread: owner.
 */
int jobstore_batch_create(struct jobstore *js, const char *input_file_id,
                          const char *endpoint, const char *completion_window,
                          const char *metadata, int64_t expires_in_s,
                          struct jobstore_batch *out);

/* Fill *out with batch `id`. ENG_ENOTFOUND. Thread: owner. */
int jobstore_batch_get(struct jobstore *js, const char *id, struct jobstore_batch *out);

/* Like jobstore_file_list, for batches (OpenAI lists them newest first). */
int jobstore_batch_list(struct jobstore *js, const char *after, int limit, bool ascending,
                        struct jobstore_batch **out, int *n, bool *has_more);

/*
 * Batches not in a final state (validating, in_progress, finalizing, cancelling),
 * oldest first, for the server to resume at start: validating ones are validated
 * again (their requests are either all stored or none), in_progress ones feed
 * jobstore_batch_pending to the engine, cancelling ones go to cancelled (nothing is
 * in flight after a restart). Heap array; free with jobstore_batches_free.
 * Thread: owner.
 */
int jobstore_unfinished_batches(struct jobstore *js, struct jobstore_batch **out, int *n);

/*
 * Move batch `id` to `to` and stamp <to>_at with now, if the state machine allows
 * it (ENG_EINVAL with "cannot go from X to Y" otherwise; the API's cancel of a
 * finished batch is this error). `errors` (JSON text) replaces the batch's errors
 * when not NULL (validation failures). Entering completed, cancelled or expired
 * publishes the output and error files (see above). Thread: owner.
 */
int jobstore_batch_set_status(struct jobstore *js, const char *id, enum jobstore_status to,
                              const char *errors);

/*
 * Store a validated batch's `n` requests, all or nothing, and set its total to
 * `n`. Only in `validating` and only once per batch (ENG_EINVAL otherwise);
 * duplicate custom_ids are ENG_EINVAL naming the line. The caller keeps `reqs`.
 * Thread: owner.
 */
int jobstore_batch_add_requests(struct jobstore *js, const char *batch_id,
                                const struct jobstore_request *reqs, int n);

/*
 * Up to `max` requests of the batch not yet done, with line > after_line, in line
 * order: page through with after_line = the last line returned. *out is a heap
 * array of *n (free with jobstore_requests_free). Thread: owner.
 */
int jobstore_batch_pending(struct jobstore *js, const char *batch_id, int64_t after_line,
                           int max, struct jobstore_request **out, int *n);

void jobstore_requests_free(struct jobstore_request *reqs, int n);

/* ---- claims: replicas draining one batch together (issue 22) ----
 *
 * A replica claims a chunk of a batch's pending requests under a lease (an owner
 * name and an expiry time), runs them, and renews the lease while it does; a
 * replica that dies stops renewing, its leases run out, and the others claim its
 * unfinished requests again. Whoever commits a request's result first answers it
 * (jobstore_batch_append_result refuses a second answer, lease or no lease), so a
 * request run twice by a replica that lost its lease still appears once. Times are
 * the store's clock (jobstore_set_time), so replicas' clocks must agree to well
 * within a lease (NTP). SQLite has one process per data dir, so there its claims
 * only ever meet their own owner; the rules are the same.
 */

/* Longest owner name, and the longest lease (a day). */
#define JOBSTORE_OWNER_MAX 128
#define JOBSTORE_LEASE_MAX_S 86400

/*
 * Claim up to `max` pending requests of batch `batch_id` for `owner` until now +
 * lease_s, in line order: requests nobody holds, and those whose lease ran out
 * (lease end <= now). Two handles claiming at once get disjoint requests
 * (PostgreSQL: FOR UPDATE SKIP LOCKED, so neither waits for the other). Only an
 * in_progress batch has claimable requests: any other state claims nothing (*n 0,
 * returns 0), which is how a replica learns that a batch is finished or
 * cancelled. *out is a heap array of *n (jobstore_requests_free). ENG_ENOTFOUND,
 * ENG_EINVAL (empty or too long owner, lease_s outside 1..JOBSTORE_LEASE_MAX_S,
 * max < 1). Thread: owner.
 */
int jobstore_batch_claim(struct jobstore *js, const char *batch_id, const char *owner,
                         int64_t lease_s, int max, struct jobstore_request **out, int *n);

/*
 * Extend to now + lease_s the leases `owner` holds on the batch's pending requests
 * that have not run out; *renewed is how many, and *status the batch's status (a
 * cancel made on any replica shows here, within one renew interval). A lease that
 * ran out is not renewed even when nobody took it: its holder must claim again.
 * ENG_ENOTFOUND, ENG_EINVAL as for claim. Thread: owner.
 */
int jobstore_batch_renew(struct jobstore *js, const char *batch_id, const char *owner,
                         int64_t lease_s, int64_t *renewed, enum jobstore_status *status);

/*
 * Give back every lease `owner` holds on the batch's pending requests (a replica
 * stopping, or dropping a cancelled batch), so that others may claim them at once
 * rather than after the lease. *released: how many (may be NULL). Thread: owner.
 */
int jobstore_batch_release(struct jobstore *js, const char *batch_id, const char *owner,
                           int64_t *released);

/*
 * Record the result of request `custom_id`: append `json_line` (one JSON object, no
 * newline; "custom_id" must equal custom_id) and a newline to the batch's output
 * file (ok) or error file (!ok), fsync it, then mark the request done and count it
 * (completed or failed), with usage from response.body.usage when present.
 * Allowed in in_progress and cancelling. A request that is already done is refused
 * (ENG_EINVAL) before anything is written, so no custom_id is ever answered twice.
 * ENG_EIO poisons the store (see above). JOBSTORE_EFULL does not: either the line
 * was cut back (nothing happened) or it is durable but not yet counted, which
 * jobstore_batch_recover settles (the caller runs it before it moves the batch
 * on). Thread: owner.
 */
int jobstore_batch_append_result(struct jobstore *js, const char *batch_id,
                                 const char *custom_id, bool ok, const char *json_line);

/* One result for jobstore_batch_append_results (borrowed strings). */
struct jobstore_result {
    const char *custom_id;
    bool ok;          /* output file; else error file */
    const char *line; /* as for jobstore_batch_append_result */
};

/*
 * Record `n` results at once, with jobstore_batch_append_result's checks and
 * guarantees, all or nothing up to the first write: every line is checked (and
 * refused, ENG_EINVAL, before anything is written, if one is already answered or
 * a custom_id is there twice), the output lines go to the output file in one
 * append and one fsync, the error lines likewise, and then one transaction marks
 * and counts them all. Recovery covers a crash between the appends and the commit
 * exactly as for one line (a torn tail is cut, every whole line is marked). For
 * callers with many results at once (expiring a batch), where one fsync each would
 * hold the owning thread for seconds. Thread: owner.
 */
int jobstore_batch_append_results(struct jobstore *js, const char *batch_id,
                                  const struct jobstore_result *rs, int n);

/*
 * Make the database agree with the batch's output and error files: cut a torn or
 * unparsable tail (only the one append that was not synced can have one), mark
 * every custom_id found as done (output) or failed (error), and recount. Run by
 * jobstore_open for each unfinished batch; idempotent. Thread: owner.
 */
int jobstore_batch_recover(struct jobstore *js, const char *batch_id);

void jobstore_batch_deinit(struct jobstore_batch *b);
void jobstore_batches_free(struct jobstore_batch *bs, int n);

#endif
