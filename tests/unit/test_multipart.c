/*
 * test_multipart.c - the multipart/form-data parser (server/multipart.c) on its own:
 * bodies as the openai package (httpx) and requests (urllib3) send them, the
 * boundary rules, data that looks like a delimiter but is not, every error the
 * parser reports, and robustness: every truncation of a valid body and thousands of
 * random mutations must parse or fail cleanly, never crash (run under ASan).
 *
 * Every body is copied into a buffer of exactly its length before parsing, with no
 * NUL after it, so ASan catches any read past the end.
 *
 * This file is over 600 lines because it is one parser's specification:
 * server/multipart.c is one module with one entry point (multipart_parse), and every
 * case here is a body in and parts or an error out, through the same exact-size
 * harness (parse_n, EXPECT_ERR) and the same boundary. Most of the length is bodies
 * written out byte for byte: the real clients' uploads, and for each error the parser
 * reports a body with just that one thing wrong; the robustness cases then truncate
 * and mutate one of the valid bodies. Split by concept (accepting, refusing,
 * surviving), the files would share everything but their assertions, and none would
 * be named for the module it tests.
 */
#include "multipart.h"
#include "multipart_testlib.h"
#include "test.h"
#include "util.h"

#include <stdint.h>

/* One parse: the result, the parts and the exact-size copy they point into. */
struct res {
    int rc;
    struct multipart_part *parts;
    int32_t n;
    char *err;
    char *copy;
    size_t len;
};

static struct res parse_n(const char *ct, const char *body, size_t len)
{
    struct res r = {0};
    r.copy = malloc(len ? len : 1);
    if (len) memcpy(r.copy, body, len);
    r.len = len;
    r.rc = multipart_parse(ct, r.copy, len, &r.parts, &r.n, &r.err);
    /* Whatever happened, the outputs agree with the return code. */
    if (r.rc == 0) {
        EXPECT(r.err == NULL);
        EXPECT(r.n >= 0 && r.n <= MULTIPART_MAX_PARTS);
        EXPECT((r.n == 0) == (r.parts == NULL));
        for (int32_t i = 0; i < r.n; i++) {
            const struct multipart_part *p = &r.parts[i];
            EXPECT(p->name && p->name[0]);
            EXPECT(p->data >= r.copy && p->data + p->len <= r.copy + len);
        }
    } else {
        EXPECT_EQ(r.rc, -1);
        EXPECT(r.parts == NULL && r.n == 0);
        EXPECT(r.err && r.err[0] && !strchr(r.err, '\n'));
    }
    return r;
}

static struct res parse(const char *ct, const char *body)
{
    return parse_n(ct, body, strlen(body));
}

static void res_free(struct res *r)
{
    multipart_free(r->parts, r->n);
    free(r->err);
    free(r->copy);
    memset(r, 0, sizeof *r);
}

/* The part's data equals the n bytes at s. */
static int data_is(const struct multipart_part *p, const char *s, size_t n)
{
    return p && p->len == n && memcmp(p->data, s, n) == 0;
}
#define DATA_IS(p, s) data_is((p), (s), strlen(s))

/* Expect an error whose message contains `what`. */
#define EXPECT_ERR(r, what)                                                                \
    do {                                                                                   \
        EXPECT_EQ((r).rc, -1);                                                             \
        if ((r).err && !strstr((r).err, (what)))                                           \
            TEST_FAIL("error \"%s\" lacks \"%s\"", (r).err, (what));                       \
    } while (0)

#define B MP_B
#define CT "multipart/form-data; boundary=" B
#define JSONL MP_JSONL

TEST(openai_package_upload)
{
    /* client.files.create(file=open("batch.jsonl","rb"), purpose="batch") goes
     * through httpx: the data field first, then the file with octet-stream. */
    struct res r = parse(CT, mp_openai_body);
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 2);
    const struct multipart_part *purpose = multipart_find(r.parts, r.n, "purpose");
    const struct multipart_part *file = multipart_find(r.parts, r.n, "file");
    EXPECT(purpose == &r.parts[0] && file == &r.parts[1]);
    EXPECT(DATA_IS(purpose, "batch"));
    EXPECT(purpose && purpose->filename == NULL && purpose->content_type == NULL);
    EXPECT(DATA_IS(file, JSONL));
    if (file) {
        EXPECT_STR(file->filename, "batch.jsonl");
        EXPECT_STR(file->content_type, "application/octet-stream");
    }
    EXPECT(multipart_find(r.parts, r.n, "missing") == NULL);
    EXPECT(multipart_find(r.parts, r.n, "File") == NULL); /* names are case-sensitive */
    res_free(&r);
}

TEST(requests_upload)
{
    /* requests.post(url, files={"file": ("in.jsonl", f, "application/jsonl")},
     * data={"purpose": "batch"}): urllib3 sends the data fields first, and its quoted
     * filenames double a backslash. */
    struct res r = parse(CT, "--" B "\r\n"
                             "Content-Disposition: form-data; name=\"purpose\"\r\n"
                             "\r\n"
                             "batch\r\n"
                             "--" B "\r\n"
                             "Content-Disposition: form-data; name=\"file\"; "
                             "filename=\"in\\\\x.jsonl\"\r\n"
                             "Content-Type: application/jsonl\r\n"
                             "\r\n" JSONL "\r\n"
                             "--" B "--\r\n");
    EXPECT_EQ(r.rc, 0);
    const struct multipart_part *file = multipart_find(r.parts, r.n, "file");
    EXPECT(DATA_IS(file, JSONL));
    if (file) {
        EXPECT_STR(file->filename, "in\\x.jsonl");
        EXPECT_STR(file->content_type, "application/jsonl");
    }
    res_free(&r);
}

TEST(quoted_boundary_and_params)
{
    /* RFC 2046 allows ' ( ) + _ , - . / : = ? and an inner space in a boundary;
     * those need quoting. Type, parameter and header names are case-insensitive. */
    const char *ct = "Multipart/Form-Data ; charset=utf-8;BOUNDARY=\"a:b=c?d (x)\" ";
    struct res r = parse(ct, "--a:b=c?d (x)\r\n"
                             "content-disposition: FORM-DATA; Name=purpose; "
                             "filename*=UTF-8''x.jsonl\r\n"
                             "X-Other: ignored\r\n"
                             "\r\n"
                             "batch\r\n"
                             "--a:b=c?d (x)--");
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 1);
    if (r.n == 1) {
        EXPECT_STR(r.parts[0].name, "purpose");
        EXPECT(r.parts[0].filename == NULL); /* filename* is ignored */
        EXPECT(DATA_IS(&r.parts[0], "batch"));
    }
    res_free(&r);

    /* Escapes in quoted strings, an empty filename, raw UTF-8 in a filename. */
    r = parse(
        CT,
        "--" B "\r\n"
        "Content-Disposition: form-data; name=\"a\\\"b\\\\c\"; filename=\"\"\r\n"
        "\r\n"
        "x\r\n"
        "--" B "\r\n"
        "Content-Disposition: form-data;name=b;filename=\"\xc3\xa9t\xc3\xa9.jsonl\";\r\n"
        "\r\n"
        "y\r\n"
        "--" B "--");
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 2);
    if (r.n == 2) {
        EXPECT_STR(r.parts[0].name, "a\"b\\c");
        EXPECT_STR(r.parts[0].filename, "");
        EXPECT_STR(r.parts[1].filename, "\xc3\xa9t\xc3\xa9.jsonl");
    }
    res_free(&r);
}

TEST(boundary_inside_data_does_not_split)
{
    /* Only CRLF "--" boundary followed by padding+CRLF or "--" ends a part. */
    const char *data = "x--" B "\r\n"       /* not after a CRLF */
                       "x\n--" B "\r\n"     /* after a bare LF */
                       "y\r\n--" B "X\r\n"  /* a longer boundary */
                       "z\r\n--" B " x\r\n" /* padding, then not CRLF */
                       "w\r\n-" B "\r\n"    /* one dash */
                       "v\r\n--" B "-\r\n"  /* one closing dash */
                       "end";
    char body[1024];
    snprintf(body, sizeof body,
             "--" B "\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n%s\r\n--" B
             "--\r\n",
             data);
    struct res r = parse(CT, body);
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 1);
    if (r.n == 1) EXPECT(DATA_IS(&r.parts[0], data));
    res_free(&r);
}

TEST(binary_data)
{
    /* Every byte value, plus the sequences a parser might mistake for structure. */
    char data[256 + 64];
    size_t n = 0;
    for (int i = 0; i < 256; i++)
        data[n++] = (char)i;
    static const char tricky[] = "\r\n\r\n\r\n--\r\n-\0\r\r\n\n";
    memcpy(data + n, tricky, sizeof tricky - 1);
    n += sizeof tricky - 1;
    char body[1024];
    size_t len = 0;
    const char *head =
        "--" B "\r\nContent-Disposition: form-data; name=\"file\"; "
        "filename=\"b.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n";
    memcpy(body + len, head, strlen(head));
    len += strlen(head);
    memcpy(body + len, data, n);
    len += n;
    const char *tail = "\r\n--" B "--";
    memcpy(body + len, tail, strlen(tail));
    len += strlen(tail);
    struct res r = parse_n(CT, body, len);
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 1);
    if (r.n == 1) {
        EXPECT(data_is(&r.parts[0], data, n));
        EXPECT(r.parts[0].data == r.copy + strlen(head)); /* no copy: into the body */
    }
    res_free(&r);
}

TEST(empty_parts)
{
    struct res r =
        parse(CT, "--" B "\r\n"
                  "Content-Disposition: form-data; name=\"purpose\"\r\n"
                  "\r\n"
                  "\r\n"
                  "--" B "\r\n"
                  "Content-Disposition: form-data; name=\"file\"; filename=\"e\"\r\n"
                  "\r\n"
                  "\r\n"
                  "--" B "--");
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 2);
    for (int32_t i = 0; i < r.n; i++)
        EXPECT_EQ(r.parts[i].len, 0);
    res_free(&r);

    /* No body at all (RFC 2046: the part's body is optional): the blank line's
     * CRLF is also the delimiter's. */
    r = parse(CT, "--" B "\r\n"
                  "Content-Disposition: form-data; name=a\r\n"
                  "\r\n"
                  "--" B "\r\n"
                  "Content-Disposition: form-data; name=b\r\n"
                  "\r\n"
                  "--" B "--");
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 2);
    for (int32_t i = 0; i < r.n; i++)
        EXPECT_EQ(r.parts[i].len, 0);
    res_free(&r);

    /* Only the close delimiter: no parts, and that is the caller's to judge. */
    r = parse(CT, "--" B "--\r\n");
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 0);
    EXPECT(r.parts == NULL);
    EXPECT(multipart_find(r.parts, r.n, "file") == NULL);
    res_free(&r);
}

TEST(preamble_epilogue_padding)
{
    struct res r = parse(CT, "This is the preamble. --" B " is not a delimiter here.\r\n"
                             "--" B " \t\r\n"
                             "Content-Disposition: form-data; name=\"purpose\"\r\n"
                             "\r\n"
                             "batch\r\n"
                             "--" B "--  epilogue\r\n--" B "\r\nmore epilogue, ignored");
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 1);
    if (r.n == 1) EXPECT(DATA_IS(&r.parts[0], "batch"));
    res_free(&r);

    /* A preamble that is only a CRLF. */
    r = parse(CT, "\r\n--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--" B
                  "--");
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 1);
    res_free(&r);
}

TEST(padding_cap)
{
    /* Transport padding up to MULTIPART_MAX_PADDING bytes is part of a delimiter
     * line; with one byte more the line is data (so a streaming parser need only hold
     * back a bounded line). */
    char pad[MULTIPART_MAX_PADDING + 2], body[512];
    memset(pad, ' ', sizeof pad);
    pad[1] = '\t';
    pad[MULTIPART_MAX_PADDING] = '\0';
    snprintf(body, sizeof body,
             "--" B "%s\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--" B "--",
             pad);
    struct res r = parse(CT, body);
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 1);
    res_free(&r);
    pad[MULTIPART_MAX_PADDING] = ' ';
    pad[MULTIPART_MAX_PADDING + 1] = '\0';
    snprintf(body, sizeof body,
             "--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--" B
             "%s\r\nw\r\n--" B "--",
             pad);
    r = parse(CT, body);
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 1);
    if (r.n == 1) EXPECT_EQ(r.parts[0].len, 1 + 2 + 2 + strlen(B) + strlen(pad) + 2 + 1);
    res_free(&r);
}

TEST(missing_closing_delimiter)
{
    const char *cases[] = {
        "--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nvalue",
        "--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nvalue\r\n",
        "--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nvalue\r\n--" B,
        "--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nvalue\r\n--" B "-",
        "--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nvalue\r\n--" B "\r\n",
        "--" B "\r\nContent-Disposition: form-data; name=a\r\n",
        "--" B "\r\nContent-Disposition: form-data; name=a",
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct res r = parse(CT, cases[i]);
        EXPECT_ERR(r, "closing boundary");
        res_free(&r);
    }
    struct res r = parse(CT, "no delimiter at all");
    EXPECT_ERR(r, "no boundary delimiter");
    res_free(&r);
    r = parse(CT, "");
    EXPECT_ERR(r, "no boundary delimiter");
    res_free(&r);
    /* Bare LF line ends are not a multipart body. */
    r = parse(CT, "--" B "\nContent-Disposition: form-data; name=a\n\nv\n--" B "--\n");
    EXPECT_ERR(r, "no boundary delimiter");
    res_free(&r);
}

TEST(bad_content_type)
{
    const char *body =
        "--" B "\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--" B "--";
    struct {
        const char *ct, *err;
    } cases[] = {
        {NULL, "multipart/form-data"},
        {"", "multipart/form-data"},
        {"application/json", "multipart/form-data"},
        {"multipart/mixed; boundary=" B, "multipart/form-data"},
        {"multipart/form-data", "no boundary"},
        {"multipart/form-data; charset=utf-8", "no boundary"},
        {"multipart/form-data; boundary=", "malformed"},
        {"multipart/form-data; boundary=\"\"", "1-70"},
        {"multipart/form-data; boundary=\"abc \"", "1-70"},  /* ends with a space */
        {"multipart/form-data; boundary=ab@c", "malformed"}, /* '@' is not a tchar */
        {"multipart/form-data; boundary=ab!c", "1-70"},      /* tchar, not a bchar */
        {"multipart/form-data; boundary=\"unterminated", "malformed"},
        {"multipart/form-data; boundary=\"a\x01\"", "malformed"},
        {"multipart/form-data; boundary=a; boundary=a", "more than one"},
        {"multipart/form-data; boundary " B, "malformed"},
        {"multipart/form-data boundary=" B, "malformed"},
        {"multipart/form-data; boundary="
         "12345678901234567890123456789012345678901234567890123456789012345678901",
         "1-70"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct res r = parse(cases[i].ct, body);
        EXPECT_ERR(r, cases[i].err);
        res_free(&r);
    }

    /* 70 characters is the most RFC 2046 allows, and it works. */
    const char *b70 =
        "1234567890123456789012345678901234567890123456789012345678901234567890";
    char ct[128], body70[512];
    snprintf(ct, sizeof ct, "multipart/form-data; boundary=%s", b70);
    snprintf(body70, sizeof body70,
             "--%s\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--%s--", b70, b70);
    struct res r = parse(ct, body70);
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 1);
    res_free(&r);

    /* A NULL error pointer is allowed: the caller only wants the verdict. */
    struct multipart_part *parts = (void *)1;
    int32_t n = 5;
    EXPECT_EQ(multipart_parse("text/plain", body, strlen(body), &parts, &n, NULL), -1);
    EXPECT(parts == NULL && n == 0);
}

TEST(bad_part_headers)
{
    /* H() gives a literal with its length: one case holds a NUL. */
#define H(s) s, sizeof(s) - 1
    struct {
        const char *headers;
        size_t hl;
        const char *err;
    } cases[] = {
        {H(""), "no Content-Disposition"},
        {H("Content-Type: text/plain\r\n"), "no Content-Disposition"},
        {H("Content-Disposition: form-data\r\n"), "no name"},
        {H("Content-Disposition: form-data; filename=\"x.jsonl\"\r\n"), "no name"},
        {H("Content-Disposition: form-data; name=\"\"\r\n"), "no name"},
        {H("Content-Disposition: attachment; name=a\r\n"), "must be form-data"},
        {H("Content-Disposition: ; name=a\r\n"), "must be form-data"},
        {H("Content-Disposition: form-data; name=a; name=b\r\n"), "repeated"},
        {H("Content-Disposition: form-data; name=a; filename=x; filename=y\r\n"),
         "repeated"},
        {H("Content-Disposition: form-data; name=\"a\r\n"),
         "malformed Content-Disposition"},
        {H("Content-Disposition: form-data; name=a b\r\n"),
         "malformed Content-Disposition"},
        {H("Content-Disposition: form-data; name\r\n"), "malformed Content-Disposition"},
        {H("Content-Disposition: form-data; name=a\r\nContent-Disposition: form-data; "
           "name=b\r\n"),
         "repeated"},
        {H("Content-Disposition: form-data; name=a\r\nContent-Type: a/b\r\ncontent-type: "
           "c/d\r\n"),
         "repeated"},
        {H("Content-Disposition: form-data; name=a\r\nno colon here\r\n"),
         "malformed header"},
        {H("Content-Disposition : form-data; name=a\r\n"), "malformed header"},
        {H(": value\r\n"), "malformed header"},
        {H("Content-Disposition: form-data;\r\n name=a\r\n"),
         "malformed header"}, /* obs-fold */
        {H("Content-Disposition: form-data; name=a\nX: y\r\n"), "CRLF"},
        {H("Content-Disposition: form-data; name=a\rX: y\r\n"), "CRLF"},
        {H("Content-Disposition: form-data; name=\"a\x01\"\r\n"), "control character"},
        {H("Content-Disposition: form-data; name=a\r\nX: a\0b\r\n"), "control character"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        size_t hl = cases[i].hl;
        char body[1024];
        size_t len = 0;
        const char *open = "--" B "\r\n", *close = "\r\nvalue\r\n--" B "--\r\n";
        memcpy(body, open, strlen(open));
        len += strlen(open);
        memcpy(body + len, cases[i].headers, hl);
        len += hl;
        memcpy(body + len, close, strlen(close));
        len += strlen(close);
        struct res r = parse_n(CT, body, len);
        if (r.rc == 0) TEST_FAIL("case %zu parsed", i);
        EXPECT_ERR(r, cases[i].err);
        res_free(&r);
    }
#undef H
}

TEST(part_limit)
{
    size_t len;
    char *body = mp_many_parts(MULTIPART_MAX_PARTS, &len);
    struct res r = parse_n(CT, body, len);
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, MULTIPART_MAX_PARTS);
    EXPECT(DATA_IS(multipart_find(r.parts, r.n, "p63"), "63"));
    res_free(&r);
    free(body);

    body = mp_many_parts(MULTIPART_MAX_PARTS + 1, &len);
    r = parse_n(CT, body, len);
    EXPECT_ERR(r, "more than 64 parts");
    res_free(&r);
    free(body);
}

/* A part whose header section (lines and the blank line) is exactly `size` bytes. */
static char *header_of_size(size_t size, size_t *len)
{
    const char *cd = "Content-Disposition: form-data; name=a\r\n";
    const char *pad_name = "X-Pad: ";
    size_t fixed = strlen(cd) + strlen(pad_name) + 2 + 2;
    CHECK(size >= fixed);
    size_t pad = size - fixed;
    /* Built as a string of known parts (not sprintf + memset into a fresh buffer,
     * where GCC's -Warray-bounds under ASan could not see the sizes). */
    const char *head = "--" B "\r\n", *tail = "\r\n\r\nv\r\n--" B "--";
    size_t nh = strlen(head), ncd = strlen(cd), np = strlen(pad_name), nt = strlen(tail);
    size_t total = nh + ncd + np + pad + nt;
    char *body = xmalloc(total + 1);
    char *w = body;
    memcpy(w, head, nh), w += nh;
    memcpy(w, cd, ncd), w += ncd;
    memcpy(w, pad_name, np), w += np;
    for (size_t i = 0; i < pad; i++) *w++ = 'x';
    memcpy(w, tail, nt + 1);
    *len = total;
    return body;
}

TEST(header_limit)
{
    size_t len;
    char *body = header_of_size(MULTIPART_MAX_HEADER_BYTES, &len);
    struct res r = parse_n(CT, body, len);
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(r.n, 1);
    res_free(&r);
    free(body);

    body = header_of_size(MULTIPART_MAX_HEADER_BYTES + 1, &len);
    r = parse_n(CT, body, len);
    EXPECT_ERR(r, "header section over 8192");
    res_free(&r);
    free(body);

    /* One giant line with no end at all, and a body that stops inside it: the
     * limit, not a scan to the end and not a read past it. */
    size_t big = 1 << 20;
    body = malloc(big);
    size_t l =
        (size_t)sprintf(body, "--" B "\r\nContent-Disposition: form-data; name=a\r\n");
    memset(body + l, 'h', big - l);
    r = parse_n(CT, body, big);
    EXPECT_ERR(r, "header section over");
    res_free(&r);
    r = parse_n(CT, body, l + 100);
    EXPECT_ERR(r, "closing boundary");
    res_free(&r);
    free(body);
}

/* The openai-style two-part body used by the robustness tests. */
static const char small_body[] = "--" B "\r\n"
                                 "Content-Disposition: form-data; name=\"purpose\"\r\n"
                                 "\r\n"
                                 "batch\r\n"
                                 "--" B "\r\n"
                                 "Content-Disposition: form-data; name=\"file\"; "
                                 "filename=\"b.jsonl\"\r\n"
                                 "Content-Type: application/jsonl\r\n"
                                 "\r\n"
                                 "{\"custom_id\":\"1\"}\n\r\n"
                                 "--" B "--\r\n";

TEST(every_truncation)
{
    /* A prefix parses exactly when it holds the whole close delimiter; every shorter
     * one is an error, never a crash or a read past the end. */
    size_t full = sizeof small_body - 1, close_end = full - 2;
    for (size_t n = 0; n <= full; n++) {
        struct res r = parse_n(CT, small_body, n);
        if (n >= close_end) {
            EXPECT_EQ(r.rc, 0);
            EXPECT_EQ(r.n, 2);
        } else if (r.rc == 0) {
            TEST_FAIL("prefix of %zu bytes parsed", n);
        }
        res_free(&r);
    }
}

TEST(fuzz_mutations)
{
    /* Mutate the valid body with the bytes and pieces the parser cares about. */
    char buf[4096];
    int ok = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = mp_mutated(buf, sizeof buf, small_body, sizeof small_body - 1);
        struct res r = parse_n(CT, buf, len);
        ok += r.rc == 0;
        res_free(&r);
    }
    /* Some mutations leave a valid body (a flipped data byte), so both outcomes
     * were exercised. */
    EXPECT(ok > 0 && ok < 20000);
    printf("# %d of 20000 mutated bodies parsed\n", ok);
}

TEST(fuzz_garbage)
{
    /* Random bytes from a small alphabet of structural characters, under random
     * Content-Types built from the same alphabet and a short boundary. */
    static const char alphabet[] = "-\r\n\"\\;=: abx";
    char buf[512], ct[96];
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = (size_t)(mp_rng() % sizeof buf);
        for (size_t i = 0; i < len; i++)
            buf[i] = (mp_rng() % 4 == 0) ? (char)mp_rng()
                                         : alphabet[mp_rng() % (sizeof alphabet - 1)];
        if (iter % 2) {
            snprintf(ct, sizeof ct, "multipart/form-data; boundary=ab");
        } else {
            size_t cl = (size_t)(mp_rng() % 40);
            int l = snprintf(ct, sizeof ct, "multipart/form-data;");
            for (size_t i = 0; i < cl; i++) {
                char c = alphabet[mp_rng() % (sizeof alphabet - 1)];
                ct[l++] = c == '\r' || c == '\n' ? 'b' : c;
            }
            ct[l] = '\0';
        }
        struct res r = parse_n(ct, buf, len);
        res_free(&r);
    }
}

int main(void)
{
    RUN(openai_package_upload);
    RUN(requests_upload);
    RUN(quoted_boundary_and_params);
    RUN(boundary_inside_data_does_not_split);
    RUN(binary_data);
    RUN(empty_parts);
    RUN(preamble_epilogue_padding);
    RUN(padding_cap);
    RUN(missing_closing_delimiter);
    RUN(bad_content_type);
    RUN(bad_part_headers);
    RUN(part_limit);
    RUN(header_limit);
    RUN(every_truncation);
    RUN(fuzz_mutations);
    RUN(fuzz_garbage);
    return test_done();
}
