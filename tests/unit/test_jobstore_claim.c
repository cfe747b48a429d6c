/*
 * test_jobstore_claim.c - claims and leases (jobstore_batch_claim, _renew,
 * _release): how replicas share one batch's requests. Two owners on one store
 * stand for two replicas, and the store's clock (jobstore_set_time) moves leases
 * past their end. Run against SQLite, and with --pg against PostgreSQL, where
 * several handles on one database, on threads of their own, show what only a
 * shared database has (test_jobstore_pg.c has a claim meeting locked rows).
 */
#include "jobstore_testlib.h"

#include <pthread.h>
#include <time.h>

/* The custom_ids of a claim, as "r1,r2,...". Static buffer. */
static const char *ids_of(const struct jobstore_request *rs, int n)
{
    static char buf[512];
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, sizeof buf - len, "%s%s", i ? "," : "", rs[i].custom_id);
    }
    return buf;
}

/* Claim and return the ids (the requests are freed). */
static const char *claim_ids(struct jobstore *js, const char *batch_id, const char *owner,
                             int64_t lease_s, int max)
{
    struct jobstore_request *rs;
    int n;
    if (jobstore_batch_claim(js, batch_id, owner, lease_s, max, &rs, &n) != 0) {
        TEST_FAIL("claim: %s", err_msg());
        return "(error)";
    }
    const char *ids = ids_of(rs, n);
    jobstore_requests_free(rs, n);
    return ids;
}

TEST(claims_come_in_chunks_in_line_order)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 10, &b);
    EXPECT_STR(claim_ids(js, b.id, "a", 30, 4), "r1,r2,r3,r4");
    EXPECT_STR(claim_ids(js, b.id, "b", 30, 4), "r5,r6,r7,r8");
    EXPECT_STR(claim_ids(js, b.id, "a", 30, 4), "r9,r10");
    EXPECT_STR(claim_ids(js, b.id, "b", 30, 4), ""); /* all held */
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    store_drop(dir);
}

TEST(an_expired_lease_is_claimed_again_and_the_result_lands_once)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 6, &b);
    jobstore_set_time(js, 1000);
    EXPECT_STR(claim_ids(js, b.id, "a", 10, 3), "r1,r2,r3"); /* until 1010 */
    jobstore_set_time(js, 1005);
    EXPECT_STR(claim_ids(js, b.id, "b", 10, 2), "r4,r5"); /* until 1015 */
    /* a died: at 1010 its leases have run out, b's have not. */
    jobstore_set_time(js, 1010);
    EXPECT_STR(claim_ids(js, b.id, "b", 10, 10), "r1,r2,r3,r6");
    /* a comes back (it was cut off, not dead): its leases are gone for good. */
    int64_t renewed = -1;
    enum jobstore_status st;
    EXPECT_EQ(jobstore_batch_renew(js, b.id, "a", 10, &renewed, &st), 0);
    EXPECT_EQ(renewed, 0);
    EXPECT_EQ(st, JOBSTORE_IN_PROGRESS);
    /* Both ran r1: the first commit answers it, the second is refused. */
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r1", true, result_line("r1")), 0);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r1", true, result_line("r1")),
              ENG_EINVAL);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, 1);
    jobstore_batch_deinit(&c);
    /* An answered request is never claimed again, whatever its lease says. */
    jobstore_set_time(js, 2000);
    EXPECT_STR(claim_ids(js, b.id, "c", 10, 10), "r2,r3,r4,r5,r6");
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    store_drop(dir);
}

TEST(renewing_keeps_a_lease_and_reports_a_cancel)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 4, &b);
    jobstore_set_time(js, 1000);
    EXPECT_STR(claim_ids(js, b.id, "a", 10, 2), "r1,r2");
    jobstore_set_time(js, 1008);
    int64_t renewed = 0;
    enum jobstore_status st;
    EXPECT_EQ(jobstore_batch_renew(js, b.id, "a", 10, &renewed, &st), 0); /* until 1018 */
    EXPECT_EQ(renewed, 2);
    jobstore_set_time(js, 1012);
    EXPECT_STR(claim_ids(js, b.id, "b", 10, 10), "r3,r4"); /* not a's */
    /* A cancel (from any replica) shows in the next renew, and stops claims. */
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_CANCELLING, NULL), 0);
    EXPECT_EQ(jobstore_batch_renew(js, b.id, "a", 10, &renewed, &st), 0);
    EXPECT_EQ(st, JOBSTORE_CANCELLING);
    EXPECT_STR(claim_ids(js, b.id, "b", 10, 10), "");
    int64_t released = 0;
    EXPECT_EQ(jobstore_batch_release(js, b.id, "a", &released), 0);
    EXPECT_EQ(released, 2);
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    store_drop(dir);
}

TEST(a_release_gives_requests_back_at_once)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 3, &b);
    EXPECT_STR(claim_ids(js, b.id, "a", 600, 10), "r1,r2,r3");
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r2", true, result_line("r2")), 0);
    int64_t released = 0;
    EXPECT_EQ(jobstore_batch_release(js, b.id, "a", &released), 0);
    EXPECT_EQ(released, 2); /* r2 is answered: nothing to give back */
    EXPECT_STR(claim_ids(js, b.id, "b", 600, 10), "r1,r3");
    EXPECT_EQ(jobstore_batch_release(js, b.id, "a", NULL), 0); /* nothing left: fine */
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    store_drop(dir);
}

TEST(claims_refuse_bad_arguments)
{
    char *dir = store_new();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 1, &b);
    struct jobstore_request *rs = (struct jobstore_request *)1;
    int n = 7;
    EXPECT_EQ(jobstore_batch_claim(js, b.id, "", 10, 1, &rs, &n), ENG_EINVAL);
    EXPECT(rs == NULL && n == 0);
    EXPECT_EQ(jobstore_batch_claim(js, b.id, NULL, 10, 1, &rs, &n), ENG_EINVAL);
    EXPECT_EQ(jobstore_batch_claim(js, b.id, "a", 0, 1, &rs, &n), ENG_EINVAL);
    EXPECT_EQ(jobstore_batch_claim(js, b.id, "a", JOBSTORE_LEASE_MAX_S + 1, 1, &rs, &n),
              ENG_EINVAL);
    EXPECT_EQ(jobstore_batch_claim(js, b.id, "a", 10, 0, &rs, &n), ENG_EINVAL);
    char long_owner[JOBSTORE_OWNER_MAX + 2];
    memset(long_owner, 'o', sizeof long_owner - 1);
    long_owner[sizeof long_owner - 1] = '\0';
    EXPECT_EQ(jobstore_batch_claim(js, b.id, long_owner, 10, 1, &rs, &n), ENG_EINVAL);
    EXPECT_EQ(jobstore_batch_claim(js, "batch_none", "a", 10, 1, &rs, &n), ENG_ENOTFOUND);
    int64_t k;
    enum jobstore_status st;
    EXPECT_EQ(jobstore_batch_renew(js, "batch_none", "a", 10, &k, &st), ENG_ENOTFOUND);
    EXPECT_EQ(jobstore_batch_release(js, "batch_none", "a", &k), ENG_ENOTFOUND);
    /* A batch not yet running has nothing to claim. */
    struct jobstore_file f;
    struct jobstore_batch v;
    EXPECT_EQ(jobstore_file_create(js, "in", "batch", "{}\n", 3, &f), 0);
    EXPECT_EQ(jobstore_batch_create(js, f.id, "/v1/completions", "24h", NULL, 0, &v), 0);
    const struct jobstore_request one = {1, "x", "{}"};
    EXPECT_EQ(jobstore_batch_add_requests(js, v.id, &one, 1), 0);
    EXPECT_STR(claim_ids(js, v.id, "a", 10, 10), "");
    jobstore_file_deinit(&f);
    jobstore_batch_deinit(&v);
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    store_drop(dir);
}

/* ---- PostgreSQL: one database, many handles ---- */

TEST(two_replicas_claim_disjoint_chunks)
{
    char *uri = store_new();
    struct jobstore *a = open_ok(uri), *b = open_ok(uri);
    struct jobstore_batch bt;
    make_running_batch(a, 10, &bt);
    EXPECT_STR(claim_ids(a, bt.id, "a", 30, 3), "r1,r2,r3");
    EXPECT_STR(claim_ids(b, bt.id, "b", 30, 3), "r4,r5,r6");
    EXPECT_STR(claim_ids(a, bt.id, "a", 30, 3), "r7,r8,r9");
    EXPECT_STR(claim_ids(b, bt.id, "b", 30, 3), "r10");
    EXPECT_STR(claim_ids(a, bt.id, "a", 30, 3), "");
    jobstore_batch_deinit(&bt);
    jobstore_close(a);
    jobstore_close(b);
    store_drop(uri);
}

/* One replica of the drain below: its own handle, on its own thread (a store has
 * one owner thread), claiming and committing until nothing is left. */
struct replica {
    const char *uri, *batch_id;
    char owner[16];
    bool dies;     /* claims one chunk, then goes without a word */
    int committed; /* results it committed */
    int refused;   /* second answers it tried, refused as they must be */
    int errors;    /* anything else: must stay 0 */
};

/* result_line's form, in the caller's buffer (result_line's is static: the
 * threads would write over each other's). */
static const char *line_for(char *buf, size_t size, const char *cid)
{
    snprintf(
        buf, size,
        "{\"id\":\"batch_req_1\",\"custom_id\":\"%s\",\"response\":{\"status_code\":200,"
        "\"body\":{\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5}}},"
        "\"error\":null}",
        cid);
    return buf;
}

static void *replica_run(void *arg)
{
    struct replica *r = arg;
    struct jobstore *js;
    if (jobstore_open(&js, r->uri) != 0) {
        r->errors++;
        return NULL;
    }
    for (int idle = 0; idle < 100;) { /* 100 x 50 ms with nothing to claim: done */
        struct jobstore_request *rs;
        int n;
        if (jobstore_batch_claim(js, r->batch_id, r->owner, r->dies ? 1 : 30, 7, &rs, &n)) {
            r->errors++;
            break;
        }
        if (r->dies) { /* a kill -9: the leases stay until they run out */
            jobstore_requests_free(rs, n);
            break;
        }
        for (int i = 0; i < n; i++) {
            char line[512];
            int err =
                jobstore_batch_append_result(js, r->batch_id, rs[i].custom_id, true,
                                             line_for(line, sizeof line, rs[i].custom_id));
            r->committed += err == 0;
            r->errors += err != 0;
        }
        /* A replica whose lease ran out may still send what it ran: refused. */
        if (n) {
            char line[512];
            int err =
                jobstore_batch_append_result(js, r->batch_id, rs[0].custom_id, true,
                                             line_for(line, sizeof line, rs[0].custom_id));
            r->refused += err == ENG_EINVAL;
            r->errors += err != ENG_EINVAL;
        }
        jobstore_requests_free(rs, n);
        struct jobstore_batch b;
        if (jobstore_batch_get(js, r->batch_id, &b) != 0) {
            r->errors++;
            break;
        }
        const bool all_in = b.completed + b.failed == b.total;
        jobstore_batch_deinit(&b);
        if (all_in) break;
        if (n == 0) {
            idle++;
            nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
        }
    }
    jobstore_close(js);
    return NULL;
}

TEST(four_replicas_drain_one_batch_and_one_dies)
{
    /* Four handles on four threads, committing for real at the same time: the row
     * lock orders the commits, SKIP LOCKED keeps the claims apart, and the chunk
     * of the replica that dies (a 1 s lease) is claimed again once it runs out.
     * Every custom_id lands once, and the output has no gap. */
    enum { N = 400, R = 4 };
    char *uri = store_new();
    struct jobstore *js = open_ok(uri);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_create(js, "in", "batch", "{}\n", 3, &f), 0);
    struct jobstore_batch b;
    EXPECT_EQ(jobstore_batch_create(js, f.id, "/v1/completions", "24h", NULL, 0, &b), 0);
    static char cids[N][16];
    struct jobstore_request reqs[N];
    for (int i = 0; i < N; i++) {
        snprintf(cids[i], sizeof cids[i], "c%d", i);
        reqs[i] = (struct jobstore_request){i + 1, cids[i], "{}"};
    }
    EXPECT_EQ(jobstore_batch_add_requests(js, b.id, reqs, N), 0);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_IN_PROGRESS, NULL), 0);
    struct replica rep[R];
    pthread_t th[R];
    for (int i = 0; i < R; i++) {
        rep[i] = (struct replica){.uri = uri, .batch_id = b.id, .dies = i == 0};
        snprintf(rep[i].owner, sizeof rep[i].owner, "replica%d", i);
    }
    /* The one that dies claims first, so that its chunk is certainly taken over. */
    pthread_create(&th[0], NULL, replica_run, &rep[0]);
    pthread_join(th[0], NULL);
    for (int i = 1; i < R; i++)
        pthread_create(&th[i], NULL, replica_run, &rep[i]);
    int committed = 0, refused = 0, errors = rep[0].errors;
    for (int i = 1; i < R; i++) {
        pthread_join(th[i], NULL);
        committed += rep[i].committed;
        refused += rep[i].refused;
        errors += rep[i].errors;
    }
    EXPECT_EQ(errors, 0);
    EXPECT_EQ(committed, N);
    EXPECT(refused > 0);
    for (int i = 1; i < R; i++) /* each took part (7 of 400 at a time) */
        if (rep[i].committed == 0) TEST_FAIL("%s committed nothing", rep[i].owner);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_FINALIZING, NULL), 0);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_COMPLETED, NULL), 0);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, N);
    size_t len = 0;
    char *body = read_body(js, c.output_file_id, 65536, &len);
    EXPECT(body != NULL);
    EXPECT_EQ(count_substr(body, "\n"), N);
    for (int i = 0; body && i < N; i += 37) {
        char needle[32];
        snprintf(needle, sizeof needle, "\"custom_id\":\"c%d\"", i);
        EXPECT_EQ(count_substr(body, needle), 1);
    }
    free(body);
    jobstore_batch_deinit(&c);
    jobstore_batch_deinit(&b);
    jobstore_file_deinit(&f);
    jobstore_close(js);
    store_drop(uri);
}

/* ---- SQLite: a data dir of the first schema ---- */

TEST(a_version_1_data_dir_gets_the_lease_columns)
{
    char *dir = tmp_dir();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 2, &b);
    jobstore_close(js);
    /* Back to what issue 5's build wrote. */
    char *db = util_path_join(dir, "h2oserve.db");
    sqlite3 *h;
    EXPECT_EQ(sqlite3_open(db, &h), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(h,
                           "ALTER TABLE batch_requests DROP COLUMN lease_owner;"
                           "ALTER TABLE batch_requests DROP COLUMN lease_until;"
                           "PRAGMA user_version=1",
                           NULL, NULL, NULL),
              SQLITE_OK);
    sqlite3_close(h);
    js = open_ok(dir);
    EXPECT_STR(claim_ids(js, b.id, "a", 30, 10), "r1,r2");
    jobstore_close(js);
    EXPECT_EQ(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_stmt *st;
    EXPECT_EQ(sqlite3_prepare_v2(h, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
    EXPECT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(st, 0), 2);
    sqlite3_finalize(st);
    sqlite3_close(h);
    free(db);
    jobstore_batch_deinit(&b);
    rm_rf(dir);
}

int main(int argc, char **argv)
{
    store_test_init(argc, argv);
    RUN(claims_come_in_chunks_in_line_order);
    RUN(an_expired_lease_is_claimed_again_and_the_result_lands_once);
    RUN(renewing_keeps_a_lease_and_reports_a_cancel);
    RUN(a_release_gives_requests_back_at_once);
    RUN(claims_refuse_bad_arguments);
    if (test_pg) {
        /* Several handles on one store: a data dir admits one process. */
        RUN(two_replicas_claim_disjoint_chunks);
        RUN(four_replicas_drain_one_batch_and_one_dies);
    } else {
        RUN(a_version_1_data_dir_gets_the_lease_columns);
    }
    return test_done();
}
