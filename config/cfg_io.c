/*
 * cfg_io.c - struct cfg in and out: the JSON file, command-line flags (each
 * subcommand's, by its scope) and a JSON dump, each walking the option table of
 * cfg_table.c.
 *
 * Loading and parsing work on a copy of the caller's struct and swap it in only when
 * everything succeeded, so a failed --config or a bad flag leaves the struct as it
 * was. cJSON stays inside this file (the engine's headers never see it).
 * Thread: any. (cJSON's parser also writes its global error pointer; nothing here
 * reads it, and configuration is loaded before other threads parse JSON.)
 */
#include "cfg.h"
#include "cfg_impl.h"

#include "err.h"
#include "util.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A configuration file is a few hundred bytes; a megabyte is a wrong path. */
#define CFG_FILE_MAX (1 << 20)

/* ---- the JSON file ---- */

static const char *json_kind(const cJSON *v)
{
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v) ? "true" : "false";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    return "an object";
}

static int type_error(const char *who, const char *want, const cJSON *v)
{
    return err_set(ENG_EINVAL, "%s wants %s, got %s", who, want, json_kind(v));
}

static int set_json(struct cfg *c, const struct cfg_opt *o, const cJSON *v, const char *who)
{
    struct cfg_val val = {0};
    switch (o->type) {
    case CFG_T_STR:
        if (cJSON_IsString(v))
            val.s = v->valuestring;
        else if (!cJSON_IsNull(v) || !(o->flags & CFG_F_NULLABLE))
            return type_error(
                who, o->flags & CFG_F_NULLABLE ? "a string or null" : "a string", v);
        break;
    case CFG_T_INT:
        if (!cJSON_IsNumber(v)) return type_error(who, "an integer", v);
        val.f = v->valuedouble;
        break;
    case CFG_T_SIZE:
        if (cJSON_IsString(v)) return cfg_opt_set_text(c, o, v->valuestring, who);
        if (!cJSON_IsNumber(v))
            return type_error(who, "a size (bytes, or a string like \"512M\")", v);
        val.f = v->valuedouble;
        break;
    case CFG_T_FLOAT:
        if (!cJSON_IsNumber(v)) return type_error(who, "a number", v);
        val.f = v->valuedouble;
        break;
    case CFG_T_BOOL:
        if (!cJSON_IsBool(v)) return type_error(who, "true or false", v);
        val.i = cJSON_IsTrue(v);
        break;
    case CFG_T_ENUM:
        if (!cJSON_IsString(v)) return type_error(who, "a string", v);
        if (cfg_enum_parse(o, v->valuestring, who, &val.i)) return ENG_EINVAL;
        break;
    case CFG_T_LIST: /* generate's; never a key of serve's file (apply_object) */
        return type_error(who, "a flag, not a file key", v);
    }
    return cfg_opt_set(c, o, &val, who);
}

/* Apply every key of root to c; keys starting with '_' are comments. An option is
 * set once per file, by its key or by its alias: "tensor_parallel" and
 * "tensor_parallel_size" in one file are two things said about one setting. */
static int apply_object(struct cfg *c, const cJSON *root, const char *name)
{
    size_t n_opts;
    const struct cfg_opt *table = cfg_opts(&n_opts);
    const char *seen[128] = {NULL}; /* [option] the key that set it in this file */
    CHECK(n_opts <= ARRAY_LEN(seen));
    const cJSON *v;
    cJSON_ArrayForEach(v, root)
    {
        const char *key = v->string ? v->string : "";
        if (key[0] == '_') continue;
        /* The file holds serve's options; generate's --temperature is no key. */
        const struct cfg_opt *o = cfg_find_n(key, strlen(key), false, CFG_ANY_SCOPE);
        if (o && !(o->scopes & CFG_SERVE)) o = NULL;
        if (!o) {
            /* The flag spelling is the likeliest slip; say how keys are spelled. */
            if (strchr(key, '-') && cfg_find_n(key, strlen(key), true, CFG_ANY_SCOPE))
                return err_set(ENG_EFORMAT,
                               "%.200s: unknown key \"%.64s\" (keys spell '-' "
                               "as '_')",
                               name, key);
            return err_set(ENG_EFORMAT, "%.200s: unknown key \"%.64s\"", name, key);
        }
        size_t idx = (size_t)(o - table);
        if (seen[idx] && strcmp(seen[idx], key) == 0)
            return err_set(ENG_EFORMAT, "%.200s: key \"%s\" appears twice", name, key);
        if (seen[idx])
            return err_set(ENG_EFORMAT,
                           "%.200s: keys \"%s\" and \"%s\" both set %s (one is an alias "
                           "of the other); keep one",
                           name, seen[idx], key, o->key);
        seen[idx] = key;
        char who[300];
        snprintf(who, sizeof who, "%.200s: key \"%.64s\"", name, key);
        int err = set_json(c, o, v, who);
        if (err) return err;
    }
    return 0;
}

int cfg_load_string(struct cfg *c, const char *json, const char *name)
{
    const char *end = NULL;
    /* A UTF-8 byte order mark is harmless; some editors write one. */
    const char *text = strncmp(json, "\xEF\xBB\xBF", 3) == 0 ? json + 3 : json;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        int line = 1, col = 1;
        for (const char *p = text; end && p < end && *p; p++) {
            if (*p == '\n')
                line++, col = 1;
            else
                col++;
        }
        return err_set(ENG_EFORMAT, "%.200s:%d:%d: not valid JSON", name, line, col);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return err_set(ENG_EFORMAT, "%.200s: wants a JSON object of options, got %s", name,
                       json_kind(root));
    }
    struct cfg tmp;
    cfg_copy(&tmp, c);
    int err = apply_object(&tmp, root, name);
    cJSON_Delete(root);
    if (err) {
        cfg_free(&tmp);
        return err;
    }
    cfg_free(c);
    *c = tmp;
    return 0;
}

int cfg_load_file(struct cfg *c, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(ENG_EIO, "%.200s: cannot open: %s", path, strerror(errno));
    char *buf = xmalloc(CFG_FILE_MAX + 2);
    size_t n = fread(buf, 1, CFG_FILE_MAX + 1, f);
    int bad = ferror(f), saved = errno;
    fclose(f);
    int err = 0;
    if (bad)
        err = err_set(ENG_EIO, "%.200s: read error: %s", path, strerror(saved));
    else if (n > CFG_FILE_MAX)
        err = err_set(ENG_EIO, "%.200s: larger than %d bytes, not a configuration file",
                      path, CFG_FILE_MAX);
    else if (memchr(buf, '\0', n))
        err = err_set(ENG_EFORMAT, "%.200s: contains a NUL byte, not JSON text", path);
    if (!err) {
        buf[n] = '\0';
        err = cfg_load_string(c, buf, path);
    }
    free(buf);
    return err;
}

/* ---- the command line ---- */

/* One parsed flag: o == NULL for --config. */
struct flag_item {
    const struct cfg_opt *o;
    const char *value;
    const char *name; /* as typed, without "--" and without "no-" (len bytes) */
    size_t len;
    bool negated;    /* --no-NAME */
    bool positional; /* the table's positional option, not a flag */
    bool is_short;   /* -i */
};

/* The option of `scope` whose short flag is -ch, or NULL. */
static const struct cfg_opt *short_opt(char ch, unsigned scope)
{
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    for (size_t i = 0; i < n; i++)
        if (t[i].short_flag && t[i].short_flag == ch && (t[i].scopes & scope)) return &t[i];
    return NULL;
}

/* "--NAME" or "--no-NAME" as the user typed it (an alias stays an alias), for
 * messages. */
static void item_who(const struct flag_item *it, char *buf, size_t len)
{
    if (it->positional)
        snprintf(buf, len, "the positional %s",
                 it->o->metavar ? it->o->metavar : "argument");
    else if (it->is_short)
        snprintf(buf, len, "-%c", it->o->short_flag);
    else
        snprintf(buf, len, "--%s%.*s", it->negated ? "no-" : "", (int)MIN(it->len, 64),
                 it->name);
}

/* Split argv into the items of command `cmd`. The first positional argument becomes
 * an item of the positional option where the command takes one; scanning stops at
 * the next (*next). */
static int scan_args(const struct cfg_cmd *cmd, int argc, char **argv,
                     struct flag_item *items, int *n_items, int *next)
{
    const struct cfg_opt *pos = cmd->positional ? cfg_positional_opt() : NULL;
    bool flags_done = false, have_pos = false;
    int i, n = 0;
    for (i = MIN(1, argc); i < argc; i++) {
        const char *a = argv[i];
        if (!flags_done && strcmp(a, "--") == 0) {
            flags_done = true; /* what follows is positional, even "--x" */
            continue;
        }
        if (flags_done || a[0] != '-' || a[1] == '\0') { /* a positional ("-" too) */
            if (!pos || have_pos) break;
            items[n++] = (struct flag_item){.o = pos, .value = a, .positional = true};
            have_pos = true;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) return CFG_HELP;
        struct flag_item *it = &items[n];
        if (a[1] != '-') {
            /* A short flag: "-i FILE" (run-batch's, as vLLM's). */
            const struct cfg_opt *o = a[2] ? NULL : short_opt(a[1], cmd->scope);
            if (!o) return err_set(ENG_EINVAL, "unknown option '%.64s'", a);
            *it = (struct flag_item){.o = o, .name = a + 1, .len = 1, .is_short = true};
            if (i + 1 >= argc) return err_set(ENG_EINVAL, "%s needs a value", a);
            it->value = argv[++i];
            n++;
            continue;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        *it = (struct flag_item){.value = eq ? eq + 1 : NULL, .name = name, .len = len};
        if (cmd->config && len == 6 && strncmp(name, "config", 6) == 0) {
            it->o = NULL;
        } else if ((it->o = cfg_find_n(name, len, true, cmd->scope))) {
            /* Only the rows of this command's scope: another's option is unknown here,
             * and a flag two rows share (--text) is this command's row. */
            if (!it->value && it->o->type == CFG_T_BOOL) it->value = "true";
        } else if (len > 3 && strncmp(name, "no-", 3) == 0 &&
                   (it->o = cfg_find_n(name + 3, len - 3, true, cmd->scope)) &&
                   it->o->type == CFG_T_BOOL) {
            if (it->value)
                return err_set(ENG_EINVAL, "--%.*s takes no value", (int)len, name);
            it->negated = true;
            it->name = name + 3;
            it->len = len - 3;
            it->value = "false";
        } else {
            return err_set(ENG_EINVAL, "unknown option '--%.*s'", (int)MIN(len, 64), name);
        }
        if (!it->value) {
            if (i + 1 >= argc)
                return err_set(ENG_EINVAL, "--%.*s needs a value", (int)len, name);
            it->value = argv[++i];
        }
        n++;
    }
    *n_items = n;
    *next = i;
    return 0;
}

/* `serve A --model B`: two different answers to one question. vLLM lets the
 * positional win without a word (ServeSubcommand.cmd: args.model = args.model_tag),
 * which hides a mistake in a launch script, so here it is an error. The same value
 * twice is fine. */
static int check_positional(const struct flag_item *items, int n)
{
    const struct flag_item *pos = NULL;
    for (int k = 0; k < n; k++)
        if (items[k].positional) pos = &items[k];
    if (!pos) return 0;
    for (int k = 0; k < n; k++) {
        const struct flag_item *it = &items[k];
        if (it->positional || it->o != pos->o || strcmp(it->value, pos->value) == 0)
            continue;
        char who[80];
        item_who(it, who, sizeof who);
        return err_set(ENG_EINVAL,
                       "%s is given twice, as the positional argument '%.200s' and as %s "
                       "'%.200s'; give one",
                       pos->o->key, pos->value, who, it->value);
    }
    return 0;
}

int cfg_parse_args(struct cfg *c, int argc, char **argv, int *next)
{
    return cfg_parse_cmd(c, CFG_SERVE, argc, argv, next);
}

int cfg_parse_cmd(struct cfg *c, unsigned scope, int argc, char **argv, int *next)
{
    const struct cfg_cmd *cmd = cfg_cmd_of(scope);
    CHECK(cmd);
    struct flag_item *items = xcalloc((size_t)MAX(argc, 1), sizeof *items);
    int n = 0, first = argc;
    int err = scan_args(cmd, argc, argv, items, &n, &first);
    if (next) *next = first;
    if (!err) err = check_positional(items, n);
    if (err) {
        free(items);
        return err;
    }
    struct cfg tmp;
    cfg_copy(&tmp, c);
    /* Files first, in order, so that every other flag overrides them. */
    for (int k = 0; k < n && !err; k++) {
        if (items[k].o) continue;
        if (!items[k].value[0])
            err = err_set(ENG_EINVAL, "--config needs a file name");
        else
            err = cfg_load_file(&tmp, items[k].value);
    }
    for (int k = 0; k < n && !err; k++) {
        if (!items[k].o) continue;
        char who[80];
        item_who(&items[k], who, sizeof who);
        err = cfg_opt_set_text(&tmp, items[k].o, items[k].value, who);
    }
    free(items);
    if (err) {
        cfg_free(&tmp);
        return err;
    }
    cfg_free(c);
    *c = tmp;
    return 0;
}

/* ---- JSON out ---- */

char *cfg_to_json(const struct cfg *c, bool redact)
{
    size_t n;
    const struct cfg_opt *table = cfg_opts(&n);
    cJSON *root = cJSON_CreateObject();
    CHECK(root);
    for (size_t i = 0; i < n; i++) {
        const struct cfg_opt *o = &table[i];
        if (!(o->scopes & CFG_SERVE)) continue; /* the file's keys only */
        char buf[128];
        cJSON *v = NULL;
        switch (o->type) {
        case CFG_T_STR: {
            const char *s = cfg_str_get(c, o);
            if (s && redact && (o->flags & CFG_F_SECRET)) s = "***";
            v = s ? cJSON_CreateString(s) : cJSON_CreateNull();
            break;
        }
        case CFG_T_INT: v = cJSON_CreateNumber((double)cfg_int_get(c, o)); break;
        case CFG_T_SIZE:
            /* "32M" where that is exact: what a person would write. */
            cfg_format_size(cfg_int_get(c, o), buf, sizeof buf);
            v = strpbrk(buf, "KMGT") ? cJSON_CreateString(buf)
                                     : cJSON_CreateNumber((double)cfg_int_get(c, o));
            break;
        case CFG_T_FLOAT: v = cJSON_CreateNumber(cfg_float_get(c, o)); break;
        case CFG_T_BOOL: v = cJSON_CreateBool(cfg_int_get(c, o) != 0); break;
        case CFG_T_ENUM:
            v = cJSON_CreateString(cfg_format_value(c, o, buf, sizeof buf));
            break;
        case CFG_T_LIST: break; /* no serve option is a list */
        }
        CHECK(v);
        cJSON_AddItemToObject(root, o->key, v);
    }
    char *text = cJSON_Print(root);
    CHECK(text);
    char *out = xstrdup(text);
    cJSON_free(text);
    cJSON_Delete(root);
    return out;
}
