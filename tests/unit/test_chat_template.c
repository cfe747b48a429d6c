/*
 * test_chat_template.c - the chat templates of the model families
 * (tests/data/chat_templates/NAME.jinja, SOURCES.md there says where each came from)
 * rendered by engine/text/chat_template.c against what transformers renders.
 *
 * expected.json holds, for every template and conversation, the prompt transformers
 * 4.57.1's apply_chat_template path (render_jinja_template) gave or the error it raised
 * (make_fixtures.py made it, with the clock fixed for Llama 3.2's date). Each prompt must
 * be identical byte for byte; each refusal must be a refusal here too (ENG_EINVAL) with
 * the template's own message. Then: reading a template from a model folder (the
 * chat_template.jinja file, tokenizer_config.json's string and its named list), and a
 * folder without one.
 */
#include "chat_template.h"
#include "err.h"
#include "test.h"
#include "util.h"

#include <cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char *read_data(const char *rel)
{
    char *buf;
    size_t len;
    CHECK(util_read_file(test_data(rel), &buf, &len) == 0);
    return buf;
}

static const char *str_or_null(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Where two strings first differ, for a readable failure. */
static void show_diff(const char *name, const char *got, const char *want)
{
    size_t i = 0;
    while (got[i] && got[i] == want[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    TEST_FAIL("%s: differs at byte %zu:\n#   got  \"%.80s\"\n#   want \"%.80s\"", name, i,
              got + from, want + from);
}

TEST(families_match_transformers)
{
    char *text = read_data("chat_templates/expected.json");
    cJSON *root = cJSON_Parse(text);
    CHECK(root);
    const cJSON *now = cJSON_GetObjectItemCaseSensitive(root, "now");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    CHECK(cJSON_IsNumber(now) && cJSON_IsArray(cases));
    int n_cases = 0, n_errors = 0;
    const char *last_file = "";
    struct chat_template *t = NULL;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const char *file = str_or_null(c, "template"), *name = str_or_null(c, "name");
        CHECK(file && name);
        char label[128];
        snprintf(label, sizeof label, "%s/%s", file, name);
        if (strcmp(file, last_file)) {
            chat_template_free(t);
            t = NULL;
            char rel[128];
            snprintf(rel, sizeof rel, "chat_templates/%s", file);
            char *src = read_data(rel), *err = NULL;
            int rc = chat_template_compile(src, &t, &err);
            free(src);
            if (rc) {
                TEST_FAIL("%s: does not compile: %s", file, err);
                free(err);
            }
            last_file = file;
        }
        if (!t) continue;
        /* the tool conversations pass `tools`, as apply_chat_template(tools=...) does */
        cJSON *extra = NULL;
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(c, "tools");
        if (tools) {
            extra = cJSON_CreateObject();
            cJSON_AddItemReferenceToObject(extra, "tools", (cJSON *)tools);
        }
        struct chat_render_opts o = {
            .extra = extra,
            .bos_token = str_or_null(c, "bos_token"),
            .eos_token = str_or_null(c, "eos_token"),
            .add_generation_prompt =
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt")),
            .now = (int64_t)now->valuedouble,
        };
        char *out = NULL, *err = NULL;
        size_t len = 0;
        int rc = chat_template_render_json(
            t, cJSON_GetObjectItemCaseSensitive(c, "messages"), &o, &out, &len, &err);
        cJSON_Delete(extra);
        const char *want = str_or_null(c, "expected"), *want_err = str_or_null(c, "error");
        const char *err_type = str_or_null(c, "error_type");
        n_cases++;
        if (want) {
            if (rc)
                TEST_FAIL("%s: failed: %s", label, err);
            else if (len != strlen(want) || memcmp(out, want, len))
                show_diff(label, out, want);
        } else {
            n_errors++;
            if (rc != ENG_EINVAL)
                TEST_FAIL("%s: rendered (rc %d), expected \"%s\"", label, rc, want_err);
            else if (!strcmp(err_type, "TemplateError") && strcmp(err, want_err))
                TEST_FAIL("%s: error \"%s\", expected \"%s\"", label, err, want_err);
        }
        free(out);
        free(err);
    }
    chat_template_free(t);
    printf("# %d conversations, %d of them refused by their template\n", n_cases, n_errors);
    EXPECT(n_cases >= 100);
    EXPECT(n_errors >= 5);
    cJSON_Delete(root);
    free(text);
}

/* A model folder under /tmp with the given files (name, content pairs, NULL-ended). */
static char *make_dir(const char *const *files)
{
    char tmpl[] = "/tmp/h2o-chat-XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir);
    for (int i = 0; files[i]; i += 2) {
        char *p = util_path_join(dir, files[i]);
        FILE *f = fopen(p, "w");
        CHECK(f);
        fputs(files[i + 1], f);
        fclose(f);
        free(p);
    }
    return xstrdup(dir);
}

static void remove_dir(char *dir, const char *const *files)
{
    for (int i = 0; files[i]; i += 2) {
        char *p = util_path_join(dir, files[i]);
        unlink(p);
        free(p);
    }
    rmdir(dir);
    free(dir);
}

TEST(template_from_model_folder)
{
    struct chat_template_src src;
    char *err = NULL;
    /* tokenizer_config.json with a string template and AddedToken-style tokens */
    const char *const a[] = {
        "tokenizer_config.json",
        "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false},"
        " \"eos_token\": \"</s>\", \"chat_template\": \"{{ bos_token }}x\"}",
        NULL};
    char *dir = make_dir(a);
    EXPECT_EQ(chat_template_read_dir(dir, &src, &err), 0);
    EXPECT_STR(src.text, "{{ bos_token }}x");
    EXPECT_STR(src.origin, "tokenizer_config.json");
    EXPECT_STR(src.bos_token, "<s>");
    EXPECT_STR(src.eos_token, "</s>");
    chat_template_src_clear(&src);
    remove_dir(dir, a);

    /* a list of named templates: "default" is the one */
    const char *const b[] = {
        "tokenizer_config.json",
        "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
        " {\"name\": \"default\", \"template\": \"D\"}]}",
        NULL};
    dir = make_dir(b);
    EXPECT_EQ(chat_template_read_dir(dir, &src, &err), 0);
    EXPECT_STR(src.text, "D");
    EXPECT(src.bos_token == NULL);
    chat_template_src_clear(&src);
    remove_dir(dir, b);

    /* chat_template.jinja wins over the config's */
    const char *const c[] = {"tokenizer_config.json", "{\"chat_template\": \"config\"}",
                             "chat_template.jinja", "file\n", NULL};
    dir = make_dir(c);
    EXPECT_EQ(chat_template_read_dir(dir, &src, &err), 0);
    EXPECT_STR(src.text, "file\n");
    EXPECT_STR(src.origin, "chat_template.jinja");
    chat_template_src_clear(&src);
    remove_dir(dir, c);

    /* no template: ENG_ENOTFOUND, with a message for the 400 */
    const char *const d[] = {"tokenizer_config.json", "{\"eos_token\": \"</s>\"}", NULL};
    dir = make_dir(d);
    EXPECT_EQ(chat_template_read_dir(dir, &src, &err), ENG_ENOTFOUND);
    EXPECT(err && strstr(err, "no chat template"));
    free(err);
    err = NULL;
    remove_dir(dir, d);

    /* several templates, none "default"; a template of the wrong type */
    const char *const e[] = {
        "tokenizer_config.json",
        "{\"chat_template\": [{\"name\": \"rag\", \"template\": \"R\"}]}", NULL};
    dir = make_dir(e);
    EXPECT_EQ(chat_template_read_dir(dir, &src, &err), ENG_EFORMAT);
    EXPECT(err && strstr(err, "default"));
    free(err);
    err = NULL;
    remove_dir(dir, e);
    const char *const f[] = {"tokenizer_config.json", "{\"chat_template\": 3}", NULL};
    dir = make_dir(f);
    EXPECT_EQ(chat_template_read_dir(dir, &src, &err), ENG_EFORMAT);
    free(err);
    remove_dir(dir, f);
}

TEST(render_plain_messages_and_extra_variables)
{
    struct chat_template *t;
    char *err = NULL, *out = NULL;
    size_t len;
    CHECK(chat_template_compile("{{ bos_token }}{% for m in messages %}[{{ m.role }}:"
                                "{{ m.content }}]{% endfor %}{{ tools }}|{{ date_string }}"
                                "{% if add_generation_prompt %}>{% endif %}",
                                &t, &err) == 0);
    struct chat_message msgs[] = {{"user", "hi"}, {"assistant", "yo"}};
    cJSON *extra = cJSON_Parse("{\"date_string\": \"1 Jan 2025\", \"tools\": [1]}");
    struct chat_render_opts o = {
        .bos_token = "<s>", .add_generation_prompt = true, .extra = extra};
    EXPECT_EQ(chat_template_render(t, msgs, 2, &o, &out, &len, &err), 0);
    EXPECT_STR(out, "<s>[user:hi][assistant:yo][1]|1 Jan 2025>");
    EXPECT_EQ(len, strlen(out));
    free(out);
    /* without extras tools is None (printed as Python does) and bos_token undefined */
    struct chat_render_opts o2 = {0};
    EXPECT_EQ(chat_template_render(t, msgs, 1, &o2, &out, &len, &err), 0);
    EXPECT_STR(out, "[user:hi]None|");
    free(out);
    cJSON_Delete(extra);
    chat_template_free(t);
}

int main(void)
{
    /* strftime_now formats local time, as datetime.now() does: the fixtures are UTC */
    setenv("TZ", "UTC", 1);
    tzset();
    RUN(families_match_transformers);
    RUN(template_from_model_folder);
    RUN(render_plain_messages_and_extra_variables);
    return test_done();
}
