/*
 * fuzz_multipart.c - libFuzzer target for the uploads of POST /v1/files:
 * multipart/form-data bodies (server/multipart.c), then the form check
 * (server/files_form.c) on the parts; and the same body through the streaming
 * parser (server/multipart_stream.c), whole and cut into pieces.
 *
 * Input: the first line (up to the first LF) is the request's Content-Type value,
 * optionally followed by a NUL and the cut: each byte b after the NUL is a piece of
 * 1 + b body bytes, the list repeated until the body is fed (no cut: one byte at a
 * time). The rest is the body. The parsers see the Content-Type up to that NUL.
 * The body and every piece are exact-size heap copies without a NUL, so ASan
 * catches a read past them or a pointer kept into a piece.
 * Checks beyond the sanitizers: parts lie inside the body, in order and without
 * overlap, each with a non-empty name; a refusal leaves no parts and says why; the
 * streaming parser gives the same parts (names, filenames, content types, data) or
 * the same message, with its events in order, however the body is cut, and after
 * every piece it has emitted all of a part's data seen so far but at most
 * MULTIPART_STREAM_HOLD_MAX bytes; the form check returns one of the parts, a
 * .jsonl upload within the limit, or a 400 / 413 with a JSON error body.
 */
#include "files_form.h"
#include "fuzz_util.h"
#include "multipart.h"
#include "multipart_stream.h"

#include "util.h"

#include <strings.h>

/* The limit is small so that the 413 is reachable with short inputs. */
static void check_form(const struct multipart_part *parts, int32_t n)
{
    struct api_error e = {0};
    const struct multipart_part *f = files_form_check(parts, n, 64, &e);
    if (!f) {
        REQUIRE(e.status == 400 || e.status == 413);
        size_t len;
        char *body = api_error_json(&e, &len);
        fuzz_require_json(body, len);
        free(body);
        api_error_clear(&e);
        return;
    }
    REQUIRE(e.status == 0 && f >= parts && f < parts + n);
    REQUIRE(strcmp(f->name, "file") == 0 && f->filename);
    const size_t k = strlen(f->filename);
    REQUIRE(k >= 6 && strcasecmp(f->filename + k - 6, FILES_FORM_SUFFIX) == 0);
    REQUIRE(json_utf8_valid(f->filename, k));
    REQUIRE(f->len >= 1 && f->len <= 64);
}

/* ---- the streaming parser against the whole-body one ---- */

/* What a stream gave, and what it must give (the whole parse). */
struct streamed {
    const struct multipart_part *want; /* the whole parse's parts, or NULL */
    int32_t n_want;
    const char *body;
    int32_t n;      /* parts begun */
    bool in_part;   /* the last one has not ended */
    size_t got;     /* data bytes of part n - 1 so far */
    bool ended;     /* the end event came */
    bool failed_ok; /* the whole parse failed: nothing is compared */
};

static void s_begin(void *ctx, const struct multipart_part *p)
{
    struct streamed *st = ctx;
    REQUIRE(!st->in_part && !st->ended && p->name && *p->name && !p->data && !p->len);
    if (!st->failed_ok) {
        REQUIRE(st->n < st->n_want);
        const struct multipart_part *w = &st->want[st->n];
        REQUIRE(strcmp(w->name, p->name) == 0);
        REQUIRE((w->filename == NULL) == (p->filename == NULL));
        REQUIRE(!w->filename || strcmp(w->filename, p->filename) == 0);
        REQUIRE((w->content_type == NULL) == (p->content_type == NULL));
        REQUIRE(!w->content_type || strcmp(w->content_type, p->content_type) == 0);
    }
    st->n++;
    st->in_part = true;
    st->got = 0;
}

static void s_data(void *ctx, const char *data, size_t len)
{
    struct streamed *st = ctx;
    REQUIRE(st->in_part && len > 0);
    if (!st->failed_ok) {
        const struct multipart_part *w = &st->want[st->n - 1];
        REQUIRE(st->got + len <= w->len && memcmp(w->data + st->got, data, len) == 0);
    }
    st->got += len;
}

static void s_end_part(void *ctx)
{
    struct streamed *st = ctx;
    REQUIRE(st->in_part);
    if (!st->failed_ok) REQUIRE(st->got == st->want[st->n - 1].len);
    st->in_part = false;
}

static void s_end(void *ctx)
{
    struct streamed *st = ctx;
    REQUIRE(!st->in_part && !st->ended);
    if (!st->failed_ok) REQUIRE(st->n == st->n_want);
    st->ended = true;
}

static const struct multipart_stream_sink s_sink = {s_begin, s_data, s_end_part, s_end};

/*
 * Stream the body in pieces (cut[0..n_cut) cycled; none: one byte at a time; NULL
 * with n_cut 1: whole) and require the whole parse's verdict: rc 0 with `want`, or
 * the message `why`.
 */
static void stream_check(const char *ct, const char *body, size_t len, const uint8_t *cut,
                         size_t n_cut, const struct multipart_part *want, int32_t n_want,
                         const char *why)
{
    struct streamed st = {.want = want, .n_want = n_want, .body = body, .failed_ok = !!why};
    struct multipart_stream *s;
    char *cerr = NULL;
    if (multipart_stream_create(&s, ct, &s_sink, &st, &cerr)) {
        REQUIRE(why && cerr && strcmp(why, cerr) == 0);
        free(cerr);
        return;
    }
    int rc = 0;
    size_t off = 0;
    for (size_t k = 0; off < len && rc == 0; k++) {
        size_t n = cut ? 1 + (size_t)cut[k % n_cut] : n_cut ? len : 1;
        if (n > len - off) n = len - off;
        char *piece = malloc(n);
        memcpy(piece, body + off, n);
        rc = multipart_stream_feed(s, piece, n);
        free(piece);
        off += n;
        if (rc || why || !st.in_part) continue;
        /* Everything of the part seen so far went out, but a delimiter line. */
        const struct multipart_part *w = &want[st.n - 1];
        const size_t start = (size_t)(w->data - body);
        const size_t seen = off > start ? MIN(off - start, w->len) : 0;
        REQUIRE(st.got + MULTIPART_STREAM_HOLD_MAX >= seen);
    }
    if (rc == 0) rc = multipart_stream_finish(s);
    if (why) {
        REQUIRE(rc == -1 && strcmp(multipart_stream_error(s), why) == 0 && !st.ended);
    } else {
        REQUIRE(rc == 0 && st.ended && !st.in_part && st.n == n_want);
        REQUIRE(multipart_stream_error(s) == NULL);
    }
    multipart_stream_destroy(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *lf = memchr(data, '\n', size);
    const size_t line_len = lf ? (size_t)(lf - data) : size;
    const uint8_t *nul = memchr(data, '\0', line_len);
    const size_t ct_len = nul ? (size_t)(nul - data) : line_len;
    const uint8_t *cut = nul ? nul + 1 : NULL;
    const size_t n_cut = nul ? line_len - ct_len - 1 : 0;
    char *ct = malloc(ct_len + 1);
    memcpy(ct, data, ct_len);
    ct[ct_len] = '\0';
    const size_t len = lf ? size - line_len - 1 : 0;
    char *body = malloc(len ? len : 1);
    if (len) memcpy(body, lf + 1, len);

    struct multipart_part *parts = (struct multipart_part *)1;
    int32_t n = -1;
    char *why = NULL;
    const int rc = multipart_parse(ct, body, len, &parts, &n, &why);
    stream_check(ct, body, len, NULL, 1, parts, n, why);
    stream_check(ct, body, len, n_cut ? cut : NULL, n_cut, parts, n, why);
    if (rc) {
        REQUIRE(parts == NULL && n == 0);
        REQUIRE(why && *why && json_utf8_valid(why, strlen(why)));
    } else {
        REQUIRE(n >= 0 && n <= MULTIPART_MAX_PARTS && (n == 0) == (parts == NULL));
        REQUIRE(why == NULL);
        const char *end_prev = body;
        for (int32_t i = 0; i < n; i++) {
            const struct multipart_part *p = &parts[i];
            REQUIRE(p->name && *p->name);
            (void)strlen(p->name);
            if (p->filename) (void)strlen(p->filename);
            if (p->content_type) (void)strlen(p->content_type);
            REQUIRE(p->data >= end_prev && p->data + p->len <= body + len);
            end_prev = p->data + p->len;
            REQUIRE(multipart_find(parts, n, p->name) != NULL);
        }
        check_form(parts, n);
    }
    free(why);
    multipart_free(parts, n);
    free(body);
    free(ct);
    return 0;
}
