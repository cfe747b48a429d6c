/*
 * batchrun.h - the runner of Batches API jobs (batchrun.c, batchrun_jobs.c).
 *
 * Validates new batches off the loop thread, and drains in_progress batches
 * together with every other replica on the same job store: it claims a batch's
 * requests a chunk at a time under a lease (jobstore_batch_claim), renews the
 * leases while it runs them, hands them to the engine at batch priority (at most
 * cfg->batch_max_in_flight engine requests at once; a line is never split, so one
 * line of many prompts may pass the bound), commits each result once, and
 * finalizes, expires and cancels. A replica that dies stops renewing, and its
 * requests are claimed again by the others when their leases run out. On SQLite
 * the same code runs with one replica. docs/deploy.md has the whole picture.
 *
 * Its store work goes through a storeq (storeq.h): for PostgreSQL on a handle of
 * its own on libuv's thread pool (a database round trip never holds the loop),
 * for SQLite on the server's handle on the loop.
 * Created after the store is open, or, when the data dir was too full to open it
 * (s->js NULL), opens it at a tick once space is freed. A batch whose results do
 * not fit on the disk goes to failed with an insufficient_storage error
 * (docs/batch.md).
 * Owns: its batches, their claimed requests and results not yet committed, the
 * lines in flight (their engine ids are registered with the server's bridge for as
 * long as the line lives), the validations, its store handle (PostgreSQL) and its
 * store queue.
 * NULL is a no-op for every call but create.
 * Thread: loop.
 */
#ifndef H2O_SERVER_BATCHRUN_H
#define H2O_SERVER_BATCHRUN_H

#include <stdint.h>

struct srv;
struct batchrun;

/*
 * Create the runner of s's job store (opening its own handle when the store is
 * shared) and resume what it finds. Returns 0, or the store's error (logged by the
 * caller with err_msg()) with *out NULL. Thread: loop.
 */
int batchrun_create(struct srv *s, struct batchrun **out);

/* The loop is about to end (the server's final stop): queued store work runs now,
 * and nothing is retried from here on. Thread: loop. */
void batchrun_close(struct batchrun *br);

/* Free the runner once the loop has ended (no validation or store job is still
 * running); lines still in flight are dropped without a cancel (the engine is
 * stopped by then). Thread: loop. */
void batchrun_destroy(struct batchrun *br);

/* Hand the engine more requests if there is room, claiming more when the claimed
 * run low (after events, or a new batch). Thread: loop. */
void batchrun_feed(struct batchrun *br);

/* Periodic: leases, retries, expiry, looking for batches, feeding once the engine
 * is ready. Thread: loop. */
void batchrun_tick(struct batchrun *br);

/* A batch was just created in `validating`: validate its input file. Thread: loop. */
void batchrun_validate(struct batchrun *br, const char *batch_id);

/* A batch was just moved to `cancelling` (on this replica): stop its requests and
 * give back its leases; it becomes cancelled right after. Other replicas learn of
 * it at their next renew (within a third of a lease). Thread: loop. */
void batchrun_cancel(struct batchrun *br, const char *batch_id);

/* For /metrics. */
struct batchrun_stats {
    int32_t batches;          /* batches being run here */
    int32_t requests;         /* engine requests in flight */
    int64_t claims;           /* claim calls that got requests */
    int64_t lines_claimed;    /* requests they got */
    int64_t commits;          /* store calls that recorded results */
    int64_t results;          /* results recorded (output and error lines) */
    int64_t refused;          /* results another replica had recorded first */
    int64_t store_jobs;       /* store jobs run */
    int64_t store_errors;     /* store jobs that failed (retried) */
    double store_seconds;     /* time the store jobs took */
};

/* Zeros for NULL. Thread: loop. */
void batchrun_stats(const struct batchrun *br, struct batchrun_stats *out);

/* Draining: cancel every batch request in flight, commit what is answered, give
 * back every lease and submit no more (what was not recorded runs again, here
 * after a restart or at once on another replica). Thread: loop. */
void batchrun_stop(struct batchrun *br);

#endif
