/*
 * test_jobstore_batch.c - a batch's requests and results in the job store
 * (server/jobstore_sqlite_batch.c and _result.c, jobstore_pg_batch.c): requests
 * added all or nothing, each result counted once and published in order,
 * cancelling keeps what was written, and, for SQLite, the crashes between a
 * result's write and its commit (an uncounted line, a torn last line) neither lose
 * nor duplicate anything on reopen. Each test has its own store (a mkdtemp data
 * dir, or with --pg a new database); PostgreSQL commits a result in one
 * transaction, so its crash tests cut connections instead (test_jobstore_pg.c).
 */
#include "jobstore_testlib.h"

TEST(add_requests_all_or_nothing)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_create(js, "in", "batch", "{}\n", 3, &f), 0);
    struct jobstore_batch b;
    EXPECT_EQ(jobstore_batch_create(js, f.id, "/v1/completions", "24h", NULL, 0, &b), 0);
    struct jobstore_request dup[3] = {{1, "a", "{}"}, {2, "b", "{}"}, {3, "a", "{}"}};
    EXPECT_EQ(jobstore_batch_add_requests(js, b.id, dup, 3), ENG_EINVAL);
    EXPECT(strstr(err_msg(), "line 3") != NULL);
    struct jobstore_request *rs;
    int n;
    EXPECT_EQ(jobstore_batch_pending(js, b.id, 0, 10, &rs, &n), 0);
    EXPECT_EQ(n, 0); /* rolled back: not even a and b */
    jobstore_requests_free(rs, n);

    struct jobstore_request ok[2] = {{1, "a", "{\"x\":1}"}, {2, "b", "{\"x\":2}"}};
    EXPECT_EQ(jobstore_batch_add_requests(js, b.id, ok, 2), 0);
    EXPECT_EQ(jobstore_batch_add_requests(js, b.id, ok, 2), ENG_EINVAL); /* once */
    jobstore_batch_deinit(&b);
    EXPECT_EQ(jobstore_batch_get(js, b.id, &b), 0);
    EXPECT_EQ(b.total, 2);
    EXPECT_EQ(jobstore_batch_pending(js, b.id, 0, 10, &rs, &n), 0);
    EXPECT_EQ(n, 2);
    if (n == 2) {
        EXPECT_EQ(rs[0].line, 1);
        EXPECT_STR(rs[0].custom_id, "a");
        EXPECT_STR(rs[1].body, "{\"x\":2}");
    }
    jobstore_requests_free(rs, n);
    jobstore_batch_deinit(&b);
    jobstore_file_deinit(&f);
    jobstore_close(js);
    store_drop(dir);
}

TEST(results_counted_once_and_published)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 4, &b);

    /* Results before in_progress are refused; so are lines that do not match. */
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r1", true, "{\"custom_id\":\"r2\"}"),
              ENG_EINVAL);
    EXPECT_EQ(
        jobstore_batch_append_result(js, b.id, "r1", true, "{\"custom_id\":\"r1\"}\n"),
        ENG_EINVAL);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r1", true, "not json"), ENG_EINVAL);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r9", true, result_line("r9")),
              ENG_ENOTFOUND);

    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r1", true, result_line("r1")), 0);
    EXPECT_EQ(
        jobstore_batch_append_result(js, b.id, "r2", false,
                                     "{\"custom_id\":\"r2\",\"error\":{\"code\":\"x\"}}"),
        0);
    /* A second answer for r1 is refused before it reaches the file. */
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r1", true, result_line("r1")),
              ENG_EINVAL);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.total, 4);
    EXPECT_EQ(c.completed, 1);
    EXPECT_EQ(c.failed, 1);
    EXPECT_EQ(c.prompt_tokens, 3);
    EXPECT_EQ(c.completion_tokens, 5);
    EXPECT(id_well_formed(c.output_file_id, "file-"));
    EXPECT(id_well_formed(c.error_file_id, "file-"));
    jobstore_batch_deinit(&c);

    struct jobstore_request *rs;
    int n;
    EXPECT_EQ(jobstore_batch_pending(js, b.id, 0, 1, &rs, &n), 0);
    EXPECT_EQ(n, 1);
    int64_t last = n ? rs[0].line : 0;
    if (n) EXPECT_STR(rs[0].custom_id, "r3");
    jobstore_requests_free(rs, n);
    EXPECT_EQ(jobstore_batch_pending(js, b.id, last, 10, &rs, &n), 0);
    EXPECT_EQ(n, 1);
    if (n) EXPECT_STR(rs[0].custom_id, "r4");
    jobstore_requests_free(rs, n);

    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r3", true, result_line("r3")), 0);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r4", true, result_line("r4")), 0);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_FINALIZING, NULL), 0);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r4", true, result_line("r4")),
              ENG_EINVAL);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_COMPLETED, NULL), 0);

    /* Completion publishes the output and error files as batch_output files. */
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, 3);
    EXPECT_EQ(c.failed, 1);
    struct jobstore_file out, errf;
    EXPECT_EQ(jobstore_file_get(js, c.output_file_id, &out), 0);
    EXPECT_EQ(jobstore_file_get(js, c.error_file_id, &errf), 0);
    EXPECT_STR(out.purpose, "batch_output");
    size_t len = 0;
    char *body = read_body(js, c.output_file_id, 7, &len); /* 7: reads cross lines */
    EXPECT_EQ(len, out.bytes);
    EXPECT_EQ(count_substr(body, "\n"), 3);
    EXPECT_EQ(count_substr(body, "\"custom_id\":\"r1\""), 1);
    /* As a stream: the same bytes. */
    FILE *st = NULL;
    int64_t st_bytes = 0;
    EXPECT_EQ(jobstore_file_open(js, c.output_file_id, &st, &st_bytes), 0);
    EXPECT_EQ(st_bytes, out.bytes);
    char st_buf[4096];
    size_t st_len = st ? fread(st_buf, 1, sizeof st_buf, st) : 0;
    EXPECT(body && st_len == len && memcmp(st_buf, body, len) == 0);
    if (st) fclose(st);
    free(body);
    body = read_body(js, c.error_file_id, 4096, &len);
    EXPECT_STR(body, "{\"custom_id\":\"r2\",\"error\":{\"code\":\"x\"}}\n");
    EXPECT_EQ(len, errf.bytes);
    free(body);
    jobstore_file_deinit(&out);
    jobstore_file_deinit(&errf);
    jobstore_batch_deinit(&c);
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    store_drop(dir);
}

TEST(many_results_in_one_append)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 4, &b);
    char *l1 = xstrdup(result_line("r1")), *l3 = xstrdup(result_line("r3")); /* static */
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r2", true, result_line("r2")), 0);
    /* Refused as a whole, before anything is written: r2 is already answered, and
     * r1 twice in one call. */
    const struct jobstore_result again[] = {{"r1", true, l1}, {"r2", true, result_line("r2")}};
    EXPECT_EQ(jobstore_batch_append_results(js, b.id, again, 2), ENG_EINVAL);
    const struct jobstore_result twice[] = {{"r1", true, l1}, {"r1", true, l1}};
    EXPECT_EQ(jobstore_batch_append_results(js, b.id, twice, 2), ENG_EINVAL);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, 1);
    char *body = NULL;
    size_t len = 0;
    struct jobstore_file out;
    EXPECT_EQ(jobstore_file_get(js, c.output_file_id, &out),
              ENG_ENOTFOUND); /* unpublished */
    jobstore_batch_deinit(&c);

    /* Output and error lines in one call: both files grow, counts and usage add up. */
    const struct jobstore_result mixed[] = {
        {"r1", true, l1},
        {"r4", false, "{\"custom_id\":\"r4\",\"error\":{\"code\":\"batch_expired\"}}"},
        {"r3", true, l3}};
    EXPECT_EQ(jobstore_batch_append_results(js, b.id, mixed, 3), 0);
    EXPECT_EQ(jobstore_batch_append_results(js, b.id, mixed, 0), 0);
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, 3);
    EXPECT_EQ(c.failed, 1);
    EXPECT_EQ(c.prompt_tokens, 9);
    EXPECT_EQ(c.completion_tokens, 15);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_FINALIZING, NULL), 0);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_COMPLETED, NULL), 0);
    body = read_body(js, c.output_file_id, 1000, &len);
    EXPECT(body != NULL);
    /* r2 from the single append, then r1 and r3 from the batch, in that order. */
    if (body) {
        char *p2 = strstr(body, "\"r2\""), *p1 = strstr(body, "\"r1\""),
             *p3 = strstr(body, "\"r3\"");
        EXPECT(p2 && p1 && p3 && p2 < p1 && p1 < p3);
        int lines = 0;
        for (size_t i = 0; i < len; i++) lines += body[i] == '\n';
        EXPECT_EQ(lines, 3);
    }
    free(body);
    free(l1);
    free(l3);
    jobstore_batch_deinit(&c);
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    store_drop(dir);
}

TEST(cancelling_keeps_partial_output)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 3, &b);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r1", true, result_line("r1")), 0);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_CANCELLING, NULL), 0);
    /* A request already running when the cancel came still lands. */
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r2", true, result_line("r2")), 0);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_CANCELLED, NULL), 0);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r3", true, result_line("r3")),
              ENG_EINVAL);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, 2);
    struct jobstore_file out;
    EXPECT_EQ(jobstore_file_get(js, c.output_file_id, &out), 0);
    jobstore_file_deinit(&out);
    EXPECT_STR(c.error_file_id, "");
    jobstore_batch_deinit(&c);
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    store_drop(dir);
}

TEST(a_long_output_reads_back_in_any_pieces)
{
    /* 300 results committed 50 at a time, read back in pieces of 97 bytes (which
     * start and end mid-line) and as a stream: the same bytes as the lines in
     * commit order, each followed by a newline. */
    enum { N = 300 };
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_create(js, "in", "batch", "{}\n", 3, &f), 0);
    struct jobstore_batch b;
    EXPECT_EQ(jobstore_batch_create(js, f.id, "/v1/completions", "24h", NULL, 0, &b), 0);
    static char cids[N][16], bodies[N][32], lines[N][600];
    struct jobstore_request reqs[N];
    struct jobstore_result rs[N];
    size_t want_len = 0;
    for (int i = 0; i < N; i++) {
        snprintf(cids[i], sizeof cids[i], "q%d", i);
        snprintf(bodies[i], sizeof bodies[i], "{\"custom_id\":\"q%d\"}", i);
        reqs[i] = (struct jobstore_request){i + 1, cids[i], bodies[i]};
        snprintf(lines[i], sizeof lines[i], "%s", result_line(cids[i]));
        rs[i] = (struct jobstore_result){cids[i], true, lines[i]};
        want_len += strlen(lines[i]) + 1;
    }
    EXPECT_EQ(jobstore_batch_add_requests(js, b.id, reqs, N), 0);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_IN_PROGRESS, NULL), 0);
    for (int i = 0; i < N; i += 50)
        EXPECT_EQ(jobstore_batch_append_results(js, b.id, rs + i, 50), 0);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_FINALIZING, NULL), 0);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_COMPLETED, NULL), 0);
    char *want = xmalloc(want_len + 1);
    size_t at = 0;
    for (int i = 0; i < N; i++)
        at += (size_t)sprintf(want + at, "%s\n", lines[i]);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, N);
    size_t len = 0;
    char *body = read_body(js, c.output_file_id, 97, &len);
    EXPECT(body && len == want_len && memcmp(body, want, len) == 0);
    free(body);
    FILE *st = NULL;
    int64_t bytes = 0;
    EXPECT_EQ(jobstore_file_open(js, c.output_file_id, &st, &bytes), 0);
    EXPECT_EQ(bytes, want_len);
    char *copy = xmalloc(want_len + 1);
    EXPECT_EQ(st ? fread(copy, 1, want_len + 1, st) : 0, want_len);
    EXPECT(memcmp(copy, want, want_len) == 0);
    if (st) fclose(st);
    free(copy);
    free(want);
    jobstore_batch_deinit(&c);
    jobstore_batch_deinit(&b);
    jobstore_file_deinit(&f);
    jobstore_close(js);
    store_drop(dir);
}

/* ---- crashes ---- */

TEST(crash_after_write_before_mark)
{
    /* The process synced r2's line and died before the commit: the line is in the
     * file, the database still says pending. Reopening must count r2 once, never
     * hand it out again, and never let a second r2 line in. */
    char *dir = tmp_dir();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 3, &b);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r1", true, result_line("r1")), 0);
    char *rel = output_path(js, b.id, true);
    jobstore_close(js);
    char *path = util_path_join(dir, rel);
    char line[600];
    snprintf(line, sizeof line, "%s\n", result_line("r2"));
    append_raw(path, line);

    js = open_ok(dir);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, 2);
    EXPECT_EQ(c.prompt_tokens, 6);
    jobstore_batch_deinit(&c);
    struct jobstore_request *rs;
    int n;
    EXPECT_EQ(jobstore_batch_pending(js, b.id, 0, 10, &rs, &n), 0);
    EXPECT_EQ(n, 1);
    if (n) EXPECT_STR(rs[0].custom_id, "r3");
    jobstore_requests_free(rs, n);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r2", true, result_line("r2")),
              ENG_EINVAL);
    /* Recovery is idempotent. */
    EXPECT_EQ(jobstore_batch_recover(js, b.id), 0);
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, 2);
    EXPECT_EQ(c.prompt_tokens, 6);
    jobstore_batch_deinit(&c);
    char *body = slurp(path, NULL);
    EXPECT_EQ(count_substr(body, "\"custom_id\":\"r2\""), 1);
    free(body);
    free(path);
    free(rel);
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    rm_rf(dir);
}

TEST(crash_mid_write_torn_line_is_cut)
{
    char *dir = tmp_dir();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 3, &b);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r1", true, result_line("r1")), 0);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r2", false,
                                           "{\"custom_id\":\"r2\",\"error\":{}}"),
              0);
    char *rel = output_path(js, b.id, true), *rel_err = output_path(js, b.id, false);
    jobstore_close(js);
    char *path = util_path_join(dir, rel), *path_err = util_path_join(dir, rel_err);
    size_t good_len = 0;
    free(slurp(path, &good_len));
    append_raw(path, "{\"id\":\"batch_req_1\",\"custom_id\":\"r3\",\"resp");
    append_raw(path_err, "garbage\n");

    js = open_ok(dir);
    size_t len = 0;
    free(slurp(path, &len));
    EXPECT_EQ(len, good_len);
    char *err_body = slurp(path_err, NULL);
    EXPECT_STR(err_body, "{\"custom_id\":\"r2\",\"error\":{}}\n");
    free(err_body);
    struct jobstore_request *rs;
    int n;
    EXPECT_EQ(jobstore_batch_pending(js, b.id, 0, 10, &rs, &n), 0);
    EXPECT_EQ(n, 1);
    if (n) EXPECT_STR(rs[0].custom_id, "r3");
    jobstore_requests_free(rs, n);
    /* The resumed r3 lands on a clean line boundary. */
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r3", true, result_line("r3")), 0);
    char *body = slurp(path, NULL);
    EXPECT_EQ(count_substr(body, "\n"), 2);
    EXPECT_EQ(count_substr(body, "\"custom_id\":\"r3\""), 1);
    free(body);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, 2);
    EXPECT_EQ(c.failed, 1);
    jobstore_batch_deinit(&c);
    free(path);
    free(path_err);
    free(rel);
    free(rel_err);
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    rm_rf(dir);
}

TEST(reopen_keeps_everything)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 2, &b);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r1", true, result_line("r1")), 0);
    jobstore_close(js);
    js = open_ok(dir);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.status, JOBSTORE_IN_PROGRESS);
    EXPECT_EQ(c.total, 2);
    EXPECT_EQ(c.completed, 1);
    EXPECT_STR(c.output_file_id, b.output_file_id[0] ? b.output_file_id : c.output_file_id);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_get(js, c.input_file_id, &f), 0);
    jobstore_file_deinit(&f);
    struct jobstore_request *rs;
    int n;
    EXPECT_EQ(jobstore_batch_pending(js, b.id, 0, 10, &rs, &n), 0);
    EXPECT_EQ(n, 1);
    jobstore_requests_free(rs, n);
    jobstore_batch_deinit(&c);
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    store_drop(dir);
}

/* ---- refusing what is not ours ---- */

int main(int argc, char **argv)
{
    store_test_init(argc, argv);
    RUN(add_requests_all_or_nothing);
    RUN(results_counted_once_and_published);
    RUN(many_results_in_one_append);
    RUN(cancelling_keeps_partial_output);
    RUN(reopen_keeps_everything);
    RUN(a_long_output_reads_back_in_any_pieces);
    if (!test_pg) {
        /* A result's two steps (the file append, then the commit) and the states a
         * crash between them leaves on disk: SQLite's alone. */
        RUN(crash_after_write_before_mark);
        RUN(crash_mid_write_torn_line_is_cut);
    }
    return test_done();
}
