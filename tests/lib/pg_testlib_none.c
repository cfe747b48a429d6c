/*
 * pg_testlib_none.c - pg_testlib.h in a build without libpq: every call fails the
 * test program with a Bail out that says so (the PostgreSQL tests are not
 * registered in such a build; this is for a --pg run by hand).
 */
#include "pg_testlib.h"

#include <stdio.h>
#include <stdlib.h>

__attribute__((noreturn)) static void bail(void)
{
    printf("Bail out! this build has no PostgreSQL job store (-Dpostgresql=disabled, or no "
           "libpq-dev)\n");
    fflush(stdout);
    exit(1);
}

const char *pg_test_server(void)
{
    bail();
}

char *pg_test_db_new(void)
{
    bail();
}

void pg_test_db_drop(char *uri)
{
    (void)uri;
    bail();
}

int pg_test_exec(const char *uri, const char *sql)
{
    (void)uri, (void)sql;
    bail();
}

int64_t pg_test_scalar(const char *uri, const char *sql)
{
    (void)uri, (void)sql;
    bail();
}
