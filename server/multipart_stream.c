/*
 * multipart_stream.c - the streaming multipart/form-data parser
 * (multipart_stream.h): a state machine over the body's bytes, in four phases:
 * the preamble (dropped), a part's header section (buffered, then read by
 * multipart_headers), a part's data (emitted), the epilogue (ignored).
 *
 * Owns: the held-back bytes of a delimiter being matched, the header section being
 * read, the part being read (its strings) and the error message.
 *
 * How a delimiter is found without the whole body: multipart.c looks for
 * "\r\n--boundary" with memmem and then checks what follows (mp_delim_at); a
 * candidate that fails restarts the search one byte later. Here the same candidate
 * is matched one byte at a time. Because '\r' occurs in "\r\n--boundary" only at its
 * start (a boundary holds no CR or LF), and the padding, dash or CR after it are
 * not '\r' either, a failed candidate never hides the start of another inside its
 * bytes: they are all data, and matching restarts at the byte that failed it. That
 * byte is the only one looked at twice, so the cost is linear. At the start of a
 * part's data (and of the body) multipart.c also accepts "--boundary" with no CRLF
 * before it; the match then simply starts with the CRLF counted as matched.
 *
 * How a header section is read without the whole body: its bytes are buffered until
 * they decide multipart_headers's result, which is once a line ends in something
 * other than CRLF, or the blank line ends, or the buffer holds
 * MULTIPART_MAX_HEADER_BYTES (that function never reads further). It then runs on
 * the buffer exactly as it would on the whole body.
 *
 * Invariants: hold_len <= MULTIPART_STREAM_HOLD_MAX, and held bytes are always a
 * prefix of a delimiter line; hdr_len <= MULTIPART_MAX_HEADER_BYTES; in_part exactly
 * when part_begin was called and part_end not yet.
 * Thread: the stream's owner.
 */
#include "multipart_stream.h"

#include "multipart_impl.h"

#include "util.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum phase {
    PHASE_PREAMBLE, /* before the first delimiter: bytes are dropped */
    PHASE_HEADERS,  /* a part's header section, into hdr */
    PHASE_DATA,     /* a part's data, emitted until its delimiter */
    PHASE_EPILOGUE, /* after the close delimiter: bytes are ignored */
    PHASE_FAILED,   /* error set; nothing more is parsed */
};

/* Where a delimiter candidate is once "\r\n--boundary" has matched (mp_delim_at's
 * checks, in its order). */
enum after {
    AFTER_NONE,  /* still matching "\r\n--boundary" */
    AFTER_START, /* the boundary matched: "--", padding or CR may follow */
    AFTER_DASH,  /* one '-': a second makes the close delimiter */
    AFTER_PAD,   /* n_pad bytes of padding: more, or CR */
    AFTER_CR,    /* CR after the padding: LF makes the delimiter */
};

/* What one byte does to a candidate. */
enum step {
    STEP_MORE,  /* the byte is part of the candidate, still undecided */
    STEP_FAIL,  /* the candidate is not a delimiter; the byte is not consumed */
    STEP_DELIM, /* a delimiter line ended with this byte */
    STEP_CLOSE, /* a close delimiter ended with this byte */
};

struct multipart_stream {
    struct multipart_body mb; /* the delimiter; b/len view hdr when it is parsed */
    struct multipart_stream_sink sink;
    void *ctx;
    enum phase phase;

    /* The delimiter candidate: `match` bytes of mb.delim matched, then `after`. */
    size_t match;
    enum after after;
    size_t n_pad;
    char hold[MULTIPART_STREAM_HOLD_MAX]; /* the candidate's bytes as they came */
    size_t hold_len;

    char *hdr; /* [MULTIPART_MAX_HEADER_BYTES], made at the first header section */
    size_t hdr_len;
    size_t line_start; /* where hdr's current line starts */
    size_t line_end;   /* its first CR or LF, or SIZE_MAX before one */

    struct multipart_part part; /* the part being read (its strings) */
    bool in_part;
    int32_t n_parts; /* parts whose data ended */
    char *error;
};

int multipart_stream_create(struct multipart_stream **out, const char *content_type,
                            const struct multipart_stream_sink *sink, void *ctx,
                            char **error)
{
    *out = NULL;
    if (error) *error = NULL;
    struct multipart_stream *s = xcalloc(1, sizeof *s);
    if (multipart_boundary(&s->mb, content_type, error)) {
        free(s);
        return -1;
    }
    if (sink) s->sink = *sink;
    s->ctx = ctx;
    s->phase = PHASE_PREAMBLE;
    /* The body may open with "--boundary": the CRLF before it counts as matched. */
    s->match = 2;
    *out = s;
    return 0;
}

void multipart_stream_destroy(struct multipart_stream *s)
{
    if (!s) return;
    multipart_part_clear(&s->part);
    free(s->hdr);
    free(s->error);
    free(s);
}

const char *multipart_stream_error(const struct multipart_stream *s)
{
    return s->error;
}

/* Record the error (once) and stop; returns -1. The message was made by
 * multipart_fail, or by multipart_headers into `msg`, which is taken. */
static int stream_fail(struct multipart_stream *s, char *msg)
{
    if (s->phase != PHASE_FAILED) {
        s->phase = PHASE_FAILED;
        s->error = msg ? msg : xstrdup("malformed multipart body");
    } else {
        free(msg);
    }
    return -1;
}

/* Data of the part being read (nothing outside a part: the preamble). */
static void emit(struct multipart_stream *s, const char *data, size_t len)
{
    if (len && s->phase == PHASE_DATA && s->sink.part_data)
        s->sink.part_data(s->ctx, data, len);
}

/* Forget the candidate; the next one starts at a CR. */
static void candidate_reset(struct multipart_stream *s)
{
    s->match = 0;
    s->after = AFTER_NONE;
    s->n_pad = 0;
    s->hold_len = 0;
}

/* One byte of a candidate delimiter line, by mp_delim_at's rules: after the
 * boundary, "--" closes; else at most MULTIPART_MAX_PADDING spaces or tabs, then
 * CRLF. */
static enum step candidate_step(struct multipart_stream *s, char c)
{
    switch (s->after) {
    case AFTER_NONE:
        if (c != s->mb.delim[s->match]) return STEP_FAIL;
        s->hold[s->hold_len++] = c;
        if (++s->match == s->mb.delim_len) s->after = AFTER_START;
        return STEP_MORE;
    case AFTER_START:
        if (c == '-') {
            s->hold[s->hold_len++] = c;
            s->after = AFTER_DASH;
            return STEP_MORE;
        }
        /* This byte is the first of the padding, or what ends it. */
        s->after = AFTER_PAD;
        /* fall through */
    case AFTER_PAD:
        if ((c == ' ' || c == '\t') && s->n_pad < MULTIPART_MAX_PADDING) {
            s->hold[s->hold_len++] = c;
            s->n_pad++;
            return STEP_MORE;
        }
        if (c != '\r') return STEP_FAIL;
        s->hold[s->hold_len++] = c;
        s->after = AFTER_CR;
        return STEP_MORE;
    case AFTER_DASH: return c == '-' ? STEP_CLOSE : STEP_FAIL;
    case AFTER_CR: return c == '\n' ? STEP_DELIM : STEP_FAIL;
    }
    return STEP_FAIL;
}

/* Start reading a part's header section (after a delimiter that is not the close
 * one), unless that would be one part too many. */
static int headers_start(struct multipart_stream *s)
{
    if (s->n_parts == MULTIPART_MAX_PARTS) {
        char *msg = NULL;
        multipart_fail(&msg, "multipart body has more than %d parts", MULTIPART_MAX_PARTS);
        return stream_fail(s, msg);
    }
    if (!s->hdr) s->hdr = xmalloc(MULTIPART_MAX_HEADER_BYTES);
    s->phase = PHASE_HEADERS;
    s->hdr_len = s->line_start = 0;
    s->line_end = SIZE_MAX;
    return 0;
}

/* A delimiter line was read in the preamble or at the end of a part's data. */
static int delimiter(struct multipart_stream *s, bool close)
{
    candidate_reset(s);
    if (s->phase == PHASE_DATA) {
        s->in_part = false;
        if (s->sink.part_end) s->sink.part_end(s->ctx);
        multipart_part_clear(&s->part);
        s->n_parts++;
    }
    if (!close) return headers_start(s);
    s->phase = PHASE_EPILOGUE;
    if (s->sink.end) s->sink.end(s->ctx);
    return 0;
}

/*
 * The preamble or a part's data: emit what cannot belong to a delimiter, match the
 * rest. *used: the bytes used (all of them unless a delimiter line ended inside).
 * Returns 0, or -1 after an error.
 */
static int scan_data(struct multipart_stream *s, const char *in, size_t n, size_t *used)
{
    size_t i = 0, run = 0; /* in[run, i) is data not yet emitted */
    while (i < n) {
        if (s->match == 0) {
            /* No candidate: everything up to the next CR is data. */
            const char *cr = memchr(in + i, '\r', n - i);
            i = cr ? (size_t)(cr - in) : n;
            emit(s, in + run, i - run);
            run = i;
            if (!cr) break;
        }
        const enum step st = candidate_step(s, in[i]);
        if (st == STEP_MORE) {
            run = ++i; /* held, emitted only if the candidate fails */
            continue;
        }
        if (st == STEP_FAIL) {
            /* The held bytes were data after all; in[i] starts afresh. */
            emit(s, s->hold, s->hold_len);
            candidate_reset(s);
            continue;
        }
        *used = i + 1;
        return delimiter(s, st == STEP_CLOSE);
    }
    emit(s, in + run, i - run);
    *used = n;
    return 0;
}

/* The header section is decided: read it with multipart_headers and begin the part. */
static int headers_end(struct multipart_stream *s)
{
    s->mb.b = s->hdr;
    s->mb.len = s->hdr_len;
    size_t pos = 0;
    char *msg = NULL;
    if (multipart_headers(&s->mb, &pos, s->n_parts + 1, &s->part, &msg)) {
        multipart_part_clear(&s->part);
        return stream_fail(s, msg);
    }
    /* Decided on a blank line, which ends the buffer: multipart_headers stops there. */
    CHECK(pos == s->hdr_len);
    s->phase = PHASE_DATA;
    s->in_part = true;
    /* A part may have no data: "--boundary" right after the blank line. */
    s->match = 2;
    if (s->sink.part_begin) s->sink.part_begin(s->ctx, &s->part);
    return 0;
}

/*
 * A header section, byte by byte until its bytes decide it: a line's first CR or LF
 * and the byte after it are either CRLF ending a non-empty line (go on), CRLF alone
 * on its line (the end), or anything else (an error); and MULTIPART_MAX_HEADER_BYTES
 * bytes decide it too. *used: the bytes used. Returns 0, or -1 after an error.
 */
static int scan_headers(struct multipart_stream *s, const char *in, size_t n, size_t *used)
{
    for (size_t i = 0; i < n; i++) {
        const char c = in[i];
        s->hdr[s->hdr_len++] = c;
        bool decided = s->hdr_len == MULTIPART_MAX_HEADER_BYTES;
        if (s->line_end == SIZE_MAX) {
            if (c == '\r' || c == '\n') s->line_end = s->hdr_len - 1;
        } else if (s->hdr_len == s->line_end + 2) {
            const bool crlf = s->hdr[s->line_end] == '\r' && c == '\n';
            if (!crlf || s->line_end == s->line_start) {
                decided = true;
            } else {
                s->line_start = s->hdr_len;
                s->line_end = SIZE_MAX;
            }
        }
        if (decided) {
            *used = i + 1;
            return headers_end(s);
        }
    }
    *used = n;
    return 0;
}

int multipart_stream_feed(struct multipart_stream *s, const char *data, size_t len)
{
    if (len > 0) CHECK(data != NULL);
    size_t off = 0;
    while (off < len) {
        size_t used = 0;
        int err = 0;
        switch (s->phase) {
        case PHASE_PREAMBLE:
        case PHASE_DATA: err = scan_data(s, data + off, len - off, &used); break;
        case PHASE_HEADERS: err = scan_headers(s, data + off, len - off, &used); break;
        case PHASE_EPILOGUE: return 0;
        case PHASE_FAILED: return -1;
        }
        if (err) return -1;
        off += used;
    }
    return s->phase == PHASE_FAILED ? -1 : 0;
}

/* The message multipart_headers gives for the header section buffered so far with
 * the body ending after it (heap), or NULL if it gives none. */
static char *headers_cut(struct multipart_stream *s)
{
    s->mb.b = s->hdr;
    s->mb.len = s->hdr_len;
    size_t pos = 0;
    struct multipart_part part = {0};
    char *msg = NULL;
    if (multipart_headers(&s->mb, &pos, s->n_parts + 1, &part, &msg) == 0) {
        free(msg);
        msg = NULL;
    }
    multipart_part_clear(&part);
    return msg;
}

int multipart_stream_finish(struct multipart_stream *s)
{
    char *msg = NULL;
    switch (s->phase) {
    case PHASE_EPILOGUE: return 0;
    case PHASE_FAILED: return -1;
    case PHASE_PREAMBLE:
        multipart_fail(&msg, "multipart body has no boundary delimiter line");
        break;
    case PHASE_HEADERS:
        /* Cut inside a header section: an earlier bad line, or the body's end. An
         * undecided section never reads as complete, but the end is named anyway. */
        msg = headers_cut(s);
        if (!msg)
            multipart_fail(&msg,
                           "multipart body ends before its closing boundary delimiter");
        break;
    case PHASE_DATA:
        multipart_fail(&msg, "multipart body ends before its closing boundary delimiter");
        break;
    }
    return stream_fail(s, msg);
}
