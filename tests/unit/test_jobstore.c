/*
 * test_jobstore.c - the Files/Batches job store (server/jobstore*.c) as a specification.
 *
 * Every test works in its own store: a mkdtemp data dir, or with --pg a new database
 * on a private PostgreSQL (jobstore_testlib.h); the tests listed first in main
 * hold for both backends. Crashes are simulated the way they
 * look on disk: a result line in the output file that the database never counted
 * (the process died between the fsync and the commit), a torn last line (it died
 * mid-write), a temporary upload or an orphan body; the store is then reopened and
 * must neither lose nor duplicate anything. Run under ASan: nothing may leak.
 * Here: files, batches and their states, the database itself; a batch's requests
 * and results, crashes among them, are test_jobstore_batch.c.
 */
#include "jobstore_testlib.h"

TEST(file_create_get_body)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    const char data[] = "{\"custom_id\":\"a\"}\n{\"custom_id\":\"b\"}\n";
    struct jobstore_file f, g;
    jobstore_set_time(js, 1700000000);
    EXPECT_EQ(jobstore_file_create(js, "../../etc/passwd", "batch", data, strlen(data), &f),
              0);
    EXPECT(id_well_formed(f.id, "file-"));
    EXPECT_EQ(f.bytes, strlen(data));
    EXPECT_EQ(f.created_at, 1700000000);
    EXPECT_STR(f.filename, "../../etc/passwd"); /* stored, never used as a path */
    EXPECT_STR(f.purpose, "batch");
    EXPECT_STR(f.status, "processed");

    EXPECT_EQ(jobstore_file_get(js, f.id, &g), 0);
    EXPECT_STR(g.id, f.id);
    EXPECT_STR(g.filename, f.filename);
    jobstore_file_deinit(&g);

    size_t len = 0;
    char *body = read_body(js, f.id, 5, &len);
    EXPECT(body && len == strlen(data) && memcmp(body, data, len) == 0);
    free(body);

    /* A path only where bodies are files. */
    char *path = NULL;
    if (test_pg) {
        EXPECT_EQ(jobstore_file_path(js, f.id, &path), ENG_EUNSUPPORTED);
    } else {
        EXPECT_EQ(jobstore_file_path(js, f.id, &path), 0);
        char want[256];
        snprintf(want, sizeof want, "%s/files/%s", dir, f.id);
        EXPECT_STR(path, want);
        free(path);
        EXPECT_EQ(jobstore_file_path(js, "file-nope", &path), ENG_ENOTFOUND);
    }
    EXPECT(path == NULL || !test_pg);

    EXPECT_EQ(jobstore_file_get(js, "file-nope", &g), ENG_ENOTFOUND);
    size_t got = 1;
    char buf[8];
    EXPECT_EQ(jobstore_file_read(js, "file-nope", 0, buf, sizeof buf, &got), ENG_ENOTFOUND);
    EXPECT_EQ(got, 0);
    EXPECT_EQ(jobstore_file_read(js, f.id, -1, buf, sizeof buf, &got), ENG_EINVAL);
    jobstore_file_deinit(&f);
    jobstore_close(js);
    store_drop(dir);
}

TEST(upload_in_pieces_and_abort)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_upload *u;
    EXPECT_EQ(jobstore_upload_begin(js, &u), 0);
    EXPECT_EQ(jobstore_upload_write(u, "abc", 3), 0);
    EXPECT_EQ(jobstore_upload_write(u, "def\n", 4), 0);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_upload_commit(u, "x.jsonl", "batch", &f), 0);
    EXPECT_EQ(f.bytes, 7);
    jobstore_file_deinit(&f);

    /* An aborted upload leaves neither a row nor a body behind. */
    EXPECT_EQ(jobstore_upload_begin(js, &u), 0);
    EXPECT_EQ(jobstore_upload_write(u, "zzz", 3), 0);
    jobstore_upload_abort(u);
    struct jobstore_file *fs;
    int n;
    bool more;
    EXPECT_EQ(jobstore_file_list(js, NULL, NULL, 100, true, &fs, &n, &more), 0);
    EXPECT_EQ(n, 1);
    jobstore_files_free(fs, n);
    EXPECT_EQ(count_bodies(dir), 1);
    jobstore_close(js);
    store_drop(dir);
}

TEST(ids_unique_and_well_formed)
{
    char ids[500][JOBSTORE_ID_MAX];
    for (int i = 0; i < 500; i++) {
        EXPECT_EQ(jobstore_new_id("batch_req_", ids[i], sizeof ids[i]), 0);
        EXPECT(id_well_formed(ids[i], "batch_req_"));
        for (int j = 0; j < i; j++)
            if (strcmp(ids[i], ids[j]) == 0) TEST_FAIL("duplicate id %s", ids[i]);
    }
    char small[10];
    EXPECT_EQ(jobstore_new_id("file-", small, sizeof small), ENG_EINVAL);
}

TEST(file_list_pagination)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    char ids[5][JOBSTORE_ID_MAX];
    jobstore_set_time(js, 1000); /* all in one second: order must still hold */
    for (int i = 0; i < 5; i++) {
        struct jobstore_file f;
        EXPECT_EQ(jobstore_file_create(js, "f", i == 2 ? "other" : "batch", "x", 1, &f), 0);
        memcpy(ids[i], f.id, sizeof ids[i]);
        jobstore_file_deinit(&f);
    }
    struct jobstore_file *fs;
    int n;
    bool more;
    /* Oldest first, two at a time, with the last id as the cursor. */
    EXPECT_EQ(jobstore_file_list(js, NULL, NULL, 2, true, &fs, &n, &more), 0);
    EXPECT_EQ(n, 2);
    EXPECT(more);
    if (n == 2) {
        EXPECT_STR(fs[0].id, ids[0]);
        EXPECT_STR(fs[1].id, ids[1]);
    }
    jobstore_files_free(fs, n);
    EXPECT_EQ(jobstore_file_list(js, NULL, ids[1], 2, true, &fs, &n, &more), 0);
    EXPECT_EQ(n, 2);
    EXPECT(more);
    if (n == 2) EXPECT_STR(fs[0].id, ids[2]);
    jobstore_files_free(fs, n);
    EXPECT_EQ(jobstore_file_list(js, NULL, ids[3], 2, true, &fs, &n, &more), 0);
    EXPECT_EQ(n, 1);
    EXPECT(!more);
    if (n == 1) EXPECT_STR(fs[0].id, ids[4]);
    jobstore_files_free(fs, n);
    /* Newest first. */
    EXPECT_EQ(jobstore_file_list(js, NULL, ids[4], 10, false, &fs, &n, &more), 0);
    EXPECT_EQ(n, 4);
    EXPECT(!more);
    if (n == 4) EXPECT_STR(fs[0].id, ids[3]);
    jobstore_files_free(fs, n);
    /* By purpose. */
    EXPECT_EQ(jobstore_file_list(js, "batch", NULL, 10, true, &fs, &n, &more), 0);
    EXPECT_EQ(n, 4);
    jobstore_files_free(fs, n);
    EXPECT_EQ(jobstore_file_list(js, "other", NULL, 10, true, &fs, &n, &more), 0);
    EXPECT_EQ(n, 1);
    jobstore_files_free(fs, n);
    /* Bad cursor and limits. */
    EXPECT_EQ(jobstore_file_list(js, NULL, "file-gone", 10, true, &fs, &n, &more),
              ENG_ENOTFOUND);
    EXPECT_EQ(jobstore_file_list(js, NULL, NULL, 0, true, &fs, &n, &more), ENG_EINVAL);
    jobstore_close(js);
    store_drop(dir);
}

TEST(file_delete_row_and_body)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_create(js, "f", "batch", "abc", 3, &f), 0);
    EXPECT_EQ(count_bodies(dir), 1);
    EXPECT_EQ(jobstore_file_delete(js, f.id), 0);
    EXPECT_EQ(count_bodies(dir), 0);
    struct jobstore_file g;
    EXPECT_EQ(jobstore_file_get(js, f.id, &g), ENG_ENOTFOUND);
    EXPECT_EQ(jobstore_file_delete(js, f.id), ENG_ENOTFOUND);
    jobstore_file_deinit(&f);
    jobstore_close(js);
    store_drop(dir);
}

TEST(file_read_in_pieces)
{
    /* 2.5 MiB + 17 bytes, uploaded in pieces of odd sizes and read back in others:
     * both cross the PostgreSQL store's 1 MiB chunks, and every byte comes back in
     * place (the pattern has a period prime to both sizes). */
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    const size_t n = (5u << 19) + 17;
    unsigned char *data = xmalloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (unsigned char)((i * 131 + i / 251) & 0xff); /* NUL bytes too */
    struct jobstore_upload *u;
    EXPECT_EQ(jobstore_upload_begin(js, &u), 0);
    for (size_t at = 0, piece = 70001; at < n; at += piece)
        EXPECT_EQ(jobstore_upload_write(u, data + at, MIN(piece, n - at)), 0);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_upload_commit(u, "big.bin", "batch", &f), 0);
    EXPECT_EQ(f.bytes, n);
    size_t len = 0;
    char *body = read_body(js, f.id, 99991, &len);
    EXPECT(body && len == n && memcmp(body, data, n) == 0);
    free(body);
    /* A read across the first chunk boundary, and reads at and past the end. */
    char buf[64];
    size_t got = 0;
    EXPECT_EQ(jobstore_file_read(js, f.id, (1 << 20) - 10, buf, sizeof buf, &got), 0);
    EXPECT_EQ(got, sizeof buf);
    EXPECT(memcmp(buf, data + (1 << 20) - 10, sizeof buf) == 0);
    EXPECT_EQ(jobstore_file_read(js, f.id, (int64_t)n - 5, buf, sizeof buf, &got), 0);
    EXPECT_EQ(got, 5);
    EXPECT_EQ(jobstore_file_read(js, f.id, (int64_t)n, buf, sizeof buf, &got), 0);
    EXPECT_EQ(got, 0);
    EXPECT_EQ(jobstore_file_read(js, f.id, (int64_t)n + 100, buf, sizeof buf, &got), 0);
    EXPECT_EQ(got, 0);
    /* The same body as a stream of its own, read whole. */
    FILE *st = NULL;
    int64_t st_bytes = 0;
    EXPECT_EQ(jobstore_file_open(js, f.id, &st, &st_bytes), 0);
    EXPECT_EQ(st_bytes, n);
    char *copy = xmalloc(n + 1);
    size_t st_len = st ? fread(copy, 1, n + 1, st) : 0;
    EXPECT_EQ(st_len, n);
    EXPECT(st && !ferror(st) && memcmp(copy, data, n) == 0);
    if (st) fclose(st);
    free(copy);
    EXPECT_EQ(jobstore_file_open(js, "file-nope", &st, &st_bytes), ENG_ENOTFOUND);
    EXPECT(st == NULL);
    /* An empty file has an empty body. */
    struct jobstore_file e;
    EXPECT_EQ(jobstore_file_create(js, "empty", "batch", "", 0, &e), 0);
    EXPECT_EQ(e.bytes, 0);
    EXPECT_EQ(jobstore_file_read(js, e.id, 0, buf, sizeof buf, &got), 0);
    EXPECT_EQ(got, 0);
    jobstore_file_deinit(&e);
    jobstore_file_deinit(&f);
    free(data);
    jobstore_close(js);
    store_drop(dir);
}

TEST(open_removes_leftovers_keeps_the_rest)
{
    /* A crash mid-upload leaves files/<id>.tmp; one between a delete's row and its
     * unlink, or between an upload's rename and its insert, leaves a body without a
     * row. The next open removes both; a row always keeps its body, and names that
     * are not ours are never touched. */
    char *dir = tmp_dir();
    struct jobstore *js = open_ok(dir);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_create(js, "keep", "batch", "k", 1, &f), 0);
    jobstore_close(js);
    char tmp[256], orphan[256], foreign[256], kept[256];
    snprintf(tmp, sizeof tmp, "%s/files/file-0123456789abcdef01234567.tmp", dir);
    snprintf(orphan, sizeof orphan, "%s/files/file-aaaaaaaaaaaaaaaaaaaaaaaa", dir);
    snprintf(foreign, sizeof foreign, "%s/files/notes.txt", dir);
    snprintf(kept, sizeof kept, "%s/files/%s", dir, f.id);
    append_raw(tmp, "partial");
    append_raw(orphan, "orphan");
    append_raw(foreign, "mine");
    js = open_ok(dir);
    EXPECT(!exists(tmp));
    EXPECT(!exists(orphan));
    EXPECT(exists(foreign));
    EXPECT(exists(kept));
    struct jobstore_file g;
    EXPECT_EQ(jobstore_file_get(js, f.id, &g), 0);
    jobstore_file_deinit(&g);
    jobstore_file_deinit(&f);
    jobstore_close(js);
    rm_rf(dir);
}

/* ---- batches ---- */

TEST(batch_create_and_get)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    jobstore_set_time(js, 5000);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_create(js, "in.jsonl", "batch", "{}\n", 3, &f), 0);
    struct jobstore_batch b;
    EXPECT_EQ(
        jobstore_batch_create(js, f.id, "/v1/completions", "24h", "{\"k\":\"v\"}", 0, &b), 0);
    EXPECT(id_well_formed(b.id, "batch_"));
    EXPECT_STR(b.input_file_id, f.id);
    EXPECT_STR(b.endpoint, "/v1/completions");
    EXPECT_STR(b.completion_window, "24h");
    EXPECT_EQ(b.status, JOBSTORE_VALIDATING);
    EXPECT_EQ(b.created_at, 5000);
    EXPECT_EQ(b.expires_at, 5000 + 86400);
    EXPECT_EQ(b.in_progress_at, 0);
    EXPECT_EQ(b.total, 0);
    EXPECT_STR(b.output_file_id, "");
    EXPECT_STR(b.metadata, "{\"k\":\"v\"}");
    EXPECT(b.errors == NULL);
    jobstore_batch_deinit(&b);

    EXPECT_EQ(jobstore_batch_create(js, "file-none", "/v1/completions", "24h", NULL, 0, &b),
              ENG_ENOTFOUND);
    EXPECT_EQ(jobstore_batch_create(js, f.id, "/v1/completions", "1d", NULL, 0, &b),
              ENG_EINVAL);
    EXPECT_EQ(jobstore_batch_create(js, f.id, "/v1/completions", "h", NULL, 0, &b),
              ENG_EINVAL);
    EXPECT_EQ(jobstore_batch_get(js, "batch_none", &b), ENG_ENOTFOUND);
    jobstore_file_deinit(&f);
    jobstore_close(js);
    store_drop(dir);
}

TEST(batch_state_machine)
{
    /* OpenAI's: validating -> failed | in_progress -> finalizing -> completed;
     * validating | in_progress -> cancelling -> cancelled; in_progress -> expired;
     * and in_progress | cancelling -> failed when results cannot be written. */
    static const bool legal[8][8] = {
        [JOBSTORE_VALIDATING] =
            {[JOBSTORE_FAILED] = 1, [JOBSTORE_IN_PROGRESS] = 1, [JOBSTORE_CANCELLING] = 1},
        [JOBSTORE_IN_PROGRESS] = {[JOBSTORE_FINALIZING] = 1, [JOBSTORE_CANCELLING] = 1,
                                  [JOBSTORE_EXPIRED] = 1, [JOBSTORE_FAILED] = 1},
        [JOBSTORE_FINALIZING] = {[JOBSTORE_COMPLETED] = 1},
        [JOBSTORE_CANCELLING] = {[JOBSTORE_CANCELLED] = 1, [JOBSTORE_FAILED] = 1},
    };
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_create(js, "in", "batch", "{}\n", 3, &f), 0);
    for (int from = 0; from < 8; from++) {
        for (int to = 0; to < 8; to++) {
            struct jobstore_batch b;
            jobstore_set_time(js, 100);
            EXPECT_EQ(jobstore_batch_create(js, f.id, "/v1/completions", "24h", NULL, 0, &b),
                      0);
            reach(js, b.id, (enum jobstore_status)from);
            jobstore_set_time(js, 200);
            int err = jobstore_batch_set_status(js, b.id, (enum jobstore_status)to, NULL);
            if (err != (legal[from][to] ? 0 : ENG_EINVAL))
                TEST_FAIL("%s -> %s returned %d", jobstore_status_name(from),
                          jobstore_status_name(to), err);
            struct jobstore_batch c;
            EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
            EXPECT_EQ(c.status, legal[from][to] ? to : from);
            if (legal[from][to]) {
                int64_t stamp = to == JOBSTORE_FAILED        ? c.failed_at
                                : to == JOBSTORE_IN_PROGRESS ? c.in_progress_at
                                : to == JOBSTORE_FINALIZING  ? c.finalizing_at
                                : to == JOBSTORE_COMPLETED   ? c.completed_at
                                : to == JOBSTORE_EXPIRED     ? c.expired_at
                                : to == JOBSTORE_CANCELLING  ? c.cancelling_at
                                                             : c.cancelled_at;
                EXPECT_EQ(stamp, 200);
            }
            jobstore_batch_deinit(&c);
            jobstore_batch_deinit(&b);
        }
    }
    /* The message says which move was refused. */
    struct jobstore_batch b;
    EXPECT_EQ(jobstore_batch_create(js, f.id, "/v1/completions", "24h", NULL, 0, &b), 0);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_COMPLETED, NULL), ENG_EINVAL);
    EXPECT(strstr(err_msg(), "cannot go from validating to completed") != NULL);
    /* Validation errors are stored with the failure. */
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_FAILED,
                                        "{\"object\":\"list\",\"data\":[{\"line\":2}]}"),
              0);
    jobstore_batch_deinit(&b);
    EXPECT_EQ(jobstore_batch_get(js, b.id, &b), 0);
    EXPECT_STR(b.errors, "{\"object\":\"list\",\"data\":[{\"line\":2}]}");
    jobstore_batch_deinit(&b);
    jobstore_file_deinit(&f);
    jobstore_close(js);
    store_drop(dir);
}

TEST(batch_list_and_unfinished)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_create(js, "in", "batch", "{}\n", 3, &f), 0);
    char ids[4][JOBSTORE_ID_MAX];
    for (int i = 0; i < 4; i++) {
        struct jobstore_batch b;
        EXPECT_EQ(jobstore_batch_create(js, f.id, "/v1/completions", "24h", NULL, 0, &b), 0);
        memcpy(ids[i], b.id, sizeof ids[i]);
        jobstore_batch_deinit(&b);
    }
    reach(js, ids[0], JOBSTORE_COMPLETED);
    reach(js, ids[1], JOBSTORE_CANCELLING);
    reach(js, ids[2], JOBSTORE_FAILED);
    struct jobstore_batch *bs;
    int n;
    bool more;
    /* Newest first, as OpenAI lists batches. */
    EXPECT_EQ(jobstore_batch_list(js, NULL, 3, false, &bs, &n, &more), 0);
    EXPECT_EQ(n, 3);
    EXPECT(more);
    if (n == 3) {
        EXPECT_STR(bs[0].id, ids[3]);
        EXPECT_STR(bs[2].id, ids[1]);
    }
    jobstore_batches_free(bs, n);
    EXPECT_EQ(jobstore_batch_list(js, ids[1], 3, false, &bs, &n, &more), 0);
    EXPECT_EQ(n, 1);
    EXPECT(!more);
    if (n == 1) EXPECT_STR(bs[0].id, ids[0]);
    jobstore_batches_free(bs, n);
    EXPECT_EQ(jobstore_batch_list(js, "batch_x", 3, false, &bs, &n, &more), ENG_ENOTFOUND);

    EXPECT_EQ(jobstore_unfinished_batches(js, &bs, &n), 0);
    EXPECT_EQ(n, 2);
    if (n == 2) {
        EXPECT_STR(bs[0].id, ids[1]);
        EXPECT_EQ(bs[0].status, JOBSTORE_CANCELLING);
        EXPECT_STR(bs[1].id, ids[3]);
    }
    jobstore_batches_free(bs, n);
    jobstore_file_deinit(&f);
    jobstore_close(js);
    store_drop(dir);
}

/* ---- requests and results ---- */

TEST(garbage_db_fails_cleanly)
{
    char *dir = tmp_dir();
    char *db = util_path_join(dir, "h2oserve.db");
    FILE *f = fopen(db, "w");
    for (int i = 0; i < 8192; i++)
        fputc((i * 7919) & 0xff, f);
    fclose(f);
    struct jobstore *js = (struct jobstore *)1;
    EXPECT_EQ(jobstore_open(&js, dir), ENG_EFORMAT);
    EXPECT(js == NULL);
    EXPECT(strstr(err_msg(), "h2oserve.db") != NULL);
    free(db);
    rm_rf(dir);
}

TEST(foreign_or_newer_db_refused)
{
    /* Someone else's SQLite database. */
    char *dir = tmp_dir();
    char *db = util_path_join(dir, "h2oserve.db");
    sqlite3 *h;
    sqlite3_open(db, &h);
    sqlite3_exec(h, "CREATE TABLE t(x)", NULL, NULL, NULL);
    sqlite3_close(h);
    struct jobstore *js;
    EXPECT_EQ(jobstore_open(&js, dir), ENG_EFORMAT);
    EXPECT(strstr(err_msg(), "not an h2oserve database") != NULL);
    free(db);
    rm_rf(dir);

    /* Ours, from a newer build. */
    dir = tmp_dir();
    js = open_ok(dir);
    jobstore_close(js);
    db = util_path_join(dir, "h2oserve.db");
    sqlite3_open(db, &h);
    sqlite3_exec(h, "PRAGMA user_version=99", NULL, NULL, NULL);
    sqlite3_close(h);
    EXPECT_EQ(jobstore_open(&js, dir), ENG_EUNSUPPORTED);
    EXPECT(strstr(err_msg(), "schema version 99") != NULL);
    free(db);
    rm_rf(dir);
}

TEST(one_store_per_data_dir)
{
    char *dir = tmp_dir();
    struct jobstore *js = open_ok(dir), *js2 = NULL;
    EXPECT_EQ(jobstore_open(&js2, dir), ENG_EIO);
    EXPECT(strstr(err_msg(), "in use") != NULL);
    jobstore_close(js);
    js2 = open_ok(dir); /* the lock goes with the store */
    jobstore_close(js2);
    rm_rf(dir);
}

int main(int argc, char **argv)
{
    store_test_init(argc, argv);
    RUN(file_create_get_body);
    RUN(upload_in_pieces_and_abort);
    RUN(ids_unique_and_well_formed);
    RUN(file_list_pagination);
    RUN(file_delete_row_and_body);
    RUN(file_read_in_pieces);
    RUN(batch_create_and_get);
    RUN(batch_state_machine);
    RUN(batch_list_and_unfinished);
    if (!test_pg) {
        /* The data dir's own mechanics: its files, its database file, its lock
         * (test_jobstore_pg.c has PostgreSQL's counterparts). */
        RUN(open_removes_leftovers_keeps_the_rest);
        RUN(garbage_db_fails_cleanly);
        RUN(foreign_or_newer_db_refused);
        RUN(one_store_per_data_dir);
    }
    return test_done();
}
