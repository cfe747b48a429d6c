/*
 * jobstore_testlib.h - what the job store tests share: a fresh store location per
 * test (a data dir, or a database on the private PostgreSQL of pg_testlib.h) and
 * its removal, opening a store that must open, reading bodies and appending raw
 * files, result lines, a batch in progress, and driving a batch to a state.
 *
 * Backends: a test program runs its tests against SQLite, or against PostgreSQL
 * when started with --pg (tests/meson.build registers both). Tests that are about
 * one backend's own mechanics (a data dir's files, its lock, a full disk) run
 * only against it and say so where they are listed.
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

/* Which backend this run tests: store_test_init sets it from argv ("--pg"). */
extern bool test_pg;

/* Read the backend from argv; with --pg, start the private PostgreSQL server. */
void store_test_init(int argc, char **argv);

/* A new empty store location for jobstore_open: a data dir, or a new database's
 * URI. Heap; store_drop removes it and frees it. */
char *store_new(void);
void store_drop(char *where);

/* File `id`'s whole body read with jobstore_file_read in `piece`-byte reads (odd
 * sizes cross chunk and line boundaries); NULL when a read fails. Heap. */
char *read_body(struct jobstore *js, const char *id, size_t piece, size_t *len);

/* How many file bodies the backend holds: entries of files/, or distinct files in
 * h2o_file_chunks. For "nothing was left behind". */
int64_t count_bodies(const char *where);

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
