/*
 * cfg_usage.c - a subcommand's --help, written from the option table: its options
 * (its scope) grouped as in the table, each with its placeholder, alias, help and
 * the subcommand's default, word-wrapped to 80 columns (see cfg.h).
 *
 * Owns: nothing. Thread: any (no mutable state).
 */
#include "cfg.h"
#include "cfg_impl.h"

#include "util.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* "  LEFT" then `text` word-wrapped into a column from INDENT to WIDTH; `tail` follows
 * as one word that is never broken ("(default: the model's name)"). */
static void print_entry(FILE *f, const char *left, const char *text, const char *tail)
{
    enum { INDENT = 30, WIDTH = 80 };
    int col = fprintf(f, "  %s", left);
    if (col > INDENT - 2) {
        fputc('\n', f);
        col = 0;
    }
    fprintf(f, "%*s", INDENT - col, "");
    col = INDENT;
    for (const char *p = text;;) {
        while (*p == ' ')
            p++;
        bool last = !*p;
        if (last && !tail) break;
        const char *word = last ? tail : p;
        int w = last ? (int)strlen(tail) : (int)strcspn(p, " ");
        if (col > INDENT && col + 1 + w > WIDTH) {
            fprintf(f, "\n%*s", INDENT, "");
            col = INDENT;
        } else if (col > INDENT) {
            fputc(' ', f);
            col++;
        }
        fwrite(word, 1, (size_t)w, f);
        col += w;
        if (last) break;
        p += w;
    }
    fputc('\n', f);
}

/* "MODEL" for key "model": the positional argument's name in --help. */
static void upper_of_key(const char *key, char *buf, size_t len)
{
    snprintf(buf, len, "%s", key);
    for (char *p = buf; *p; p++)
        *p = (char)toupper((unsigned char)*p);
}

void cfg_usage(FILE *f, const char *cmd)
{
    const unsigned scope = cfg_scope_of(cmd);
    const struct cfg_cmd *sc = cfg_cmd_of(scope);
    CHECK(sc);
    size_t n;
    const struct cfg_opt *table = cfg_opts(&n);
    const struct cfg_opt *pos = sc->positional ? cfg_positional_opt() : NULL;
    struct cfg d;
    cfg_defaults_cmd(&d, scope);
    char pos_name[64] = "", pos_usage[80] = "";
    if (pos) {
        upper_of_key(pos->key, pos_name, sizeof pos_name);
        snprintf(pos_usage, sizeof pos_usage, " [%s]", pos_name);
    }
    fprintf(f, "usage: h2oserve %s%s%s%s [options]\n\n", cmd, sc->required ? " " : "",
            sc->required ? sc->required : "", pos_usage);
    if (sc->config)
        fprintf(
            f,
            "Every option is also a key of the JSON file given with --config: the flag\n"
            "without its \"--\", with '_' for '-' (--max-num-seqs is \"max_num_seqs\").\n"
            "Flags override the file wherever --config stands; config/example.json shows\n"
            "every key with a comment. SIZE takes bytes or K, M, G, T (powers of 1024).\n"
            "vLLM's flag names are accepted as aliases (shown beside each flag).\n\n");
    else
        fprintf(
            f,
            "Flags are --name VALUE or --name=VALUE; SIZE takes bytes or K, M, G, T\n"
            "(powers of 1024). They are spelled, checked and documented as serve's.\n\n");
    if (pos) {
        char flag[80], text[200];
        cfg_flag_of(pos, flag, sizeof flag);
        snprintf(text, sizeof text,
                 "the same as %s %s, anywhere on the line (as in 'vllm serve %s'); both "
                 "given must agree",
                 flag, pos_name, pos_name);
        print_entry(f, pos_name, text, NULL);
    }
    if (sc->config)
        print_entry(f, "--config FILE",
                    "read options from a JSON file (repeatable; later files override "
                    "earlier ones)",
                    NULL);
    print_entry(f, "-h, --help", "show this help and exit", NULL);
    const char *group = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct cfg_opt *o = &table[i];
        if (!(o->scopes & scope)) continue;
        if (!group || strcmp(group, o->group) != 0) {
            group = o->group;
            fprintf(f, "\n%s:\n", group);
        }
        char flag[80], alias[96] = "", left[256], val[128], tail[160], help[1024];
        cfg_flag_of(o, flag, sizeof flag);
        char shrt[8] = ""; /* "-i, " before the long flag */
        if (o->short_flag) snprintf(shrt, sizeof shrt, "-%c, ", o->short_flag);
        if (o->alias) {
            char af[80];
            cfg_flag_of_key(o->alias, af, sizeof af);
            snprintf(alias, sizeof alias, " (alias %s%s)",
                     o->type == CFG_T_BOOL ? "--[no-]" : "--", af + 2);
        }
        if (o->type == CFG_T_BOOL) {
            snprintf(left, sizeof left, "--[no-]%s%s", flag + 2, alias);
        } else if (o->type == CFG_T_ENUM) {
            char all[96] = "";
            for (int k = 0; o->values[k]; k++) {
                if (k) strncat(all, "|", sizeof all - strlen(all) - 1);
                strncat(all, o->values[k], sizeof all - strlen(all) - 1);
            }
            snprintf(left, sizeof left, "%s %s%s", flag, all, alias);
        } else {
            const char *mv = o->metavar               ? o->metavar
                             : o->type == CFG_T_INT   ? "N"
                             : o->type == CFG_T_SIZE  ? "SIZE"
                             : o->type == CFG_T_FLOAT ? "X"
                                                      : "STR";
            snprintf(left, sizeof left, "%s%s %s%s", shrt, flag, mv, alias);
        }
        /* Alias values follow the help: "also accepted: float32=fp32, ...". */
        snprintf(help, sizeof help, "%s", o->help);
        for (const struct cfg_enum_alias *a = o->value_aliases; a && a->name; a++) {
            size_t at = strlen(help);
            snprintf(help + at, sizeof help - at, "%s%s=%s",
                     a == o->value_aliases ? "; also accepted: " : ", ", a->name,
                     o->values[a->value]);
        }
        snprintf(tail, sizeof tail, "(default: %s)",
                 o->dflt_note ? o->dflt_note : cfg_format_value(&d, o, val, sizeof val));
        print_entry(f, left, help, tail);
    }
    cfg_free(&d);
}
