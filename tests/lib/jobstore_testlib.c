/*
 * jobstore_testlib.c - the job store tests' helpers (jobstore_testlib.h).
 */
#include "jobstore_testlib.h"

#include "pg_testlib.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool test_pg;

void store_test_init(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--pg") == 0) test_pg = true;
    if (test_pg) {
        pg_test_server();
        printf("# backend: postgresql\n");
    } else {
        printf("# backend: sqlite\n");
    }
}

char *store_new(void)
{
    return test_pg ? pg_test_db_new() : tmp_dir();
}

void store_drop(char *where)
{
    if (test_pg)
        pg_test_db_drop(where);
    else
        rm_rf(where);
}

char *read_body(struct jobstore *js, const char *id, size_t piece, size_t *len)
{
    size_t n = 0, cap = piece + 1;
    char *body = xmalloc(cap);
    for (;;) {
        if (n + piece + 1 > cap) {
            cap = 2 * (n + piece + 1);
            body = xrealloc(body, cap);
        }
        size_t got = 0;
        if (jobstore_file_read(js, id, (int64_t)n, body + n, piece, &got) != 0) {
            free(body);
            return NULL;
        }
        if (got == 0) break;
        n += got;
    }
    body[n] = '\0';
    if (len) *len = n;
    return body;
}

int64_t count_bodies(const char *where)
{
    if (test_pg)
        return pg_test_scalar(where, "SELECT count(DISTINCT file_id) FROM h2o_file_chunks");
    char *files = util_path_join(where, "files");
    int64_t entries = 0;
    DIR *d = opendir(files);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') entries++;
    if (d) closedir(d);
    free(files);
    return entries;
}

char *tmp_dir(void)
{
    char tmpl[] = "/tmp/test_jobstore.XXXXXX";
    char *d = mkdtemp(tmpl);
    if (!d) abort();
    return xstrdup(d);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

void rm_rf(char *dir)
{
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

struct jobstore *open_ok(const char *dir)
{
    struct jobstore *js = NULL;
    int err = jobstore_open(&js, dir);
    if (err) TEST_FAIL("jobstore_open: %s", err_msg());
    return js;
}

char *slurp(const char *path, size_t *len)
{
    char *s = NULL;
    size_t n = 0;
    if (util_read_file(path, &s, &n) != 0) return NULL;
    if (len) *len = n;
    return s;
}

bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

void append_raw(const char *path, const char *text)
{
    FILE *f = fopen(path, "a");
    if (!f) abort();
    fputs(text, f);
    fclose(f);
}

int count_substr(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

const char *result_line(const char *cid)
{
    static char buf[512];
    snprintf(
        buf, sizeof buf,
        "{\"id\":\"batch_req_1\",\"custom_id\":\"%s\",\"response\":{\"status_code\":200,"
        "\"request_id\":\"cmpl-1\",\"body\":{\"usage\":{\"prompt_tokens\":3,"
        "\"completion_tokens\":5,\"total_tokens\":8}}},\"error\":null}",
        cid);
    return buf;
}

void make_running_batch(struct jobstore *js, int n, struct jobstore_batch *b)
{
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_create(js, "in.jsonl", "batch", "{}\n", 3, &f), 0);
    EXPECT_EQ(jobstore_batch_create(js, f.id, "/v1/completions", "24h", NULL, 0, b), 0);
    jobstore_file_deinit(&f);
    struct jobstore_request reqs[16];
    char cids[16][16], bodies[16][64]; /* room for any int: "r" + 10 digits */
    if (n < 0 || n > 16) abort();     /* the arrays above hold 16 */
    for (int i = 0; i < n; i++) {
        snprintf(cids[i], sizeof cids[i], "r%d", i + 1);
        snprintf(bodies[i], sizeof bodies[i], "{\"custom_id\":\"r%d\"}", i + 1);
        reqs[i] = (struct jobstore_request){i + 1, cids[i], bodies[i]};
    }
    EXPECT_EQ(jobstore_batch_add_requests(js, b->id, reqs, n), 0);
    EXPECT_EQ(jobstore_batch_set_status(js, b->id, JOBSTORE_IN_PROGRESS, NULL), 0);
}

char *output_path(struct jobstore *js, const char *batch_id, bool ok)
{
    struct jobstore_batch b;
    if (jobstore_batch_get(js, batch_id, &b) != 0) return NULL;
    char name[64];
    snprintf(name, sizeof name, "files/%s", ok ? b.output_file_id : b.error_file_id);
    jobstore_batch_deinit(&b);
    return xstrdup(name);
}

bool id_well_formed(const char *id, const char *prefix)
{
    size_t p = strlen(prefix);
    if (strncmp(id, prefix, p) != 0 || strlen(id) != p + 24) return false;
    for (const char *c = id + p; *c; c++)
        if (!strchr("0123456789abcdef", *c)) return false;
    return true;
}

void reach(struct jobstore *js, const char *id, enum jobstore_status s)
{
    static const enum jobstore_status path_to[][4] = {
        [JOBSTORE_VALIDATING] = {JOBSTORE_VALIDATING},
        [JOBSTORE_FAILED] = {JOBSTORE_FAILED},
        [JOBSTORE_IN_PROGRESS] = {JOBSTORE_IN_PROGRESS},
        [JOBSTORE_FINALIZING] = {JOBSTORE_IN_PROGRESS, JOBSTORE_FINALIZING},
        [JOBSTORE_COMPLETED] = {JOBSTORE_IN_PROGRESS, JOBSTORE_FINALIZING,
                                JOBSTORE_COMPLETED},
        [JOBSTORE_EXPIRED] = {JOBSTORE_IN_PROGRESS, JOBSTORE_EXPIRED},
        [JOBSTORE_CANCELLING] = {JOBSTORE_CANCELLING},
        [JOBSTORE_CANCELLED] = {JOBSTORE_CANCELLING, JOBSTORE_CANCELLED},
    };
    for (int i = 0; i < 4 && path_to[s][i] != JOBSTORE_VALIDATING; i++)
        EXPECT_EQ(jobstore_batch_set_status(js, id, path_to[s][i], NULL), 0);
}
