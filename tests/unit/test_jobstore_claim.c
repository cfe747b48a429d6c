/*
 * test_jobstore_claim.c - claims and leases (jobstore_batch_claim, _renew,
 * _release): how replicas share one batch's requests. Two owners on one store
 * stand for two replicas, and the store's clock (jobstore_set_time) moves leases
 * past their end. Run against SQLite, and with --pg against PostgreSQL, where two
 * handles on one database and a transaction holding rows locked show what only a
 * shared database has.
 */
#include "jobstore_testlib.h"
#include "pg_testlib.h"

#include <libpq-fe.h>

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

TEST(a_claim_skips_rows_another_transaction_holds)
{
    /* Another replica's claim in flight holds r1..r3 locked: a claim now neither
     * waits for it nor takes those rows (SKIP LOCKED). */
    char *uri = store_new();
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
    EXPECT_STR(claim_ids(js, bt.id, "a", 30, 10), "r4,r5,r6");
    PQclear(PQexec(other, "ROLLBACK"));
    PQfinish(other);
    EXPECT_STR(claim_ids(js, bt.id, "b", 30, 10), "r1,r2,r3");
    jobstore_batch_deinit(&bt);
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
        RUN(a_claim_skips_rows_another_transaction_holds);
    } else {
        RUN(a_version_1_data_dir_gets_the_lease_columns);
    }
    return test_done();
}
