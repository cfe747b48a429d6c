/*
 * test_files_upload.c - one POST /v1/files upload while its body streams in
 * (server/files_upload.c), against a real job store: SQLite in a temporary data dir,
 * or with --pg a database on a private PostgreSQL (jobstore_testlib.h).
 *
 * The specification is the whole-body path it replaced: for every body here, cut in
 * several ways, the streamed upload must give the verdict that multipart_parse and
 * then files_form_check give for the whole body (the same status, message and
 * param), store exactly the file part's bytes when that verdict is a success, and
 * leave nothing in the store otherwise, nor when the body is cut short. Then what
 * only streaming has: the file reaches the store while the body arrives, and the
 * store is left alone once the bytes seen already fail the form.
 */
#include "files_form.h"
#include "files_upload.h"
#include "jobstore_testlib.h"
#include "multipart.h"

#include <stdint.h>

#define B "h2oserveTest0123456789"
#define CT "multipart/form-data; boundary=" B
#define LINES "{\"custom_id\":\"r1\",\"method\":\"POST\",\"url\":\"/v1/completions\"}\n"

/* A verdict, as the client would see it. */
struct verdict {
    int status; /* 200, or the error's */
    char *message, *param;
    char *data; /* the file's bytes on a 200 */
    size_t len;
    char *filename;
};

static void verdict_free(struct verdict *v)
{
    free(v->message);
    free(v->param);
    free(v->data);
    free(v->filename);
    memset(v, 0, sizeof *v);
}

static void verdict_error(struct verdict *v, struct api_error *e)
{
    v->status = e->status;
    v->message = e->message ? xstrdup(e->message) : NULL;
    v->param = e->param ? xstrdup(e->param) : NULL;
    api_error_clear(e);
}

/* What the whole body got before streaming: parse, check, store. */
static struct verdict whole(const char *ct, const char *body, size_t len, int64_t max)
{
    struct verdict v = {0};
    struct multipart_part *parts;
    int32_t n;
    char *why = NULL;
    if (multipart_parse(ct, body, len, &parts, &n, &why)) {
        v.status = 400;
        v.message = why;
        return v;
    }
    struct api_error e = {0};
    const struct multipart_part *f = files_form_check(parts, n, max, &e);
    if (!f) {
        verdict_error(&v, &e);
    } else {
        v.status = 200;
        v.data = xmalloc(f->len);
        memcpy(v.data, f->data, f->len);
        v.len = f->len;
        v.filename = xstrdup(f->filename);
    }
    multipart_free(parts, n);
    return v;
}

/* The same body streamed in pieces of `step` bytes (0: random sizes) into js. */
static struct verdict streamed(struct jobstore *js, const char *ct, const char *body,
                               size_t len, int64_t max, size_t step)
{
    struct verdict v = {0};
    struct api_error e = {0};
    struct files_upload *up = files_upload_create(js, ct, max, &e);
    if (!up) {
        verdict_error(&v, &e);
        return v;
    }
    for (size_t off = 0; off < len;) {
        size_t n = step ? step : 1 + (size_t)rand() % 200;
        if (n > len - off) n = len - off;
        char *piece = xmalloc(n); /* exact size, freed at once: nothing may keep it */
        memcpy(piece, body + off, n);
        files_upload_write(up, piece, n);
        free(piece);
        off += n;
    }
    struct jobstore_file f = {0};
    int err = files_upload_finish(up, &f, &e);
    files_upload_destroy(up);
    if (err && e.status) {
        EXPECT_EQ(err, -1);
        verdict_error(&v, &e);
    } else if (err) {
        v.status = 500;
        v.message = xstrdup(err_msg());
    } else {
        v.status = 200;
        EXPECT_STR(f.purpose, "batch");
        v.data = read_body(js, f.id, 4096, &v.len);
        EXPECT_EQ((int64_t)v.len, f.bytes);
        v.filename = xstrdup(f.filename);
        EXPECT_EQ(jobstore_file_delete(js, f.id), 0);
        jobstore_file_deinit(&f);
    }
    return v;
}

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Stream `body` cut several ways; each verdict must be the whole body's, and the
 * store must hold nothing afterwards. Returns the status. */
static int agree_n(struct jobstore *js, const char *where, const char *ct, const char *body,
                   size_t len, int64_t max)
{
    struct verdict w = whole(ct, body, len, max);
    static const size_t steps[] = {SIZE_MAX, 1, 3, 64, 1000, 0, 0};
    for (size_t i = 0; i < ARRAY_LEN(steps); i++) {
        struct verdict s = streamed(js, ct, body, len, max, steps[i]);
        if (s.status != w.status || !str_eq(s.message, w.message) ||
            !str_eq(s.param, w.param) || !str_eq(s.filename, w.filename) ||
            s.len != w.len || (w.len && memcmp(s.data, w.data, w.len) != 0))
            TEST_FAIL("step %zu: streamed %d \"%s\" [%s], whole %d \"%s\" [%s]", steps[i],
                      s.status, s.message ? s.message : "", s.param ? s.param : "",
                      w.status, w.message ? w.message : "", w.param ? w.param : "");
        verdict_free(&s);
        EXPECT_EQ(count_bodies(where), 0);
    }
    int st = w.status;
    verdict_free(&w);
    return st;
}

static int agree(struct jobstore *js, const char *where, const char *body, int64_t max)
{
    return agree_n(js, where, CT, body, strlen(body), max);
}

/* A part: a form field, or with a filename a file. */
#define FIELD(name, value)                                                                 \
    "--" B "\r\nContent-Disposition: form-data; name=\"" name "\"\r\n\r\n" value "\r\n"
#define FILE_PART(filename, value)                                                         \
    "--" B "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" filename       \
    "\"\r\nContent-Type: application/octet-stream\r\n\r\n" value "\r\n"
#define END "--" B "--\r\n"

TEST(verdicts_agree_with_the_whole_body)
{
    char *where = store_new();
    struct jobstore *js = open_ok(where);
    /* Accepted: either order, other fields ignored, a preamble, a case-insensitive
     * suffix, a file of exactly max bytes. */
    EXPECT_EQ(
        agree(js, where, FIELD("purpose", "batch") FILE_PART("a.jsonl", LINES) END, 1000),
        200);
    EXPECT_EQ(
        agree(js, where, FILE_PART("a.jsonl", LINES) FIELD("purpose", "batch") END, 1000),
        200);
    EXPECT_EQ(agree(js, where,
                    "preamble\r\n" FIELD("x", "y") FILE_PART("B.JSONL", LINES LINES)
                        FIELD("purpose", "batch") END "epilogue",
                    1000),
              200);
    EXPECT_EQ(agree(js, where,
                    FIELD("purpose", "batch") FILE_PART("a.jsonl", "0123456789") END, 10),
              200);
    /* The form's checks, each alone, and two at once in both orders (the first in
     * the check's order wins, wherever it is in the body). */
    static const char *const refused[] = {
        FIELD("purpose", "batch") END,
        FILE_PART("a.jsonl", LINES) END,
        FIELD("purpose", "fine-tune") FILE_PART("a.jsonl", LINES) END,
        FILE_PART("a.jsonl", LINES) FIELD("purpose", "batchx") END,
        FILE_PART("a.jsonl", LINES) FIELD("purpose", "") END,
        FIELD("purpose", "batch") FILE_PART("a.json", LINES) END,
        FIELD("purpose", "batch") FILE_PART("\xff\xfe.jsonl", LINES) END,
        FIELD("purpose", "batch") FIELD("file", LINES) END,
        FIELD("purpose", "batch") FILE_PART("a.jsonl", "") END,
        FIELD("purpose", "batch") FILE_PART("a.jsonl", "01234567890") END,
        FIELD("purpose", "batch") FILE_PART("a.jsonl", LINES) FILE_PART("b.jsonl", LINES)
            END,
        FIELD("purpose", "batch") FIELD("purpose", "batch") FILE_PART("a.jsonl", LINES) END,
        FILE_PART("a.jsonl", LINES) FIELD("purpose", "batch")
            FIELD("expires_after[anchor]", "created_at") END,
        FILE_PART("a.json", "01234567890") FIELD("purpose", "nope") END,
        FILE_PART("a.jsonl", "01234567890") FIELD("purpose", "batch") FILE_PART("b", "")
            END,
        FIELD("purpose", "nope") FILE_PART("a.jsonl", "01234567890") END,
        FILE_PART("a.jsonl", "") FIELD("purpose", "nope") END,
        /* A malformed body comes before the form: cut, or with a bad part late. */
        FIELD("purpose", "nope") FILE_PART("a.jsonl", LINES),
        FIELD("purpose", "batch") FILE_PART("a.jsonl", LINES) "--" B
                                                              "\r\nX: y\r\n\r\n\r\n" END,
        "",
    };
    for (size_t i = 0; i < ARRAY_LEN(refused); i++) {
        int st = agree(js, where, refused[i], 10);
        if (st != 400 && st != 413) TEST_FAIL("case %zu: status %d", i, st);
    }
    /* The Content-Type is refused before any body. */
    EXPECT_EQ(agree_n(js, where, "application/json", "{}", 2, 10), 400);
    EXPECT_EQ(agree_n(js, where, NULL, "", 0, 10), 400);
    jobstore_close(js);
    store_drop(where);
}

TEST(large_file_streams_exactly)
{
    /* 3 MiB of every byte value, with lines that look like the boundary, more than
     * FILES_UPLOAD_WRITE_BYTES many times over, fed in odd pieces. */
    char *where = store_new();
    struct jobstore *js = open_ok(where);
    const size_t n = 3 << 20;
    const char *head =
        FIELD("purpose", "batch") "--" B "\r\nContent-Disposition: form-data; "
                                  "name=\"file\"; filename=\"big.jsonl\"\r\n\r\n";
    const char *tail = "\r\n" END;
    size_t len = strlen(head) + n + strlen(tail);
    char *body = xmalloc(len);
    memcpy(body, head, strlen(head));
    char *file = body + strlen(head);
    for (size_t i = 0; i < n; i++)
        file[i] = (char)(i * 2654435761u >> 13);
    for (size_t at = 1000; at + 40 < n; at += 100000)
        memcpy(file + at, "\r\n--" B "-\r\n--" B "x", 2 * strlen(B) + 10);
    memcpy(file + n, tail, strlen(tail));
    EXPECT_EQ(agree_n(js, where, CT, body, len, (int64_t)n), 200);
    EXPECT_EQ(agree_n(js, where, CT, body, len, (int64_t)n - 1), 413);
    free(body);
    jobstore_close(js);
    store_drop(where);
}

/* A 1 MiB file part's head and bytes, without its end. */
static void write_open_file(struct files_upload *up, const char *purpose_first)
{
    if (purpose_first) files_upload_write(up, purpose_first, strlen(purpose_first));
    const char *head = "--" B "\r\nContent-Disposition: form-data; name=\"file\"; "
                       "filename=\"a.jsonl\"\r\n\r\n";
    files_upload_write(up, head, strlen(head));
    char chunk[4096];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 256; i++)
        files_upload_write(up, chunk, sizeof chunk);
}

TEST(a_cut_body_leaves_nothing)
{
    /* The client leaves mid-file: the exchange is freed, and the upload with it. */
    char *where = store_new();
    struct jobstore *js = open_ok(where);
    struct api_error e = {0};
    struct files_upload *up = files_upload_create(js, CT, 1 << 30, &e);
    write_open_file(up, FIELD("purpose", "batch"));
    /* The file went to the store as it came (SQLite: its temporary body). */
    if (!test_pg) EXPECT_EQ(count_bodies(where), 1);
    files_upload_destroy(up);
    EXPECT_EQ(count_bodies(where), 0);
    /* Or the body ends there: malformed, 400, nothing stored. */
    up = files_upload_create(js, CT, 1 << 30, &e);
    write_open_file(up, NULL);
    struct jobstore_file f = {0};
    EXPECT_EQ(files_upload_finish(up, &f, &e), -1);
    EXPECT_EQ(e.status, 400);
    api_error_clear(&e);
    files_upload_destroy(up);
    EXPECT_EQ(count_bodies(where), 0);
    struct jobstore_file *fs = NULL;
    int nf = -1;
    bool more = true;
    EXPECT_EQ(jobstore_file_list(js, NULL, NULL, 100, true, &fs, &nf, &more), 0);
    EXPECT_EQ(nf, 0);
    jobstore_files_free(fs, nf);
    jobstore_close(js);
    store_drop(where);
}

TEST(store_left_alone_once_the_form_fails)
{
    /* A purpose the check refuses, seen before the file: none of the file is
     * stored (SQLite shows a temporary body as soon as one is written). */
    if (test_pg) return; /* an open PostgreSQL upload is invisible until it commits */
    char *where = store_new();
    struct jobstore *js = open_ok(where);
    static const char *const before[] = {
        FIELD("purpose", "fine-tune"), FIELD("expires_after", "1"),
        FIELD("purpose", "batch") FIELD("purpose", "batch")};
    for (size_t i = 0; i < ARRAY_LEN(before); i++) {
        struct api_error e = {0};
        struct files_upload *up = files_upload_create(js, CT, 1 << 30, &e);
        write_open_file(up, before[i]);
        EXPECT_EQ(count_bodies(where), 0);
        files_upload_destroy(up);
    }
    /* A file over the limit: what was stored goes when the limit is passed. */
    struct api_error e = {0};
    struct files_upload *up = files_upload_create(js, CT, 300000, &e);
    write_open_file(up, FIELD("purpose", "batch"));
    EXPECT_EQ(count_bodies(where), 0);
    const char *end = "\r\n" END;
    files_upload_write(up, end, strlen(end));
    struct jobstore_file f = {0};
    EXPECT_EQ(files_upload_finish(up, &f, &e), -1);
    EXPECT_EQ(e.status, 413);
    EXPECT(e.message && strstr(e.message, "1048576 bytes"));
    api_error_clear(&e);
    files_upload_destroy(up);
    jobstore_close(js);
    store_drop(where);
}

int main(int argc, char **argv)
{
    store_test_init(argc, argv);
    srand(7);
    RUN(verdicts_agree_with_the_whole_body);
    RUN(large_file_streams_exactly);
    RUN(a_cut_body_leaves_nothing);
    RUN(store_left_alone_once_the_form_fails);
    return test_done();
}
