/*
 * multipart.h - multipart/form-data body parsers (RFC 7578 over RFC 2046), for
 * POST /v1/files: a whole request body in, its parts out (multipart_parse, here), or
 * the body fed in pieces as it arrives, events out (multipart_stream.h). The two
 * accept the same bodies and refuse the others with the same messages.
 *
 * A pure module: no sockets, no clock, no state. The body is never copied, because
 * an uploaded batch file may be hundreds of megabytes; each part's data points into
 * the caller's buffer, and only the small strings from the part headers (name,
 * filename, content type) are heap copies.
 *
 * What it accepts: CRLF line ends only (every HTTP client sends them; accepting a
 * bare LF would let two parsers disagree on where a part ends), the boundary from
 * the request's Content-Type (token or quoted string, 1-70 RFC 2046 characters),
 * a preamble and an epilogue (ignored), per part a header section of at most
 * MULTIPART_MAX_HEADER_BYTES with "Content-Disposition: form-data; name=..."
 * (name required, filename optional, other parameters such as filename* ignored)
 * and an optional Content-Type; other part headers are ignored. The CRLF before each
 * delimiter belongs to the delimiter, not to the data, and a "--boundary" that is not
 * at the start of a line, or is followed by anything but "--", or at most
 * MULTIPART_MAX_PADDING spaces/tabs and CRLF, is data.
 *
 * Thread: any (no shared state).
 */
#ifndef H2O_SERVER_MULTIPART_H
#define H2O_SERVER_MULTIPART_H

#include <stddef.h>
#include <stdint.h>

/* More parts than this is an error: Files needs two, and the array should not grow
 * without bound on a hostile body. */
#define MULTIPART_MAX_PARTS 64
/* The header section of one part (its lines and the blank line that ends it). */
#define MULTIPART_MAX_HEADER_BYTES 8192
/* RFC 2046's limit on a boundary's length. */
#define MULTIPART_MAX_BOUNDARY 70
/* Transport padding (spaces and tabs between a boundary and its CRLF) a delimiter
 * line may carry. RFC 2046 forbids senders to add any and asks receivers to bear what
 * a mail transport added, which is a few bytes; the cap is what lets the streaming
 * parser hold back a bounded number of bytes (a delimiter still being matched)
 * however the body is cut. A line with more padding is data. */
#define MULTIPART_MAX_PADDING 64

/*
 * One part. The strings are NUL-terminated heap copies owned by the parts array
 * (multipart_free); name and filename are unquoted and unescaped. data points into
 * the body given to multipart_parse and is valid as long as that body is; it is not
 * NUL-terminated (it may hold NULs itself).
 */
struct multipart_part {
    char *name;         /* the form field name, never NULL or "" */
    char *filename;     /* NULL when the part has no filename parameter; may be "" */
    char *content_type; /* the part's Content-Type as sent (trimmed), or NULL */
    const char *data;   /* len bytes in the body */
    size_t len;
};

/*
 * Split `body` (len bytes, need not be NUL-terminated) into its parts, using the
 * boundary of `content_type_header` (the request's Content-Type value; NULL counts
 * as missing).
 *
 * Returns 0 with *parts (a heap array; NULL when there are none) and *n_parts, in
 * body order. A body holding only the close delimiter has no parts and is not an
 * error here: the caller reports the missing field it needed.
 * Returns -1 with *parts = NULL, *n_parts = 0 and, when `error` is not NULL, a
 * one-line message in *error (heap; caller frees) that names no user text, only
 * part numbers: the Content-Type is not multipart/form-data or has no valid
 * boundary, the body has no delimiter or ends before the close delimiter, a part
 * has no Content-Disposition (or one that is not form-data, or has no name), a
 * duplicate Content-Disposition or Content-Type, a malformed header line, a header
 * section over MULTIPART_MAX_HEADER_BYTES, or more than MULTIPART_MAX_PARTS parts.
 * Owns: the caller owns *parts and frees it with multipart_free.
 * Thread: any.
 */
int multipart_parse(const char *content_type_header, const char *body, size_t len,
                    struct multipart_part **parts, int32_t *n_parts, char **error);

/* Free the array from multipart_parse and its strings (not the body). NULL is a
 * no-op. Thread: any. */
void multipart_free(struct multipart_part *parts, int32_t n);

/* The first part whose name is `name` (compared exactly, as RFC 7578 field names
 * are case-sensitive), or NULL. The pointer lives as long as the array. A caller
 * that must reject a repeated field loops over the array itself. Thread: any. */
const struct multipart_part *multipart_find(const struct multipart_part *parts, int32_t n,
                                            const char *name);

#endif
