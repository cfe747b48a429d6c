/*
 * jobstore_testlib.h - what the job store tests share: a fresh data dir per test and
 * its removal, opening a store that must open, reading and appending raw files,
 * result lines, a batch in progress, and driving a batch to a state.
 */
#ifndef H2O_TEST_JOBSTORE_TESTLIB_H
#define H2O_TEST_JOBSTORE_TESTLIB_H

#include "err.h"
#include "jobstore.h"
#include "test.h"
#include "util.h"

#include <sqlite3.h>

#include <dirent.h>
#include <ftw.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

char *tmp_dir(void);

void rm_rf(char *dir);

struct jobstore *open_ok(const char *dir);

char *slurp(const char *path, size_t *len);

bool exists(const char *path);

void append_raw(const char *path, const char *text);

int count_substr(const char *s, const char *needle);

/* An OpenAI batch output line for `cid` with usage 3 + 5 tokens. */
const char *result_line(const char *cid);

/* An input file and a batch with requests r1..rN, moved to in_progress. */
void make_running_batch(struct jobstore *js, int n, struct jobstore_batch *b);

char *output_path(struct jobstore *js, const char *batch_id, bool ok);

bool id_well_formed(const char *id, const char *prefix);

/* ---- files ---- */

/* Drive a new batch to `s` along legal transitions. */
void reach(struct jobstore *js, const char *id, enum jobstore_status s);

#endif
