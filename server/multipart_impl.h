/*
 * multipart_impl.h - what the whole-body parser (multipart.c) shares with the
 * streaming one (multipart_stream.c): the boundary from the Content-Type and the
 * reading of one part's header section. Both parsers call the same code on the same
 * bytes, so they accept the same bodies and word their refusals alike.
 *
 * Private to the multipart files; the rest of the server sees multipart.h and
 * multipart_stream.h only.
 * Thread: any (no shared state).
 */
#ifndef H2O_SERVER_MULTIPART_IMPL_H
#define H2O_SERVER_MULTIPART_IMPL_H

#include "multipart.h"

#include <stddef.h>
#include <stdint.h>

/* A view of body bytes (b, len: need not be NUL-terminated) and the delimiter of
 * the body's boundary. delim is "\r\n--" + boundary: the form every delimiter but a
 * first one at the body's offset 0 takes. */
struct multipart_body {
    const char *b;
    size_t len;
    char delim[4 + MULTIPART_MAX_BOUNDARY + 1];
    size_t delim_len;
};

/* Set *error (when error is not NULL) to the formatted one-line message (heap;
 * caller frees) and return -1. Thread: any. */
int multipart_fail(char **error, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Read the boundary from the request's Content-Type value `ct` (NULL counts as
 * missing) into m->delim and m->delim_len. Returns 0, or -1 with *error set: not
 * multipart/form-data, a malformed header, no boundary, two, or one that breaks
 * RFC 2046's rules. Thread: any.
 */
int multipart_boundary(struct multipart_body *m, const char *ct, char **error);

/*
 * Read the header section of part `idx` (1-based, for messages) that starts at *pos
 * of m->b and fill `part`'s name, filename and content_type (heap strings the part
 * owns: multipart_part_clear); *pos moves past the blank line that ends it. It reads
 * at most MULTIPART_MAX_HEADER_BYTES from *pos and, where m->len comes before that
 * and before the blank line, reports the body's end. Returns 0, or -1 with *error
 * set (the part's strings may be partly filled: clear them). Thread: any.
 */
int multipart_headers(const struct multipart_body *m, size_t *pos, int32_t idx,
                      struct multipart_part *part, char **error);

/* Free a part's strings and zero it. Thread: any. */
void multipart_part_clear(struct multipart_part *p);

#endif
