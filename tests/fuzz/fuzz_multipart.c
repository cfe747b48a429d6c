/*
 * fuzz_multipart.c - libFuzzer target for multipart/form-data bodies (POST
 * /v1/files, server/multipart.c).
 *
 * Input: the request's Content-Type value up to the first LF, then the body. The
 * body is an exact-size heap copy without a NUL, so ASan catches a read past it.
 * Checks beyond the sanitizers: parts lie inside the body, in order and without
 * overlap, each with a non-empty name; a refusal leaves no parts and says why.
 */
#include "fuzz_util.h"
#include "multipart.h"

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
    }
    free(why);
    multipart_free(parts, n);
    free(body);
    free(ct);
    return 0;
}
