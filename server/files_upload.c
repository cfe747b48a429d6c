/*
 * files_upload.c - one POST /v1/files upload while its body streams in
 * (files_upload.h): a multipart stream whose events feed the job store and a summary
 * of the form.
 *
 * Owns: the multipart stream, the store's upload until it is committed or aborted,
 * the write buffer, and the summary: each part as files_form_check reads it (name,
 * filename, length, and its first FORM_KEEP bytes as data, which is all the check
 * reads of a part: the purpose's value "batch").
 *
 * Why the summary is enough: files_form_check reads a part's data only to compare
 * the purpose with "batch", and only when the lengths match; everything else it
 * reads is a name, a filename or a length. So the check at the end, on the summary,
 * gives exactly the verdict it gives on the whole body's parts.
 *
 * Early stops: stop_storing() ends the store's part of an upload the form will fail
 * whatever follows (each call site says which check makes that certain). The answer
 * still comes from files_form_check at the end, so an early stop can only save work,
 * never change what the client is told; files_upload_finish checks that it agrees.
 * Thread: the store's owner.
 */
#include "files_upload.h"

#include "files_form.h"
#include "multipart_stream.h"

#include "err.h"
#include "util.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of each part kept for the form check: more than "batch". */
#define FORM_KEEP 16

struct files_upload {
    struct jobstore *js;
    int64_t max_bytes;
    struct multipart_stream *mp;
    bool malformed; /* the stream refused the body (multipart_stream_error says why) */

    /* The form so far, as files_form_check reads it. */
    struct multipart_part parts[MULTIPART_MAX_PARTS];
    char values[MULTIPART_MAX_PARTS][FORM_KEEP]; /* each part's first bytes */
    int32_t n;
    int32_t file;      /* the first part named "file", or -1 */
    bool have_purpose; /* a part named "purpose" began */

    struct jobstore_upload *u; /* begun with the file's first write */
    char *buf;                 /* [FILES_UPLOAD_WRITE_BYTES]: the file's next bytes */
    size_t fill;
    bool stopped;    /* the form fails whatever follows: nothing more is stored */
    int store_err;   /* a store call failed: its code, and its message */
    char *store_msg; /*   (err_msg() is the thread's and would be overwritten) */
};

/* Nothing more goes to the store; what went is dropped. */
static void stop_storing(struct files_upload *up)
{
    up->stopped = true;
    jobstore_upload_abort(up->u);
    up->u = NULL;
    up->fill = 0;
}

/* The file's buffered bytes to the store, beginning the store's upload with the
 * first of them. A failure is kept for the verdict, which it comes after (the form's
 * checks first, as when the whole body was stored at once). */
static void flush(struct files_upload *up)
{
    if (up->fill == 0 || up->stopped || up->store_err) return;
    int err = up->u ? 0 : jobstore_upload_begin(up->js, &up->u);
    if (!err) err = jobstore_upload_write(up->u, up->buf, up->fill);
    up->fill = 0;
    if (!err) return;
    up->store_err = err;
    up->store_msg = xstrdup(err_msg());
    jobstore_upload_abort(up->u);
    up->u = NULL;
}

/*
 * Whether part p fails the checks of its own field whatever the rest of the form
 * holds: files_form_check on p beside a valid stand-in for the other required field,
 * so that no rule is written twice.
 */
static bool fails_alone(const struct files_upload *up, const struct multipart_part *p)
{
    static const struct multipart_part purpose = {.name = (char *)"purpose",
                                                  .data = FILES_FORM_PURPOSE,
                                                  .len = sizeof FILES_FORM_PURPOSE - 1};
    static const struct multipart_part file = {.name = (char *)"file",
                                               .filename = (char *)"x" FILES_FORM_SUFFIX,
                                               .data = "x",
                                               .len = 1};
    const struct multipart_part form[2] = {*p,
                                           strcmp(p->name, "file") == 0 ? purpose : file};
    struct api_error e = {0};
    const bool fails = files_form_check(form, 2, up->max_bytes, &e) == NULL;
    api_error_clear(&e);
    return fails;
}

static void on_part_begin(void *ctx, const struct multipart_part *part)
{
    struct files_upload *up = ctx;
    /* The stream refuses a part past MULTIPART_MAX_PARTS before it begins. */
    CHECK(up->n < MULTIPART_MAX_PARTS);
    struct multipart_part *p = &up->parts[up->n];
    p->name = xstrdup(part->name);
    p->filename = part->filename ? xstrdup(part->filename) : NULL;
    p->data = up->values[up->n];
    const int32_t idx = up->n++;
    /* The form's shape: a second file or purpose, or expires_after, fails it. */
    const bool is_file = strcmp(p->name, "file") == 0;
    const bool is_purpose = strcmp(p->name, "purpose") == 0;
    if ((is_file && up->file >= 0) || (is_purpose && up->have_purpose) ||
        strncmp(p->name, "expires_after", 13) == 0)
        stop_storing(up);
    up->have_purpose |= is_purpose;
    if (is_file && up->file < 0) {
        up->file = idx;
        /* The filename's checks, on the part as if it held one byte. */
        struct multipart_part probe = *p;
        probe.len = 1;
        if (fails_alone(up, &probe)) stop_storing(up);
    }
}

static void on_part_data(void *ctx, const char *data, size_t len)
{
    struct files_upload *up = ctx;
    const int32_t idx = up->n - 1;
    struct multipart_part *p = &up->parts[idx];
    if (p->len < FORM_KEEP)
        memcpy(up->values[idx] + p->len, data, MIN(len, FORM_KEEP - p->len));
    p->len += len;
    /* Past FORM_KEEP the value is not kept: nothing may read it (files_form.h). */
    p->data = p->len <= FORM_KEEP ? up->values[idx] : NULL;
    if (idx != up->file || up->stopped || up->store_err) return;
    if ((uint64_t)p->len > (uint64_t)up->max_bytes) {
        stop_storing(up); /* the size check's 413, unless an earlier check fails */
        return;
    }
    while (len) {
        const size_t k = MIN(len, (size_t)FILES_UPLOAD_WRITE_BYTES - up->fill);
        memcpy(up->buf + up->fill, data, k);
        up->fill += k;
        data += k;
        len -= k;
        if (up->fill == FILES_UPLOAD_WRITE_BYTES) flush(up);
    }
}

static void on_part_end(void *ctx)
{
    struct files_upload *up = ctx;
    const struct multipart_part *p = &up->parts[up->n - 1];
    if (up->n - 1 == up->file) flush(up);
    /* An empty file, a purpose other than "batch". */
    if ((up->n - 1 == up->file || strcmp(p->name, "purpose") == 0) && fails_alone(up, p))
        stop_storing(up);
}

static const struct multipart_stream_sink upload_sink = {
    .part_begin = on_part_begin,
    .part_data = on_part_data,
    .part_end = on_part_end,
};

struct files_upload *files_upload_create(struct jobstore *js, const char *content_type,
                                         int64_t max_bytes, struct api_error *e)
{
    struct files_upload *up = xcalloc(1, sizeof *up);
    char *why = NULL;
    if (multipart_stream_create(&up->mp, content_type, &upload_sink, up, &why)) {
        /* The parser's message names no user text, so it can go back as is. */
        api_error_set(e, 400, API_ERR_INVALID, NULL, NULL, "%s",
                      why ? why : "malformed multipart body");
        free(why);
        free(up);
        return NULL;
    }
    up->js = js;
    up->max_bytes = max_bytes;
    up->file = -1;
    up->buf = xmalloc(FILES_UPLOAD_WRITE_BYTES);
    return up;
}

void files_upload_write(struct files_upload *up, const char *data, size_t len)
{
    if (up->malformed) return;
    if (multipart_stream_feed(up->mp, data, len)) {
        up->malformed = true;
        stop_storing(up); /* multipart_parse's 400 comes before any other check */
    }
}

int files_upload_finish(struct files_upload *up, struct jobstore_file *out,
                        struct api_error *e)
{
    if (!up->malformed && multipart_stream_finish(up->mp)) up->malformed = true;
    if (up->malformed) {
        stop_storing(up);
        return api_error_set(e, 400, API_ERR_INVALID, NULL, NULL, "%s",
                             multipart_stream_error(up->mp));
    }
    const struct multipart_part *file =
        files_form_check(up->parts, up->n, up->max_bytes, e);
    if (!file) {
        stop_storing(up);
        return -1;
    }
    if (up->stopped) {
        /* An early stop the check does not confirm is this file's bug, not the
         * client's: say so rather than store a file with bytes missing. */
        return err_set(ENG_EIO, "upload: stopped early for a form that passed its checks");
    }
    if (up->store_err) return err_set(up->store_err, "%s", up->store_msg);
    /* A file of one byte or more went to the store at its part's end. */
    CHECK(file == &up->parts[up->file] && up->u != NULL);
    struct jobstore_upload *u = up->u;
    up->u = NULL;
    return jobstore_upload_commit(u, file->filename, FILES_FORM_PURPOSE, out);
}

void files_upload_destroy(struct files_upload *up)
{
    if (!up) return;
    jobstore_upload_abort(up->u);
    multipart_stream_destroy(up->mp);
    for (int32_t i = 0; i < up->n; i++) {
        free(up->parts[i].name);
        free(up->parts[i].filename);
    }
    free(up->buf);
    free(up->store_msg);
    free(up);
}
