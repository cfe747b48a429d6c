/*
 * batchrun.h - the runner of Batches API jobs (batchrun.c).
 *
 * Validates new batches off the loop thread, feeds in_progress batches' requests
 * to the engine at batch priority (at most cfg->batch_max_in_flight engine requests
 * at once; a line is never split, so one line of many prompts may pass the bound),
 * records each result through the job store, finalizes, expires and cancels.
 * Created after the store is open, or, when the data dir was too full to open it
 * (s->js NULL), opens it at a tick once space is freed; resumes every unfinished
 * batch it finds there. A batch whose results do not fit on the disk goes to failed
 * with an insufficient_storage error (docs/batch.md).
 * Owns: its batches and lines in flight; their engine ids are registered with the
 * server's bridge for as long as their line lives.
 * NULL is a no-op for every call but create.
 * Thread: loop.
 */
#ifndef H2O_SERVER_BATCHRUN_H
#define H2O_SERVER_BATCHRUN_H

#include <stdint.h>

struct srv;
struct batchrun;

/* Create the runner of s's job store and resume what it finds. Thread: loop. */
struct batchrun *batchrun_create(struct srv *s);

/* Free the runner once the loop has ended (no validation is still running); lines
 * still in flight are dropped without a cancel (the engine is stopped by then).
 * Thread: loop. */
void batchrun_destroy(struct batchrun *br);

/* Hand the engine more requests if there is room (after events, or a new batch).
 * Thread: loop. */
void batchrun_feed(struct batchrun *br);

/* Periodic: expiry, finishing cancels, feeding once the engine is ready.
 * Thread: loop. */
void batchrun_tick(struct batchrun *br);

/* A batch was just created in `validating`: validate its input file. Thread: loop. */
void batchrun_validate(struct batchrun *br, const char *batch_id);

/* A batch was just moved to `cancelling`: stop its requests; it becomes cancelled
 * on the next tick. Thread: loop. */
void batchrun_cancel(struct batchrun *br, const char *batch_id);

/* Batches running (in_progress, tracked) and engine requests in flight, for
 * /metrics. Zeros for NULL. Thread: loop. */
void batchrun_stats(const struct batchrun *br, int32_t *batches, int32_t *requests);

/* Draining: cancel every batch request in flight and submit no more (what was not
 * recorded runs again after a restart). Thread: loop. */
void batchrun_stop(struct batchrun *br);

#endif
