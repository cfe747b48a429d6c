/*
 * test_cfg_usage.c - --help (cfg_usage.c): every flag of a subcommand listed with its
 * default. vLLM's command line (aliases, dtype names, the positional model) is
 * test_cfg_vllm.c.
 */
#include "cfg_testlib.h"

/* Where buf has the --help entry of flag: "\n  FLAG" (or "\n  -x, FLAG") then a
 * space (placeholder, help) or a newline; NULL when it has none. */
static const char *usage_entry(const char *buf, const char *flag)
{
    const char *at = buf;
    size_t fl = strlen(flag);
    while ((at = strstr(at, flag))) {
        bool starts = (at - buf >= 3 && strncmp(at - 3, "\n  ", 3) == 0) ||
                      (at - buf >= 7 && strncmp(at - 7, "\n  -", 4) == 0 &&
                       strncmp(at - 2, ", ", 2) == 0);
        if (starts && (at[fl] == ' ' || at[fl] == '\n')) return at;
        at++;
    }
    return NULL;
}

TEST(usage_lists_every_flag_with_its_default)
{
    for (size_t sc = 0; sc < sizeof all_scopes / sizeof all_scopes[0]; sc++) {
        const unsigned scope = all_scopes[sc];
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        cfg_usage(f, scope_names[sc]);
        fclose(f);
        char want_usage[80];
        snprintf(want_usage, sizeof want_usage, "usage: h2oserve %s", scope_names[sc]);
        EXPECT(strstr(buf, want_usage) != NULL);
        EXPECT_EQ(strstr(buf, "--config FILE") != NULL,
                  (scope & (CFG_SERVE | CFG_RUN_BATCH)) != 0);
        EXPECT(strstr(buf, "--help") != NULL);
        EXPECT_EQ(cfg_scope_of(scope_names[sc]), scope);
        size_t n;
        const struct cfg_opt *t = cfg_opts(&n);
        struct cfg d;
        cfg_defaults_cmd(&d, scope);
        for (size_t i = 0; i < n; i++) {
            char flag[80], want[300], val[128];
            char plain[64];
            flag_of(&t[i], plain, sizeof plain);
            if (t[i].type == CFG_T_BOOL)
                snprintf(flag, sizeof flag, "--[no-]%s", plain + 2);
            else
                snprintf(flag, sizeof flag, "%s", plain);
            const char *at = usage_entry(buf, flag);
            if (!(t[i].scopes & scope)) {
                /* Another subcommand's option is not in this one's help (a flag it
                 * shares with a row of this one is that row's entry). */
                if (at && !flag_twin(&t[i], plain, scope))
                    TEST_FAIL("%s usage lists %s", scope_names[sc], flag);
                continue;
            }
            if (!at) TEST_FAIL("%s usage lacks %s", scope_names[sc], flag);
            /* The default, after the flag (the help text may wrap before it). */
            snprintf(want, sizeof want, "(default: %s)",
                     t[i].dflt_note ? t[i].dflt_note
                                    : cfg_format_value(&d, &t[i], val, sizeof val));
            const char *next = at ? strstr(at + 1, "\n  -") : NULL;
            const char *hit = at ? strstr(at, want) : NULL;
            if (!hit || (next && hit > next))
                TEST_FAIL("%s usage of %s lacks %s", scope_names[sc], flag, want);
        }
        if (scope == CFG_SERVE) {
            EXPECT(strstr(buf, "(default: 8000)") != NULL);
            EXPECT(strstr(buf, "(default: 32M)") != NULL);
            EXPECT(strstr(buf, "(default: h2o)") != NULL);
        }
        /* No line wider than 80 columns (the help wraps). */
        for (const char *p = buf; *p;) {
            size_t w = strcspn(p, "\n");
            if (w > 80) TEST_FAIL("usage line of %zu columns: %.40s...", w, p);
            p += w + (p[w] != 0);
        }
        cfg_free(&d);
        free(buf);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(usage_lists_every_flag_with_its_default);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd)) {
    }
    return test_done();
}
