/*
 * jinja_str.c - Python's str methods as templates call them (strip, split, replace,
 * startswith, upper, title, ...), dict.get / items / keys / values, and the globals
 * transformers defines (raise_exception, strftime_now) with Jinja's own (namespace,
 * range, dict).
 *
 * Strings are UTF-8; whitespace is Python's str.isspace() set and case mapping is
 * utf8proc's per code point (so "ß".upper() stays "ß" where Python gives "SS": the one
 * known difference, in docs/chat-templates.md).
 * Thread: the render's.
 */
#include "jinja_impl.h"
#include "jinja_str.h"

#include "err.h"
#include "util.h"

#include <utf8proc.h>

#include <string.h>
#include <time.h>

/* One code point at p (n bytes left); an invalid byte reads as itself, 1 byte long. */
size_t jinja_str_decode(const char *p, size_t n, int32_t *cp)
{
    utf8proc_int32_t c;
    utf8proc_ssize_t k =
        utf8proc_iterate((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &c);
    if (k <= 0) {
        *cp = (unsigned char)p[0];
        return 1;
    }
    *cp = c;
    return (size_t)k;
}

int jinja_str_isspace(int32_t c)
{
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

static int in_chars(int32_t c, struct jv chars)
{
    for (size_t i = 0; i < chars.u.str.n;) {
        int32_t d;
        i += jinja_str_decode(chars.u.str.s + i, chars.u.str.n - i, &d);
        if (c == d) return 1;
    }
    return 0;
}

/* Python's str.strip / lstrip / rstrip: `chars` NONE means whitespace. */
struct jv jinja_str_strip(struct jv s, struct jv chars, int left, int right)
{
    const char *p = s.u.str.s;
    size_t a = 0, b = s.u.str.n;
    while (left && a < b) {
        int32_t c;
        size_t k = jinja_str_decode(p + a, b - a, &c);
        if (chars.t == JV_STR ? !in_chars(c, chars) : !jinja_str_isspace(c)) break;
        a += k;
    }
    while (right && b > a) {
        size_t st = b - 1;
        while (st > a && ((unsigned char)p[st] & 0xC0) == 0x80)
            st--;
        int32_t c;
        jinja_str_decode(p + st, b - st, &c);
        if (chars.t == JV_STR ? !in_chars(c, chars) : !jinja_str_isspace(c)) break;
        b = st;
    }
    return jinja_v_str(p + a, b - a);
}

enum { CASE_UPPER, CASE_LOWER, CASE_TITLE_PY, CASE_TITLE_JINJA, CASE_CAPITALIZE };

static int is_cased(int32_t c)
{
    return utf8proc_toupper(c) != c || utf8proc_tolower(c) != c || utf8proc_totitle(c) != c;
}

int jinja_str_case(struct jinja_state *s, struct jv str, int mode, struct jv *out)
{
    struct jbuf b = {0};
    int prev_cased = 0, first = 1, word_start = 1;
    for (size_t i = 0; i < str.u.str.n;) {
        int32_t c, r;
        i += jinja_str_decode(str.u.str.s + i, str.u.str.n - i, &c);
        switch (mode) {
        case CASE_UPPER: r = utf8proc_toupper(c); break;
        case CASE_LOWER: r = utf8proc_tolower(c); break;
        case CASE_CAPITALIZE: r = first ? utf8proc_totitle(c) : utf8proc_tolower(c); break;
        case CASE_TITLE_PY: /* str.title(): a letter after a cased one is lowered */
            r = prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c);
            prev_cased = is_cased(c);
            break;
        default: /* Jinja's title filter: words start after -, whitespace, ( { [ < */
            r = word_start ? utf8proc_toupper(c) : utf8proc_tolower(c);
            word_start = c == '-' || jinja_str_isspace(c) || c == '(' || c == '{' ||
                         c == '[' || c == '<';
        }
        first = 0;
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t k = utf8proc_encode_char(r, enc);
        if (jinja_buf_add(s, &b, (const char *)enc, (size_t)k)) return -1;
    }
    *out = jinja_v_str(b.p ? b.p : "", b.n);
    return 0;
}

static const char *find_sub(const char *h, size_t hn, const char *n, size_t nn)
{
    if (nn == 0) return h;
    for (size_t i = 0; i + nn <= hn; i++)
        if (!memcmp(h + i, n, nn)) return h + i;
    return NULL;
}

int jinja_str_replace(struct jinja_state *s, struct jv str, struct jv old, struct jv new_,
                      long long count, struct jv *out)
{
    struct jbuf b = {0};
    const char *p = str.u.str.s, *end = p + str.u.str.n;
    if (old.u.str.n == 0) {
        /* Python inserts `new` between every character and at both ends */
        for (;;) {
            if (count-- == 0) break;
            if (jinja_buf_add(s, &b, new_.u.str.s, new_.u.str.n)) return -1;
            if (p >= end) break;
            int32_t c;
            size_t k = jinja_str_decode(p, (size_t)(end - p), &c);
            if (jinja_buf_add(s, &b, p, k)) return -1;
            p += k;
        }
    } else {
        const char *hit;
        while (count != 0 &&
               (hit = find_sub(p, (size_t)(end - p), old.u.str.s, old.u.str.n))) {
            if (jinja_buf_add(s, &b, p, (size_t)(hit - p)) ||
                jinja_buf_add(s, &b, new_.u.str.s, new_.u.str.n))
                return -1;
            p = hit + old.u.str.n;
            if (count > 0) count--;
        }
    }
    if (jinja_buf_add(s, &b, p, (size_t)(end - p))) return -1;
    *out = jinja_v_str(b.p ? b.p : "", b.n);
    return 0;
}

/* str.split(sep=None, maxsplit=-1) */
static int str_split(struct jinja_state *s, const struct jnode *at, struct jv str,
                     struct jv sep, long long maxsplit, struct jv *out)
{
    struct jlist *l = jinja_list_new(s);
    if (!l) return -1;
    const char *p = str.u.str.s, *end = p + str.u.str.n;
    if (sep.t == JV_STR) {
        if (!sep.u.str.n) return jinja_err(s, at, ENG_EINVAL, "split: empty separator");
        const char *hit;
        while (maxsplit != 0 &&
               (hit = find_sub(p, (size_t)(end - p), sep.u.str.s, sep.u.str.n))) {
            if (jinja_list_push(s, l, jinja_v_str(p, (size_t)(hit - p)))) return -1;
            p = hit + sep.u.str.n;
            if (maxsplit > 0) maxsplit--;
        }
        if (jinja_list_push(s, l, jinja_v_str(p, (size_t)(end - p)))) return -1;
    } else {
        /* runs of whitespace separate, and no empty strings come out */
        for (;;) {
            int32_t c;
            while (p < end) {
                size_t k = jinja_str_decode(p, (size_t)(end - p), &c);
                if (!jinja_str_isspace(c)) break;
                p += k;
            }
            if (p >= end) break;
            const char *w = p;
            if (maxsplit == 0) {
                struct jv rest = jinja_str_strip(jinja_v_str(w, (size_t)(end - w)),
                                                 jinja_v_none(), 0, 1);
                if (jinja_list_push(s, l, rest)) return -1;
                break;
            }
            while (p < end) {
                size_t k = jinja_str_decode(p, (size_t)(end - p), &c);
                if (jinja_str_isspace(c)) break;
                p += k;
            }
            if (jinja_list_push(s, l, jinja_v_str(w, (size_t)(p - w)))) return -1;
            if (maxsplit > 0) maxsplit--;
        }
    }
    *out = (struct jv){.t = JV_LIST, .u.list = l};
    return 0;
}

static const char *const str_methods[] = {
    "strip", "lstrip", "rstrip",     "startswith", "endswith", "split", "replace", "upper",
    "lower", "title",  "capitalize", "find",       "count",    "join",  NULL};
static const char *const dict_methods[] = {"get", "items", "keys", "values", NULL};

static int in_list(const char *const *l, const char *name)
{
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], name)) return 1;
    return 0;
}

int jinja_is_method(struct jv obj, const char *name)
{
    if (obj.t == JV_STR) return in_list(str_methods, name);
    if (obj.t == JV_DICT) return in_list(dict_methods, name);
    return 0;
}

static int want_str(struct jinja_state *s, const struct jnode *at, const char *what,
                    const struct jv *args, int n, int i, int optional)
{
    if (i >= n) {
        if (optional) return 0;
        return jinja_err(s, at, ENG_EINVAL, "%s: missing argument %d", what, i + 1);
    }
    if (args[i].t == JV_STR || (optional && args[i].t == JV_NONE)) return 0;
    return jinja_err(s, at, ENG_EINVAL, "%s: argument %d must be a string, not %s", what,
                     i + 1, jinja_v_type_name(args[i]));
}

int jinja_str_dict_items(struct jinja_state *s, struct jv d, int what, struct jv *out)
{
    struct jlist *l = jinja_list_new(s);
    if (!l) return -1;
    for (size_t i = 0; d.t == JV_DICT && i < d.u.dict->n; i++) {
        struct jv item = what == 0 ? d.u.dict->k[i] : d.u.dict->v[i];
        if (what == 2) {
            struct jlist *pair = jinja_list_new(s);
            if (!pair || jinja_list_push(s, pair, d.u.dict->k[i]) ||
                jinja_list_push(s, pair, d.u.dict->v[i]))
                return -1;
            pair->kind = JL_TUPLE;
            item = (struct jv){.t = JV_LIST, .u.list = pair};
        }
        if (jinja_list_push(s, l, item)) return -1;
    }
    l->kind = what == 0 ? JL_KEYS : what == 1 ? JL_VALUES : JL_ITEMS;
    *out = (struct jv){.t = JV_LIST, .u.list = l};
    return 0;
}

int jinja_method(struct jinja_state *s, const struct jnode *at, struct jv obj,
                 const char *name, const struct jv *args, int n, const char **kwnames,
                 const struct jv *kwargs, int n_kw, struct jv *out)
{
    (void)kwnames;
    (void)kwargs;
    if (n_kw) return jinja_err(s, at, ENG_EUNSUPPORTED, "keyword arguments to .%s()", name);
    if (obj.t == JV_DICT) {
        if (!strcmp(name, "get")) {
            if (n < 1 || n > 2 || args[0].t != JV_STR) {
                if (n >= 1 && n <= 2) return *out = n == 2 ? args[1] : jinja_v_none(), 0;
                return jinja_err(s, at, ENG_EINVAL, "get() takes one or two arguments");
            }
            struct jv *v = jinja_dict_get(obj.u.dict, args[0].u.str.s, args[0].u.str.n);
            *out = v ? *v : n == 2 ? args[1] : jinja_v_none();
            return 0;
        }
        if (n) return jinja_err(s, at, ENG_EINVAL, "%s() takes no arguments", name);
        return jinja_str_dict_items(s, obj,
                                    !strcmp(name, "keys")     ? 0
                                    : !strcmp(name, "values") ? 1
                                                              : 2,
                                    out);
    }
    /* a str */
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        if (want_str(s, at, name, args, n, 0, 1)) return -1;
        *out = jinja_str_strip(obj, n ? args[0] : jinja_v_none(), name[0] != 'r',
                               name[0] != 'l');
        return 0;
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        int ends = name[0] == 'e', r = 0;
        if (n != 1) return jinja_err(s, at, ENG_EINVAL, "%s() takes one argument", name);
        /* (Python also takes a tuple of prefixes; the subset has no tuples) */
        struct jv c = args[0];
        if (c.t != JV_STR)
            return jinja_err(s, at, ENG_EINVAL,
                             "%s(): the argument must be a string, not %s", name,
                             jinja_v_type_name(c));
        if (c.u.str.n <= obj.u.str.n &&
            !memcmp(obj.u.str.s + (ends ? obj.u.str.n - c.u.str.n : 0), c.u.str.s,
                    c.u.str.n))
            r = 1;
        *out = jinja_v_bool(r);
        return 0;
    }
    if (!strcmp(name, "split")) {
        if (want_str(s, at, name, args, n, 0, 1)) return -1;
        if (n > 1 && args[1].t != JV_INT)
            return jinja_err(s, at, ENG_EINVAL, "split(): maxsplit must be an int");
        return str_split(s, at, obj, n ? args[0] : jinja_v_none(), n > 1 ? args[1].u.i : -1,
                         out);
    }
    if (!strcmp(name, "replace")) {
        if (want_str(s, at, name, args, n, 0, 0) || want_str(s, at, name, args, n, 1, 0))
            return -1;
        if (n > 2 && args[2].t != JV_INT)
            return jinja_err(s, at, ENG_EINVAL, "replace(): count must be an int");
        return jinja_str_replace(s, obj, args[0], args[1], n > 2 ? args[2].u.i : -1, out);
    }
    if (!strcmp(name, "find") || !strcmp(name, "count")) {
        if (n != 1 || want_str(s, at, name, args, n, 0, 0))
            return jinja_err(s, at, ENG_EINVAL, "%s() takes one string", name);
        const char *p = obj.u.str.s, *end = p + obj.u.str.n, *hit;
        long long cnt = 0;
        if (name[0] == 'f') {
            hit = find_sub(p, obj.u.str.n, args[0].u.str.s, args[0].u.str.n);
            long long cp = 0;
            for (const char *q = p; hit && q < hit; q++)
                cp += ((unsigned char)*q & 0xC0) != 0x80;
            *out = jinja_v_int(hit ? cp : -1);
            return 0;
        }
        if (!args[0].u.str.n) {
            size_t ncp = 0;
            for (const char *q = p; q < end; q++)
                ncp += ((unsigned char)*q & 0xC0) != 0x80;
            *out = jinja_v_int((long long)ncp + 1);
            return 0;
        }
        while ((hit = find_sub(p, (size_t)(end - p), args[0].u.str.s, args[0].u.str.n)))
            cnt++, p = hit + args[0].u.str.n;
        *out = jinja_v_int(cnt);
        return 0;
    }
    if (!strcmp(name, "join")) {
        if (n != 1 || args[0].t != JV_LIST)
            return jinja_err(s, at, ENG_EINVAL, "join() takes a list of strings");
        if (jinja_list_walk(s, at, args[0].u.list)) return -1;
        struct jbuf b = {0};
        for (size_t i = 0; i < args[0].u.list->n; i++) {
            struct jv it = args[0].u.list->v[i];
            if (it.t != JV_STR)
                return jinja_err(s, at, ENG_EINVAL, "join(): item %zu is not a string", i);
            if ((i && jinja_buf_add(s, &b, obj.u.str.s, obj.u.str.n)) ||
                jinja_buf_add(s, &b, it.u.str.s, it.u.str.n))
                return -1;
        }
        *out = jinja_v_str(b.p ? b.p : "", b.n);
        return 0;
    }
    if (n) return jinja_err(s, at, ENG_EINVAL, "%s() takes no arguments", name);
    int mode = !strcmp(name, "upper")   ? CASE_UPPER
               : !strcmp(name, "lower") ? CASE_LOWER
               : !strcmp(name, "title") ? CASE_TITLE_PY
                                        : CASE_CAPITALIZE;
    return jinja_str_case(s, obj, mode, out);
}

int jinja_str_case_filter(struct jinja_state *s, struct jv str, const char *name,
                          struct jv *out)
{
    int mode = !strcmp(name, "upper")   ? CASE_UPPER
               : !strcmp(name, "lower") ? CASE_LOWER
               : !strcmp(name, "title") ? CASE_TITLE_JINJA
                                        : CASE_CAPITALIZE;
    return jinja_str_case(s, str, mode, out);
}

int jinja_call_func(struct jinja_state *s, const struct jnode *at, int func,
                    const struct jv *args, int n, const char **kwnames,
                    const struct jv *kwargs, int n_kw, struct jv *out)
{
    switch (func) {
    case JF_RAISE: {
        /* transformers raises TemplateError(message): the message alone, for the client */
        struct jv msg = n ? args[0] : jinja_v_str("", 0);
        if (jinja_v_stringify(s, msg, &msg)) return -1;
        return jinja_err(s, NULL, ENG_EINVAL, "%.*s", (int)MIN(msg.u.str.n, 400),
                         msg.u.str.s);
    }
    case JF_STRFTIME: {
        if (n != 1 || args[0].t != JV_STR)
            return jinja_err(s, at, ENG_EINVAL, "strftime_now() takes one format string");
        char fmt[128], buf[256];
        if (args[0].u.str.n >= sizeof fmt)
            return jinja_err(s, at, ENG_EUNSUPPORTED, "strftime_now(): format too long");
        memcpy(fmt, args[0].u.str.s, args[0].u.str.n);
        fmt[args[0].u.str.n] = 0;
        time_t t = (time_t)s->o->now;
        struct tm tm;
        localtime_r(&t, &tm); /* datetime.now() is local time */
        size_t k = strftime(buf, sizeof buf, fmt, &tm);
        if (!k && fmt[0])
            return jinja_err(s, at, ENG_EUNSUPPORTED, "strftime_now(): bad format");
        return jinja_v_str_dup(s, buf, k, out);
    }
    case JF_NAMESPACE:
    case JF_DICT: {
        if (n)
            return jinja_err(s, at, ENG_EUNSUPPORTED, "%s() with positional arguments",
                             func == JF_DICT ? "dict" : "namespace");
        struct jdict *d = jinja_dict_new(s);
        if (!d) return -1;
        for (int i = 0; i < n_kw; i++)
            if (jinja_dict_set(s, d, jinja_v_str(kwnames[i], strlen(kwnames[i])),
                               kwargs[i]))
                return -1;
        *out = (struct jv){.t = func == JF_DICT ? JV_DICT : JV_NS, .u.dict = d};
        return 0;
    }
    default: { /* JF_RANGE */
        long long a = 0, b, st = 1;
        for (int i = 0; i < n; i++)
            if (args[i].t != JV_INT)
                return jinja_err(s, at, ENG_EINVAL, "range() takes ints");
        if (n == 1)
            b = args[0].u.i;
        else if (n == 2 || n == 3)
            a = args[0].u.i, b = args[1].u.i, st = n == 3 ? args[2].u.i : 1;
        else
            return jinja_err(s, at, ENG_EINVAL, "range() takes 1 to 3 arguments");
        if (st == 0) return jinja_err(s, at, ENG_EINVAL, "range() step must not be zero");
        struct jlist *l = jinja_list_new(s);
        if (!l) return -1;
        for (long long i = a; st > 0 ? i < b : i > b;) {
            if (++s->steps > s->o->limits.max_steps)
                return jinja_err(s, at, ENG_ENOSPC,
                                 "the chat template ran more than %ld steps",
                                 s->o->limits.max_steps);
            if (jinja_list_push(s, l, jinja_v_int(i))) return -1;
            if (__builtin_add_overflow(i, st, &i)) break;
        }
        l->kind = JL_RANGE;
        *out = (struct jv){.t = JV_LIST, .u.list = l};
        return 0;
    }
    }
}
