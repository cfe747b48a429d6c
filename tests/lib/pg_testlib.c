/*
 * pg_testlib.c - the tests' private PostgreSQL server (pg_testlib.h).
 *
 * Owns: the server's folder (data, socket, logs) from the first pg_test_server to
 * the program's end, when a watchdog process stops the server and removes the
 * folder (start_watchdog says why a process and not only an atexit handler).
 */
#include "pg_testlib.h"

#include "util.h"

#include <libpq-fe.h>

#include <ftw.h>
#include <stdbool.h>
#include <glob.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

static char *g_dir;    /* the server's folder: data/, the socket, initdb.log, server.log */
static char *g_bindir; /* where initdb and pg_ctl are */
static char g_as[96];  /* "setpriv ... " to run as an unprivileged user, or "" */
static int g_n_db;

/* The whole program fails: without a server no PostgreSQL test can say anything. */
__attribute__((noreturn)) static void bail(const char *why)
{
    printf("Bail out! %s\n", why);
    for (int i = 0; g_dir && i < 2; i++) {
        char log[4096];
        snprintf(log, sizeof log, "%s/%s", g_dir, i ? "server.log" : "initdb.log");
        FILE *f = fopen(log, "r");
        for (char line[512]; f && fgets(line, sizeof line, f);)
            printf("# %s", line);
        if (f) fclose(f);
    }
    fflush(stdout);
    exit(1);
}

static char *find_bindir(void)
{
    const char *env = getenv("H2O_PG_BINDIR");
    if (env && env[0]) return xstrdup(env);
    glob_t g;
    char *dir = NULL;
    /* Sorted: the last is the newest version when several are installed. */
    if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) == 0 && g.gl_pathc) {
        dir = xstrdup(g.gl_pathv[g.gl_pathc - 1]);
        *strrchr(dir, '/') = '\0';
    }
    globfree(&g);
    return dir;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* Stop the server if it runs (its pid file says so) and remove the folder. */
static void stop_server(void)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s/data/postmaster.pid", g_dir);
    /* immediate: the databases are thrown away, nothing needs a clean checkpoint. */
    if (access(cmd, F_OK) == 0) {
        snprintf(cmd, sizeof cmd,
                 "cd %s && %s%s/pg_ctl -D %s/data -m immediate -s stop >/dev/null 2>&1",
                 g_dir, g_as, g_bindir, g_dir);
        if (system(cmd) != 0) printf("# pg_testlib: pg_ctl stop failed\n");
    }
    nftw(g_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* The server must not outlive a test program that crashes, where no atexit handler
 * runs: a child process waits for the end of a pipe that only the test program
 * holds (close-on-exec, so neither the shells nor postgres inherit it), and stops
 * the server when it comes, however the program ends. */
static int g_watch_fd = -1;
static pid_t g_watch_pid;

static void start_watchdog(void)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) bail("pipe2 failed");
    fflush(stdout); /* or the child's exit would print the buffer twice */
    const pid_t pid = fork();
    if (pid < 0) bail("fork failed");
    if (pid == 0) {
        close(fds[1]);
        char b;
        ssize_t r;
        do
            r = read(fds[0], &b, 1);
        while (r > 0 || (r < 0 && errno == EINTR));
        stop_server();
        _exit(0);
    }
    close(fds[0]);
    g_watch_fd = fds[1];
    g_watch_pid = pid;
}

/* atexit: end the pipe and wait until the watchdog has stopped the server. */
static void end_server(void)
{
    close(g_watch_fd);
    waitpid(g_watch_pid, NULL, 0);
}

const char *pg_test_server(void)
{
    if (g_dir) return g_dir;
    g_bindir = find_bindir();
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/initdb", g_bindir ? g_bindir : "");
    if (!g_bindir || access(probe, X_OK) != 0)
        bail("PostgreSQL is not installed: no initdb under /usr/lib/postgresql/*/bin "
             "(H2O_PG_BINDIR overrides); ./bootstrap.sh installs Debian's postgresql");
    char tmpl[] = "/tmp/h2o_pg.XXXXXX";
    if (!mkdtemp(tmpl)) bail("mkdtemp failed");
    g_dir = xstrdup(tmpl);
    if (geteuid() == 0) {
        /* initdb and postgres refuse to run as root: hand the folder to nobody and
         * run them as nobody. */
        const struct passwd *pw = getpwnam("nobody");
        if (!pw) bail("running as root and there is no user 'nobody' to run PostgreSQL as");
        if (chown(g_dir, pw->pw_uid, pw->pw_gid) != 0)
            bail("chown of the server folder failed");
        snprintf(g_as, sizeof g_as, "setpriv --reuid=%u --regid=%u --clear-groups ",
                 (unsigned)pw->pw_uid, (unsigned)pw->pw_gid);
    }
    start_watchdog();
    atexit(end_server);
    char cmd[8192];
    /* --no-sync and fsync=off: the server's own durability is not under test here,
     * and a test database that survives a power cut is worth nothing. */
    snprintf(cmd, sizeof cmd,
             "cd %s && %s%s/initdb -D %s/data -U postgres -A trust -E UTF8 --locale=C "
             "--no-sync >%s/initdb.log 2>&1",
             g_dir, g_as, g_bindir, g_dir, g_dir);
    if (system(cmd) != 0) bail("initdb failed");
    snprintf(cmd, sizeof cmd,
             "cd %s && %s%s/pg_ctl -D %s/data -l %s/server.log -w -s -o \"-k %s -c "
             "listen_addresses='' "
             "-c fsync=off -c max_connections=40\" start >/dev/null 2>&1",
             g_dir, g_as, g_bindir, g_dir, g_dir, g_dir);
    if (system(cmd) != 0) bail("the PostgreSQL server did not start");
    return g_dir;
}

static char *uri_of(const char *db)
{
    char buf[512];
    snprintf(buf, sizeof buf, "postgresql:///%s?host=%s&user=postgres", db,
             pg_test_server());
    return xstrdup(buf);
}

int pg_test_exec(const char *uri, const char *sql)
{
    PGconn *c = PQconnectdb(uri);
    PGresult *r = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
    const ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    const int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : -1;
    if (rc) printf("# pg_testlib: %s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    return rc;
}

int64_t pg_test_scalar(const char *uri, const char *sql)
{
    PGconn *c = PQconnectdb(uri);
    PGresult *r = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
    int64_t v = -1;
    if (r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 &&
        !PQgetisnull(r, 0, 0))
        v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    else
        printf("# pg_testlib: %s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    return v;
}

char *pg_test_db_new(void)
{
    char name[64], sql[128];
    snprintf(name, sizeof name, "t%d_%d", (int)getpid(), ++g_n_db);
    char *admin = uri_of("postgres");
    snprintf(sql, sizeof sql, "CREATE DATABASE %s ENCODING 'UTF8'", name);
    if (pg_test_exec(admin, sql) != 0) bail("CREATE DATABASE failed");
    free(admin);
    return uri_of(name);
}

void pg_test_db_drop(char *uri)
{
    const char *name = strstr(uri, ":///") + 4;
    char sql[128];
    snprintf(sql, sizeof sql, "DROP DATABASE %.*s WITH (FORCE)", (int)strcspn(name, "?"),
             name);
    char *admin = uri_of("postgres");
    pg_test_exec(admin, sql);
    free(admin);
    free(uri);
}
