/*
 * fuzz_json.c - libFuzzer target for the JSON every POST body and Batch metadata goes
 * through: json_parse_checked (cJSON, built instrumented, plus the UTF-8 and NUL
 * checks), json_fault_say, and the POST /v1/batches body check (batch_create.h).
 *
 * Checks beyond the sanitizers: an accepted object holds only valid UTF-8 strings
 * without NUL, prints back to text the same checks accept; a refusal says where
 * (inside the text) and why in valid UTF-8; batch_create either fills every field
 * or answers 400 with a JSON error body.
 */
#include "batch_create.h"
#include "fuzz_util.h"

#include <stdbool.h>

/* Every string of the tree, member names included, clean. */
static void walk(const cJSON *j)
{
    for (; j; j = j->next) {
        if (j->string) REQUIRE(json_utf8_valid(j->string, strlen(j->string)));
        if (cJSON_IsString(j))
            REQUIRE(json_utf8_valid(j->valuestring, strlen(j->valuestring)));
        if (j->child) walk(j->child);
    }
}

static void check_parse(const char *text, size_t len)
{
    struct json_fault f;
    cJSON *j = json_parse_checked(text, len, &f);
    if (!j) {
        REQUIRE(f.kind != JSON_FAULT_NONE);
        REQUIRE(f.at <= len);
        char say[512];
        json_fault_say(&f, say, sizeof say);
        REQUIRE(json_utf8_valid(say, strlen(say)));
        REQUIRE(json_utf8_valid(f.path, strlen(f.path)));
        return;
    }
    REQUIRE(cJSON_IsObject(j));
    walk(j->child);
    /* What the server prints from it (metadata, echoed strings) is accepted again
     * and prints the same: a round trip loses nothing more. (cJSON_Compare cannot
     * judge this: it looks members up by name, so a key given twice fails it.) */
    size_t plen, plen2;
    char *printed = json_print(j, &plen);
    REQUIRE(printed && strlen(printed) == plen);
    cJSON *back = json_parse_checked(printed, plen, &f);
    REQUIRE(back != NULL);
    char *again = json_print(back, &plen2);
    REQUIRE(plen2 == plen && memcmp(again, printed, plen) == 0);
    free(again);
    cJSON_Delete(back);
    free(printed);
    cJSON_Delete(j);
}

static void check_batch_create(const char *text, size_t len)
{
    struct batch_create c;
    struct api_error e = {0};
    if (batch_create_parse(text, len, &c, &e)) {
        REQUIRE(e.status == 400 && e.message);
        REQUIRE(c.input_file_id == NULL && c.endpoint == NULL && c.metadata == NULL);
        size_t n;
        char *body = api_error_json(&e, &n);
        fuzz_require_json(body, n);
        free(body);
        api_error_clear(&e);
        return;
    }
    REQUIRE(e.status == 0);
    REQUIRE(c.input_file_id && *c.input_file_id);
    REQUIRE(strcmp(c.endpoint, "/v1/completions") == 0 ||
            strcmp(c.endpoint, "/v1/chat/completions") == 0);
    if (c.metadata) fuzz_require_json(c.metadata, strlen(c.metadata));
    batch_create_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy without a NUL: the parsers take lengths, and ASan then
     * catches any read past them. */
    char *text = malloc(size ? size : 1);
    memcpy(text, data, size);
    check_parse(text, size);
    check_batch_create(text, size);
    free(text);
    return 0;
}
