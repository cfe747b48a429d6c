/*
 * jinja_filter.c - the filters (x | trim) and tests (x is defined) of the subset.
 *
 * Each follows jinja2/filters.py and tests.py, except tojson, which is transformers'
 * override: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys), no
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
    "trim",       "tojson",     "length",  "count",  "upper", "lower",
    "title",      "capitalize", "default", "d",      "join",  "items",
    "selectattr", "rejectattr", "select",  "reject", "map",   "first",
    "last",       "list",       "string",  "int",    "float", "abs",
    "replace",    "reverse",    "safe",    "indent", NULL};

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
        return jinja_list_walk(s, at, v.u.list);
    }
    struct jlist *l = jinja_list_new(s);
    if (!l) return -1;
    *out = l;
    if (v.t == JV_UNDEF) return 0;
    if (v.t == JV_DICT) {
        for (size_t i = 0; i < v.u.dict->n; i++)
            if (jinja_list_push(s, l, v.u.dict->k[i])) return -1;
        return 0;
    }
    if (v.t == JV_STR) {
        for (size_t i = 0; i < v.u.str.n;) {
            int32_t c;
            size_t k = jinja_str_decode(v.u.str.s + i, v.u.str.n - i, &c);
            if (jinja_list_push(s, l, jinja_v_str(v.u.str.s + i, k))) return -1;
            i += k;
        }
        return 0;
    }
    return jinja_err(s, at, ENG_EINVAL, "'%s' object is not iterable",
                     jinja_v_type_name(v));
}

/* item.attr for selectattr / map: dict keys, with "a.b" going deeper as Jinja allows */
static struct jv attr_of(struct jv item, struct jv name)
{
    const char *p = name.u.str.s, *end = p + name.u.str.n;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(end - p);
        if (item.t != JV_DICT && item.t != JV_NS) return jinja_v_undef("attribute");
        struct jv *v = jinja_dict_get(item.u.dict, p, len);
        if (!v) return jinja_v_undef("attribute");
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
    struct jlist *in, *l = jinja_list_new(s);
    if (!l || as_list(s, at, v, &in)) return -1;
    if (by_attr && (n < 1 || args[0].t != JV_STR))
        return jinja_err(s, at, ENG_EINVAL, "%s needs an attribute name", name);
    int t0 = by_attr ? 1 : 0;
    if (n > t0 && args[t0].t != JV_STR)
        return jinja_err(s, at, ENG_EINVAL, "%s: the test name must be a string", name);
    char test[32] = "";
    if (n > t0) {
        snprintf(test, sizeof test, "%.*s", (int)MIN(args[t0].u.str.n, 31),
                 args[t0].u.str.s);
        if (!jinja_has_test(test))
            return jinja_err(s, at, ENG_EUNSUPPORTED, "test '%s' is not supported", test);
    }
    for (size_t i = 0; i < in->n; i++) {
        struct jv x = by_attr ? attr_of(in->v[i], args[0]) : in->v[i];
        int r;
        if (test[0]) {
            if (jinja_test(s, at, test, x, args + t0 + 1, n - t0 - 1, &r)) return -1;
        } else {
            r = jinja_v_truthy(x);
        }
        if (r == keep && jinja_list_push(s, l, in->v[i])) return -1;
    }
    l->kind = JL_GEN;
    *out = (struct jv){.t = JV_LIST, .u.list = l};
    return 0;
}

static int filter_join(struct jinja_state *s, const struct jnode *at, struct jv v,
                       const struct jv *args, int n, const char **kwn, const struct jv *kwv,
                       int n_kw, struct jv *out)
{
    struct jlist *in;
    struct jv sep = n ? args[0] : jinja_v_str("", 0);
    const struct jv *attr = n > 1 ? &args[1] : kwarg(kwn, kwv, n_kw, "attribute");
    if (sep.t != JV_STR)
        return jinja_err(s, at, ENG_EINVAL, "join: the separator must be a string");
    if (attr && attr->t != JV_STR)
        return jinja_err(s, at, ENG_EINVAL, "join: bad attribute");
    if (as_list(s, at, v, &in)) return -1;
    struct jbuf b = {0};
    for (size_t i = 0; i < in->n; i++) {
        struct jv x = attr ? attr_of(in->v[i], *attr) : in->v[i];
        if ((i && jinja_buf_add(s, &b, sep.u.str.s, sep.u.str.n)) ||
            jinja_v_to_str(s, &b, x))
            return -1;
    }
    *out = jinja_v_str(b.p ? b.p : "", b.n);
    return 0;
}

static int filter_tojson(struct jinja_state *s, const struct jnode *at, struct jv v,
                         const struct jv *args, int n, const char **kwn,
                         const struct jv *kwv, int n_kw, struct jv *out)
{
    int indent = -1;
    /* transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
     * sort_keys=False) */
    struct jv ea = n > 0 ? args[0] : jinja_v_bool(0),
              ind = n > 1 ? args[1] : jinja_v_none(),
              sep = n > 2 ? args[2] : jinja_v_none(),
              sk = n > 3 ? args[3] : jinja_v_bool(0);
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
            return jinja_err(s, at, ENG_EINVAL, "tojson() has no argument '%s'", kwn[i]);
    }
    if (jinja_v_truthy(ea))
        return jinja_err(s, at, ENG_EUNSUPPORTED, "tojson(ensure_ascii=true)");
    struct jjson_fmt f = {.indent = -1};
    if (sep.t != JV_NONE) {
        /* separators=(item, key): two strings, as json.dumps takes them */
        struct jv a, k;
        if (sep.t != JV_LIST || sep.u.list->n != 2 || sep.u.list->v[0].t != JV_STR ||
            sep.u.list->v[1].t != JV_STR)
            return jinja_err(s, at, ENG_EINVAL, "tojson: separators must be two strings");
        struct jv *sv = sep.u.list->v;
        /* copies: the separators must end in a NUL */
        if (jinja_v_str_dup(s, sv[0].u.str.s, sv[0].u.str.n, &a) ||
            jinja_v_str_dup(s, sv[1].u.str.s, sv[1].u.str.n, &k))
            return -1;
        f.item_sep = a.u.str.s;
        f.key_sep = k.u.str.s;
    }
    if (ind.t == JV_INT)
        indent = (int)MAX(0, MIN(ind.u.i, 64));
    else if (ind.t != JV_NONE)
        return jinja_err(s, at, ENG_EUNSUPPORTED, "tojson(indent=<not an int>)");
    f.indent = indent;
    f.sort_keys = jinja_v_truthy(sk);
    struct jbuf b = {0};
    if (jinja_v_to_json(s, at, &b, v, &f, 0)) return -1;
    *out = jinja_v_str(b.p ? b.p : "", b.n);
    return 0;
}

/* Python's str.splitlines() boundaries: \n \r \r\n \v \f \x1c-\x1e \x85 U+2028 U+2029.
 * Returns the length of the line break at p, 0 when there is none. */
static size_t line_break(const char *p, size_t n)
{
    unsigned char c = (unsigned char)p[0];
    if (c == '\r') return n > 1 && p[1] == '\n' ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) return 1;
    if (n >= 2 && c == 0xC2 && (unsigned char)p[1] == 0x85) return 2;
    if (n >= 3 && c == 0xE2 && (unsigned char)p[1] == 0x80 &&
        ((unsigned char)p[2] == 0xA8 || (unsigned char)p[2] == 0xA9))
        return 3;
    return 0;
}

/* indent(width=4, first=False, blank=False), as jinja2.filters.do_indent: the text's
 * lines joined with "\n" + the indent, the first and blank lines left alone unless
 * asked. */
static int filter_indent(struct jinja_state *s, const struct jnode *at, struct jv str,
                         const struct jv *args, int n, const char **kwn,
                         const struct jv *kwv, int n_kw, struct jv *out)
{
    struct jv width = n > 0 ? args[0] : jinja_v_int(4);
    int first = n > 1 ? jinja_v_truthy(args[1]) : 0,
        blank = n > 2 ? jinja_v_truthy(args[2]) : 0;
    for (int i = 0; i < n_kw; i++) {
        if (!strcmp(kwn[i], "width"))
            width = kwv[i];
        else if (!strcmp(kwn[i], "first"))
            first = jinja_v_truthy(kwv[i]);
        else if (!strcmp(kwn[i], "blank"))
            blank = jinja_v_truthy(kwv[i]);
        else
            return jinja_err(s, at, ENG_EINVAL, "indent() has no argument '%s'", kwn[i]);
    }
    struct jbuf ind = {0}, b = {0};
    if (width.t == JV_STR) {
        if (jinja_buf_add(s, &ind, width.u.str.s, width.u.str.n)) return -1;
    } else if (width.t == JV_INT && width.u.i >= 0 && width.u.i <= 256) {
        for (long long i = 0; i < width.u.i; i++)
            if (jinja_buf_add(s, &ind, " ", 1)) return -1;
    } else {
        return jinja_err(s, at, ENG_EINVAL,
                         "indent: width must be a small int or a string");
    }
    if (first && jinja_buf_add(s, &b, ind.p, ind.n)) return -1;
    const char *p = str.u.str.s, *end = p + str.u.str.n;
    /* splitlines() of text + "\n": the pieces between line breaks, the last one too
     * (empty when the text ends with a break) */
    for (int line_no = 0;; line_no++) {
        const char *q = p;
        size_t br = 0;
        while (q < end && !(br = line_break(q, (size_t)(end - q))))
            q++;
        if (line_no > 0) {
            if (jinja_buf_add(s, &b, "\n", 1)) return -1;
            if ((blank || q > p) && jinja_buf_add(s, &b, ind.p, ind.n)) return -1;
        }
        if (jinja_buf_add(s, &b, p, (size_t)(q - p))) return -1;
        if (q >= end) break;
        p = q + br;
    }
    *out = jinja_v_str(b.p ? b.p : "", b.n);
    return 0;
}

int jinja_filter(struct jinja_state *s, const struct jnode *at, const char *name,
                 struct jv v, const struct jv *args, int n, const char **kwn,
                 const struct jv *kwv, int n_kw, struct jv *out)
{
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        struct jv def = n ? args[0] : jinja_v_str("", 0);
        int boolean = n > 1 ? jinja_v_truthy(args[1]) : 0;
        const struct jv *kb = kwarg(kwn, kwv, n_kw, "boolean");
        if (kb) boolean = jinja_v_truthy(*kb);
        *out = (v.t == JV_UNDEF || (boolean && !jinja_v_truthy(v))) ? def : v;
        return 0;
    }
    if (!strcmp(name, "tojson"))
        return filter_tojson(s, at, v, args, n, kwn, kwv, n_kw, out);
    if (!strcmp(name, "join")) return filter_join(s, at, v, args, n, kwn, kwv, n_kw, out);
    if (strstr(name, "select") || strstr(name, "reject"))
        return filter_select(s, at, name, v, args, n, out);
    if (n_kw && strcmp(name, "map") && strcmp(name, "indent"))
        return jinja_err(s, at, ENG_EUNSUPPORTED, "keyword arguments to the '%s' filter",
                         name);
    if (!strcmp(name, "safe")) return *out = v, 0;
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        if (v.t == JV_STR)
            *out = jinja_v_int((long long)utf8_len(v));
        else if (v.t == JV_LIST && v.u.list->kind == JL_GEN)
            return jinja_err(s, at, ENG_EINVAL, "object of type 'generator' has no len()");
        else if (v.t == JV_LIST)
            *out = jinja_v_int((long long)v.u.list->n);
        else if (v.t == JV_DICT || v.t == JV_NS)
            *out = jinja_v_int((long long)v.u.dict->n);
        else if (v.t == JV_UNDEF)
            *out = jinja_v_int(0);
        else
            return jinja_err(s, at, ENG_EINVAL, "object of type '%s' has no len()",
                             jinja_v_type_name(v));
        return 0;
    }
    if (!strcmp(name, "items")) {
        if (v.t != JV_DICT && v.t != JV_UNDEF)
            return jinja_err(s, at, ENG_EINVAL, "items: a %s is not a mapping",
                             jinja_v_type_name(v));
        if (jinja_str_dict_items(s, v, 2, out)) return -1;
        out->u.list->kind = JL_GEN; /* Jinja's items filter yields: a generator */
        return 0;
    }
    if (!strcmp(name, "list")) {
        struct jlist *l;
        if (as_list(s, at, v, &l)) return -1;
        if (l->kind != JL_LIST) { /* list(x): a list, whatever x was */
            struct jlist *c = jinja_list_new(s);
            if (!c) return -1;
            for (size_t i = 0; i < l->n; i++)
                if (jinja_list_push(s, c, l->v[i])) return -1;
            l = c;
        }
        *out = (struct jv){.t = JV_LIST, .u.list = l};
        return 0;
    }
    if (!strcmp(name, "first") || !strcmp(name, "last") || !strcmp(name, "reverse")) {
        struct jlist *l;
        int was_gen = v.t == JV_LIST && v.u.list->kind == JL_GEN;
        if (name[0] == 'l' && was_gen)
            return jinja_err(s, at, ENG_EINVAL, "'generator' object is not reversible");
        if (as_list(s, at, v, &l)) return -1;
        if (name[0] == 'f')
            *out = l->n ? l->v[0] : jinja_v_undef("first");
        else if (name[0] == 'l')
            *out = l->n ? l->v[l->n - 1] : jinja_v_undef("last");
        else {
            struct jlist *r = jinja_list_new(s);
            if (!r) return -1;
            for (size_t i = l->n; i-- > 0;)
                if (jinja_list_push(s, r, l->v[i])) return -1;
            if (v.t == JV_STR) {
                struct jv joined = {.t = JV_LIST, .u.list = r};
                struct jv empty = jinja_v_str("", 0);
                return filter_join(s, at, joined, &empty, 1, NULL, NULL, 0, out);
            }
            /* reversed(x) is an iterator; Jinja lists a generator first (do_reverse) */
            r->kind = was_gen ? JL_LIST : JL_GEN;
            *out = (struct jv){.t = JV_LIST, .u.list = r};
        }
        return 0;
    }
    if (!strcmp(name, "map")) {
        const struct jv *attr = kwarg(kwn, kwv, n_kw, "attribute");
        if (!attr || attr->t != JV_STR || n)
            return jinja_err(s, at, ENG_EUNSUPPORTED,
                             "map is supported only as map(attribute=...)");
        struct jlist *in, *l = jinja_list_new(s);
        if (!l || as_list(s, at, v, &in)) return -1;
        for (size_t i = 0; i < in->n; i++) {
            struct jv x = attr_of(in->v[i], *attr);
            const struct jv *def = kwarg(kwn, kwv, n_kw, "default");
            if (x.t == JV_UNDEF && def) x = *def;
            if (jinja_list_push(s, l, x)) return -1;
        }
        l->kind = JL_GEN;
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
            if (isnan(d)) return *out = n ? args[0] : jinja_v_int(0), 0;
        } else if (name[0] != 'a') {
            return *out =
                       n ? args[0] : (name[0] == 'i' ? jinja_v_int(0) : jinja_v_float(0)),
                   0;
        } else {
            return jinja_err(s, at, ENG_EINVAL, "bad operand type for abs(): '%s'",
                             jinja_v_type_name(v));
        }
        if (name[0] == 'i')
            *out = jinja_v_int((long long)d);
        else if (name[0] == 'f')
            *out = jinja_v_float(d);
        else
            *out = v.t == JV_FLOAT ? jinja_v_float(fabs(d))
                                   : jinja_v_int(llabs(v.t == JV_INT ? v.u.i : v.u.b));
        return 0;
    }
    /* the rest work on text: anything else is printed first, as Jinja's soft_str does */
    struct jv str;
    if (jinja_v_stringify(s, v, &str)) return -1;
    if (!strcmp(name, "string")) return *out = str, 0;
    if (!strcmp(name, "trim")) {
        if (n && args[0].t != JV_STR && args[0].t != JV_NONE)
            return jinja_err(s, at, ENG_EINVAL, "trim: chars must be a string");
        *out = jinja_str_strip(str, n ? args[0] : jinja_v_none(), 1, 1);
        return 0;
    }
    if (!strcmp(name, "indent"))
        return filter_indent(s, at, str, args, n, kwn, kwv, n_kw, out);
    if (!strcmp(name, "replace")) {
        if (n < 2 || args[0].t != JV_STR || args[1].t != JV_STR ||
            (n > 2 && args[2].t != JV_INT))
            return jinja_err(s, at, ENG_EINVAL, "replace(old, new[, count]) takes strings");
        return jinja_str_replace(s, str, args[0], args[1], n > 2 ? args[2].u.i : -1, out);
    }
    if (n) return jinja_err(s, at, ENG_EINVAL, "the '%s' filter takes no arguments", name);
    return jinja_str_case_filter(s, str, name, out);
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
    enum jinja_v_type t = v.t;
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
    else if (!strcmp(name, "sequence")) /* len() and [i]: not a generator nor a dict view */
        *out = t == JV_STR || t == JV_DICT ||
               (t == JV_LIST && (v.u.list->kind <= JL_TUPLE || v.u.list->kind == JL_RANGE));
    else if (!strcmp(name, "callable"))
        *out = t == JV_MACRO || t == JV_FUNC || t == JV_CALLER;
    else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        struct jv c;
        if (t != JV_STR) return *out = 0, 0;
        if (jinja_str_case_filter(s, v, name, &c)) return -1;
        *out = jinja_v_equal(s, c, v);
    } else if (!strcmp(name, "even") || !strcmp(name, "odd") ||
               !strcmp(name, "divisibleby")) {
        long long d = 2;
        if (name[0] == 'd') {
            if (n != 1 || args[0].t != JV_INT || args[0].u.i == 0)
                return jinja_err(s, at, ENG_EINVAL, "divisibleby needs a non-zero int");
            d = args[0].u.i;
        }
        if (t != JV_INT) return jinja_err(s, at, ENG_EINVAL, "'%s' needs an int", name);
        long long r = v.u.i % d;
        *out = name[0] == 'o' ? r != 0 : r == 0;
    } else if (!strcmp(name, "in")) {
        if (n != 1) return jinja_err(s, at, ENG_EINVAL, "'in' needs one argument");
        struct jv h = args[0];
        *out = 0;
        if (h.t == JV_LIST)
            for (size_t i = 0; i < h.u.list->n; i++)
                *out |= jinja_v_equal(s, v, h.u.list->v[i]);
        else if (h.t == JV_DICT && t == JV_STR)
            *out = jinja_dict_get(h.u.dict, v.u.str.s, v.u.str.n) != NULL;
        else if (h.t == JV_STR && t == JV_STR)
            *out = v.u.str.n == 0 ||
                   memmem(h.u.str.s, h.u.str.n, v.u.str.s, v.u.str.n) != NULL;
        else
            return jinja_err(s, at, ENG_EINVAL, "'in' test on a %s", jinja_v_type_name(h));
    } else {
        /* comparisons: eq equalto sameas ne lt lessthan le gt greaterthan ge */
        if (n != 1)
            return jinja_err(s, at, ENG_EINVAL, "test '%s' needs one argument", name);
        if (!strcmp(name, "eq") || !strcmp(name, "equalto"))
            *out = jinja_v_equal(s, v, args[0]);
        else if (!strcmp(name, "sameas"))
            *out = t == args[0].t && (t == JV_NONE || t == JV_BOOL) &&
                   jinja_v_equal(s, v, args[0]);
        else if (!strcmp(name, "ne"))
            *out = !jinja_v_equal(s, v, args[0]);
        else {
            int c;
            if (num_cmp(v, args[0], &c))
                return jinja_err(s, at, ENG_EINVAL, "test '%s' cannot compare %s and %s",
                                 name, jinja_v_type_name(v), jinja_v_type_name(args[0]));
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
