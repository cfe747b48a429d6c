/*
 * test_jobstore_full.c - the job store on a disk with no room (server/jobstore*.c):
 * every way a write can fail for want of space is JOBSTORE_EFULL, not ENG_EIO, and
 * leaves the store as it was and usable once space returns: an upload, the row
 * after a body, a result line, a result's commit after its line, and the open of a
 * store that cannot even grow its WAL index.
 *
 * "No room" is RLIMIT_FSIZE, set and lifted around each write in this process: a
 * write that would pass it fails with EFBIG (SIGXFSZ is ignored, as the server does),
 * which SQLite reports as an I/O error, the hardest case of the mapping (ENOSPC it
 * reports as SQLITE_FULL; tests/integration/test_disk_full.py fills a real tmpfs).
 * Each test has its own mkdtemp data dir.
 */
#include "jobstore_testlib.h"

#include <signal.h>
#include <string.h>
#include <sys/resource.h>

/* Writes past `bytes` in any one file fail with EFBIG; -1 lifts the limit. */
static void limit_file_size(long long bytes)
{
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl;
    getrlimit(RLIMIT_FSIZE, &rl);
    rl.rlim_cur = bytes < 0 ? rl.rlim_max : (rlim_t)bytes;
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) abort();
}

static long long file_size(const char *dir, const char *name)
{
    char *path = util_path_join(dir, name);
    struct stat sb;
    long long size = stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
    free(path);
    return size;
}

static int count_files(struct jobstore *js)
{
    struct jobstore_file *fs;
    int n = -1;
    bool more;
    if (jobstore_file_list(js, NULL, NULL, 100, true, &fs, &n, &more) == 0)
        jobstore_files_free(fs, n);
    return n;
}

static int count_tmp_bodies(const char *dir)
{
    char *files = util_path_join(dir, "files");
    DIR *d = opendir(files);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, ".tmp") != NULL;
    if (d) closedir(d);
    free(files);
    return n;
}

TEST(upload_that_does_not_fit_is_efull_and_leaves_nothing)
{
    char *dir = tmp_dir();
    struct jobstore *js = open_ok(dir);
    static char body[256 * 1024];
    memset(body, 'x', sizeof body);
    limit_file_size(64 * 1024);
    EXPECT_EQ(jobstore_file_create(js, "big.jsonl", "batch", body, sizeof body, NULL),
              JOBSTORE_EFULL);
    EXPECT(strstr(err_msg(), "File too large") != NULL); /* the cause, named */
    limit_file_size(-1);
    EXPECT_EQ(count_tmp_bodies(dir), 0);
    EXPECT_EQ(count_files(js), 0);
    /* Space is back: the same upload works, the store was never poisoned. */
    EXPECT_EQ(jobstore_file_create(js, "big.jsonl", "batch", body, sizeof body, NULL), 0);
    EXPECT_EQ(count_files(js), 1);
    jobstore_close(js);
    rm_rf(dir);
}

TEST(row_that_does_not_fit_is_efull_and_removes_its_body)
{
    /* The body is small enough; the WAL cannot grow for its row. SQLite says "disk
     * I/O error" (SQLITE_IOERR_WRITE) with errno EFBIG, which must read as full. */
    char *dir = tmp_dir();
    struct jobstore *js = open_ok(dir);
    EXPECT_EQ(jobstore_file_create(js, "a.jsonl", "batch", "{}\n", 3, NULL), 0);
    const long long wal = file_size(dir, "h2oserve.db-wal");
    EXPECT(wal > 3);
    limit_file_size(wal);
    EXPECT_EQ(jobstore_file_create(js, "b.jsonl", "batch", "{}\n", 3, NULL), JOBSTORE_EFULL);
    limit_file_size(-1);
    EXPECT_EQ(count_files(js), 1);
    char *files = util_path_join(dir, "files");
    DIR *d = opendir(files);
    int bodies = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        bodies += e->d_name[0] != '.';
    if (d) closedir(d);
    free(files);
    EXPECT_EQ(bodies, 1); /* never a body without a row left behind */
    EXPECT_EQ(jobstore_file_create(js, "b.jsonl", "batch", "{}\n", 3, NULL), 0);
    jobstore_close(js);
    rm_rf(dir);
}

TEST(result_that_does_not_fit_is_cut_back_and_does_not_poison)
{
    char *dir = tmp_dir();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 3, &b);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r1", true, result_line("r1")), 0);
    char *rel = output_path(js, b.id, true);
    const long long size = file_size(dir, rel);
    EXPECT(size > 0);
    limit_file_size(size + 10); /* a part of the next line fits, not all of it */
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r2", true, result_line("r2")),
              JOBSTORE_EFULL);
    limit_file_size(-1);
    EXPECT_EQ(file_size(dir, rel), size); /* no torn line left in the file */
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r2", true, result_line("r2")), 0);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, 2);
    jobstore_batch_deinit(&c);
    free(rel);
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    rm_rf(dir);
}

TEST(result_whose_commit_does_not_fit_is_settled_by_recover)
{
    /* The line is written and synced, then the WAL has no room for its count: the
     * line must neither be lost nor be answered a second time. */
    char *dir = tmp_dir();
    struct jobstore *js = open_ok(dir);
    struct jobstore_batch b;
    make_running_batch(js, 3, &b);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r1", true, result_line("r1")), 0);
    limit_file_size(file_size(dir, "h2oserve.db-wal"));
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r2", true, result_line("r2")),
              JOBSTORE_EFULL);
    limit_file_size(-1);
    EXPECT_EQ(jobstore_batch_recover(js, b.id), 0);
    struct jobstore_batch c;
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    EXPECT_EQ(c.completed, 2);
    jobstore_batch_deinit(&c);
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r2", true, result_line("r2")),
              ENG_EINVAL); /* answered once */
    /* Not poisoned: the next result is recorded, and a batch may fail for it. */
    EXPECT_EQ(jobstore_batch_append_result(js, b.id, "r3", false, result_line("r3")), 0);
    EXPECT_EQ(jobstore_batch_set_status(js, b.id, JOBSTORE_FAILED, NULL), 0);
    EXPECT_EQ(jobstore_batch_get(js, b.id, &c), 0);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_get(js, c.output_file_id, &f), 0); /* published */
    EXPECT_STR(f.purpose, "batch_output");
    jobstore_file_deinit(&f);
    EXPECT_EQ(jobstore_file_get(js, c.error_file_id, &f), 0);
    jobstore_file_deinit(&f);
    jobstore_batch_deinit(&c);
    jobstore_batch_deinit(&b);
    jobstore_close(js);
    rm_rf(dir);
}

TEST(open_on_a_full_disk_is_efull_and_changes_nothing)
{
    char *dir = tmp_dir();
    struct jobstore *js = open_ok(dir);
    struct jobstore_file f;
    EXPECT_EQ(jobstore_file_create(js, "a.jsonl", "batch", "{}\n", 3, &f), 0);
    jobstore_close(js); /* a clean close removes the WAL and its index */
    limit_file_size(0);
    EXPECT_EQ(jobstore_open(&js, dir), JOBSTORE_EFULL);
    EXPECT(js == NULL);
    limit_file_size(-1);
    js = open_ok(dir);
    struct jobstore_file g;
    EXPECT_EQ(jobstore_file_get(js, f.id, &g), 0);
    jobstore_file_deinit(&g);
    jobstore_file_deinit(&f);
    jobstore_close(js);
    rm_rf(dir);
}

TEST(reserve_is_made_at_open_and_released_once)
{
    char *dir = tmp_dir();
    struct jobstore *js = open_ok(dir);
    EXPECT_EQ(file_size(dir, "reserve"), JOBSTORE_RESERVE_BYTES);
    EXPECT(jobstore_release_reserve(js));
    EXPECT(!jobstore_release_reserve(js));
    EXPECT_EQ(file_size(dir, "reserve"), -1);
    jobstore_close(js);
    js = open_ok(dir); /* made again */
    EXPECT_EQ(file_size(dir, "reserve"), JOBSTORE_RESERVE_BYTES);
    jobstore_close(js);
    rm_rf(dir);
}

int main(void)
{
    RUN(upload_that_does_not_fit_is_efull_and_leaves_nothing);
    RUN(row_that_does_not_fit_is_efull_and_removes_its_body);
    RUN(result_that_does_not_fit_is_cut_back_and_does_not_poison);
    RUN(result_whose_commit_does_not_fit_is_settled_by_recover);
    RUN(open_on_a_full_disk_is_efull_and_changes_nothing);
    RUN(reserve_is_made_at_open_and_released_once);
    return test_done();
}
