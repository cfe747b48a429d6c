/*
 * fuzz_util.h - what the libFuzzer targets share: the entry point's prototypes and a
 * contract check that aborts, which libFuzzer reports as a crash with its input.
 * Thread: the fuzzer's (one).
 */
#ifndef H2O_FUZZ_UTIL_H
#define H2O_FUZZ_UTIL_H

#include "json.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(cond)                                                                      \
    do {                                                                                   \
        if (!(cond)) abort();                                                              \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Text the server sends must be one JSON value (cJSON's own parser, the strict one
 * of json.h) and valid UTF-8. */
static inline void fuzz_require_json(const char *s, size_t len)
{
    REQUIRE(s != NULL && strlen(s) == len);
    REQUIRE(json_utf8_valid(s, len));
    struct json_fault f;
    cJSON *j = json_parse_checked(s, len, &f);
    REQUIRE(j != NULL);
    cJSON_Delete(j);
}

#endif
