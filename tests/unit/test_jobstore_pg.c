/*
 * test_jobstore_pg.c - what only the PostgreSQL job store (server/jobstore_pg*.c)
 * has: one database that several stores share (two handles in one process stand
 * for two replicas), its schema's checks at open, connections cut in the middle of
 * an upload or under an open store, a claim meeting rows another transaction holds,
 * and input the database itself would refuse.
 * The tests both backends share are test_jobstore.c and test_jobstore_batch.c,
 * run again with --pg. Each test has its own database on a private server
 * (pg_testlib.h).
 */
#include "jobstore_testlib.h"
#include "pg_testlib.h"

#include <libpq-fe.h>

#include <pthread.h>
#include <time.h>

/* Close every connection to the test's database but the caller's: what a network
 * cut or a restarted database server does to a replica. */
static void cut_connections(const char *uri)
{
    EXPECT_EQ(pg_test_exec(uri,
                           "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                           " WHERE datname=current_database() AND pid<>pg_backend_pid()"),
              0);
}

TEST(foreign_or_newer_schema_refused)
{
    /* Someone else's h2o_files table, without our version table. */
    char *uri = pg_test_db_new();
    EXPECT_EQ(pg_test_exec(uri, "CREATE TABLE h2o_files(x integer)"), 0);
    struct jobstore *js = (struct jobstore *)1;
    EXPECT_EQ(jobstore_open(&js, uri), ENG_EFORMAT);
    EXPECT(js == NULL);
    EXPECT(strstr(err_msg(), "not an h2oserve database") != NULL);
    pg_test_db_drop(uri);

    /* Ours, from a newer build. */
    uri = pg_test_db_new();
    js = open_ok(uri);
    jobstore_close(js);
    EXPECT_EQ(pg_test_exec(uri, "UPDATE h2o_schema SET version=99"), 0);
    EXPECT_EQ(jobstore_open(&js, uri), ENG_EUNSUPPORTED);
    EXPECT(strstr(err_msg(), "schema version 99") != NULL);
    pg_test_db_drop(uri);
}

TEST(unreachable_database_fails_cleanly)
{
    struct jobstore *js = (struct jobstore *)1;
    EXPECT_EQ(jobstore_open(&js, "postgresql:///nodb?host=/nonexistent&connect_timeout=2"),
              ENG_EUNAVAILABLE);
    EXPECT(js == NULL);
    EXPECT(strstr(err_msg(), "postgresql: connect") != NULL);
    char uri[512];
    snprintf(uri, sizeof uri, "postgresql:///no_such_db?host=%s&user=postgres",
             pg_test_server());
    EXPECT_EQ(jobstore_open(&js, uri), ENG_EUNAVAILABLE);
    EXPECT(strstr(err_msg(), "no_such_db") != NULL);
    EXPECT_EQ(jobstore_open(&js, "postgresql://["), ENG_EINVAL); /* not a URI libpq reads */
    EXPECT(strstr(err_msg(), "not one libpq reads") != NULL);
}

TEST(two_replicas_share_files_and_batches)
{
    char *uri = pg_test_db_new();
    struct jobstore *a = open_ok(uri), *b = open_ok(uri);
    /* An upload in progress on one replica is invisible everywhere until it commits. */
    struct jobstore_upload *u;
    EXPECT_EQ(jobstore_upload_begin(a, &u), 0);
    EXPECT_EQ(jobstore_upload_write(u, "{\"custom_id\":\"r1\"}\n", 19), 0);
    struct jobstore_file *fs;
    int n;
    bool more;
    EXPECT_EQ(jobstore_file_list(b, NULL, NULL, 10, true, &fs, &n, &more), 0);
    EXPECT_EQ(n, 0);
    jobstore_files_free(fs, n);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_upload_commit(u, "in.jsonl", "batch", &f), 0);
    EXPECT_EQ(jobstore_file_list(b, NULL, NULL, 10, true, &fs, &n, &more), 0);
    EXPECT_EQ(n, 1);
    jobstore_files_free(fs, n);
    size_t len;
    char *body = read_body(b, f.id, 4, &len);
    EXPECT_STR(body, "{\"custom_id\":\"r1\"}\n");
    free(body);
    /* A batch made on B runs on A; its status moves are seen by both. */
    struct jobstore_batch bb, ab;
    EXPECT_EQ(jobstore_batch_create(b, f.id, "/v1/completions", "24h", NULL, 0, &bb), 0);
    EXPECT_EQ(jobstore_batch_get(a, bb.id, &ab), 0);
    EXPECT_EQ(ab.status, JOBSTORE_VALIDATING);
    jobstore_batch_deinit(&ab);
    EXPECT_EQ(jobstore_batch_set_status(a, bb.id, JOBSTORE_IN_PROGRESS, NULL), 0);
    /* The state machine holds across replicas: B's move from a state A has left is
     * refused against the row as it is now. */
    EXPECT_EQ(jobstore_batch_set_status(b, bb.id, JOBSTORE_FAILED, NULL), 0);
    EXPECT_EQ(jobstore_batch_set_status(a, bb.id, JOBSTORE_FINALIZING, NULL), ENG_EINVAL);
    EXPECT(strstr(err_msg(), "cannot go from failed to finalizing") != NULL);
    jobstore_batch_deinit(&bb);
    jobstore_file_deinit(&f);
    jobstore_close(a);
    jobstore_close(b);
    pg_test_db_drop(uri);
}

TEST(a_result_is_committed_once_whichever_replica_sends_it)
{
    char *uri = pg_test_db_new();
    struct jobstore *a = open_ok(uri), *b = open_ok(uri);
    struct jobstore_batch bt;
    make_running_batch(a, 4, &bt);
    /* Both replicas ran r1 (one lost its lease while running it): the first commit
     * wins, the second is refused and changes nothing. */
    EXPECT_EQ(jobstore_batch_append_result(a, bt.id, "r1", true, result_line("r1")), 0);
    EXPECT_EQ(jobstore_batch_append_result(b, bt.id, "r1", true, result_line("r1")),
              ENG_EINVAL);
    EXPECT(strstr(err_msg(), "already answered") != NULL);
    /* Interleaved commits from both keep one output with every line once. */
    EXPECT_EQ(jobstore_batch_append_result(b, bt.id, "r2", true, result_line("r2")), 0);
    EXPECT_EQ(jobstore_batch_append_result(a, bt.id, "r3", false,
                                           "{\"custom_id\":\"r3\",\"error\":{}}"),
              0);
    EXPECT_EQ(jobstore_batch_append_result(b, bt.id, "r4", true, result_line("r4")), 0);
    EXPECT_EQ(jobstore_batch_append_result(a, bt.id, "r4", true, result_line("r4")),
              ENG_EINVAL);
    EXPECT_EQ(jobstore_batch_set_status(b, bt.id, JOBSTORE_FINALIZING, NULL), 0);
    EXPECT_EQ(jobstore_batch_set_status(a, bt.id, JOBSTORE_COMPLETED, NULL), 0);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(b, bt.id, &c), 0);
    EXPECT_EQ(c.completed, 3);
    EXPECT_EQ(c.failed, 1);
    EXPECT_EQ(c.prompt_tokens, 9);
    size_t len = 0;
    char *body = read_body(b, c.output_file_id, 13, &len);
    struct jobstore_file out;
    EXPECT_EQ(jobstore_file_get(a, c.output_file_id, &out), 0);
    EXPECT_EQ(len, out.bytes);
    jobstore_file_deinit(&out);
    EXPECT_EQ(count_substr(body, "\n"), 3);
    for (int i = 1; i <= 4; i++) {
        char cid[32];
        snprintf(cid, sizeof cid, "\"custom_id\":\"r%d\"", i);
        EXPECT_EQ(count_substr(body, cid), i == 3 ? 0 : 1);
    }
    /* In commit order: r1 (A), r2 (B), r4 (B). */
    char *p1 = body ? strstr(body, "\"r1\"") : NULL,
         *p2 = body ? strstr(body, "\"r2\"") : NULL,
         *p4 = body ? strstr(body, "\"r4\"") : NULL;
    EXPECT(p1 && p2 && p4 && p1 < p2 && p2 < p4);
    free(body);
    body = read_body(a, c.error_file_id, 3, &len);
    EXPECT_STR(body, "{\"custom_id\":\"r3\",\"error\":{}}\n");
    free(body);
    jobstore_batch_deinit(&c);
    jobstore_batch_deinit(&bt);
    jobstore_close(a);
    jobstore_close(b);
    pg_test_db_drop(uri);
}

TEST(a_cancel_on_one_replica_stops_results_on_the_other)
{
    char *uri = pg_test_db_new();
    struct jobstore *a = open_ok(uri), *b = open_ok(uri);
    struct jobstore_batch bt;
    make_running_batch(a, 3, &bt);
    EXPECT_EQ(jobstore_batch_append_result(a, bt.id, "r1", true, result_line("r1")), 0);
    EXPECT_EQ(jobstore_batch_set_status(b, bt.id, JOBSTORE_CANCELLING, NULL), 0);
    /* What A had running when the cancel came still lands ... */
    EXPECT_EQ(jobstore_batch_append_result(a, bt.id, "r2", true, result_line("r2")), 0);
    EXPECT_EQ(jobstore_batch_set_status(b, bt.id, JOBSTORE_CANCELLED, NULL), 0);
    /* ... and nothing after the batch is cancelled. */
    EXPECT_EQ(jobstore_batch_append_result(a, bt.id, "r3", true, result_line("r3")),
              ENG_EINVAL);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(a, bt.id, &c), 0);
    EXPECT_EQ(c.status, JOBSTORE_CANCELLED);
    EXPECT_EQ(c.completed, 2);
    jobstore_batch_deinit(&c);
    jobstore_batch_deinit(&bt);
    jobstore_close(a);
    jobstore_close(b);
    pg_test_db_drop(uri);
}

TEST(a_cut_connection_mid_upload_leaves_nothing)
{
    char *uri = pg_test_db_new();
    struct jobstore *js = open_ok(uri);
    /* 1.5 MiB: one chunk is in the database (uncommitted) when the cut comes. */
    const size_t n = 3u << 19;
    char *data = xmalloc(n);
    memset(data, 'x', n);
    struct jobstore_upload *u;
    EXPECT_EQ(jobstore_upload_begin(js, &u), 0);
    EXPECT_EQ(jobstore_upload_write(u, data, n), 0);
    cut_connections(uri);
    EXPECT_EQ(jobstore_upload_commit(u, "big", "batch", NULL), ENG_EUNAVAILABLE);
    EXPECT_EQ(count_bodies(uri), 0);
    /* The store's own connection was cut too: a call may fail on finding that out,
     * and the next one reconnects. */
    struct jobstore_file *fs;
    int k;
    bool more;
    int err = jobstore_file_list(js, NULL, NULL, 10, true, &fs, &k, &more);
    EXPECT(err == 0 || err == ENG_EUNAVAILABLE);
    if (!err) jobstore_files_free(fs, k);
    EXPECT_EQ(jobstore_file_list(js, NULL, NULL, 10, true, &fs, &k, &more), 0);
    EXPECT_EQ(k, 0);
    jobstore_files_free(fs, k);
    /* And it works as before: an upload after the cut commits. */
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_create(js, "after", "batch", data, n, &f), 0);
    EXPECT_EQ(count_bodies(uri), 1);
    jobstore_file_deinit(&f);
    free(data);
    jobstore_close(js);
    pg_test_db_drop(uri);
}

/* Half a second from now, cut every connection to the database but its own: the
 * kill -9 of a replica (or a network cut) in the middle of its commit. */
struct cutter {
    const char *uri;
    int rc;
};

static void *cut_later(void *arg)
{
    struct cutter *c = arg;
    nanosleep(&(struct timespec){0, 500 * 1000 * 1000}, NULL);
    c->rc =
        pg_test_exec(c->uri, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                             " WHERE datname=current_database() AND pid<>pg_backend_pid()");
    return NULL;
}

TEST(a_result_cut_mid_commit_leaves_nothing)
{
    /* SQLite's crash tests leave a line on disk that the database did not count;
     * PostgreSQL's result is one transaction, so a cut inside it must leave
     * neither: r1 and r2 were sent in one call, r2's insert stalls (a trigger
     * sleeps), the connection is cut, and both are pending again, uncounted, with
     * no result row. Sent again, each lands once. */
    char *uri = pg_test_db_new();
    struct jobstore *js = open_ok(uri);
    struct jobstore_batch b;
    make_running_batch(js, 3, &b);
    EXPECT_EQ(pg_test_exec(uri, "CREATE FUNCTION h2o_test_slow() RETURNS trigger AS $$"
                                " BEGIN IF NEW.custom_id = 'r2' THEN PERFORM pg_sleep(5);"
                                " END IF; RETURN NEW; END $$ LANGUAGE plpgsql;"
                                " CREATE TRIGGER slow BEFORE INSERT ON h2o_batch_results"
                                " FOR EACH ROW EXECUTE FUNCTION h2o_test_slow()"),
              0);
    char l1[512], l2[512];
    snprintf(l1, sizeof l1, "%s", result_line("r1"));
    snprintf(l2, sizeof l2, "%s", result_line("r2"));
    const struct jobstore_result rs[] = {{"r1", true, l1}, {"r2", true, l2}};
    struct cutter cut = {uri, -1};
    pthread_t th;
    pthread_create(&th, NULL, cut_later, &cut);
    EXPECT_EQ(jobstore_batch_append_results(js, b.id, rs, 2), ENG_EUNAVAILABLE);
    pthread_join(th, NULL);
    EXPECT_EQ(cut.rc, 0);
    EXPECT_EQ(pg_test_exec(uri, "DROP TRIGGER slow ON h2o_batch_results"), 0);
    struct jobstore_batch c;
    int err = jobstore_batch_get(js, b.id, &c); /* may fail once, finding the cut */
    if (err == ENG_EUNAVAILABLE) err = jobstore_batch_get(js, b.id, &c);
    EXPECT_EQ(err, 0);
    if (!err) {
        EXPECT_EQ(c.completed, 0);
        EXPECT_STR(c.output_file_id, "");
        jobstore_batch_deinit(&c);
    }
    EXPECT_EQ(pg_test_scalar(uri, "SELECT count(*) FROM h2o_batch_results"), 0);
    struct jobstore_request *pend;
    int n;
    EXPECT_EQ(jobstore_batch_pending(js, b.id, 0, 10, &pend, &n), 0);
    EXPECT_EQ(n, 3);
    jobstore_requests_free(pend, n);
    EXPECT_EQ(jobstore_batch_append_results(js, b.id, rs, 2), 0);
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, 2);
    jobstore_batch_deinit(&c);
    EXPECT_EQ(pg_test_scalar(uri, "SELECT count(*) FROM h2o_batch_results"), 2);
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    pg_test_db_drop(uri);
}

TEST(a_database_that_went_away_fails_fast)
{
    /* Dropped under an open store: the next calls fail (ENG_EUNAVAILABLE), and after
     * one failed reconnect the store does not try again for a second, so the thread
     * it shares with interactive traffic is not held by connect after connect. */
    char *uri = pg_test_db_new();
    struct jobstore *js = open_ok(uri);
    pg_test_db_drop(uri); /* FORCE: closes the store's connection */
    struct jobstore_file g;
    /* The server's goodbye is usually in the socket already: the store sees it
     * before sending the query and reconnects at once, which fails. Otherwise the
     * query finds the connection gone, and the next call reconnects. */
    EXPECT_EQ(jobstore_file_get(js, "file-x", &g), ENG_EUNAVAILABLE);
    if (!strstr(err_msg(), "postgresql: connect:")) {
        EXPECT_EQ(jobstore_file_get(js, "file-x", &g), ENG_EUNAVAILABLE);
        EXPECT(strstr(err_msg(), "postgresql: connect:") != NULL);
    }
    EXPECT_EQ(jobstore_file_get(js, "file-x", &g), ENG_EUNAVAILABLE);
    EXPECT(strstr(err_msg(), "unreachable (retrying each second)") != NULL);
    jobstore_close(js);
}

/* The custom_ids `owner` claims (up to 10, a 30 s lease), as "r1,r2,...". Static. */
static const char *claimed(struct jobstore *js, const char *batch_id, const char *owner)
{
    static char buf[256];
    struct jobstore_request *rs;
    int n;
    buf[0] = '\0';
    if (jobstore_batch_claim(js, batch_id, owner, 30, 10, &rs, &n) != 0) {
        TEST_FAIL("claim: %s", err_msg());
        return "(error)";
    }
    for (int i = 0; i < n; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, sizeof buf - len, "%s%s", i ? "," : "", rs[i].custom_id);
    }
    jobstore_requests_free(rs, n);
    return buf;
}

TEST(a_claim_skips_rows_another_transaction_holds)
{
    /* Another replica's claim in flight holds r1..r3 locked: a claim now neither
     * waits for it nor takes those rows (SKIP LOCKED). */
    char *uri = pg_test_db_new();
    struct jobstore *js = open_ok(uri);
    struct jobstore_batch bt;
    make_running_batch(js, 6, &bt);
    PGconn *other = PQconnectdb(uri);
    EXPECT(PQstatus(other) == CONNECTION_OK);
    char sql[256];
    snprintf(sql, sizeof sql,
             "BEGIN; SELECT line FROM h2o_batch_requests WHERE batch_id='%s' AND line<=3"
             " FOR UPDATE",
             bt.id);
    PGresult *r = PQexec(other, sql);
    EXPECT(PQresultStatus(r) == PGRES_TUPLES_OK);
    PQclear(r);
    EXPECT_STR(claimed(js, bt.id, "a"), "r4,r5,r6");
    PQclear(PQexec(other, "ROLLBACK"));
    PQfinish(other);
    EXPECT_STR(claimed(js, bt.id, "b"), "r1,r2,r3");
    jobstore_batch_deinit(&bt);
    jobstore_close(js);
    pg_test_db_drop(uri);
}

TEST(input_the_database_refuses_is_einval)
{
    char *uri = pg_test_db_new();
    struct jobstore *js = open_ok(uri);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_create(js, "in", "batch", "{}\n", 3, &f), 0);
    struct jobstore_batch b;
    EXPECT_EQ(jobstore_batch_create(js, f.id, "/v1/completions", "24h", NULL, 0, &b), 0);
    /* Text that is not UTF-8 (PostgreSQL's text refuses it): refused, nothing kept. */
    struct jobstore_request bad[2] = {{1, "a", "{}"}, {2, "b\xff", "{}"}};
    EXPECT_EQ(jobstore_batch_add_requests(js, b.id, bad, 2), ENG_EINVAL);
    struct jobstore_request *rs;
    int n;
    EXPECT_EQ(jobstore_batch_pending(js, b.id, 0, 10, &rs, &n), 0);
    EXPECT_EQ(n, 0);
    jobstore_requests_free(rs, n);
    /* What COPY's text format reserves (tab, backslash, newline) goes through. */
    struct jobstore_request odd[2] = {{1, "x\\y\tz", "{\"k\":\"a\\\\n\\t\"}"},
                                      {2, "line\nbreak", "{}"}};
    EXPECT_EQ(jobstore_batch_add_requests(js, b.id, odd, 2), 0);
    EXPECT_EQ(jobstore_batch_pending(js, b.id, 0, 10, &rs, &n), 0);
    EXPECT_EQ(n, 2);
    if (n == 2) {
        EXPECT_STR(rs[0].custom_id, "x\\y\tz");
        EXPECT_STR(rs[0].body, "{\"k\":\"a\\\\n\\t\"}");
        EXPECT_STR(rs[1].custom_id, "line\nbreak");
    }
    jobstore_requests_free(rs, n);
    /* A result line that is not UTF-8: refused, not counted. */
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_IN_PROGRESS, NULL), 0);
    EXPECT_EQ(jobstore_batch_append_result(
                  js, b.id, "x\\y\tz", true,
                  "{\"custom_id\":\"x\\\\y\\tz\",\"body\":\"\xc3\x28\"}"),
              ENG_EINVAL);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, 0);
    EXPECT_STR(c.output_file_id, "");
    jobstore_batch_deinit(&c);
    jobstore_batch_deinit(&b);
    jobstore_file_deinit(&f);
    jobstore_close(js);
    pg_test_db_drop(uri);
}

int main(int argc, char **argv)
{
    (void)argc, (void)argv;
    store_test_init(2, (char *[]){argv[0], "--pg", NULL});
    RUN(foreign_or_newer_schema_refused);
    RUN(unreachable_database_fails_cleanly);
    RUN(two_replicas_share_files_and_batches);
    RUN(a_result_is_committed_once_whichever_replica_sends_it);
    RUN(a_cancel_on_one_replica_stops_results_on_the_other);
    RUN(a_cut_connection_mid_upload_leaves_nothing);
    RUN(a_result_cut_mid_commit_leaves_nothing);
    RUN(a_database_that_went_away_fails_fast);
    RUN(a_claim_skips_rows_another_transaction_holds);
    RUN(input_the_database_refuses_is_einval);
    return test_done();
}
