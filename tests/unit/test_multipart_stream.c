/*
 * test_multipart_stream.c - the streaming multipart/form-data parser
 * (server/multipart_stream.c) against the whole-body one (server/multipart.c): for
 * every body here, fed cut at every split point, at every pair of split points, one
 * byte at a time and in random pieces, the stream must give the parts (names,
 * filenames, content types, data) and the errors (the same message) that
 * multipart_parse gives for the whole body. Then what only a stream has: the events
 * come in order, nothing of the input is kept (each piece is an exact-size heap
 * copy freed after its feed, so ASan catches a kept pointer), and the bytes held
 * back never exceed MULTIPART_STREAM_HOLD_MAX however long a part is.
 */
#include "multipart.h"
#include "multipart_stream.h"
#include "multipart_testlib.h"
#include "test.h"
#include "util.h"

#include <stdbool.h>
#include <stdint.h>

#define B MP_B
#define CT MP_CT

/* ---- a parse, in a form both parsers fill ---- */

struct got_part {
    char *name, *filename, *content_type;
    char *data;
    size_t len, cap;
    bool ended;
};

struct got {
    int rc;
    char *err;
    int32_t n;
    struct got_part parts[MULTIPART_MAX_PARTS + 1];
    int ends;     /* the stream's end events */
    bool in_part; /* a part began and has not ended */
    size_t fed;   /* body bytes fed so far */
};

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

static void got_free(struct got *g)
{
    for (int32_t i = 0; i < g->n; i++) {
        free(g->parts[i].name);
        free(g->parts[i].filename);
        free(g->parts[i].content_type);
        free(g->parts[i].data);
    }
    free(g->err);
    memset(g, 0, sizeof *g);
}

static void got_add(struct got *g, const struct multipart_part *p)
{
    CHECK(g->n <= MULTIPART_MAX_PARTS);
    struct got_part *q = &g->parts[g->n++];
    q->name = dup_or_null(p->name);
    q->filename = dup_or_null(p->filename);
    q->content_type = dup_or_null(p->content_type);
}

static void got_data(struct got_part *q, const char *data, size_t len)
{
    if (q->len + len + 1 > q->cap) {
        q->cap = MAX(2 * q->cap, q->len + len + 1);
        q->data = xrealloc(q->data, q->cap);
    }
    memcpy(q->data + q->len, data, len);
    q->len += len;
}

static struct got whole(const char *ct, const char *body, size_t len)
{
    struct got g = {0};
    char *copy = xmalloc(len ? len : 1);
    if (len) memcpy(copy, body, len);
    struct multipart_part *parts;
    int32_t n;
    g.rc = multipart_parse(ct, copy, len, &parts, &n, &g.err);
    for (int32_t i = 0; i < n; i++) {
        got_add(&g, &parts[i]);
        got_data(&g.parts[i], parts[i].data, parts[i].len);
        g.parts[i].ended = true;
    }
    multipart_free(parts, n);
    free(copy);
    return g;
}

/* ---- the stream's sink: events must come in order ---- */

static void on_begin(void *ctx, const struct multipart_part *p)
{
    struct got *g = ctx;
    EXPECT(!g->in_part && g->ends == 0);
    EXPECT(p->data == NULL && p->len == 0 && p->name && p->name[0]);
    got_add(g, p);
    g->in_part = true;
}

static void on_data(void *ctx, const char *data, size_t len)
{
    struct got *g = ctx;
    EXPECT(g->in_part && len > 0);
    if (g->in_part) got_data(&g->parts[g->n - 1], data, len);
}

static void on_part_end(void *ctx)
{
    struct got *g = ctx;
    EXPECT(g->in_part);
    if (g->n) g->parts[g->n - 1].ended = true;
    g->in_part = false;
}

static void on_end(void *ctx)
{
    struct got *g = ctx;
    EXPECT(!g->in_part);
    g->ends++;
}

static const struct multipart_stream_sink sink = {on_begin, on_data, on_part_end, on_end};

/* Feed `body` cut before each offset in cuts[0..n_cuts) (increasing), each piece an
 * exact-size heap copy freed after its feed. */
static struct got streamed(const char *ct, const char *body, size_t len, const size_t *cuts,
                           int n_cuts)
{
    struct got g = {0};
    struct multipart_stream *s;
    g.rc = multipart_stream_create(&s, ct, &sink, &g, &g.err);
    if (g.rc) {
        EXPECT(s == NULL);
        return g;
    }
    size_t off = 0;
    for (int k = 0; k <= n_cuts && g.rc == 0; k++) {
        size_t end = k < n_cuts ? cuts[k] : len;
        char *piece = xmalloc(end - off + 1);
        memcpy(piece, body + off, end - off);
        g.rc = multipart_stream_feed(s, piece, end - off);
        free(piece);
        g.fed = off = end;
    }
    if (g.rc == 0) g.rc = multipart_stream_finish(s);
    if (g.rc) {
        EXPECT_EQ(g.rc, -1);
        EXPECT(multipart_stream_error(s) != NULL);
        if (multipart_stream_error(s)) g.err = xstrdup(multipart_stream_error(s));
        EXPECT_EQ(multipart_stream_feed(s, "x", 1), -1); /* sticky */
        EXPECT_EQ(multipart_stream_finish(s), -1);
        EXPECT_EQ(g.ends, 0);
    } else {
        EXPECT(multipart_stream_error(s) == NULL);
        EXPECT(!g.in_part && g.ends == 1);
    }
    multipart_stream_destroy(s);
    return g;
}

/* Whether the stream's result is the whole parse's; says how they differ. */
static bool same(const struct got *w, const struct got *s, const char *how)
{
    const char *why = NULL;
    if (w->rc != s->rc)
        why = "return code";
    else if (w->rc && (!w->err || !s->err || strcmp(w->err, s->err) != 0))
        why = "error message";
    else if (w->rc == 0 && w->n != s->n)
        why = "part count";
    for (int32_t i = 0; !why && w->rc == 0 && i < w->n; i++) {
        const struct got_part *a = &w->parts[i], *b = &s->parts[i];
        if (strcmp(a->name, b->name) != 0 || !b->ended)
            why = "part name";
        else if ((a->filename == NULL) != (b->filename == NULL) ||
                 (a->filename && strcmp(a->filename, b->filename) != 0))
            why = "filename";
        else if ((a->content_type == NULL) != (b->content_type == NULL) ||
                 (a->content_type && strcmp(a->content_type, b->content_type) != 0))
            why = "content type";
        else if (a->len != b->len || (a->len && memcmp(a->data, b->data, a->len) != 0))
            why = "part data";
    }
    if (why)
        TEST_FAIL("%s: %s differs (whole: %d \"%s\", stream: %d \"%s\")", how, why, w->rc,
                  w->err ? w->err : "", s->rc, s->err ? s->err : "");
    return !why;
}

/*
 * The stream agrees with the whole parse however the body is cut: whole, at every
 * split point (bodies up to `splits_upto` bytes), at every pair of them (up to
 * `pairs_upto` bytes), one byte at a time, and in `random_trials` random cuttings.
 * Returns the whole parse's rc.
 */
static int agree_cut(const char *ct, const char *body, size_t len, size_t splits_upto,
                     size_t pairs_upto, int random_trials)
{
    struct got w = whole(ct, body, len), s;
    char how[96];
    bool ok = true;
    s = streamed(ct, body, len, NULL, 0);
    ok = same(&w, &s, "whole");
    got_free(&s);
    for (size_t a = 1; ok && len <= splits_upto && a < len; a++) {
        s = streamed(ct, body, len, &a, 1);
        snprintf(how, sizeof how, "cut at %zu", a);
        ok = same(&w, &s, how);
        got_free(&s);
        for (size_t b = a + 1; ok && len <= pairs_upto && b < len; b++) {
            size_t cuts[2] = {a, b};
            s = streamed(ct, body, len, cuts, 2);
            snprintf(how, sizeof how, "cut at %zu and %zu", a, b);
            ok = same(&w, &s, how);
            got_free(&s);
        }
    }
    size_t *cuts = xmalloc((len + 1) * sizeof *cuts);
    for (size_t i = 0; i + 1 < len; i++)
        cuts[i] = i + 1;
    if (ok && len > 1) {
        s = streamed(ct, body, len, cuts, (int)(len - 1));
        ok = same(&w, &s, "one byte at a time");
        got_free(&s);
    }
    for (int t = 0; ok && t < random_trials; t++) {
        int n = 0;
        for (size_t off = 1 + mp_rng() % 97; off < len; off += 1 + mp_rng() % 97)
            cuts[n++] = off;
        s = streamed(ct, body, len, cuts, n);
        snprintf(how, sizeof how, "random cutting %d", t);
        ok = same(&w, &s, how);
        got_free(&s);
    }
    free(cuts);
    int rc = w.rc;
    got_free(&w);
    return rc;
}

/* Every pair of split points for the short bodies only: the pairs grow with the
 * square of the length, and this runs under ASan in CI. */
static int agree(const char *ct, const char *body)
{
    return agree_cut(ct, body, strlen(body), SIZE_MAX, 128, 20);
}

/* ---- bodies ---- */

#define JSONL MP_JSONL
#define openai_body mp_openai_body

TEST(valid_bodies_agree)
{
    EXPECT_EQ(agree_cut(CT, openai_body, strlen(openai_body), SIZE_MAX, 400, 50), 0);
    /* The file first, then the purpose (fields may come in any order). */
    EXPECT_EQ(agree(CT,
                    "--" B "\r\nContent-Disposition: form-data; name=file; "
                    "filename=\"a.jsonl\"\r\n\r\n" JSONL "\r\n--" B
                    "\r\nContent-Disposition: form-data; name=purpose\r\n\r\nbatch\r\n--" B
                    "--"),
              0);
    /* Quoted boundary with the RFC 2046 specials, parameters in odd case. */
    EXPECT_EQ(agree("Multipart/Form-Data ; charset=utf-8;BOUNDARY=\"a:b=c?d (x)\" ",
                    "--a:b=c?d (x)\r\ncontent-disposition: FORM-DATA; Name=purpose; "
                    "filename*=UTF-8''x.jsonl\r\nX-Other: ignored\r\n\r\nbatch\r\n"
                    "--a:b=c?d (x)--"),
              0);
    /* A boundary of dashes: its delimiter is all dashes after the CRLF. */
    EXPECT_EQ(
        agree("multipart/form-data; boundary=-",
              "---\r\nContent-Disposition: form-data; name=a\r\n\r\n-\r\n--\r\n----\r\n"
              "---x\r\n---- \r\n---\t\r\nContent-Disposition: form-data; name=b\r\n\r\n"
              "\r\n-----"),
        0);
    /* Data that looks like a delimiter but is not one. */
    EXPECT_EQ(agree(CT, "--" B "\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n"
                        "x--" B "\r\nx\n--" B "\r\ny\r\n--" B "X\r\nz\r\n--" B " x\r\n"
                        "w\r\n-" B "\r\nv\r\n--" B "-\r\n\r\r\n\r\n--" B "\r\r\nend"
                        "\r\n--" B "--\r\n"),
              0);
    /* Empty parts, with and without the CRLF before their delimiter. */
    EXPECT_EQ(agree(CT, "--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\n\r\n--" B
                        "\r\nContent-Disposition: form-data; name=b\r\n\r\n--" B "--"),
              0);
    /* Only the close delimiter: no parts. */
    EXPECT_EQ(agree(CT, "--" B "--\r\n"), 0);
    /* Preamble, padding, epilogue with a delimiter in it. */
    EXPECT_EQ(agree(CT, "The preamble. --" B " is not a delimiter here.\r\n--" B " \t\r\n"
                        "Content-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
                        "--" B "--  epilogue\r\n--" B "\r\nmore epilogue, ignored"),
              0);
    EXPECT_EQ(agree(CT, "\r\n--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n"
                        "--" B "--"),
              0);
}

TEST(binary_data_agrees)
{
    char body[1024];
    size_t len = 0;
    const char *head = "--" B "\r\nContent-Disposition: form-data; name=\"file\"; "
                       "filename=\"b.bin\"\r\n\r\n";
    memcpy(body, head, strlen(head));
    len += strlen(head);
    for (int i = 0; i < 256; i++)
        body[len++] = (char)i;
    static const char tricky[] = "\r\n\r\n\r\n--\r\n-\0\r\r\n\n\r\n--" B "\r\r\n--" B "x";
    memcpy(body + len, tricky, sizeof tricky - 1);
    len += sizeof tricky - 1;
    const char *tail = "\r\n--" B "--";
    memcpy(body + len, tail, strlen(tail));
    len += strlen(tail);
    EXPECT_EQ(agree_cut(CT, body, len, SIZE_MAX, 0, 200), 0);
}

TEST(padding_cap_agrees)
{
    /* MULTIPART_MAX_PADDING spaces and tabs: a delimiter; one more: data. */
    char body[512], pad[MULTIPART_MAX_PADDING + 2];
    for (int i = 0; i < MULTIPART_MAX_PADDING + 1; i++)
        pad[i] = i % 3 ? ' ' : '\t';
    pad[MULTIPART_MAX_PADDING] = '\0';
    snprintf(body, sizeof body,
             "--" B "%s\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--" B "%s\r\n"
             "Content-Disposition: form-data; name=b\r\n\r\nw\r\n--" B "--",
             pad, pad);
    EXPECT_EQ(agree(CT, body), 0);
    struct got w = whole(CT, body, strlen(body));
    EXPECT_EQ(w.n, 2);
    got_free(&w);
    pad[MULTIPART_MAX_PADDING] = ' ';
    pad[MULTIPART_MAX_PADDING + 1] = '\0';
    snprintf(body, sizeof body,
             "--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--" B "%s\r\n"
             "Content-Disposition: form-data; name=b\r\n\r\nw\r\n--" B "--",
             pad);
    EXPECT_EQ(agree(CT, body), 0);
    w = whole(CT, body, strlen(body));
    EXPECT_EQ(w.n, 1); /* the over-padded line is part a's data */
    got_free(&w);
    snprintf(body, sizeof body,
             "--" B "%s\r\nContent-Disposition: form-data; name=a\r\n\r\n", pad);
    EXPECT_EQ(agree(CT, body), -1); /* no delimiter line at all */
}

TEST(errors_agree)
{
    static const char *const bodies[] = {
        "",
        "no delimiter at all",
        "--" B "\nContent-Disposition: form-data; name=a\n\nv\n--" B "--\n",
        "--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nvalue",
        "--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nvalue\r\n--" B,
        "--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nvalue\r\n--" B "-",
        "--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nvalue\r\n--" B "\r\n",
        "--" B "\r\nContent-Disposition: form-data; name=a\r\n",
        "--" B "\r\nContent-Disposition: form-data; name=a",
        "--" B "\r\n\r\nv\r\n--" B "--",
        "--" B "\r\nContent-Type: text/plain\r\n\r\nv\r\n--" B "--",
        "--" B "\r\nContent-Disposition: form-data\r\n\r\nv\r\n--" B "--",
        "--" B "\r\nContent-Disposition: attachment; name=a\r\n\r\nv\r\n--" B "--",
        "--" B "\r\nContent-Disposition: form-data; name=a; name=b\r\n\r\nv\r\n--" B "--",
        "--" B "\r\nContent-Disposition: form-data; name=\"a\r\n\r\nv\r\n--" B "--",
        "--" B "\r\nContent-Disposition: form-data; name=a\r\nContent-Disposition: "
        "form-data; name=b\r\n\r\nv\r\n--" B "--",
        "--" B
        "\r\nContent-Disposition: form-data; name=a\r\nno colon here\r\n\r\nv\r\n--" B,
        "--" B "\r\nContent-Disposition : form-data; name=a\r\n\r\nv\r\n--" B "--",
        "--" B "\r\nContent-Disposition: form-data;\r\n name=a\r\n\r\nv\r\n--" B "--",
        "--" B "\r\nContent-Disposition: form-data; name=a\nX: y\r\n\r\nv\r\n--" B "--",
        "--" B "\r\nContent-Disposition: form-data; name=a\rX: y\r\n\r\nv\r\n--" B "--",
        "--" B "\r\nContent-Disposition: form-data; name=\"a\x01\"\r\n\r\nv\r\n--" B "--",
        "--" B "\r\nX: bad\r\nContent-Disposition: form-data; name=a\r\n\r",
        "--" B "\r\nX: y\r\n\r\nv\r\n--" B "--",
    };
    for (size_t i = 0; i < ARRAY_LEN(bodies); i++)
        EXPECT_EQ(agree(CT, bodies[i]), -1);
    /* A NUL inside a header value. */
    static const char nul[] = "--" B "\r\nContent-Disposition: form-data; name=a\r\nX: a\0b"
                              "\r\n\r\nv\r\n--" B "--";
    EXPECT_EQ(agree_cut(CT, nul, sizeof nul - 1, SIZE_MAX, 400, 50), -1);
    /* Content-Types the stream refuses at once, as multipart_parse does. */
    static const char *const cts[] = {
        NULL,
        "",
        "application/json",
        "multipart/mixed; boundary=" B,
        "multipart/form-data",
        "multipart/form-data; boundary=",
        "multipart/form-data; boundary=\"abc \"",
        "multipart/form-data; boundary=a; boundary=a",
    };
    for (size_t i = 0; i < ARRAY_LEN(cts); i++) {
        EXPECT_EQ(agree(cts[i], openai_body), -1);
        struct multipart_stream *s = (void *)1;
        EXPECT_EQ(multipart_stream_create(&s, cts[i], &sink, NULL, NULL), -1);
        EXPECT(s == NULL);
    }
}

TEST(limits_agree)
{
    size_t len;
    char *body = mp_many_parts(MULTIPART_MAX_PARTS, &len);
    EXPECT_EQ(agree_cut(CT, body, len, SIZE_MAX, 0, 20), 0);
    free(body);
    body = mp_many_parts(MULTIPART_MAX_PARTS + 1, &len);
    EXPECT_EQ(agree_cut(CT, body, len, SIZE_MAX, 0, 20), -1);
    free(body);

    /* Header sections of exactly the limit, one byte over, and with no end; fed
     * whole, one byte at a time and cut at random (every split of 8 KiB bodies
     * would take minutes under ASan). */
    const char *cd = "--" B "\r\nContent-Disposition: form-data; name=a\r\nX-Pad: ";
    const size_t fixed = strlen(cd) - strlen("--" B "\r\n") + 4;
    for (size_t size = MULTIPART_MAX_HEADER_BYTES - 1;
         size <= MULTIPART_MAX_HEADER_BYTES + 1; size++) {
        /* Built from parts of known length (GCC's -Warray-bounds under ASan does not
         * follow sprintf's return into a memset). */
        const char *tail = "\r\n\r\nv\r\n--" B "--";
        const size_t pad = size - fixed, nc = strlen(cd), nt = strlen(tail);
        const size_t l = nc + pad + nt;
        body = xmalloc(l + 1);
        memcpy(body, cd, nc);
        for (size_t i = 0; i < pad; i++)
            body[nc + i] = 'x';
        memcpy(body + nc + pad, tail, nt + 1);
        EXPECT_EQ(agree_cut(CT, body, l, 0, 0, 40),
                  size <= MULTIPART_MAX_HEADER_BYTES ? 0 : -1);
        /* Cut inside the header section: the end of the body, or the limit. */
        EXPECT_EQ(agree_cut(CT, body, strlen(cd) + pad - 1, 0, 0, 40), -1);
        free(body);
    }
}

TEST(mutations_agree)
{
    /* The robustness mutations of test_multipart.c, each body then fed whole, one
     * byte at a time and cut at random. */
    char buf[2048];
    int ok = 0;
    for (int iter = 0; iter < 4000; iter++) {
        size_t len = mp_mutated(buf, sizeof buf, openai_body, strlen(openai_body));
        ok += agree_cut(CT, buf, len, 0, 0, 10) == 0;
    }
    EXPECT(ok > 0 && ok < 4000);
    printf("# %d of 4000 mutated bodies parsed\n", ok);
}

/* ---- what only a stream has ---- */

TEST(holds_back_only_a_delimiter)
{
    /* A 4 MiB part fed in 1000-byte pieces: after each feed every byte that cannot
     * begin a delimiter has gone out, so at most MULTIPART_STREAM_HOLD_MAX bytes of
     * the part wait, even when a piece ends inside a would-be delimiter line. */
    struct got g = {0};
    struct multipart_stream *s;
    EXPECT_EQ(multipart_stream_create(&s, CT, &sink, &g, NULL), 0);
    const char *head = "--" B "\r\nContent-Disposition: form-data; name=file; "
                       "filename=\"a.jsonl\"\r\n\r\n";
    EXPECT_EQ(multipart_stream_feed(s, head, strlen(head)), 0);
    char piece[1000];
    /* Each piece ends with a delimiter line as long as it can be without ending:
     * CRLF, the boundary, the most padding, a CR. */
    const char *tricky = "\r\n--" B;
    size_t fed = 0, max_held = 0;
    for (int i = 0; i < 4 << 10; i++) {
        memset(piece, 'x', sizeof piece);
        size_t t = strlen(tricky);
        memcpy(piece + sizeof piece - t - MULTIPART_MAX_PADDING - 1, tricky, t);
        memset(piece + sizeof piece - MULTIPART_MAX_PADDING - 1, ' ',
               MULTIPART_MAX_PADDING);
        piece[sizeof piece - 1] = '\r';
        EXPECT_EQ(multipart_stream_feed(s, piece, sizeof piece), 0);
        fed += sizeof piece;
        size_t held = fed - (g.n ? g.parts[0].len : 0);
        if (held > max_held) max_held = held;
    }
    EXPECT_EQ(max_held, strlen(tricky) + MULTIPART_MAX_PADDING + 1);
    EXPECT(max_held <= MULTIPART_STREAM_HOLD_MAX);
    /* The last held line was data too, once the byte after it failed it. */
    const char *tail = "x\r\n--" B "--";
    EXPECT_EQ(multipart_stream_feed(s, tail, strlen(tail)), 0);
    EXPECT_EQ(multipart_stream_finish(s), 0);
    EXPECT_EQ(g.n, 1);
    EXPECT_EQ(g.parts[0].len, fed + 1);
    multipart_stream_destroy(s);
    got_free(&g);
}

TEST(epilogue_and_empty_feeds)
{
    struct got g = {0};
    struct multipart_stream *s;
    EXPECT_EQ(multipart_stream_create(&s, CT, &sink, &g, NULL), 0);
    EXPECT_EQ(multipart_stream_feed(s, NULL, 0), 0);
    EXPECT_EQ(multipart_stream_feed(s, openai_body, strlen(openai_body)), 0);
    EXPECT_EQ(g.ends, 1);
    /* After the close delimiter anything is epilogue, even what would be an error. */
    EXPECT_EQ(multipart_stream_feed(s, "--" B "\r\n\r\n\n\n", 40), 0);
    EXPECT_EQ(multipart_stream_finish(s), 0);
    EXPECT_EQ(g.n, 2);
    EXPECT_EQ(g.ends, 1);
    multipart_stream_destroy(s);
    got_free(&g);
    /* A sink with no callbacks at all, and a stream destroyed mid-part. */
    EXPECT_EQ(multipart_stream_create(&s, CT, NULL, NULL, NULL), 0);
    EXPECT_EQ(multipart_stream_feed(s, openai_body, 120), 0);
    multipart_stream_destroy(s);
    multipart_stream_destroy(NULL);
}

int main(void)
{
    RUN(valid_bodies_agree);
    RUN(binary_data_agrees);
    RUN(padding_cap_agrees);
    RUN(errors_agree);
    RUN(limits_agree);
    RUN(mutations_agree);
    RUN(holds_back_only_a_delimiter);
    RUN(epilogue_and_empty_feeds);
    return test_done();
}
