/*
 * cfg_testlib.c - the configuration tests' helpers (cfg_testlib.h).
 */
#include "cfg_testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char tmp_dir[] = "/tmp/h2o_test_cfg_XXXXXX";

const char *write_file(const char *name, const char *text, size_t len)
{
    static char path[4][256];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", tmp_dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    fwrite(text, 1, len ? len : strlen(text), f);
    fclose(f);
    return p;
}

int parse(struct cfg *c, int *next, const char *const *args)
{
    char *argv[64] = {"serve"};
    int argc = 1;
    while (args[argc - 1]) {
        argv[argc] = (char *)args[argc - 1];
        argc++;
    }
    int dummy;
    return cfg_parse_args(c, argc, argv, next ? next : &dummy);
}

int parse_cmd(struct cfg *c, unsigned scope, int *next, const char *const *args)
{
    char *argv[64] = {"cmd"};
    int argc = 1;
    while (args[argc - 1]) {
        argv[argc] = (char *)args[argc - 1];
        argc++;
    }
    int dummy;
    return cfg_parse_cmd(c, scope, argc, argv, next ? next : &dummy);
}

const unsigned all_scopes[N_SCOPES] = {CFG_SERVE, CFG_RUN_BATCH, CFG_GENERATE,
                                       CFG_BENCH_QUALITY, CFG_TOKENIZE};
const char *const scope_names[N_SCOPES] = {"serve", "run-batch", "generate",
                                           "bench quality", "tokenize"};

int msg_has(const char *needle)
{
    if (strstr(err_msg(), needle)) return 1;
    printf("# message \"%s\" lacks \"%s\"\n", err_msg(), needle);
    return 0;
}

int64_t field_int(const struct cfg *c, const struct cfg_opt *o)
{
    const char *p = (const char *)c + o->offset;
    if (o->type == CFG_T_BOOL) return *(const bool *)p;
    if (o->type == CFG_T_ENUM) return *(const int *)p;
    if (o->size == 4) return *(const int32_t *)p;
    return *(const int64_t *)p;
}

double field_float(const struct cfg *c, const struct cfg_opt *o)
{
    return *(const double *)((const char *)c + o->offset);
}

const char *field_str(const struct cfg *c, const struct cfg_opt *o)
{
    return *(char *const *)((const char *)c + o->offset);
}

char *flag_of(const struct cfg_opt *o, char *buf, size_t len)
{
    if (o->flag) {
        snprintf(buf, len, "--%s", o->flag);
        return buf;
    }
    snprintf(buf, len, "--%s", o->key);
    for (char *p = buf; *p; p++)
        if (*p == '_') *p = '-';
    return buf;
}

void other_value(const struct cfg *d, const struct cfg_opt *o, char *text, char *json,
                 size_t len)
{
    int64_t v;
    double f;
    switch (o->type) {
    case CFG_T_STR:
        snprintf(text, len, "x.example");
        snprintf(json, len, "\"x.example\"");
        break;
    case CFG_T_LIST: /* one item after none */
        snprintf(text, len, "x.example");
        snprintf(json, len, "[\"x.example\"]");
        break;
    case CFG_T_INT:
    case CFG_T_SIZE:
        v = field_int(d, o);
        v = (double)(v + 1024) <= o->max ? v + 1024
            : (double)(v + 1) <= o->max  ? v + 1
                                         : v - 1;
        snprintf(text, len, "%lld", (long long)v);
        snprintf(json, len, "%lld", (long long)v);
        break;
    case CFG_T_FLOAT:
        f = field_float(d, o);
        f = f + 0.25 <= o->max ? f + 0.25 : f - 0.25;
        snprintf(text, len, "%.17g", f);
        snprintf(json, len, "%.17g", f);
        break;
    case CFG_T_BOOL:
        snprintf(text, len, "%s", field_int(d, o) ? "false" : "true");
        snprintf(json, len, "%s", text);
        break;
    case CFG_T_ENUM: {
        int n = 0;
        while (o->values[n])
            n++;
        snprintf(text, len, "%s", o->values[(field_int(d, o) + 1) % n]);
        snprintf(json, len, "\"%.100s\"", text);
        break;
    }
    }
}

void expect_only_changed(const struct cfg *c, const struct cfg *d, const struct cfg_opt *o,
                         const char *text, const char *how)
{
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    for (size_t i = 0; i < n; i++) {
        char a[128], b[128];
        cfg_format_value(c, &t[i], a, sizeof a);
        cfg_format_value(d, &t[i], b, sizeof b);
        if (&t[i] == o) {
            if (strcmp(a, b) == 0)
                TEST_FAIL("%s via %s: still the default %s", o->key, how, a);
        } else if (strcmp(a, b) != 0) {
            TEST_FAIL("%s via %s also changed %s (%s -> %s)", o->key, how, t[i].key, b, a);
        }
    }
    switch (o->type) {
    case CFG_T_STR: EXPECT_STR(field_str(c, o), text); break;
    case CFG_T_INT:
    case CFG_T_SIZE: EXPECT_EQ(field_int(c, o), strtoll(text, NULL, 10)); break;
    case CFG_T_FLOAT: EXPECT_NEAR(field_float(c, o), strtod(text, NULL), 1e-12); break;
    case CFG_T_BOOL: EXPECT_EQ(field_int(c, o), strcmp(text, "true") == 0); break;
    case CFG_T_ENUM: EXPECT_STR(o->values[field_int(c, o)], text); break;
    case CFG_T_LIST: {
        const struct cfg_list *l = (const struct cfg_list *)((const char *)c + o->offset);
        EXPECT_EQ(l->n, 1);
        if (l->n == 1) EXPECT_STR(l->items[0], text);
        break;
    }
    }
}

const struct cfg_opt *flag_twin(const struct cfg_opt *o, const char *flag, unsigned scope)
{
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    for (size_t i = 0; i < n; i++) {
        char f[80];
        if (&t[i] != o && (t[i].scopes & scope) &&
            strcmp(flag_of(&t[i], f, sizeof f), flag) == 0)
            return &t[i];
    }
    return NULL;
}
