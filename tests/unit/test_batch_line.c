/*
 * test_batch_line.c - the Batch input line, as both ways in (the Batches API's check,
 * batch_check.c, and `h2oserve run-batch`) read it: the codes of bad lines, hostile
 * strings named by their member, and output lines that are always valid UTF-8.
 */
#include "batch_line.h"

#include "json.h"
#include "test.h"
#include "util.h"

#include <string.h>

#define EP "/v1/completions"
#define GOOD_BODY "\"body\":{\"model\":\"m\",\"prompt\":\"hi\"}"
#define REQ "\"method\":\"POST\",\"url\":\"" EP "\","

/* One line: the code expected (NULL: a request), its param ("" none), and the
 * custom_id the parser hands back (NULL: none). */
struct line_case {
    const char *text;
    size_t len; /* 0: strlen */
    const char *code, *param, *custom_id;
};

static const struct line_case cases[] = {
    {"{\"custom_id\":\"a\"," REQ GOOD_BODY "}", 0, NULL, "", "a"},
    /* a key given twice takes its last value, as the body's fields do */
    {"{\"custom_id\":\"a\",\"custom_id\":\"b\"," REQ GOOD_BODY "}", 0, NULL, "", "b"},
    {"{\"custom_id\":\"a\"," REQ GOOD_BODY "} \r\n", 0, NULL, "", "a"},
    /* not one JSON object */
    {"not json", 0, "invalid_json", "", NULL},
    {"{\"custom_id\":\"a\"," REQ GOOD_BODY "}{}", 0, "invalid_json", "", NULL},
    {"{\"custom_id\":\"a\"," REQ GOOD_BODY "} x", 0, "invalid_json", "", NULL},
    {"{\"custom_id\":\"a\"," REQ GOOD_BODY "}\0", 0, "invalid_json", "", NULL}, /* len below */
    {"[]", 0, "invalid_json", "", NULL},
    {"{\"custom_id\":\"\\ud800\"," REQ GOOD_BODY "}", 0, "invalid_json", "", NULL},
    {"{\"x\\u0000\":1,\"custom_id\":\"a\"," REQ GOOD_BODY "}", 0, "invalid_json", "", NULL},
    /* custom_id */
    {"{" REQ GOOD_BODY "}", 0, "missing_custom_id", "custom_id", NULL},
    {"{\"custom_id\":\"\"," REQ GOOD_BODY "}", 0, "missing_custom_id", "custom_id", ""},
    {"{\"custom_id\":7," REQ GOOD_BODY "}", 0, "missing_custom_id", "custom_id", NULL},
    {"{\"custom_id\":\"a\xff\"," REQ GOOD_BODY "}", 0, "invalid_custom_id", "custom_id", NULL},
    {"{\"custom_id\":\"a\xc0\xaf\"," REQ GOOD_BODY "}", 0, "invalid_custom_id", "custom_id",
     NULL},
    {"{\"custom_id\":\"\xed\xa0\x80\"," REQ GOOD_BODY "}", 0, "invalid_custom_id", "custom_id",
     NULL},
    {"{\"custom_id\":\"x\\u0000y\"," REQ GOOD_BODY "}", 0, "invalid_custom_id", "custom_id",
     NULL},
    /* method, url, body */
    {"{\"custom_id\":\"a\",\"method\":\"GET\",\"url\":\"" EP "\"," GOOD_BODY "}", 0,
     "invalid_method", "method", "a"},
    {"{\"custom_id\":\"a\",\"method\":\"POST\\u0000\",\"url\":\"" EP "\"," GOOD_BODY "}", 0,
     "invalid_method", "method", NULL},
    {"{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/chat\"," GOOD_BODY "}", 0,
     "invalid_url", "url", "a"},
    {"{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"" EP "\\u0000x\"," GOOD_BODY "}", 0,
     "invalid_url", "url", NULL},
    {"{\"custom_id\":\"a\"," REQ "\"body\":\"text\"}", 0, "invalid_body", "body", "a"},
    {"{\"custom_id\":\"a\"," REQ "\"body\":{\"model\":\"m\",\"prompt\":\"a\\u0000b\"}}", 0,
     "invalid_body", "body.prompt", NULL},
    {"{\"custom_id\":\"a\"," REQ "\"body\":{\"model\":\"m\",\"prompt\":[\"x\",\"\xff\"]}}", 0,
     "invalid_body", "body.prompt[1]", NULL},
    {"{\"custom_id\":\"a\"," REQ "\"body\":{\"model\":\"m\",\"prompt\":\"p\",\"\xff\":1}}", 0,
     "invalid_body", "body", NULL},
    {"{\"custom_id\":\"a\"," REQ "\"body\":{\"model\":\"x\",\"prompt\":\"p\"}}", 0,
     "model_not_found", "body.model", "a"},
    {"{\"custom_id\":\"a\"," REQ "\"body\":{\"model\":\"m\",\"prompt\":\"p\",\"stream\":true}}",
     0, "invalid_body", "body.stream", "a"},
    /* a bad string anywhere else in the line */
    {"{\"custom_id\":\"a\"," REQ GOOD_BODY ",\"extra\":\"\\u0000\"}", 0, "invalid_json", "extra",
     NULL},
};

TEST(lines_get_their_codes)
{
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        const struct line_case *c = &cases[i];
        size_t len = c->len ? c->len : strlen(c->text);
        if (i == 6) len++; /* the raw NUL after the object */
        struct batch_line_error e;
        memset(&e, 0, sizeof e);
        char *cid = NULL;
        cJSON *body = batch_line_parse(c->text, len, EP, "m", &cid, NULL, &e);
        EXPECT_EQ(body != NULL, c->code == NULL);
        if (c->code) {
            EXPECT_STR(e.code, c->code);
            EXPECT_STR(e.param, c->param);
            EXPECT(e.message[0] && json_utf8_valid(e.message, strlen(e.message)));
        }
        if (c->custom_id) EXPECT_STR(cid, c->custom_id);
        else EXPECT(cid == NULL);
        if (test_cur_failed) {
            printf("# in case %zu: %s -> %s %s: %s\n", i, c->text, e.code, e.param, e.message);
            free(cid);
            cJSON_Delete(body);
            break;
        }
        free(cid);
        cJSON_Delete(body);
    }
}

TEST(nul_messages_name_the_member)
{
    struct batch_line_error e;
    char *cid = NULL;
    const char *t = "{\"custom_id\":\"x\\u0000y\"," REQ GOOD_BODY "}";
    EXPECT(batch_line_parse(t, strlen(t), EP, NULL, &cid, NULL, &e) == NULL);
    EXPECT_STR(e.message, "'custom_id' contains U+0000 (NUL), which is not accepted");
    t = "{\"custom_id\":\"a\"," REQ "\"body\":{\"prompt\":\"\\u0000\"}}";
    EXPECT(batch_line_parse(t, strlen(t), EP, NULL, &cid, NULL, &e) == NULL);
    EXPECT_STR(e.message, "'body.prompt' contains U+0000 (NUL), which is not accepted");
    free(cid);
}

TEST(ids_differing_after_a_nul_never_reach_the_set)
{
    /* Before, "x\u0000a" and "x\u0000b" both read as "x": the second line was a
     * duplicate of the first. Now neither is an id at all. */
    struct batch_line_idset ids = {0};
    const char *lines[] = {"{\"custom_id\":\"x\\u0000a\"," REQ GOOD_BODY "}",
                           "{\"custom_id\":\"x\\u0000b\"," REQ GOOD_BODY "}"};
    for (int i = 0; i < 2; i++) {
        struct batch_line_error e;
        char *cid = NULL;
        EXPECT(batch_line_parse(lines[i], strlen(lines[i]), EP, NULL, &cid, NULL, &e) ==
               NULL);
        EXPECT(cid == NULL);
        EXPECT_STR(e.code, "invalid_custom_id");
    }
    EXPECT(batch_line_idset_add(&ids, "x"));
    EXPECT(!batch_line_idset_add(&ids, "x"));
    batch_line_idset_free(&ids);
}

TEST(blank_lines)
{
    EXPECT(batch_line_blank("", 0));
    EXPECT(batch_line_blank(" \t\r\n", 4));
    EXPECT(!batch_line_blank(" x", 2));
    EXPECT(!batch_line_blank("\x01", 1));
}

TEST(output_lines_are_valid_json_and_utf8)
{
    /* What both ways in write for a refused line: custom_id null, the error. */
    const char *t = "{\"custom_id\":\"a\xff\"," REQ GOOD_BODY "}";
    struct batch_line_error e;
    char *cid = NULL;
    EXPECT(batch_line_parse(t, strlen(t), EP, NULL, &cid, NULL, &e) == NULL);
    char *out = batch_line_output("batch_req_1", cid, 0, NULL, NULL, e.code, e.message);
    EXPECT(json_utf8_valid(out, strlen(out)));
    struct json_fault f;
    cJSON *o = json_parse_checked(out, strlen(out), &f);
    EXPECT(o != NULL);
    EXPECT(cJSON_IsNull(cJSON_GetObjectItem(o, "custom_id")));
    EXPECT_STR(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "error"), "code")->valuestring,
               "invalid_custom_id");
    cJSON_Delete(o);
    free(out);
    free(cid);
}

TEST(output_lines_replace_bytes_that_are_not_utf8)
{
    /* An id read back from a store written before ids were checked. */
    char *out = batch_line_output("batch_req_2", "a\xff", 0, NULL, NULL, "batch_expired",
                                  "m\xc0\xaf");
    EXPECT(json_utf8_valid(out, strlen(out)));
    EXPECT(strstr(out, "\"custom_id\":\"a\xef\xbf\xbd\"") != NULL);
    free(out);
}

int main(void)
{
    RUN(lines_get_their_codes);
    RUN(nul_messages_name_the_member);
    RUN(ids_differing_after_a_nul_never_reach_the_set);
    RUN(blank_lines);
    RUN(output_lines_are_valid_json_and_utf8);
    RUN(output_lines_replace_bytes_that_are_not_utf8);
    return test_done();
}
