/*
 * jinja_value.c - the arena and the values of a render: how they compare, how Python
 * would print them (str, repr) and how transformers' tojson writes them.
 *
 * Owns: the arena chunks. Values point into the arena or into the compiled template.
 * Printing follows CPython because the expected prompts come from CPython: str(None) is
 * "None", str(True) "True", a float prints its shortest round-trip repr ("1.0", "0.1"),
 * a list prints as ['a', 1] with repr'd strings; json.dumps escapes only '"', '\\' and
 * control characters (ensure_ascii=False) and uses ", " / ": " (or "," with an indent).
 * Thread: the render's.
 */
#include "jinja_impl.h"

#include "err.h"
#include "util.h"

#include <cJSON.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jinja_chunk {
    struct jinja_chunk *next;
    size_t cap, used;
    _Alignas(16) unsigned char mem[];
};

void *jinja_alloc(struct jinja_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (a->limit && a->used + n > a->limit) return NULL;
    struct jinja_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = MAX(n, (size_t)64 << 10);
        c = xmalloc(sizeof *c + cap);
        c->cap = cap;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->mem + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void jinja_arena_free(struct jinja_arena *a)
{
    for (struct jinja_chunk *c = a->head, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

int jinja_err(struct jinja_state *s, const struct jnode *n, int code, const char *fmt, ...)
{
    if (s->err) return -1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t need = strlen(msg) + 64;
    s->err_msg = xmalloc(need);
    if (n)
        snprintf(s->err_msg, need, "line %d, column %d: %s", n->line, n->col, msg);
    else
        snprintf(s->err_msg, need, "%s", msg);
    s->err = code;
    return -1;
}

/* Arena memory for the render, or an error (the memory limit). */
static void *salloc(struct jinja_state *s, size_t n)
{
    void *p = jinja_alloc(&s->ar, n);
    if (!p)
        jinja_err(s, NULL, ENG_ENOSPC, "the chat template used more than %zu bytes",
                  s->ar.limit);
    return p;
}

struct jv jinja_v_undef(const char *name)
{
    return (struct jv){.t = JV_UNDEF, .undef_name = name};
}
struct jv jinja_v_none(void)
{
    return (struct jv){.t = JV_NONE};
}
struct jv jinja_v_bool(int b)
{
    return (struct jv){.t = JV_BOOL, .u.b = !!b};
}
struct jv jinja_v_int(long long i)
{
    return (struct jv){.t = JV_INT, .u.i = i};
}
struct jv jinja_v_float(double f)
{
    return (struct jv){.t = JV_FLOAT, .u.f = f};
}
struct jv jinja_v_str(const char *p, size_t n)
{
    return (struct jv){.t = JV_STR, .u.str = {p, n}};
}

int jinja_v_str_dup(struct jinja_state *s, const char *p, size_t n, struct jv *out)
{
    char *c = salloc(s, n + 1);
    if (!c) return -1;
    if (n) memcpy(c, p, n);
    *out = jinja_v_str(c, n);
    return 0;
}

struct jlist *jinja_list_new(struct jinja_state *s)
{
    return salloc(s, sizeof(struct jlist));
}

int jinja_list_walk(struct jinja_state *s, const struct jnode *at, struct jlist *l)
{
    if (l->kind != JL_GEN) return 0;
    if (l->consumed)
        return jinja_err(
            s, at, ENG_EUNSUPPORTED,
            "a generator (from select, map, items, reverse) used a second time: "
            "Jinja would find it empty; add |list where it is made");
    l->consumed = 1;
    return 0;
}

int jinja_list_push(struct jinja_state *s, struct jlist *l, struct jv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        struct jv *g = salloc(s, cap * sizeof *g);
        if (!g) return -1;
        if (l->n) memcpy(g, l->v, l->n * sizeof *g);
        l->v = g;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

struct jdict *jinja_dict_new(struct jinja_state *s)
{
    return salloc(s, sizeof(struct jdict));
}

struct jv *jinja_dict_get(const struct jdict *d, const char *k, size_t kn)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].u.str.n == kn && !memcmp(d->k[i].u.str.s, k, kn)) return &d->v[i];
    return NULL;
}

int jinja_dict_set(struct jinja_state *s, struct jdict *d, struct jv k, struct jv v)
{
    struct jv *old = jinja_dict_get(d, k.u.str.s, k.u.str.n);
    if (old) {
        *old = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        struct jv *gk = salloc(s, cap * sizeof *gk), *gv = salloc(s, cap * sizeof *gv);
        if (!gk || !gv) return -1;
        if (d->n) {
            memcpy(gk, d->k, d->n * sizeof *gk);
            memcpy(gv, d->v, d->n * sizeof *gv);
        }
        d->k = gk;
        d->v = gv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
    return 0;
}

int jinja_v_truthy(struct jv v)
{
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.str.n != 0;
    case JV_LIST:
        return v.u.list->kind == JL_GEN || v.u.list->n != 0; /* a generator: true */
    case JV_DICT: return v.u.dict->n != 0;
    default: return 1;
    }
}

static int jinja_v_is_num(struct jv v)
{
    return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT;
}

static double jinja_v_num(struct jv v)
{
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b;
}

static int jinja_v_equal_l(struct jinja_state *s, struct jv a, struct jv b, int level)
{
    if (level > 100) {
        /* the render fails at its next step: no answer is given for such values */
        jinja_err(s, NULL, ENG_EUNSUPPORTED,
                  "comparing values nested deeper than 100 levels");
        return 0;
    }
    /* Python: True == 1 and 1 == 1.0 */
    if (jinja_v_is_num(a) && jinja_v_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
        return jinja_v_num(a) == jinja_v_num(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR: return a.u.str.n == b.u.str.n && !memcmp(a.u.str.s, b.u.str.s, a.u.str.n);
    case JV_LIST:
        if (a.u.list->kind != b.u.list->kind) return 0; /* (1, 2) != [1, 2] */
        if (a.u.list->kind == JL_GEN) return a.u.list == b.u.list;
        if (a.u.list->kind >= JL_KEYS) {
            jinja_err(s, NULL, ENG_EUNSUPPORTED, "comparing dict views");
            return 0;
        }
        if (a.u.list->n != b.u.list->n) return 0;
        for (size_t i = 0; i < a.u.list->n; i++)
            if (!jinja_v_equal_l(s, a.u.list->v[i], b.u.list->v[i], level + 1)) return 0;
        return 1;
    case JV_DICT:
        if (a.u.dict->n != b.u.dict->n) return 0;
        for (size_t i = 0; i < a.u.dict->n; i++) {
            struct jv k = a.u.dict->k[i];
            struct jv *o = jinja_dict_get(b.u.dict, k.u.str.s, k.u.str.n);
            if (!o || !jinja_v_equal_l(s, a.u.dict->v[i], *o, level + 1)) return 0;
        }
        return 1;
    case JV_NS: return a.u.dict == b.u.dict;
    case JV_MACRO: return a.u.macro == b.u.macro;
    case JV_FUNC: return a.u.func == b.u.func;
    default: return 0;
    }
}

int jinja_v_equal(struct jinja_state *s, struct jv a, struct jv b)
{
    return jinja_v_equal_l(s, a, b, 0);
}

const char *jinja_v_type_name(struct jv v)
{
    static const char *const names[] = {"undefined", "none", "bool",  "int",       "float",
                                        "str",       "list", "dict",  "namespace", "macro",
                                        "function",  "loop", "caller"};
    return names[v.t];
}

int jinja_buf_add(struct jinja_state *s, struct jbuf *b, const char *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = MAX(b->cap * 2, b->n + n + 1);
        cap = MAX(cap, (size_t)64);
        char *g = salloc(s, cap);
        if (!g) return -1;
        if (b->n) memcpy(g, b->p, b->n);
        b->p = g;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static int jinja_buf_str(struct jinja_state *s, struct jbuf *b, const char *z)
{
    return jinja_buf_add(s, b, z, strlen(z));
}

/* Python's repr(float): the shortest digits that read back as the same double, in
 * positional notation for exponents -4..15, else as 1e+16 / 1e-05. */
static void float_repr(double f, char *buf, size_t cap)
{
    if (isnan(f) || isinf(f)) {
        snprintf(buf, cap, isnan(f) ? "nan" : f > 0 ? "inf" : "-inf");
        return;
    }
    char tmp[48];
    for (int prec = 0; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec, f);
        if (strtod(tmp, NULL) == f) break;
    }
    const char *p = tmp;
    int neg = *p == '-';
    if (neg) p++;
    char dig[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < 23) dig[nd++] = *p;
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    int exp = atoi(p + 1);
    char *o = buf, *end = buf + cap - 1;
#define PUT(c) (o < end ? (void)(*o++ = (c)) : (void)0)
    if (neg) PUT('-');
    if (exp < -4 || exp >= 16) {
        PUT(dig[0]);
        if (nd > 1) {
            PUT('.');
            for (int i = 1; i < nd; i++)
                PUT(dig[i]);
        }
        o += snprintf(o, (size_t)(end - o) + 1, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
    } else if (exp < 0) {
        PUT('0');
        PUT('.');
        for (int i = 0; i < -exp - 1; i++)
            PUT('0');
        for (int i = 0; i < nd; i++)
            PUT(dig[i]);
    } else {
        for (int i = 0; i <= exp; i++)
            PUT(i < nd ? dig[i] : '0');
        PUT('.');
        if (nd > exp + 1)
            for (int i = exp + 1; i < nd; i++)
                PUT(dig[i]);
        else
            PUT('0');
    }
#undef PUT
    *o = 0;
}

/* repr() of a str: single quotes unless it has ' and no ", escapes as CPython. */
static int str_repr(struct jinja_state *s, struct jbuf *b, const char *p, size_t n)
{
    int sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
    char q = (sq && !dq) ? '"' : '\'';
    if (jinja_buf_add(s, b, &q, 1)) return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        char esc[8];
        const char *e = NULL;
        if (c == '\\')
            e = "\\\\";
        else if (c == '\n')
            e = "\\n";
        else if (c == '\r')
            e = "\\r";
        else if (c == '\t')
            e = "\\t";
        else if (c == (unsigned char)q)
            e = q == '\'' ? "\\'" : "\\\"";
        else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            e = esc;
        }
        if (e ? jinja_buf_str(s, b, e) : jinja_buf_add(s, b, p + i, 1)) return -1;
    }
    return jinja_buf_add(s, b, &q, 1);
}

static int jinja_v_repr(struct jinja_state *s, struct jbuf *b, struct jv v, int level);

static int jinja_v_to_str_l(struct jinja_state *s, struct jbuf *b, struct jv v, int level)
{
    char num[64];
    if (level > 100)
        return jinja_err(s, NULL, ENG_EUNSUPPORTED,
                         "a value nested deeper than 100 levels");
    switch (v.t) {
    case JV_UNDEF: return 0;
    case JV_NONE: return jinja_buf_str(s, b, "None");
    case JV_BOOL: return jinja_buf_str(s, b, v.u.b ? "True" : "False");
    case JV_INT: snprintf(num, sizeof num, "%lld", v.u.i); return jinja_buf_str(s, b, num);
    case JV_FLOAT: float_repr(v.u.f, num, sizeof num); return jinja_buf_str(s, b, num);
    case JV_STR: return jinja_buf_add(s, b, v.u.str.s, v.u.str.n);
    case JV_LIST: {
        static const char *const view[] = {[JL_KEYS] = "dict_keys(",
                                           [JL_VALUES] = "dict_values(",
                                           [JL_ITEMS] = "dict_items("};
        int k = v.u.list->kind;
        if (k == JL_GEN || k == JL_RANGE)
            return jinja_err(s, NULL, ENG_EUNSUPPORTED,
                             "printing a %s (Python prints its repr; add |list)",
                             k == JL_GEN ? "generator" : "range");
        if (k >= JL_KEYS && jinja_buf_str(s, b, view[k])) return -1;
        if (jinja_buf_str(s, b, k == JL_TUPLE ? "(" : "[")) return -1;
        for (size_t i = 0; i < v.u.list->n; i++)
            if ((i && jinja_buf_str(s, b, ", ")) ||
                jinja_v_repr(s, b, v.u.list->v[i], level + 1))
                return -1;
        if (k == JL_TUPLE && v.u.list->n == 1 && jinja_buf_str(s, b, ",")) return -1;
        if (jinja_buf_str(s, b, k == JL_TUPLE ? ")" : "]")) return -1;
        return k >= JL_KEYS ? jinja_buf_str(s, b, ")") : 0;
    }
    case JV_DICT:
        if (jinja_buf_str(s, b, "{")) return -1;
        for (size_t i = 0; i < v.u.dict->n; i++)
            if ((i && jinja_buf_str(s, b, ", ")) ||
                jinja_v_repr(s, b, v.u.dict->k[i], level + 1) ||
                jinja_buf_str(s, b, ": ") || jinja_v_repr(s, b, v.u.dict->v[i], level + 1))
                return -1;
        return jinja_buf_str(s, b, "}");
    default:
        return jinja_err(s, NULL, ENG_EUNSUPPORTED, "printing a %s is not supported",
                         jinja_v_type_name(v));
    }
}

static int jinja_v_repr(struct jinja_state *s, struct jbuf *b, struct jv v, int level)
{
    if (v.t == JV_STR) return str_repr(s, b, v.u.str.s, v.u.str.n);
    if (v.t == JV_UNDEF) return jinja_buf_str(s, b, "Undefined"); /* Jinja's repr() */
    return jinja_v_to_str_l(s, b, v, level);
}

int jinja_v_to_str(struct jinja_state *s, struct jbuf *b, struct jv v)
{
    return jinja_v_to_str_l(s, b, v, 0);
}

int jinja_v_stringify(struct jinja_state *s, struct jv v, struct jv *out)
{
    if (v.t == JV_STR) {
        *out = v;
        return 0;
    }
    struct jbuf b = {0};
    if (jinja_v_to_str(s, &b, v)) return -1;
    *out = jinja_v_str(b.p ? b.p : "", b.n);
    return 0;
}

static int json_str(struct jinja_state *s, struct jbuf *b, const char *p, size_t n)
{
    if (jinja_buf_str(s, b, "\"")) return -1;
    size_t run = 0; /* bytes copied as they are, in one call */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        char esc[8];
        const char *e = NULL;
        if (c == '"')
            e = "\\\"";
        else if (c == '\\')
            e = "\\\\";
        else if (c == '\n')
            e = "\\n";
        else if (c == '\r')
            e = "\\r";
        else if (c == '\t')
            e = "\\t";
        else if (c == '\b')
            e = "\\b";
        else if (c == '\f')
            e = "\\f";
        else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            e = esc;
        }
        if (!e) {
            run++;
            continue;
        }
        if (jinja_buf_add(s, b, p + i - run, run) || jinja_buf_str(s, b, e)) return -1;
        run = 0;
    }
    if (jinja_buf_add(s, b, p + n - run, run)) return -1;
    return jinja_buf_str(s, b, "\"");
}

static int json_nl(struct jinja_state *s, struct jbuf *b, int indent, int level)
{
    if (jinja_buf_str(s, b, "\n")) return -1;
    for (int i = 0; i < indent * level; i++)
        if (jinja_buf_str(s, b, " ")) return -1;
    return 0;
}

int jinja_v_to_json(struct jinja_state *s, const struct jnode *at, struct jbuf *b,
                    struct jv v, const struct jjson_fmt *f, int level)
{
    char num[64];
    if (level > 100) return jinja_err(s, at, ENG_EUNSUPPORTED, "tojson: nested too deep");
    int indent = f->indent, sort_keys = f->sort_keys;
    const char *item_sep = f->item_sep ? f->item_sep : indent >= 0 ? "," : ", ";
    const char *key_sep = f->key_sep ? f->key_sep : ": ";
    switch (v.t) {
    case JV_NONE: return jinja_buf_str(s, b, "null");
    case JV_BOOL: return jinja_buf_str(s, b, v.u.b ? "true" : "false");
    case JV_INT: snprintf(num, sizeof num, "%lld", v.u.i); return jinja_buf_str(s, b, num);
    case JV_FLOAT:
        float_repr(v.u.f, num, sizeof num);
        if (isnan(v.u.f))
            snprintf(num, sizeof num, "NaN");
        else if (isinf(v.u.f))
            snprintf(num, sizeof num, v.u.f > 0 ? "Infinity" : "-Infinity");
        return jinja_buf_str(s, b, num);
    case JV_STR: return json_str(s, b, v.u.str.s, v.u.str.n);
    case JV_LIST: {
        struct jlist *l = v.u.list;
        if (l->kind != JL_LIST && l->kind != JL_TUPLE)
            return jinja_err(s, at, ENG_EINVAL, "tojson: a %s is not JSON serializable",
                             l->kind == JL_GEN     ? "generator"
                             : l->kind == JL_RANGE ? "range"
                                                   : "dict view");
        if (!l->n) return jinja_buf_str(s, b, "[]");
        if (jinja_buf_str(s, b, "[")) return -1;
        for (size_t i = 0; i < l->n; i++) {
            if (i && jinja_buf_str(s, b, item_sep)) return -1;
            if (indent >= 0 && json_nl(s, b, indent, level + 1)) return -1;
            if (jinja_v_to_json(s, at, b, l->v[i], f, level + 1)) return -1;
        }
        if (indent >= 0 && json_nl(s, b, indent, level)) return -1;
        return jinja_buf_str(s, b, "]");
    }
    case JV_DICT: {
        struct jdict *d = v.u.dict;
        if (!d->n) return jinja_buf_str(s, b, "{}");
        size_t *ord = salloc(s, d->n * sizeof *ord);
        if (!ord) return -1;
        for (size_t i = 0; i < d->n; i++)
            ord[i] = i;
        if (sort_keys) /* insertion sort on the keys' bytes: Python sorts by code point */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0; j--) {
                    struct jv x = d->k[ord[j - 1]], y = d->k[ord[j]];
                    size_t m = MIN(x.u.str.n, y.u.str.n);
                    int c = memcmp(x.u.str.s, y.u.str.s, m);
                    if (c < 0 || (c == 0 && x.u.str.n <= y.u.str.n)) break;
                    size_t t = ord[j];
                    ord[j] = ord[j - 1];
                    ord[j - 1] = t;
                }
        if (jinja_buf_str(s, b, "{")) return -1;
        for (size_t i = 0; i < d->n; i++) {
            if (i && jinja_buf_str(s, b, item_sep)) return -1;
            if (indent >= 0 && json_nl(s, b, indent, level + 1)) return -1;
            struct jv k = d->k[ord[i]];
            if (json_str(s, b, k.u.str.s, k.u.str.n) || jinja_buf_str(s, b, key_sep) ||
                jinja_v_to_json(s, at, b, d->v[ord[i]], f, level + 1))
                return -1;
        }
        if (indent >= 0 && json_nl(s, b, indent, level)) return -1;
        return jinja_buf_str(s, b, "}");
    }
    default:
        return jinja_err(s, at, ENG_EINVAL,
                         "tojson: object of type %s is not JSON serializable",
                         v.t == JV_UNDEF ? "Undefined" : jinja_v_type_name(v));
    }
}

int jinja_v_from_cjson(struct jinja_state *s, const cJSON *j, struct jv *out)
{
    if (cJSON_IsNull(j))
        *out = jinja_v_none();
    else if (cJSON_IsBool(j))
        *out = jinja_v_bool(cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) {
        /* cJSON keeps no int/float distinction: an integral value is an int */
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9007199254740992.0)
            *out = jinja_v_int((long long)d);
        else
            *out = jinja_v_float(d);
    } else if (cJSON_IsString(j)) {
        return jinja_v_str_dup(s, j->valuestring, strlen(j->valuestring), out);
    } else if (cJSON_IsArray(j)) {
        struct jlist *l = jinja_list_new(s);
        if (!l) return -1;
        for (const cJSON *c = j->child; c; c = c->next) {
            struct jv v;
            if (jinja_v_from_cjson(s, c, &v) || jinja_list_push(s, l, v)) return -1;
        }
        *out = (struct jv){.t = JV_LIST, .u.list = l};
    } else if (cJSON_IsObject(j)) {
        struct jdict *d = jinja_dict_new(s);
        if (!d) return -1;
        for (const cJSON *c = j->child; c; c = c->next) {
            struct jv k, v;
            if (jinja_v_str_dup(s, c->string, strlen(c->string), &k) ||
                jinja_v_from_cjson(s, c, &v) || jinja_dict_set(s, d, k, v))
                return -1;
        }
        *out = (struct jv){.t = JV_DICT, .u.dict = d};
    } else {
        return jinja_err(s, NULL, ENG_EINVAL, "a variable that is not JSON");
    }
    return 0;
}
