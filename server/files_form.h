/*
 * files_form.h - the form of POST /v1/files, checked: the parts of a
 * multipart/form-data body (multipart.h) in, the uploaded file part out, or the
 * error a client gets. Pure (no store, no sockets), so the fuzzer drives it straight
 * after the multipart parser; files_upload.c runs it on a streamed upload's parts.
 * Thread: any (no shared state).
 */
#ifndef H2O_SERVER_FILES_FORM_H
#define H2O_SERVER_FILES_FORM_H

#include "api_error.h"
#include "multipart.h"

#include <stdint.h>

/* The only purpose an upload may have (nothing here consumes another), and the
 * suffix the Batch API asks of the filename. */
#define FILES_FORM_PURPOSE "batch"
#define FILES_FORM_SUFFIX ".jsonl"

/*
 * The checks of an upload's fields, in the order a user would fix them: the form's
 * shape (one "file" part, one "purpose" part, no expires_after: files here never
 * expire, and accepting it would promise a deletion that never happens; other
 * fields are ignored), then purpose "batch", then the file part's filename (present,
 * ending in .jsonl in any case, valid UTF-8: it goes back out in JSON), then its
 * size (not empty, at most max_bytes). Returns the file part (one of parts), or NULL
 * with *e set: 400 naming the field, or 413 for a file over max_bytes.
 * Of the parts' data it reads only the purpose's, and that only when its len is
 * that of "batch"; of the rest, names, filenames and lens. So a caller that streamed
 * the parts elsewhere (files_upload.h) passes each with its true len and data
 * pointing at its first bytes, or NULL when it kept fewer than len.
 * Owns: nothing. Thread: any.
 */
const struct multipart_part *files_form_check(const struct multipart_part *parts, int32_t n,
                                              int64_t max_bytes, struct api_error *e);

#endif
