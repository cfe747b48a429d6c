/*
 * fuzz_multipart.c - libFuzzer target for the uploads of POST /v1/files:
 * multipart/form-data bodies (server/multipart.c), then the form check
 * (server/files_form.c) on the parts.
 *
 * Input: the request's Content-Type value up to the first LF, then the body. The
 * body is an exact-size heap copy without a NUL, so ASan catches a read past it.
 * Checks beyond the sanitizers: parts lie inside the body, in order and without
 * overlap, each with a non-empty name; a refusal leaves no parts and says why; the
 * form check returns one of the parts, a .jsonl upload within the limit, or a 400 /
 * 413 with a JSON error body.
 */
#include "files_form.h"
#include "fuzz_util.h"
#include "multipart.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *lf = memchr(data, '\n', size);
    const size_t ct_len = lf ? (size_t)(lf - data) : size;
    char *ct = malloc(ct_len + 1);
    memcpy(ct, data, ct_len);
    ct[ct_len] = '\0';
    const size_t len = lf ? size - ct_len - 1 : 0;
    char *body = malloc(len ? len : 1);
    if (len) memcpy(body, lf + 1, len);

    struct multipart_part *parts = (struct multipart_part *)1;
    int32_t n = -1;
    char *why = NULL;
    if (multipart_parse(ct, body, len, &parts, &n, &why)) {
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
