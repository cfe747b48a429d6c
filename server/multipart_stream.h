/*
 * multipart_stream.h - the streaming multipart/form-data parser: a body fed in pieces
 * cut anywhere (as the HTTP layer reads them), events out as soon as the bytes
 * decide them: a part begins (its name, filename and content type), a piece of its
 * data, the part ends, the body ends (the close delimiter).
 *
 * It accepts exactly the bodies multipart_parse (multipart.h) accepts, with the same
 * parts, and refuses the others with the same one-line message, wherever the body is
 * cut: the boundary and the part headers are read by the same code
 * (multipart_impl.h), and a delimiter is matched byte by byte by the rules of the
 * whole-body parser. The unit tests hold the two to that at every split point.
 *
 * Memory: the parser holds back only the bytes of a delimiter still being matched,
 * at most MULTIPART_STREAM_HOLD_MAX (the "\r\n--boundary" line with its padding),
 * and one part's header section (at most MULTIPART_MAX_HEADER_BYTES); a part's data
 * goes out as it arrives, so a body of any size costs about 9 KiB. A data piece
 * points into the fed buffer or into that held-back line, and is valid only during
 * the callback.
 *
 * Thread: any; one stream belongs to one thread at a time.
 */
#ifndef H2O_SERVER_MULTIPART_STREAM_H
#define H2O_SERVER_MULTIPART_STREAM_H

#include "multipart.h"

#include <stddef.h>
#include <stdint.h>

/* The most bytes held back between feeds: "\r\n--" + boundary, then the padding and
 * the CR of a delimiter line whose LF has not arrived yet. */
#define MULTIPART_STREAM_HOLD_MAX (4 + MULTIPART_MAX_BOUNDARY + MULTIPART_MAX_PADDING + 1)

/*
 * What a stream tells its owner, in body order. Any callback may be NULL. After an
 * error no callback is called again: a part that began may then never end.
 */
struct multipart_stream_sink {
    /* A part begins. part->name, filename and content_type are as multipart_parse
     * gives them (data NULL, len 0) and live until part_end returns, or until the
     * stream is destroyed after an error. */
    void (*part_begin)(void *ctx, const struct multipart_part *part);
    /* The next len (> 0) bytes of the part's data; valid during the call only. */
    void (*part_data)(void *ctx, const char *data, size_t len);
    /* The part's data ended (its delimiter was read). */
    void (*part_end)(void *ctx);
    /* The close delimiter was read: the body is complete and whatever follows is the
     * epilogue, ignored. */
    void (*end)(void *ctx);
};

struct multipart_stream;

/*
 * A stream for a body whose request Content-Type value is `content_type` (NULL
 * counts as missing). The sink is copied; ctx is passed to each callback.
 * Returns 0 with *out (the caller's: multipart_stream_destroy), or -1 with *out NULL
 * and, when `error` is not NULL, multipart_parse's message for that Content-Type in
 * *error (heap; caller frees). Thread: any.
 */
int multipart_stream_create(struct multipart_stream **out, const char *content_type,
                            const struct multipart_stream_sink *sink, void *ctx,
                            char **error);

/*
 * Parse the next `len` bytes of the body (len 0 is allowed), calling the sink for
 * what they decide. Returns 0, or -1 once the body is known to be malformed (then
 * multipart_stream_error says why, and every later feed returns -1 at once). Bytes
 * after the close delimiter are ignored. Nothing points into `data` afterwards.
 * Thread: the stream's.
 */
int multipart_stream_feed(struct multipart_stream *s, const char *data, size_t len);

/*
 * The body ended. Returns 0 when it was complete (the close delimiter was read),
 * else -1 with the message multipart_parse gives for a body cut there (or the
 * earlier error). Thread: the stream's.
 */
int multipart_stream_finish(struct multipart_stream *s);

/* Why the body was refused: a one-line message naming no user text, only part
 * numbers (as multipart_parse's), owned by the stream; NULL while there is no
 * error. Thread: the stream's. */
const char *multipart_stream_error(const struct multipart_stream *s);

/* Free the stream and the part it was reading. NULL is a no-op. Thread: the
 * stream's. */
void multipart_stream_destroy(struct multipart_stream *s);

#endif
