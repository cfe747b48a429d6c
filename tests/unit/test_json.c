/*
 * test_json.c - json_parse_checked, the one parser of untrusted JSON (request bodies,
 * Batch input lines, batch metadata): what it refuses, and that a refusal names the
 * member at fault.
 */
#include "json.h"

#include "test.h"
#include "util.h"

#include <string.h>

/* One text: the fault expected (JSON_FAULT_NONE: accepted), its path and in_key. */
struct fault_case {
    const char *text;
    size_t len; /* 0: strlen(text) (for texts with a raw NUL) */
    enum json_fault_kind kind;
    const char *path;
    bool in_key;
};

static const struct fault_case cases[] = {
    /* accepted */
    {"{}", 0, JSON_FAULT_NONE, "", false},
    {" \t\r\n{\"a\":\"h\xc3\xa9\xf0\x9f\x98\x80\"} \n", 0, JSON_FAULT_NONE, "", false},
    {"{\"a\":\"\\\\u0000\"}", 0, JSON_FAULT_NONE, "", false}, /* an escaped backslash */
    {"{\"a\":\"\\u0001\\ud83d\\ude00\"}", 0, JSON_FAULT_NONE, "", false},
    /* the text as a whole */
    {"", 0, JSON_FAULT_EMPTY, "", false},
    {" \n", 0, JSON_FAULT_EMPTY, "", false},
    {"{", 0, JSON_FAULT_SYNTAX, "", false},
    {"{}{}", 0, JSON_FAULT_SYNTAX, "", false},
    {"{} x", 0, JSON_FAULT_SYNTAX, "", false},
    {"{}\x01", 0, JSON_FAULT_SYNTAX, "", false}, /* cJSON calls it a space */
    {"{\x01}", 0, JSON_FAULT_SYNTAX, "", false},
    {"{}\0", 3, JSON_FAULT_SYNTAX, "", false}, /* a raw NUL after the object */
    {"{\"a\":\"\\ud800\"}", 0, JSON_FAULT_SYNTAX, "", false}, /* unpaired surrogates */
    {"{\"a\":\"\\udc00\"}", 0, JSON_FAULT_SYNTAX, "", false},
    {"{\"a\":\"\\ud800\\u0041\"}", 0, JSON_FAULT_SYNTAX, "", false},
    {"{\"a\":\"\xff\"", 0, JSON_FAULT_UTF8, "", false}, /* cut short and not UTF-8 */
    {"[1]", 0, JSON_FAULT_NOT_OBJECT, "", false},
    /* RFC 8259 where cJSON is looser (found by fuzz_json): escapes, control bytes in
     * strings, numbers outside the grammar */
    {"{\"a\":\"\\ud83X\"}", 0, JSON_FAULT_SYNTAX, "a", false}, /* cJSON: U+0000 */
    {"{\"a\":\"\\u12G4\"}", 0, JSON_FAULT_SYNTAX, "a", false},
    {"{\"a\":\"\\u00\"}", 0, JSON_FAULT_SYNTAX, "", false},      /* cJSON refuses it */
    {"{\"a\":\"\\x41\"}", 0, JSON_FAULT_SYNTAX, "", false},      /* cJSON refuses it */
    {"{\"a\":\"tab\there\"}", 0, JSON_FAULT_SYNTAX, "a", false}, /* a raw tab */
    {"{\"a\":\"\x1f\"}", 0, JSON_FAULT_SYNTAX, "a", false},
    {"{\"a\":+1}", 0, JSON_FAULT_SYNTAX, "", false},
    {"{\"a\":.5}", 0, JSON_FAULT_SYNTAX, "", false},
    {"{\"a\":01}", 0, JSON_FAULT_SYNTAX, "", false},
    {"{\"a\":1.}", 0, JSON_FAULT_SYNTAX, "", false},
    {"{\"a\":[1,-]}", 0, JSON_FAULT_SYNTAX, "", false},
    {"{\"a\":1e}", 0, JSON_FAULT_SYNTAX, "", false},
    {"{\"a\":-0.5e+10,\"b\":[0,1E5,2e-3,-0,1e999],\"c\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}", 0,
     JSON_FAULT_NONE, "", false},
    {"\"s\"", 0, JSON_FAULT_NOT_OBJECT, "", false},
    /* bad strings, named by their member */
    {"{\"custom_id\":\"a\xff\"}", 0, JSON_FAULT_UTF8, "custom_id", false},
    {"{\"a\":\"\xc0\xaf\"}", 0, JSON_FAULT_UTF8, "a", false},         /* overlong */
    {"{\"a\":\"\xe0\x80\xaf\"}", 0, JSON_FAULT_UTF8, "a", false},     /* overlong */
    {"{\"a\":\"\xed\xa0\x80\"}", 0, JSON_FAULT_UTF8, "a", false},     /* surrogate */
    {"{\"a\":\"\xf4\x90\x80\x80\"}", 0, JSON_FAULT_UTF8, "a", false}, /* > U+10FFFF */
    {"{\"a\":\"\xe2\x82\"}", 0, JSON_FAULT_UTF8, "a", false},         /* unfinished */
    {"{\"custom_id\":\"x\\u0000y\"}", 0, JSON_FAULT_NUL, "custom_id", false},
    {"{\"a\":\"x\0y\"}", 11, JSON_FAULT_NUL, "a", false}, /* a raw NUL */
    {"{\"body\":{\"model\":\"m\",\"prompt\":\"a\\u0000\"}}", 0, JSON_FAULT_NUL,
     "body.prompt", false},
    {"{\"body\":{\"prompt\":[\"ok\",[1],\"\\u0000\"]}}", 0, JSON_FAULT_NUL,
     "body.prompt[2]", false},
    {"{\"a\":[{\"b\":1},{\"c\":\"\xff\"}]}", 0, JSON_FAULT_UTF8, "a[1].c", false},
    {"{\"a\":1,\"b\\\"q\":\"\\u0000\"}", 0, JSON_FAULT_NUL, "b\\\"q",
     false}, /* as written */
    /* bad member names: the object is named */
    {"{\"metadata\":{\"k\\u0000\":\"v\"}}", 0, JSON_FAULT_NUL, "metadata", true},
    {"{\"metadata\":{\"ok\":\"v\",\"\xff\":\"v\"}}", 0, JSON_FAULT_UTF8, "metadata", true},
    {"{\"x\\u0000\":1}", 0, JSON_FAULT_NUL, "", true},
};

TEST(faults_are_found_and_named)
{
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        const struct fault_case *c = &cases[i];
        const size_t len = c->len ? c->len : strlen(c->text);
        struct json_fault f;
        cJSON *root = json_parse_checked(c->text, len, &f);
        EXPECT_EQ(root != NULL, c->kind == JSON_FAULT_NONE);
        EXPECT_EQ(f.kind, c->kind);
        EXPECT_STR(f.path, c->path);
        EXPECT_EQ(f.in_key, c->in_key);
        if (test_cur_failed) {
            printf("# in case %zu: %s\n", i, c->text);
            break;
        }
        cJSON_Delete(root);
    }
}

TEST(fault_offsets_point_at_the_string)
{
    struct json_fault f;
    const char *t = "{\"a\":\"ok\",\"b\":\"x\\u0000\"}";
    EXPECT(json_parse_checked(t, strlen(t), &f) == NULL);
    EXPECT_EQ(f.at, strchr(t, '\\') - t);
    t = "{\"a\":1} junk";
    EXPECT(json_parse_checked(t, strlen(t), &f) == NULL);
    EXPECT_EQ(f.at, 8);
}

TEST(long_and_deep_paths_are_clipped)
{
    /* 40 levels of {"level":...}: the path stops after its first levels with "...". */
    char t[1024];
    size_t n = 0;
    for (int i = 0; i < 40; i++) n += (size_t)snprintf(t + n, sizeof t - n, "{\"level\":");
    n += (size_t)snprintf(t + n, sizeof t - n, "\"\\u0000\"");
    for (int i = 0; i < 40; i++) t[n++] = '}';
    struct json_fault f;
    EXPECT(json_parse_checked(t, n, &f) == NULL);
    EXPECT_EQ(f.kind, JSON_FAULT_NUL);
    EXPECT(strncmp(f.path, "level.level.", 12) == 0);
    EXPECT(strcmp(f.path + strlen(f.path) - 3, "...") == 0);
    EXPECT(strlen(f.path) < sizeof f.path);
    /* A long name is cut on a character boundary (é is two bytes). */
    char key[400];
    for (int i = 0; i < 199; i++) memcpy(key + 2 * i, "\xc3\xa9", 2);
    key[398] = '\0';
    snprintf(t, sizeof t, "{\"%s\":\"\\u0000\"}", key);
    EXPECT(json_parse_checked(t, strlen(t), &f) == NULL);
    EXPECT(json_utf8_valid(f.path, strlen(f.path)));
    EXPECT(strcmp(f.path + strlen(f.path) - 3, "...") == 0);
}

TEST(fault_sentences)
{
    struct json_fault f;
    char say[256];
    const char *t = "{\"prompt\":[\"\\u0000\"]}";
    EXPECT(json_parse_checked(t, strlen(t), &f) == NULL);
    json_fault_say(&f, say, sizeof say);
    EXPECT_STR(say, "'prompt[0]' contains U+0000 (NUL), which is not accepted");
    t = "{\"metadata\":{\"\xff\":\"v\"}}";
    EXPECT(json_parse_checked(t, strlen(t), &f) == NULL);
    json_fault_say(&f, say, sizeof say);
    EXPECT_STR(say, "a member name in 'metadata' is not valid UTF-8");
}

TEST(http_bodies_get_a_400_naming_the_member)
{
    struct api_error e = {0};
    const char *t = "{\"prompt\":\"a\\u0000b\"}";
    EXPECT(json_parse_object(t, strlen(t), &e) == NULL);
    EXPECT_EQ(e.status, 400);
    EXPECT_STR(e.param, "prompt");
    EXPECT(strstr(e.message, "U+0000") != NULL);
    t = "{\"prompt\":\"a\"} {}";
    EXPECT(json_parse_object(t, strlen(t), &e) == NULL);
    EXPECT(e.param == NULL);
    EXPECT(strstr(e.message, "parse") != NULL);
    api_error_clear(&e);
}

int main(void)
{
    RUN(faults_are_found_and_named);
    RUN(fault_offsets_point_at_the_string);
    RUN(long_and_deep_paths_are_clipped);
    RUN(fault_sentences);
    RUN(http_bodies_get_a_400_naming_the_member);
    return test_done();
}
