/*
 * test_jinja.c - the Jinja subset of engine/text/jinja*.c, construct by construct.
 *
 * First every small template of tests/data/chat_templates/jinja_cases.json (whitespace
 * control, literals, operators, access and slicing, if / for / loop, set and scopes,
 * namespace, macro, tests, filters, string methods, transformers' globals) against what
 * Jinja2 3.1.6 renders with transformers' settings (make_jinja_cases.py made it): the
 * same bytes, or an error where Jinja2 raised one; and 45 real templates of other models
 * (hub_cases.json), each identical or refused by name. Then what only this side can say:
 * constructs outside the subset are refused with their line and column, syntax errors
 * are located, and hostile templates (deep nesting, endless loops, doubling strings,
 * runaway recursion, huge output) stop at a limit with a clean error.
 */
#include "err.h"
#include "jinja.h"
#include "test.h"
#include "util.h"

#include <cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Render `src` with the JSON object `vars` (NULL: none). Returns the rc; *out or *err. */
static int render(const char *src, const char *vars, const struct jinja_render_opts *o,
                  char **out, char **err)
{
    struct jinja_template *t;
    *out = NULL;
    int rc = jinja_compile(src, strlen(src), &t, err);
    if (rc) return rc;
    cJSON *v = vars ? cJSON_Parse(vars) : NULL;
    size_t len;
    rc = jinja_render(t, v, o, out, &len, err);
    if (!rc) CHECK(len == strlen(*out));
    cJSON_Delete(v);
    jinja_free(t);
    return rc;
}

/*
 * Render every case of `rel` (jinja_cases.json's format) and compare with Jinja2's
 * output. With `may_refuse`, a case may instead be refused as outside the subset
 * (ENG_EUNSUPPORTED, a construct named); it may never render differently. Returns the
 * number of cases refused.
 */
static int check_cases(const char *rel, int min_cases, int may_refuse)
{
    char *text;
    size_t len;
    CHECK(util_read_file(test_data(rel), &text, &len) == 0);
    cJSON *root = cJSON_Parse(text);
    CHECK(root);
    struct jinja_render_opts o = {
        .now = (int64_t)cJSON_GetObjectItemCaseSensitive(root, "now")->valuedouble};
    const cJSON *c;
    int n = 0, refused = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "cases"))
    {
        const char *src = cJSON_GetObjectItemCaseSensitive(c, "template")->valuestring;
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
        const char *label = cJSON_IsString(name) ? name->valuestring : src;
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(c, "expected");
        const cJSON *etype = cJSON_GetObjectItemCaseSensitive(c, "error_type");
        const cJSON *emsg = cJSON_GetObjectItemCaseSensitive(c, "error");
        char *vars = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(c, "vars"));
        char *out = NULL, *err = NULL;
        int rc = render(src, vars, &o, &out, &err);
        n++;
        if (rc == ENG_EUNSUPPORTED && may_refuse) {
            printf("# %s: refused: %s\n", label, err);
            refused++;
        } else if (cJSON_IsString(want)) {
            if (rc)
                TEST_FAIL("%s: failed: %s", label, err);
            else if (strcmp(out, want->valuestring))
                TEST_FAIL("%s:\n#   got  \"%s\"\n#   want \"%s\"", label, out,
                          want->valuestring);
        } else if (!rc) {
            TEST_FAIL("%s: rendered \"%s\", Jinja2 raised %s", label, out,
                      etype->valuestring);
        } else if (!strcmp(etype->valuestring, "TemplateError") &&
                   strcmp(err, emsg->valuestring)) {
            TEST_FAIL("%s: error \"%s\", want \"%s\"", label, err, emsg->valuestring);
        }
        free(out);
        free(err);
        free(vars);
    }
    printf("# %s: %d templates, %d refused\n", rel, n, refused);
    EXPECT(n >= min_cases);
    cJSON_Delete(root);
    free(text);
    return refused;
}

TEST(constructs_match_jinja2)
{
    check_cases("chat_templates/jinja_cases.json", 100, 0);
}

TEST(hub_templates_match_or_are_refused_by_name)
{
    /* 45 more models' templates (make_hub_cases.py): all but Jamba's (*args) render as
     * transformers renders them */
    int refused = check_cases("chat_templates/hub_cases.json", 45, 1);
    EXPECT(refused <= 1);
}

/* The error of compiling (or rendering) `src` must contain `want`, with code `code`. */
static void expect_error(const char *src, int code, const char *want)
{
    char *out, *err = NULL;
    int rc = render(src, NULL, NULL, &out, &err);
    if (rc != code)
        TEST_FAIL("%s: rc %d, expected %d (%s)", src, rc, code, err ? err : out);
    else if (!err || !strstr(err, want))
        TEST_FAIL("%s: error \"%s\", expected \"%s\"", src, err, want);
    free(out);
    free(err);
}

TEST(unsupported_constructs_name_themselves_and_where)
{
    expect_error("ok\n  {% include 'x.jinja' %}", ENG_EUNSUPPORTED,
                 "line 2, column 6: statement 'include' is not supported");
    expect_error("{% extends 'base' %}", ENG_EUNSUPPORTED, "statement 'extends'");
    expect_error("{% raw %}x{% endraw %}", ENG_EUNSUPPORTED, "statement 'raw'");
    expect_error("{% call m() %}{% endcall %}", ENG_EUNSUPPORTED,
                 "line 1, column 10: {% call %} needs a macro, not undefined");
    expect_error("{% filter upper %}x{% endfilter %}", ENG_EUNSUPPORTED,
                 "statement 'filter'");
    expect_error("{{ x | wordwrap(5) }}", ENG_EUNSUPPORTED,
                 "line 1, column 8: filter 'wordwrap' is not supported");
    expect_error("a\nb {{ x is escaped }}", ENG_EUNSUPPORTED,
                 "line 2, column 11: test 'escaped' is not supported");
    expect_error("{% set a, b = 1, 2 %}", ENG_EUNSUPPORTED, "several targets");
    expect_error("{% for x in y recursive %}{% endfor %}", ENG_EUNSUPPORTED, "recursive");
    expect_error("{{ f(*args) }}", ENG_EUNSUPPORTED,
                 "line 1, column 6: *args and **kwargs");
    expect_error("{% for a, b, c in x %}{% endfor %}", ENG_EUNSUPPORTED, "more than two");
    /* at render time: what only the values show */
    expect_error("{{ [1].append(2) }}", ENG_EUNSUPPORTED,
                 "line 1, column 8: method 'append' of a list is not supported");
    expect_error("{{ 'a %s' % 1 }}", ENG_EUNSUPPORTED, "string formatting");
    expect_error("{{ 1|tojson(ensure_ascii=true) }}", ENG_EUNSUPPORTED, "ensure_ascii");
    expect_error("{% for x in [1] %}{{ loop.cycle('a', 'b') }}{% endfor %}",
                 ENG_EUNSUPPORTED, "method 'cycle' of a loop");
    expect_error("{{ 9223372036854775807 + 1 }}", ENG_EUNSUPPORTED, "integer overflow");
    /* a generator prints as <generator object ... at 0x7f...> in Jinja, a range as
     * range(0, 3); and a generator walked twice is empty the second time */
    expect_error("{{ [1]|select }}", ENG_EUNSUPPORTED, "printing a generator");
    expect_error("{{ range(3) }}", ENG_EUNSUPPORTED, "printing a range");
    expect_error("{% set g = [1, 2]|select %}{{ g|join }}{{ g|join }}", ENG_EUNSUPPORTED,
                 "line 1, column 45: a generator (from select, map, items, reverse) used a "
                 "second time");
}

TEST(syntax_errors_are_located)
{
    expect_error("{% if x %}never closed", ENG_EFORMAT,
                 "line 1, column 4: this tag has no {% endif %}");
    expect_error("{% for x in y %}", ENG_EFORMAT, "endfor");
    expect_error("x\n{{ 'unclosed }}", ENG_EFORMAT, "line 2, column 4: unclosed string");
    expect_error("{{ 1 +", ENG_EFORMAT, "unclosed {{ tag");
    expect_error("{# no end", ENG_EFORMAT, "unclosed comment");
    expect_error("{% endif %}", ENG_EFORMAT, "unexpected {% endif %}");
    expect_error("{% break %}", ENG_EFORMAT, "'break' outside a loop");
    expect_error("{{ a ? b }}", ENG_EFORMAT, "line 1, column 6: unexpected character '?'");
    expect_error("{{ }}", ENG_EFORMAT, "expected an expression");
    expect_error("{{ f(a=1, 2) }}", ENG_EFORMAT, "positional argument after a keyword");
    expect_error("{% if %}{% endif %}", ENG_EFORMAT, "expected an expression");
}

TEST(runtime_errors_say_what_and_where)
{
    expect_error("\n\n  {{ messages.x.y }}", ENG_EINVAL,
                 "line 3, column 6: 'messages' is undefined");
    expect_error("{{ 'a' + none }}", ENG_EINVAL,
                 "unsupported operand types for +: 'str' and 'none'");
    expect_error("{{ undefined_fn() }}", ENG_EINVAL, "'undefined_fn' is undefined");
    expect_error("{{ raise_exception('Only user and assistant roles are supported!') }}",
                 ENG_EINVAL, "Only user and assistant roles are supported!");
    /* raise_exception's message is the whole error: it goes to the client as it is */
    char *out, *err;
    EXPECT_EQ(render("{{ raise_exception('bad roles') }}", NULL, NULL, &out, &err),
              ENG_EINVAL);
    EXPECT_STR(err, "bad roles");
    free(err);
}

/* open^k mid close^k: nested brackets or blocks, for the depth limits. Caller frees. */
static char *nested(const char *open, const char *mid, const char *close, int k)
{
    size_t lo = strlen(open), lm = strlen(mid), lc = strlen(close);
    char *s = xmalloc(lo * (size_t)k + lm + lc * (size_t)k + 1), *p = s;
    for (int i = 0; i < k; i++, p += lo)
        memcpy(p, open, lo);
    memcpy(p, mid, lm);
    p += lm;
    for (int i = 0; i < k; i++, p += lc)
        memcpy(p, close, lc);
    *p = 0;
    return s;
}

TEST(hostile_templates_stop_at_a_limit)
{
    char *out, *err;
    /* deep nesting: refused while compiling, before any stack is at risk */
    char *src = nested("(", "1", ")", 100000);
    char *tpl = xmalloc(strlen(src) + 8);
    sprintf(tpl, "{{ %s }}", src);
    expect_error(tpl, ENG_EUNSUPPORTED, "nesting deeper than");
    free(src);
    free(tpl);
    src = nested("{% if true %}", "x", "{% endif %}", 5000);
    expect_error(src, ENG_EUNSUPPORTED, "nesting deeper than");
    free(src);
    src = nested("[", "1", "]", 5000);
    tpl = xmalloc(strlen(src) + 8);
    sprintf(tpl, "{{ %s }}", src);
    expect_error(tpl, ENG_EUNSUPPORTED, "nesting deeper than");
    free(src);
    free(tpl);
    src = nested("not ", "1", "", 5000);
    tpl = xmalloc(strlen(src) + 8);
    sprintf(tpl, "{{ %s }}", src);
    expect_error(tpl, ENG_EUNSUPPORTED, "nesting deeper than");
    free(src);
    free(tpl);
    src = nested("-", "1", "", 5000);
    tpl = xmalloc(strlen(src) + 8);
    sprintf(tpl, "{{ %s }}", src);
    expect_error(tpl, ENG_EUNSUPPORTED, "nesting deeper than");
    free(src);
    free(tpl);

    /* huge loops: the step limit (10 million by default; here 100 thousand) */
    struct jinja_render_opts o = {.limits = {.max_steps = 100000}};
    EXPECT_EQ(render("{% for i in range(1000000000) %}{% endfor %}", NULL, &o, &out, &err),
              ENG_ENOSPC);
    EXPECT(err && strstr(err, "steps"));
    free(err);
    EXPECT_EQ(render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}"
                     "{% endfor %}",
                     NULL, &o, &out, &err),
              ENG_ENOSPC);
    free(err);
    /* by default too, without a limit set: a range the size of memory is refused */
    EXPECT_EQ(render("{% for i in range(9000000000000000000) %}{% endfor %}", NULL, NULL,
                     &out, &err),
              ENG_ENOSPC);
    free(err);

    /* memory: a string that doubles each time */
    EXPECT_EQ(
        render("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(64) %}"
               "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               NULL, NULL, &out, &err),
        ENG_ENOSPC);
    EXPECT(err && strstr(err, "bytes"));
    free(err);
    EXPECT_EQ(render("{{ 'x' * 1000000000 }}", NULL, NULL, &out, &err), ENG_ENOSPC);
    free(err);

    /* output: 8 MiB by default; here 1 MiB */
    struct jinja_render_opts small = {.limits = {.max_output = 1 << 20}};
    EXPECT_EQ(render("{% for i in range(100000) %}0123456789abcdef{% endfor %}", NULL,
                     &small, &out, &err),
              ENG_ENOSPC);
    EXPECT(err && strstr(err, "longer than"));
    free(err);
    EXPECT_EQ(render("{% for i in range(100000) %}0123456789abcdef{% endfor %}", NULL, NULL,
                     &out, &err),
              0);
    EXPECT_EQ(strlen(out), 1600000);
    free(out);

    /* runaway recursion: a macro that calls itself forever */
    EXPECT_EQ(render("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}", NULL, NULL, &out,
                     &err),
              ENG_ENOSPC);
    EXPECT(err && strstr(err, "deeper than"));
    free(err);
    /* and one that nests output inside output */
    EXPECT_EQ(render("{% macro f(x) %}[{{ f(x + 1) }}]{% endmacro %}{{ f(1) }}", NULL, NULL,
                     &out, &err),
              ENG_ENOSPC);
    free(err);

    /* a list nested a thousand deep, built by the template, then compared */
    EXPECT_EQ(render("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}"
                     "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x == ns.x }}",
                     NULL, NULL, &out, &err),
              ENG_EUNSUPPORTED);
    EXPECT(err && strstr(err, "nested deeper"));
    free(err);

    /* a deeply nested JSON value printed or tojson'd */
    src = nested("[", "1", "]", 150);
    char *vars = xmalloc(strlen(src) + 16);
    sprintf(vars, "{\"v\": %s}", src);
    EXPECT_EQ(render("{{ v }}", vars, NULL, &out, &err), ENG_EUNSUPPORTED);
    free(err);
    EXPECT_EQ(render("{{ v|tojson }}", vars, NULL, &out, &err), ENG_EUNSUPPORTED);
    free(err);
    free(src);
    free(vars);

    /* garbage bytes are text, never a crash */
    const char junk[] = "{{\xff\xfe}} {% \x01 %} {{ '\xc3' }}";
    struct jinja_template *t;
    int rc = jinja_compile(junk, sizeof junk - 1, &t, &err);
    EXPECT(rc != 0);
    free(err);
}

TEST(a_template_renders_from_many_threads_alike)
{
    /* the compiled template is read-only: two renders of one template give one output */
    struct jinja_template *t;
    char *err, *a, *b;
    size_t la, lb;
    const char *src = "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = "
                      "ns.n + 1 %}{{ m }}{% endfor %}{{ ns.n }}";
    CHECK(jinja_compile(src, strlen(src), &t, &err) == 0);
    cJSON *v = cJSON_Parse("{\"messages\": [\"a\", \"b\"]}");
    EXPECT_EQ(jinja_render(t, v, NULL, &a, &la, &err), 0);
    EXPECT_EQ(jinja_render(t, v, NULL, &b, &lb, &err), 0);
    EXPECT_STR(a, "ab2");
    EXPECT_STR(b, "ab2");
    free(a);
    free(b);
    cJSON_Delete(v);
    jinja_free(t);
}

int main(void)
{
    setenv("TZ", "UTC", 1);
    tzset();
    RUN(constructs_match_jinja2);
    RUN(hub_templates_match_or_are_refused_by_name);
    RUN(unsupported_constructs_name_themselves_and_where);
    RUN(syntax_errors_are_located);
    RUN(runtime_errors_say_what_and_where);
    RUN(hostile_templates_stop_at_a_limit);
    RUN(a_template_renders_from_many_threads_alike);
    return test_done();
}
