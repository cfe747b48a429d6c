/*
 * files_form.c - the POST /v1/files form check (files_form.h).
 */
#include "files_form.h"

#include "json.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

static bool part_equals(const struct multipart_part *p, const char *s)
{
    const size_t n = strlen(s);
    return p->len == n && memcmp(p->data, s, n) == 0;
}

static bool ends_with_ci(const char *s, const char *suffix)
{
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

const struct multipart_part *files_form_check(const struct multipart_part *parts, int32_t n,
                                              int64_t max_bytes, struct api_error *e)
{
    const struct multipart_part *file = NULL, *purpose = NULL;
    for (int32_t i = 0; i < n; i++) {
        const struct multipart_part *p = &parts[i];
        const struct multipart_part **slot = NULL;
        if (strcmp(p->name, "file") == 0)
            slot = &file;
        else if (strcmp(p->name, "purpose") == 0)
            slot = &purpose;
        if (slot) {
            /* Two files or two purposes: which one did the client mean? */
            if (*slot) {
                API_BAD_VALUE(e, p->name, "The '%s' field appears more than once", p->name);
                return NULL;
            }
            *slot = p;
        } else if (strncmp(p->name, "expires_after", 13) == 0) {
            /* Files here never expire; accepting the field silently would promise
             * a deletion that never happens. Other unknown fields are ignored. */
            API_BAD_VALUE(
                e, "expires_after",
                "expires_after is not supported: files on this server do not expire");
            return NULL;
        }
    }
    if (!file) {
        API_BAD_VALUE(e, "file", "Missing required parameter: 'file'");
        return NULL;
    }
    if (!purpose) {
        API_BAD_VALUE(e, "purpose", "Missing required parameter: 'purpose'");
        return NULL;
    }
    if (!part_equals(purpose, FILES_FORM_PURPOSE)) {
        API_BAD_VALUE(e, "purpose",
                      "Invalid value for 'purpose': this server accepts only '%s'",
                      FILES_FORM_PURPOSE);
        return NULL;
    }
    if (!file->filename) {
        API_BAD_VALUE(e, "file",
                      "The 'file' field must be a file upload (a part with a filename)");
        return NULL;
    }
    if (!ends_with_ci(file->filename, FILES_FORM_SUFFIX)) {
        API_BAD_VALUE(
            e, "file",
            "Invalid file format for the Batch API: the filename must end in '%s'",
            FILES_FORM_SUFFIX);
        return NULL;
    }
    /* The name goes back out in JSON, which must be UTF-8. */
    if (!json_utf8_valid(file->filename, strlen(file->filename))) {
        API_BAD_VALUE(e, "file", "The filename is not valid UTF-8");
        return NULL;
    }
    if (file->len == 0) {
        API_BAD_VALUE(e, "file", "The file is empty");
        return NULL;
    }
    if ((uint64_t)file->len > (uint64_t)max_bytes) {
        api_error_set(
            e, 413, API_ERR_INVALID, "file", NULL,
            "The file is %zu bytes; this server accepts files of at most %lld bytes",
            file->len, (long long)max_bytes);
        return NULL;
    }
    return file;
}
