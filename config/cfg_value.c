/*
 * cfg_value.c - values into the fields of struct cfg and back out as text: command
 * line text ("512M", "true", "h2o") and JSON values, each checked against its row's
 * type and range (cfg_table.c), strings copied, lists appended; freeing and copying
 * a struct cfg through the table.
 *
 * Owns: nothing; the strings it stores belong to the struct cfg.
 * Thread: any (no mutable state).
 */
#include "cfg.h"
#include "cfg_impl.h"

#include "err.h"
#include "util.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

char **cfg_str_field(struct cfg *c, const struct cfg_opt *o)
{
    return (char **)((char *)c + o->offset);
}

int64_t cfg_int_get(const struct cfg *c, const struct cfg_opt *o)
{
    const char *p = (const char *)c + o->offset;
    if (o->type == CFG_T_BOOL) return *(const bool *)p;
    if (o->type == CFG_T_ENUM) return *(const int *)p;
    if (o->size == sizeof(int32_t)) return *(const int32_t *)p;
    return *(const int64_t *)p;
}

double cfg_float_get(const struct cfg *c, const struct cfg_opt *o)
{
    return *(const double *)((const char *)c + o->offset);
}

const char *cfg_str_get(const struct cfg *c, const struct cfg_opt *o)
{
    return *(char *const *)((const char *)c + o->offset);
}

const struct cfg_list *cfg_list_get(const struct cfg *c, const struct cfg_opt *o)
{
    return (const struct cfg_list *)((const char *)c + o->offset);
}

/* Store a checked value into o's field; strings are copied, the old one freed; a
 * list gets one more item. */
static void store(struct cfg *c, const struct cfg_opt *o, const struct cfg_val *v)
{
    char *p = (char *)c + o->offset;
    switch (o->type) {
    case CFG_T_LIST: {
        struct cfg_list *l = (struct cfg_list *)p;
        l->items = xrealloc(l->items, (size_t)(l->n + 1) * sizeof *l->items);
        l->items[l->n++] = xstrdup(v->s ? v->s : "");
        break;
    }
    case CFG_T_STR: {
        char **s = (char **)p;
        free(*s);
        *s = v->s ? xstrdup(v->s) : NULL;
        break;
    }
    case CFG_T_BOOL: *(bool *)p = v->i != 0; break;
    case CFG_T_ENUM: *(int *)p = (int)v->i; break;
    case CFG_T_FLOAT: *(double *)p = v->f; break;
    case CFG_T_INT:
    case CFG_T_SIZE:
        if (o->size == sizeof(int32_t))
            *(int32_t *)p = (int32_t)v->i;
        else
            *(int64_t *)p = v->i;
        break;
    }
}

/* Ranges print as integers for integer types and as sizes for sizes. */
static void fmt_num(const struct cfg_opt *o, double x, char *buf, size_t len)
{
    if (o->type == CFG_T_SIZE)
        cfg_format_size((int64_t)x, buf, len);
    else if (o->type == CFG_T_FLOAT)
        snprintf(buf, len, "%g", x);
    else
        snprintf(buf, len, "%.0f", x);
}

int cfg_range_error(const struct cfg_opt *o, const char *who, const char *got)
{
    char lo[32], hi[32];
    fmt_num(o, o->min, lo, sizeof lo);
    fmt_num(o, o->max, hi, sizeof hi);
    const char *what = o->type == CFG_T_SIZE    ? "a size"
                       : o->type == CFG_T_FLOAT ? "a number"
                                                : "an integer";
    return err_set(ENG_EINVAL, "%s wants %s in [%s, %s], got %s", who, what, lo, hi, got);
}

/* Whole bytes from "123", "1.5G", "512M", "64KiB", "2gb", "100B" (powers of 1024). No
 * sign, exponent or hex: a size is digits, an optional fraction and a unit. */
static int parse_size(const char *s, double *out)
{
    static const char units[] = "kmgt";
    size_t n = strspn(s, "0123456789.");
    char num[64];
    if (n == 0 || n >= sizeof num) return -1;
    memcpy(num, s, n);
    num[n] = '\0';
    char *end;
    double v = strtod(num, &end);
    if (*end) return -1; /* "1.2.3" */
    const char *u = s + n;
    int exp = 0;
    const char *k = *u ? strchr(units, tolower((unsigned char)*u)) : NULL;
    if (k) {
        exp = (int)(k - units) + 1;
        u++;
        if (*u == 'i' || *u == 'I') u++;
    }
    if (*u == 'b' || *u == 'B') u++;
    if (*u) return -1;
    v *= pow(1024.0, exp);
    if (!isfinite(v) || v != floor(v)) return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, int64_t *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) return *out = 1, 0;
        if (strcasecmp(s, no[i]) == 0) return *out = 0, 0;
    }
    return -1;
}

int cfg_enum_parse(const struct cfg_opt *o, const char *s, const char *who, int64_t *out)
{
    for (int i = 0; o->values[i]; i++)
        if (strcmp(o->values[i], s) == 0) return *out = i, 0;
    /* An alias is normalised here, so the struct only ever holds canonical values. */
    for (const struct cfg_enum_alias *a = o->value_aliases; a && a->name; a++)
        if (strcmp(a->name, s) == 0) return *out = a->value, 0;
    /* The choices in prose ("cpu, cuda or auto"), then any aliases ("(or float32,
     * half)"): once, as a reader wants them. */
    char prose[256] = "";
    int n = 0;
    while (o->values[n])
        n++;
    for (int i = 0; i < n; i++) {
        strncat(prose,
                i == 0       ? ""
                : i == n - 1 ? " or "
                             : ", ",
                sizeof prose - strlen(prose) - 1);
        strncat(prose, o->values[i], sizeof prose - strlen(prose) - 1);
    }
    for (const struct cfg_enum_alias *a = o->value_aliases; a && a->name; a++) {
        strncat(prose, a == o->value_aliases ? " (or " : ", ",
                sizeof prose - strlen(prose) - 1);
        strncat(prose, a->name, sizeof prose - strlen(prose) - 1);
        if (!a[1].name) strncat(prose, ")", sizeof prose - strlen(prose) - 1);
    }
    return err_set(ENG_EINVAL, "%s wants %s, got '%.64s'", who, prose, s);
}

int cfg_opt_set(struct cfg *c, const struct cfg_opt *o, const struct cfg_val *v,
                const char *who)
{
    struct cfg_val w = *v;
    char got[48];
    switch (o->type) {
    case CFG_T_STR:
        /* An empty secret is refused, not taken for unset: --api-key "" (an unset
         * shell variable) would otherwise turn authentication off without a word. */
        if ((o->flags & CFG_F_SECRET) && w.s && !w.s[0])
            return err_set(ENG_EINVAL, "%s must not be empty (leave it unset for %s)", who,
                           o->dflt_note ? o->dflt_note : "no authentication");
        if ((o->flags & CFG_F_NULLABLE) && w.s && !w.s[0]) w.s = NULL;
        break;
    case CFG_T_LIST:
        if ((double)cfg_list_get(c, o)->n >= o->max)
            return err_set(ENG_EINVAL, "%s is given more than %.0f times", who, o->max);
        break;
    case CFG_T_INT:
    case CFG_T_SIZE:
        /* w.f holds the number; ranges never reach past 2^63, so the cast is safe once
         * it is inside them. */
        if (!(w.f >= o->min && w.f <= o->max)) {
            snprintf(got, sizeof got, "%.17g", w.f);
            return cfg_range_error(o, who, got);
        }
        if (w.f != floor(w.f))
            return err_set(ENG_EINVAL, "%s wants a whole number, got %.17g", who, w.f);
        w.i = (int64_t)w.f;
        break;
    case CFG_T_FLOAT:
        if (!(w.f >= o->min && w.f <= o->max)) {
            snprintf(got, sizeof got, "%.17g", w.f);
            return cfg_range_error(o, who, got);
        }
        break;
    case CFG_T_BOOL:
    case CFG_T_ENUM: break;
    }
    store(c, o, &w);
    return 0;
}

int cfg_opt_set_text(struct cfg *c, const struct cfg_opt *o, const char *s, const char *who)
{
    struct cfg_val v = {0};
    char *end;
    switch (o->type) {
    case CFG_T_STR:
    case CFG_T_LIST: v.s = s; break;
    case CFG_T_INT:
        /* strtod, not strtoll, so that "1e3" works and out-of-range numbers reach the
         * range check as numbers rather than as ERANGE. No hex, no spaces. */
        v.f = strtod(s, &end);
        if (end == s || *end || isspace((unsigned char)s[0]) || strpbrk(s, "xXnN"))
            return err_set(ENG_EINVAL, "%s wants an integer, got '%.64s'", who, s);
        break;
    case CFG_T_SIZE:
        if (parse_size(s, &v.f))
            return err_set(ENG_EINVAL,
                           "%s wants a size in bytes like 65536, 512M or 2G, got '%.64s'",
                           who, s);
        break;
    case CFG_T_FLOAT:
        v.f = strtod(s, &end);
        if (end == s || *end || isspace((unsigned char)s[0]) || strpbrk(s, "xX") ||
            !isfinite(v.f))
            return err_set(ENG_EINVAL, "%s wants a number, got '%.64s'", who, s);
        break;
    case CFG_T_BOOL:
        if (parse_bool(s, &v.i))
            return err_set(ENG_EINVAL, "%s wants true or false, got '%.64s'", who, s);
        break;
    case CFG_T_ENUM:
        if (cfg_enum_parse(o, s, who, &v.i)) return ENG_EINVAL;
        break;
    }
    return cfg_opt_set(c, o, &v, who);
}

int cfg_set(struct cfg *c, const char *name, const char *value)
{
    const struct cfg_opt *o = cfg_find(name);
    if (!o) return err_set(ENG_ENOTFOUND, "unknown option '%.64s'", name);
    char who[80];
    cfg_flag_of(o, who, sizeof who);
    return cfg_opt_set_text(c, o, value, who);
}

void cfg_free(struct cfg *c)
{
    if (!c) return;
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    for (size_t i = 0; i < n; i++) {
        if (t[i].type == CFG_T_LIST) {
            struct cfg_list *l = (struct cfg_list *)((char *)c + t[i].offset);
            for (int32_t k = 0; k < l->n; k++)
                free(l->items[k]);
            free(l->items);
            *l = (struct cfg_list){0};
        } else if (t[i].type == CFG_T_STR) {
            char **s = cfg_str_field(c, &t[i]);
            free(*s);
            *s = NULL;
        }
    }
}

void cfg_copy(struct cfg *dst, const struct cfg *src)
{
    *dst = *src;
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    for (size_t i = 0; i < n; i++) {
        if (t[i].type == CFG_T_LIST) {
            struct cfg_list *l = (struct cfg_list *)((char *)dst + t[i].offset);
            char **items = l->n ? xmalloc((size_t)l->n * sizeof *items) : NULL;
            for (int32_t k = 0; k < l->n; k++)
                items[k] = xstrdup(l->items[k]);
            l->items = items;
        } else if (t[i].type == CFG_T_STR) {
            char **s = cfg_str_field(dst, &t[i]);
            if (*s) *s = xstrdup(*s);
        }
    }
}

void cfg_format_size(int64_t v, char *buf, size_t len)
{
    static const char units[] = "TGMK";
    for (int i = 0; i < 4 && v != 0; i++) {
        int64_t u = (int64_t)1 << (10 * (4 - i));
        if (v % u == 0) {
            snprintf(buf, len, "%lld%c", (long long)(v / u), units[i]);
            return;
        }
    }
    snprintf(buf, len, "%lld", (long long)v);
}

char *cfg_format_value(const struct cfg *c, const struct cfg_opt *o, char *buf, size_t len)
{
    int64_t v;
    const char *s;
    switch (o->type) {
    case CFG_T_STR:
        s = cfg_str_get(c, o);
        snprintf(buf, len, "%s", s ? s : "none");
        break;
    case CFG_T_INT: snprintf(buf, len, "%lld", (long long)cfg_int_get(c, o)); break;
    case CFG_T_SIZE: cfg_format_size(cfg_int_get(c, o), buf, len); break;
    case CFG_T_FLOAT: snprintf(buf, len, "%g", cfg_float_get(c, o)); break;
    case CFG_T_BOOL: snprintf(buf, len, "%s", cfg_int_get(c, o) ? "true" : "false"); break;
    case CFG_T_LIST: {
        /* "a, b" (as given), "none" when empty. */
        const struct cfg_list *l = cfg_list_get(c, o);
        snprintf(buf, len, "%s", l->n ? "" : "none");
        for (int32_t k = 0; k < l->n; k++) {
            size_t at = strlen(buf);
            snprintf(buf + at, len - at, "%s%s", k ? ", " : "", l->items[k]);
        }
        break;
    }
    case CFG_T_ENUM: {
        v = cfg_int_get(c, o);
        int n = 0;
        while (o->values[n])
            n++;
        snprintf(buf, len, "%s", v >= 0 && v < n ? o->values[v] : "?");
        break;
    }
    }
    return buf;
}
