/*
 * files_upload.h - one POST /v1/files upload while its body streams in: the
 * multipart/form-data body in, in whatever pieces the HTTP layer reads
 * (multipart_stream.h); the file part's bytes out to the job store as they arrive
 * (jobstore_upload_write, in writes of up to FILES_UPLOAD_WRITE_BYTES, so the store is
 * not called per TCP segment); at the body's end the form's checks
 * (files_form_check), then the commit, or an abort that leaves nothing of the upload
 * in the store.
 *
 * Memory: the multipart parser's few KiB, one write buffer, and of each part its
 * name, filename and first bytes: never the file, whatever its size.
 *
 * The verdict is the one the whole body would get from multipart_parse, then
 * files_form_check, then the store, with the same statuses and messages: a
 * malformed body (400) first, then the form's checks in their order (400, 413), then
 * the store's errors. Fields may come in any order (the purpose after the file), so
 * the verdict waits for the body's end; but once the bytes seen already make the form
 * fail (a second file part, a purpose other than "batch", a filename the checks
 * refuse, a file past max_bytes, an empty one), nothing more goes to the store and
 * the store's upload is aborted at once.
 *
 * Thread: the store's owner (the server's loop).
 */
#ifndef H2O_SERVER_FILES_UPLOAD_H
#define H2O_SERVER_FILES_UPLOAD_H

#include "api_error.h"
#include "jobstore.h"

#include <stddef.h>
#include <stdint.h>

/* The most bytes of the file part buffered before one jobstore_upload_write. */
#define FILES_UPLOAD_WRITE_BYTES (64 * 1024)

struct files_upload;

/*
 * Start an upload into `js` of a body whose request Content-Type is `content_type`
 * (NULL: none), for a file of at most max_bytes. Returns the upload, the caller's
 * (files_upload_destroy), or NULL with *e set (400, multipart_parse's message) when
 * the Content-Type is not multipart/form-data with a valid boundary: a refusal the
 * request's head decides alone. Nothing is stored before the file's first bytes.
 * Thread: the store's owner.
 */
struct files_upload *files_upload_create(struct jobstore *js, const char *content_type,
                                         int64_t max_bytes, struct api_error *e);

/*
 * The next `len` bytes of the body. Nothing can fail here that the client is told
 * before the body's end: a malformed body, a form that fails its checks or a store
 * write that fails is recorded for files_upload_finish (and stops the store
 * writes). Thread: the store's owner.
 */
void files_upload_write(struct files_upload *up, const char *data, size_t len);

/*
 * The body ended: check it and commit the file. Call once. Returns 0 with *out
 * filled (caller deinits). Otherwise nothing of the upload remains in the store and
 * either e->status is set (the client's error: 400, or 413 for a file over
 * max_bytes; the return is -1), or the return is the job store's error code with
 * err_msg() saying why (reply_store_error answers it).
 * Thread: the store's owner.
 */
int files_upload_finish(struct files_upload *up, struct jobstore_file *out,
                        struct api_error *e);

/* Free the upload; one not committed is aborted (jobstore_upload_abort), so a body
 * cut short leaves nothing. NULL is a no-op. Thread: the store's owner. */
void files_upload_destroy(struct files_upload *up);

#endif
