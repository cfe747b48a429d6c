/*
 * multipart.c - the multipart/form-data parser over a whole body: boundary from the
 * Content-Type, delimiters found with memmem, part headers read line by line. The
 * boundary and the part headers are read by the same code for the streaming parser
 * (multipart_stream.c), through multipart_impl.h, so the two cannot disagree on them.
 *
 * Owns: nothing between calls. During a call, the parts array and its strings until
 * they are handed to the caller (or freed on an error).
 *
 * Bounds: the body carries its length and is never read past it (no strlen, no
 * reliance on a trailing NUL), because the fuzz tests hand in exact-size buffers.
 * Header values are copied into NUL-terminated strings only after checking that
 * they hold no control characters (NUL included), so the C-string code that parses
 * them (Content-Type, Content-Disposition) sees the whole value.
 * Cost: linear in the body. memmem finds each "\r\n--boundary"; a candidate that is
 * not a delimiter (say "\r\n--boundaryX") restarts the search one byte later, and
 * the transport padding after one candidate ends before the next begins.
 * Thread: any.
 */
#include "multipart.h"
#include "multipart_impl.h"

#include "util.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int multipart_fail(char **error, const char *fmt, ...)
{
    if (error) {
        char buf[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        *error = xstrdup(buf);
    }
    return -1;
}

/* RFC 9110 tchar. */
static bool mp_is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* RFC 2046 bchars (space included; it may not end a boundary). */
static bool mp_is_bchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c != '\0' && strchr("'()+_,-./:=? ", c) != NULL;
}

/* A byte allowed in a header value: HTAB, visible ASCII, space, and obs-text (raw
 * UTF-8 filenames, which browsers and urllib3 send unencoded). */
static bool mp_is_field_char(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static const char *mp_skip_ows(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* The token at *s as a heap copy, *s moved past it; NULL (and *s unmoved) when
 * there is none. */
static char *mp_token(const char **s)
{
    const char *p = *s;
    while (mp_is_tchar((unsigned char)*p))
        p++;
    if (p == *s) return NULL;
    char *t = xstrndup(*s, (size_t)(p - *s));
    *s = p;
    return t;
}

/* The quoted-string at *s (which is '"'), its quoted-pairs unescaped, as a heap
 * copy, *s moved past the closing quote. NULL when it is unterminated or holds a
 * control character: such a value is malformed, not something to guess at. */
static char *mp_quoted(const char **s)
{
    const char *p = *s + 1;
    size_t n = 0;
    /* First pass: validate and measure, so the copy is one exact allocation. */
    for (;;) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') break;
        if (c == '\\') c = (unsigned char)*++p;
        if (c == '\0' || !mp_is_field_char(c)) return NULL;
        p++;
        n++;
    }
    char *out = xmalloc(n + 1), *o = out;
    for (p = *s + 1; *p != '"'; p++) {
        if (*p == '\\') p++;
        *o++ = *p;
    }
    *o = '\0';
    *s = p + 1;
    return out;
}

/*
 * The next "; name=value" parameter at *s. Returns 1 with *name (lowercased) and
 * *value (unquoted) as heap copies, 0 at the end of the string, -1 when malformed.
 * Empty parameters (";;", a trailing ";") are skipped, as lenient as the senders
 * seen in the wild need and no more. OWS around '=' is accepted: it is unambiguous.
 */
static int mp_param_next(const char **s, char **name, char **value)
{
    const char *p = mp_skip_ows(*s);
    if (*p == '\0') return 0;
    if (*p != ';') return -1;
    do
        p = mp_skip_ows(p + 1);
    while (*p == ';');
    if (*p == '\0') return 0;
    char *n = mp_token(&p);
    if (!n) return -1;
    p = mp_skip_ows(p);
    if (*p != '=') goto fail;
    p = mp_skip_ows(p + 1);
    char *v = *p == '"' ? mp_quoted(&p) : mp_token(&p);
    if (!v) goto fail;
    for (char *c = n; *c; c++)
        if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
    *s = p;
    *name = n;
    *value = v;
    return 1;
fail:
    free(n);
    return -1;
}

int multipart_boundary(struct multipart_body *m, const char *ct, char **error)
{
    if (!ct)
        return multipart_fail(error,
                              "Content-Type must be multipart/form-data with a boundary");
    const char *p = mp_skip_ows(ct);
    char *type = mp_token(&p), *subtype = NULL, *boundary = NULL;
    int err = -1;
    if (type && *p == '/') {
        p++;
        subtype = mp_token(&p);
    }
    if (!subtype || strcasecmp(type, "multipart") != 0 ||
        strcasecmp(subtype, "form-data") != 0) {
        multipart_fail(error, "Content-Type must be multipart/form-data");
        goto out;
    }
    for (;;) {
        char *name, *value;
        int r = mp_param_next(&p, &name, &value);
        if (r == 0) break;
        if (r < 0) {
            multipart_fail(error, "malformed Content-Type header");
            goto out;
        }
        bool is_boundary = strcmp(name, "boundary") == 0;
        free(name);
        if (!is_boundary) {
            free(value);
            continue;
        }
        if (boundary) {
            /* Two boundaries: two parsers could each pick a different one. */
            free(value);
            multipart_fail(error, "Content-Type has more than one boundary parameter");
            goto out;
        }
        boundary = value;
    }
    if (!boundary) {
        multipart_fail(error, "Content-Type multipart/form-data has no boundary parameter");
        goto out;
    }
    size_t n = strlen(boundary);
    bool ok = n >= 1 && n <= MULTIPART_MAX_BOUNDARY && boundary[n - 1] != ' ';
    for (size_t i = 0; ok && i < n; i++)
        ok = mp_is_bchar((unsigned char)boundary[i]);
    if (!ok) {
        multipart_fail(error,
                       "multipart boundary must be 1-%d characters allowed by RFC 2046",
                       MULTIPART_MAX_BOUNDARY);
        goto out;
    }
    memcpy(m->delim, "\r\n--", 4);
    memcpy(m->delim + 4, boundary, n + 1);
    m->delim_len = 4 + n;
    err = 0;
out:
    free(type);
    free(subtype);
    free(boundary);
    return err;
}

/*
 * Whether "--boundary" at `at` is a delimiter line: followed by "--" (the close
 * delimiter; the epilogue after it is ignored) or by at most MULTIPART_MAX_PADDING
 * bytes of transport padding and CRLF. On true, *next is the first byte after it and
 * *close says which it was.
 */
static bool mp_delim_at(const struct multipart_body *m, size_t at, size_t *next,
                        bool *close)
{
    const char *b = m->b;
    size_t dl = m->delim_len - 2; /* without the CRLF */
    if (m->len - at < dl || memcmp(b + at, m->delim + 2, dl) != 0) return false;
    size_t p = at + dl;
    if (m->len - p >= 2 && b[p] == '-' && b[p + 1] == '-') {
        *next = p + 2;
        *close = true;
        return true;
    }
    const size_t pad0 = p;
    while (p < m->len && p - pad0 < MULTIPART_MAX_PADDING && (b[p] == ' ' || b[p] == '\t'))
        p++;
    if (m->len - p >= 2 && b[p] == '\r' && b[p + 1] == '\n') {
        *next = p + 2;
        *close = false;
        return true;
    }
    return false;
}

/* The first delimiter at or after `from` in its CRLF form: *at is where its CRLF
 * starts (the end of the data before it). */
static bool mp_find_delim(const struct multipart_body *m, size_t from, size_t *at,
                          size_t *next, bool *close)
{
    while (from < m->len) {
        const char *hit = memmem(m->b + from, m->len - from, m->delim, m->delim_len);
        if (!hit) return false;
        size_t h = (size_t)(hit - m->b);
        if (mp_delim_at(m, h + 2, next, close)) {
            *at = h;
            return true;
        }
        from = h + 1;
    }
    return false;
}

void multipart_part_clear(struct multipart_part *p)
{
    free(p->name);
    free(p->filename);
    free(p->content_type);
    memset(p, 0, sizeof *p);
}

/* Fill part->name and part->filename from a Content-Disposition value. */
static int mp_disposition(const char *v, int32_t idx, struct multipart_part *part,
                          char **error)
{
    const char *p = v;
    char *type = mp_token(&p);
    bool form_data = type && strcasecmp(type, "form-data") == 0;
    free(type);
    if (!form_data)
        return multipart_fail(
            error, "multipart part %d: Content-Disposition must be form-data", idx);
    for (;;) {
        char *name, *value;
        int r = mp_param_next(&p, &name, &value);
        if (r == 0) break;
        if (r < 0)
            return multipart_fail(error, "multipart part %d: malformed Content-Disposition",
                                  idx);
        /* filename* (RFC 5987) is ignored: RFC 7578 tells senders not to use it,
         * and the name we would store is never used as a path anyway. */
        char **slot = strcmp(name, "name") == 0       ? &part->name
                      : strcmp(name, "filename") == 0 ? &part->filename
                                                      : NULL;
        free(name);
        if (slot && *slot) {
            free(value);
            return multipart_fail(
                error, "multipart part %d: repeated Content-Disposition parameter", idx);
        }
        if (slot)
            *slot = value;
        else
            free(value);
    }
    if (!part->name || part->name[0] == '\0')
        return multipart_fail(
            error, "multipart part %d has no name in its Content-Disposition", idx);
    return 0;
}

int multipart_headers(const struct multipart_body *m, size_t *pos, int32_t idx,
                      struct multipart_part *part, char **error)
{
    const char *b = m->b;
    size_t start = *pos, p = start;
    char *disp = NULL;
    int err = -1;
    for (;;) {
        /* Scanning stops at the limit, so a 200 MB body with no line end costs
         * 8 KiB here, not 200 MB. */
        size_t q = p;
        while (q < m->len && q - start < MULTIPART_MAX_HEADER_BYTES && b[q] != '\r' &&
               b[q] != '\n')
            q++;
        if (q - start >= MULTIPART_MAX_HEADER_BYTES ||
            (q < m->len && q + 2 - start > MULTIPART_MAX_HEADER_BYTES)) {
            multipart_fail(error, "multipart part %d: header section over %d bytes", idx,
                           MULTIPART_MAX_HEADER_BYTES);
            goto out;
        }
        if (m->len - q < 2) {
            multipart_fail(error,
                           "multipart body ends before its closing boundary delimiter");
            goto out;
        }
        if (b[q] != '\r' || b[q + 1] != '\n') {
            multipart_fail(error, "multipart part %d: header line not ended by CRLF", idx);
            goto out;
        }
        if (q == p) {
            *pos = q + 2;
            break;
        }
        /* name ":" OWS value OWS. A line that starts with whitespace is obs-fold,
         * which RFC 9110 retired; it fails the token check like any bad name. */
        size_t c = p;
        while (c < q && mp_is_tchar((unsigned char)b[c]))
            c++;
        if (c == p || c == q || b[c] != ':') {
            multipart_fail(error, "multipart part %d: malformed header line", idx);
            goto out;
        }
        size_t name_len = c - p, v0 = c + 1, v1 = q;
        while (v0 < v1 && (b[v0] == ' ' || b[v0] == '\t'))
            v0++;
        while (v1 > v0 && (b[v1 - 1] == ' ' || b[v1 - 1] == '\t'))
            v1--;
        for (size_t i = v0; i < v1; i++) {
            if (!mp_is_field_char((unsigned char)b[i])) {
                multipart_fail(error, "multipart part %d: control character in a header",
                               idx);
                goto out;
            }
        }
        char **slot = NULL;
        if (name_len == 19 && strncasecmp(b + p, "content-disposition", 19) == 0)
            slot = &disp;
        else if (name_len == 12 && strncasecmp(b + p, "content-type", 12) == 0)
            slot = &part->content_type;
        if (slot && *slot) {
            /* Two of either leave the part's meaning up to whichever one a reader
             * picks; refuse rather than choose. */
            multipart_fail(error, "multipart part %d: repeated %s header", idx,
                           slot == &disp ? "Content-Disposition" : "Content-Type");
            goto out;
        }
        if (slot) *slot = xstrndup(b + v0, v1 - v0);
        p = q + 2;
    }
    if (!disp) {
        multipart_fail(error, "multipart part %d has no Content-Disposition header", idx);
        goto out;
    }
    err = mp_disposition(disp, idx, part, error);
out:
    free(disp);
    return err;
}

int multipart_parse(const char *content_type_header, const char *body, size_t len,
                    struct multipart_part **parts, int32_t *n_parts, char **error)
{
    struct multipart_body m = {.b = body, .len = len};
    struct multipart_part *arr = NULL, cur = {0};
    int32_t n = 0, cap = 0;
    *parts = NULL;
    *n_parts = 0;
    if (error) *error = NULL;
    if (multipart_boundary(&m, content_type_header, error)) return -1;
    if (len > 0) CHECK(body != NULL);

    /* The first delimiter may open the body with no CRLF before it; otherwise it
     * ends a preamble, and its CRLF belongs to it like every later one's. */
    size_t pos, at;
    bool close;
    if (!mp_delim_at(&m, 0, &pos, &close) && !mp_find_delim(&m, 0, &at, &pos, &close)) {
        multipart_fail(error, "multipart body has no boundary delimiter line");
        goto fail;
    }
    while (!close) {
        if (n == MULTIPART_MAX_PARTS) {
            multipart_fail(error, "multipart body has more than %d parts",
                           MULTIPART_MAX_PARTS);
            goto fail;
        }
        if (multipart_headers(&m, &pos, n + 1, &cur, error)) goto fail;
        /* RFC 2046 makes a part's body optional (body-part := headers [CRLF
         * *OCTET]), and without one the CRLF that ends the header section is also
         * the next delimiter's: "name=a\r\n\r\n--boundary". */
        size_t data = pos;
        if (mp_delim_at(&m, data, &pos, &close)) {
            at = data;
        } else if (!mp_find_delim(&m, data, &at, &pos, &close)) {
            multipart_fail(error,
                           "multipart body ends before its closing boundary delimiter");
            goto fail;
        }
        cur.data = body + data;
        cur.len = at - data;
        if (n == cap) {
            cap = cap ? 2 * cap : 4;
            arr = xrealloc(arr, (size_t)cap * sizeof *arr);
        }
        arr[n++] = cur;
        memset(&cur, 0, sizeof cur);
    }
    *parts = arr;
    *n_parts = n;
    return 0;
fail:
    multipart_part_clear(&cur);
    multipart_free(arr, n);
    return -1;
}

void multipart_free(struct multipart_part *parts, int32_t n)
{
    if (!parts) return;
    for (int32_t i = 0; i < n; i++)
        multipart_part_clear(&parts[i]);
    free(parts);
}

const struct multipart_part *multipart_find(const struct multipart_part *parts, int32_t n,
                                            const char *name)
{
    for (int32_t i = 0; i < n; i++)
        if (strcmp(parts[i].name, name) == 0) return &parts[i];
    return NULL;
}
