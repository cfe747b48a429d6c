/*
 * jinja_filter.c - the filters (x | trim) and tests (x is defined) of the subset.
 *
 * Each follows jinja2/filters.py and tests.py, except tojson, which is transformers'
 * override: json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys), no
 * HTML escaping. The names are checked when a template compiles (jinja_has_filter /
 * jinja_has_test), so a filter outside this list never reaches a render.
 * Thread: the render's.
 */
#include "jinja_impl.h"
#include "jinja_str.h"

#include "err.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const filters[] = {
    "trim",       "tojson",  "length", "count",   "upper",   "lower",      "title",
    "capitalize", "default", "d",      "join",    "items",   "selectattr", "rejectattr",
    "select",     "reject",  "map",    "first",   "last",    "list",       "string",
    "int",        "float",   "abs",    "replace", "reverse", "safe",       NULL};

static const char *const tests[] = {
    "defined", "undefined", "none",        "string",  "number",      "integer",  "float",
    "boolean", "true",      "false",       "mapping", "iterable",    "sequence", "callable",
    "even",    "odd",       "divisibleby", "eq",      "equalto",     "sameas",   "ne",
    "lt",      "lessthan",  "le",          "gt",      "greaterthan", "ge",       "in",
    "lower",   "upper",     NULL};

static int in_list(const char *const *l, const char *name)
{
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], name)) return 1;
    return 0;
}

int jinja_has_filter(const char *name)
{
    return in_list(filters, name);
}
int jinja_has_test(const char *name)
{
    return in_list(tests, name);
}

static size_t utf8_len(struct jv v)
{
    size_t n = 0;
    for (size_t i = 0; i < v.u.str.n; i++)
        n += ((unsigned char)v.u.str.s[i] & 0xC0) != 0x80;
    return n;
}

static const struct jv *kwarg(const char **names, const struct jv *vals, int n,
                              const char *k)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], k)) return &vals[i];
    return NULL;
}

/* A value as a list, as list(x) gives it (for first / last / reverse / select ...). */
static int as_list(struct jinja_state *s, const struct jnode *at, struct jv v,
                   struct jlist **out)
{
    if (v.t == JV_LIST) {
        *out = v.u.list;
        return 0;
    }
    struct jlist *l = jlist_new(s);
    if (!l) return -1;
    *out = l;
    if (v.t == JV_UNDEF) return 0;
    if (v.t == JV_DICT) {
        for (size_t i = 0; i < v.u.dict->n; i++)
            if (jlist_push(s, l, v.u.dict->k[i])) return -1;
        return 0;
    }
    if (v.t == JV_STR) {
        for (size_t i = 0; i < v.u.str.n;) {
            int32_t c;
            size_t k = jstr_decode(v.u.str.s + i, v.u.str.n - i, &c);
            if (jlist_push(s, l, jv_str(v.u.str.s + i, k))) return -1;
            i += k;
        }
        return 0;
    }
    return jerr(s, at, ENG_EINVAL, "'%s' object is not iterable", jv_type_name(v));
}

/* item.attr for selectattr / map: dict keys, with "a.b" going deeper as Jinja allows */
static struct jv attr_of(struct jv item, struct jv name)
{
    const char *p = name.u.str.s, *end = p + name.u.str.n;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
        if (item.t != JV_DICT && item.t != JV_NS) return jv_undef("attribute");
        struct jv *v = jdict_get(item.u.dict, p, len);
        if (!v) return jv_undef("attribute");
        item = *v;
        if (!dot) break;
        p = dot + 1;
    }
    return item;
}

/* select / reject / selectattr / rejectattr */
static int filter_select(struct jinja_state *s, const struct jnode *at, const char *name,
                         struct jv v, const struct jv *args, int n, struct jv *out)
{
    int by_attr = strstr(name, "attr") != NULL, keep = name[0] == 's';
    struct jlist *in, *l = jlist_new(s);
    if (!l || as_list(s, at, v, &in)) return -1;
    if (by_attr && (n < 1 || args[0].t != JV_STR))
        return jerr(s, at, ENG_EINVAL, "%s needs an attribute name", name);
    int t0 = by_attr ? 1 : 0;
    if (n > t0 && args[t0].t != JV_STR)
        return jerr(s, at, ENG_EINVAL, "%s: the test name must be a string", name);
    char test[32] = "";
    if (n > t0) {
        snprintf(test, sizeof test, "%.*s", (int)MIN(args[t0].u.str.n, 31),
                 args[t0].u.str.s);
        if (!jinja_has_test(test))
            return jerr(s, at, ENG_EUNSUPPORTED, "test '%s' is not supported", test);
    }
    for (size_t i = 0; i < in->n; i++) {
        struct jv x = by_attr ? attr_of(in->v[i], args[0]) : in->v[i];
        int r;
        if (test[0]) {
            if (jinja_test(s, at, test, x, args + t0 + 1, n - t0 - 1, &r)) return -1;
        } else {
            r = jv_truthy(x);
        }
        if (r == keep && jlist_push(s, l, in->v[i])) return -1;
    }
    *out = (struct jv){.t = JV_LIST, .u.list = l};
    return 0;
}

static int filter_join(struct jinja_state *s, const struct jnode *at, struct jv v,
                       const struct jv *args, int n, const char **kwn, const struct jv *kwv,
                       int n_kw, struct jv *out)
{
    struct jlist *in;
    struct jv sep = n ? args[0] : jv_str("", 0);
    const struct jv *attr = n > 1 ? &args[1] : kwarg(kwn, kwv, n_kw, "attribute");
    if (sep.t != JV_STR)
        return jerr(s, at, ENG_EINVAL, "join: the separator must be a string");
    if (attr && attr->t != JV_STR) return jerr(s, at, ENG_EINVAL, "join: bad attribute");
    if (as_list(s, at, v, &in)) return -1;
    struct jbuf b = {0};
    for (size_t i = 0; i < in->n; i++) {
        struct jv x = attr ? attr_of(in->v[i], *attr) : in->v[i];
        if ((i && jbuf_add(s, &b, sep.u.str.s, sep.u.str.n)) || jv_to_str(s, &b, x))
            return -1;
    }
    *out = jv_str(b.p ? b.p : "", b.n);
    return 0;
}

static int filter_tojson(struct jinja_state *s, const struct jnode *at, struct jv v,
                         const struct jv *args, int n, const char **kwn,
                         const struct jv *kwv, int n_kw, struct jv *out)
{
    int indent = -1, sort_keys = 0;
    /* transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
     * sort_keys=False) */
    struct jv ea = n > 0 ? args[0] : jv_bool(0), ind = n > 1 ? args[1] : jv_none(),
              sep = n > 2 ? args[2] : jv_none(), sk = n > 3 ? args[3] : jv_bool(0);
    for (int i = 0; i < n_kw; i++) {
        if (!strcmp(kwn[i], "ensure_ascii"))
            ea = kwv[i];
        else if (!strcmp(kwn[i], "indent"))
            ind = kwv[i];
        else if (!strcmp(kwn[i], "separators"))
            sep = kwv[i];
        else if (!strcmp(kwn[i], "sort_keys"))
            sk = kwv[i];
        else
            return jerr(s, at, ENG_EINVAL, "tojson() has no argument '%s'", kwn[i]);
    }
    if (jv_truthy(ea)) return jerr(s, at, ENG_EUNSUPPORTED, "tojson(ensure_ascii=true)");
    if (sep.t != JV_NONE) return jerr(s, at, ENG_EUNSUPPORTED, "tojson(separators=...)");
    if (ind.t == JV_INT)
        indent = (int)MAX(0, MIN(ind.u.i, 64));
    else if (ind.t != JV_NONE)
        return jerr(s, at, ENG_EUNSUPPORTED, "tojson(indent=<not an int>)");
    sort_keys = jv_truthy(sk);
    struct jbuf b = {0};
    if (jv_to_json(s, at, &b, v, indent, sort_keys, 0)) return -1;
    *out = jv_str(b.p ? b.p : "", b.n);
    return 0;
}

int jinja_filter(struct jinja_state *s, const struct jnode *at, const char *name,
                 struct jv v, const struct jv *args, int n, const char **kwn,
                 const struct jv *kwv, int n_kw, struct jv *out)
{
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        struct jv def = n ? args[0] : jv_str("", 0);
        int boolean = n > 1 ? jv_truthy(args[1]) : 0;
        const struct jv *kb = kwarg(kwn, kwv, n_kw, "boolean");
        if (kb) boolean = jv_truthy(*kb);
        *out = (v.t == JV_UNDEF || (boolean && !jv_truthy(v))) ? def : v;
        return 0;
    }
    if (!strcmp(name, "tojson"))
        return filter_tojson(s, at, v, args, n, kwn, kwv, n_kw, out);
    if (!strcmp(name, "join")) return filter_join(s, at, v, args, n, kwn, kwv, n_kw, out);
    if (strstr(name, "select") || strstr(name, "reject"))
        return filter_select(s, at, name, v, args, n, out);
    if (n_kw && strcmp(name, "map"))
        return jerr(s, at, ENG_EUNSUPPORTED, "keyword arguments to the '%s' filter", name);
    if (!strcmp(name, "safe")) return *out = v, 0;
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        if (v.t == JV_STR)
            *out = jv_int((long long)utf8_len(v));
        else if (v.t == JV_LIST)
            *out = jv_int((long long)v.u.list->n);
        else if (v.t == JV_DICT || v.t == JV_NS)
            *out = jv_int((long long)v.u.dict->n);
        else if (v.t == JV_UNDEF)
            *out = jv_int(0);
        else
            return jerr(s, at, ENG_EINVAL, "object of type '%s' has no len()",
                        jv_type_name(v));
        return 0;
    }
    if (!strcmp(name, "items")) {
        if (v.t != JV_DICT && v.t != JV_UNDEF)
            return jerr(s, at, ENG_EINVAL, "items: a %s is not a mapping", jv_type_name(v));
        return jdict_items(s, v, 2, out);
    }
    if (!strcmp(name, "list")) {
        struct jlist *l;
        if (as_list(s, at, v, &l)) return -1;
        *out = (struct jv){.t = JV_LIST, .u.list = l};
        return 0;
    }
    if (!strcmp(name, "first") || !strcmp(name, "last") || !strcmp(name, "reverse")) {
        struct jlist *l;
        if (as_list(s, at, v, &l)) return -1;
        if (name[0] == 'f')
            *out = l->n ? l->v[0] : jv_undef("first");
        else if (name[0] == 'l')
            *out = l->n ? l->v[l->n - 1] : jv_undef("last");
        else {
            struct jlist *r = jlist_new(s);
            if (!r) return -1;
            for (size_t i = l->n; i-- > 0;)
                if (jlist_push(s, r, l->v[i])) return -1;
            if (v.t == JV_STR) {
                struct jv joined = {.t = JV_LIST, .u.list = r};
                struct jv empty = jv_str("", 0);
                return filter_join(s, at, joined, &empty, 1, NULL, NULL, 0, out);
            }
            *out = (struct jv){.t = JV_LIST, .u.list = r};
        }
        return 0;
    }
    if (!strcmp(name, "map")) {
        const struct jv *attr = kwarg(kwn, kwv, n_kw, "attribute");
        if (!attr || attr->t != JV_STR || n)
            return jerr(s, at, ENG_EUNSUPPORTED,
                        "map is supported only as map(attribute=...)");
        struct jlist *in, *l = jlist_new(s);
        if (!l || as_list(s, at, v, &in)) return -1;
        for (size_t i = 0; i < in->n; i++) {
            struct jv x = attr_of(in->v[i], *attr);
            const struct jv *def = kwarg(kwn, kwv, n_kw, "default");
            if (x.t == JV_UNDEF && def) x = *def;
            if (jlist_push(s, l, x)) return -1;
        }
        *out = (struct jv){.t = JV_LIST, .u.list = l};
        return 0;
    }
    if (!strcmp(name, "int") || !strcmp(name, "float") || !strcmp(name, "abs")) {
        double d;
        if (v.t == JV_INT || v.t == JV_BOOL)
            d = (double)(v.t == JV_INT ? v.u.i : v.u.b);
        else if (v.t == JV_FLOAT)
            d = v.u.f;
        else if (v.t == JV_STR && name[0] != 'a') {
            char buf[64];
            snprintf(buf, sizeof buf, "%.*s", (int)MIN(v.u.str.n, 63), v.u.str.s);
            char *e;
            d = strtod(buf, &e);
            if (e == buf) d = n ? NAN : 0; /* Jinja: the default (0) on a bad string */
            if (isnan(d)) return *out = n ? args[0] : jv_int(0), 0;
        } else if (name[0] != 'a') {
            return *out = n ? args[0] : (name[0] == 'i' ? jv_int(0) : jv_float(0)), 0;
        } else {
            return jerr(s, at, ENG_EINVAL, "bad operand type for abs(): '%s'",
                        jv_type_name(v));
        }
        if (name[0] == 'i')
            *out = jv_int((long long)d);
        else if (name[0] == 'f')
            *out = jv_float(d);
        else
            *out = v.t == JV_FLOAT ? jv_float(fabs(d))
                                   : jv_int(llabs(v.t == JV_INT ? v.u.i : v.u.b));
        return 0;
    }
    /* the rest work on text: anything else is printed first, as Jinja's soft_str does */
    struct jv str;
    if (jv_stringify(s, v, &str)) return -1;
    if (!strcmp(name, "string")) return *out = str, 0;
    if (!strcmp(name, "trim")) {
        if (n && args[0].t != JV_STR && args[0].t != JV_NONE)
            return jerr(s, at, ENG_EINVAL, "trim: chars must be a string");
        *out = jstr_strip(str, n ? args[0] : jv_none(), 1, 1);
        return 0;
    }
    if (!strcmp(name, "replace")) {
        if (n < 2 || args[0].t != JV_STR || args[1].t != JV_STR ||
            (n > 2 && args[2].t != JV_INT))
            return jerr(s, at, ENG_EINVAL, "replace(old, new[, count]) takes strings");
        return jstr_replace(s, str, args[0], args[1], n > 2 ? args[2].u.i : -1, out);
    }
    if (n) return jerr(s, at, ENG_EINVAL, "the '%s' filter takes no arguments", name);
    return jstr_case_filter(s, str, name, out);
}

static int num_cmp(struct jv a, struct jv b, int *out)
{
    int an = a.t == JV_INT || a.t == JV_FLOAT || a.t == JV_BOOL;
    int bn = b.t == JV_INT || b.t == JV_FLOAT || b.t == JV_BOOL;
    if (an && bn) {
        double x = a.t == JV_FLOAT ? a.u.f : (double)(a.t == JV_INT ? a.u.i : a.u.b);
        double y = b.t == JV_FLOAT ? b.u.f : (double)(b.t == JV_INT ? b.u.i : b.u.b);
        *out = x < y ? -1 : x > y;
        return 0;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t m = MIN(a.u.str.n, b.u.str.n);
        int c = memcmp(a.u.str.s, b.u.str.s, m);
        *out = c ? (c < 0 ? -1 : 1) : (a.u.str.n < b.u.str.n ? -1 : a.u.str.n > b.u.str.n);
        return 0;
    }
    return -1;
}

int jinja_test(struct jinja_state *s, const struct jnode *at, const char *name, struct jv v,
               const struct jv *args, int n, int *out)
{
    enum jv_type t = v.t;
    if (!strcmp(name, "defined"))
        *out = t != JV_UNDEF;
    else if (!strcmp(name, "undefined"))
        *out = t == JV_UNDEF;
    else if (!strcmp(name, "none"))
        *out = t == JV_NONE;
    else if (!strcmp(name, "string"))
        *out = t == JV_STR;
    else if (!strcmp(name, "number"))
        *out = t == JV_INT || t == JV_FLOAT || t == JV_BOOL;
    else if (!strcmp(name, "integer"))
        *out = t == JV_INT;
    else if (!strcmp(name, "float"))
        *out = t == JV_FLOAT;
    else if (!strcmp(name, "boolean"))
        *out = t == JV_BOOL;
    else if (!strcmp(name, "true"))
        *out = t == JV_BOOL && v.u.b;
    else if (!strcmp(name, "false"))
        *out = t == JV_BOOL && !v.u.b;
    else if (!strcmp(name, "mapping"))
        *out = t == JV_DICT;
    /* an Undefined is iterable (it iterates as nothing), as in Jinja */
    else if (!strcmp(name, "iterable"))
        *out = t == JV_STR || t == JV_LIST || t == JV_DICT || t == JV_UNDEF;
    else if (!strcmp(name, "sequence"))
        *out = t == JV_STR || t == JV_LIST || t == JV_DICT;
    else if (!strcmp(name, "callable"))
        *out = t == JV_MACRO || t == JV_FUNC;
    else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        struct jv c;
        if (t != JV_STR) return *out = 0, 0;
        if (jstr_case_filter(s, v, name, &c)) return -1;
        *out = jv_equal(s, c, v);
    } else if (!strcmp(name, "even") || !strcmp(name, "odd") ||
               !strcmp(name, "divisibleby")) {
        long long d = 2;
        if (name[0] == 'd') {
            if (n != 1 || args[0].t != JV_INT || args[0].u.i == 0)
                return jerr(s, at, ENG_EINVAL, "divisibleby needs a non-zero int");
            d = args[0].u.i;
        }
        if (t != JV_INT) return jerr(s, at, ENG_EINVAL, "'%s' needs an int", name);
        long long r = v.u.i % d;
        *out = name[0] == 'o' ? r != 0 : r == 0;
    } else if (!strcmp(name, "in")) {
        if (n != 1) return jerr(s, at, ENG_EINVAL, "'in' needs one argument");
        struct jv h = args[0];
        *out = 0;
        if (h.t == JV_LIST)
            for (size_t i = 0; i < h.u.list->n; i++)
                *out |= jv_equal(s, v, h.u.list->v[i]);
        else if (h.t == JV_DICT && t == JV_STR)
            *out = jdict_get(h.u.dict, v.u.str.s, v.u.str.n) != NULL;
        else if (h.t == JV_STR && t == JV_STR)
            *out = v.u.str.n == 0 ||
                   memmem(h.u.str.s, h.u.str.n, v.u.str.s, v.u.str.n) != NULL;
        else
            return jerr(s, at, ENG_EINVAL, "'in' test on a %s", jv_type_name(h));
    } else {
        /* comparisons: eq equalto sameas ne lt lessthan le gt greaterthan ge */
        if (n != 1) return jerr(s, at, ENG_EINVAL, "test '%s' needs one argument", name);
        if (!strcmp(name, "eq") || !strcmp(name, "equalto"))
            *out = jv_equal(s, v, args[0]);
        else if (!strcmp(name, "sameas"))
            *out =
                t == args[0].t && (t == JV_NONE || t == JV_BOOL) && jv_equal(s, v, args[0]);
        else if (!strcmp(name, "ne"))
            *out = !jv_equal(s, v, args[0]);
        else {
            int c;
            if (num_cmp(v, args[0], &c))
                return jerr(s, at, ENG_EINVAL, "test '%s' cannot compare %s and %s", name,
                            jv_type_name(v), jv_type_name(args[0]));
            if (!strcmp(name, "lt") || !strcmp(name, "lessthan"))
                *out = c < 0;
            else if (!strcmp(name, "le"))
                *out = c <= 0;
            else if (!strcmp(name, "gt") || !strcmp(name, "greaterthan"))
                *out = c > 0;
            else
                *out = c >= 0;
        }
    }
    return 0;
}
