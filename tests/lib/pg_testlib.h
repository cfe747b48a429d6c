/*
 * pg_testlib.h - a private PostgreSQL server for tests: initdb in a temporary
 * folder, the server on a unix socket in that folder (no TCP port to clash with
 * anyone's), run as an unprivileged user when the tests run as root (initdb and
 * postgres refuse root), stopped and removed when the test program exits.
 *
 * Debian's postgresql package puts initdb, pg_ctl and postgres under
 * /usr/lib/postgresql/<version>/bin; H2O_PG_BINDIR overrides. When they are not
 * installed the test program fails with a "Bail out!" that says so (bootstrap.sh
 * installs them): a PostgreSQL test never passes by not running.
 * Thread: the test's main thread.
 */
#ifndef H2O_TEST_PG_TESTLIB_H
#define H2O_TEST_PG_TESTLIB_H

#include <stdint.h>

/* Start the server if it is not running yet. Returns its socket folder (static);
 * never returns on failure. */
const char *pg_test_server(void);

/* A new empty UTF8 database on the server; returns its postgresql:// URI (heap,
 * freed by pg_test_db_drop). */
char *pg_test_db_new(void);

/* Drop the database of `uri` (closing whatever is connected to it); frees uri. */
void pg_test_db_drop(char *uri);

/* Run `sql` on the database of `uri`: 0, or -1 with the reason printed as a TAP
 * comment. */
int pg_test_exec(const char *uri, const char *sql);

/* The first column of the first row of `sql` as an integer; -1 when it fails or
 * returns nothing. */
int64_t pg_test_scalar(const char *uri, const char *sql);

#endif
