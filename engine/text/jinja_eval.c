/*
 * jinja_eval.c - renders a compiled template: statements, scopes and expressions.
 *
 * Owns: the render state (jinja_state), its arena and its output buffer.
 * Scopes as Jinja has them: the variables passed in, under them the template's own
 * `set`s; a for loop and a macro call each open a scope whose `set`s vanish when it
 * ends (which is why templates carry state out of loops in a namespace()). `if` opens
 * none. Every statement and expression evaluated counts a step; output size, memory,
 * steps and nesting have limits, so a hostile template ends with an error, not a hang.
 * Thread: one render at a time per state; the template is only read.
 */
#include "jinja_impl.h"

#include "err.h"
#include "util.h"

#include <cJSON.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int exec_body(struct jinja_state *s, struct jnode *const *body, int n);

static int step(struct jinja_state *s, const struct jnode *n)
{
    if (s->err) return -1;
    if (++s->steps > s->o->limits.max_steps)
        return jinja_err(s, n, ENG_ENOSPC, "the chat template ran more than %ld steps",
                         s->o->limits.max_steps);
    return 0;
}

static int out_add(struct jinja_state *s, const struct jnode *at, const char *p, size_t n)
{
    if (s->out_n + n > s->o->limits.max_output)
        return jinja_err(s, at, ENG_ENOSPC, "the rendered prompt is longer than %zu bytes",
                         s->o->limits.max_output);
    if (s->out_n + n + 1 > s->out_cap) {
        s->out_cap = MAX(s->out_cap * 2, s->out_n + n + 1);
        s->out = xrealloc(s->out, s->out_cap);
    }
    memcpy(s->out + s->out_n, p, n);
    s->out_n += n;
    s->out[s->out_n] = 0;
    return 0;
}

static struct jv lookup(struct jinja_state *s, const char *name)
{
    size_t n = strlen(name);
    for (struct jframe *f = s->frame; f; f = f->parent) {
        struct jv *v = jinja_dict_get(&f->vars, name, n);
        if (v) return *v;
    }
    static const struct {
        const char *name;
        int func;
    } globals[] = {{"raise_exception", JF_RAISE},
                   {"strftime_now", JF_STRFTIME},
                   {"namespace", JF_NAMESPACE},
                   {"range", JF_RANGE},
                   {"dict", JF_DICT}};
    for (size_t i = 0; i < ARRAY_LEN(globals); i++)
        if (!strcmp(name, globals[i].name))
            return (struct jv){.t = JV_FUNC, .u.func = globals[i].func};
    return jinja_v_undef(name);
}

static int set_var(struct jinja_state *s, struct jframe *f, const char *name, struct jv v)
{
    return jinja_dict_set(s, &f->vars, jinja_v_str(name, strlen(name)), v);
}

static int undefined_err(struct jinja_state *s, const struct jnode *n, struct jv v)
{
    return jinja_err(s, n, ENG_EINVAL, "'%s' is undefined",
                     v.undef_name ? v.undef_name : "value");
}

/* ---- attribute, item and slice ---- */

static int loop_attr(struct jinja_state *s, const struct jnode *n, const struct jloop *l,
                     const char *name, struct jv *out)
{
    long long len = (long long)l->items->n, i0 = (long long)l->index0;
    if (!strcmp(name, "index"))
        *out = jinja_v_int(i0 + 1);
    else if (!strcmp(name, "index0"))
        *out = jinja_v_int(i0);
    else if (!strcmp(name, "first"))
        *out = jinja_v_bool(i0 == 0);
    else if (!strcmp(name, "last"))
        *out = jinja_v_bool(i0 == len - 1);
    else if (!strcmp(name, "length"))
        *out = jinja_v_int(len);
    else if (!strcmp(name, "revindex"))
        *out = jinja_v_int(len - i0);
    else if (!strcmp(name, "revindex0"))
        *out = jinja_v_int(len - i0 - 1);
    else if (!strcmp(name, "depth"))
        *out = jinja_v_int(1);
    else if (!strcmp(name, "depth0"))
        *out = jinja_v_int(0);
    else if (!strcmp(name, "previtem"))
        *out = i0 > 0 ? l->items->v[i0 - 1] : jinja_v_undef("loop.previtem");
    else if (!strcmp(name, "nextitem"))
        *out = i0 + 1 < len ? l->items->v[i0 + 1] : jinja_v_undef("loop.nextitem");
    else
        return jinja_err(s, n, ENG_EUNSUPPORTED, "loop.%s is not supported", name);
    return 0;
}

static int get_attr(struct jinja_state *s, const struct jnode *n, struct jv obj,
                    const char *name, struct jv *out)
{
    if (obj.t == JV_UNDEF) return undefined_err(s, n->a, obj);
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        struct jv *v = jinja_dict_get(obj.u.dict, name, strlen(name));
        *out = v ? *v : jinja_v_undef(name);
        return 0;
    }
    if (obj.t == JV_LOOP) return loop_attr(s, n, obj.u.loop, name, out);
    *out = jinja_v_undef(name); /* Jinja: a missing attribute is undefined, not an error */
    return 0;
}

/* Byte offsets of the code points of a UTF-8 string (n_cp + 1 entries). */
static size_t *cp_offsets(struct jinja_state *s, struct jv str, size_t *n_cp)
{
    size_t *off = jinja_alloc(&s->ar, (str.u.str.n + 1) * sizeof *off), k = 0;
    if (!off) {
        jinja_err(s, NULL, ENG_ENOSPC, "the chat template used too much memory");
        return NULL;
    }
    for (size_t i = 0; i < str.u.str.n; i++)
        if (((unsigned char)str.u.str.s[i] & 0xC0) != 0x80) off[k++] = i;
    off[k] = str.u.str.n;
    *n_cp = k;
    return off;
}

static int get_item(struct jinja_state *s, const struct jnode *n, struct jv obj,
                    struct jv key, struct jv *out)
{
    if (obj.t == JV_UNDEF) return undefined_err(s, n, obj);
    *out = jinja_v_undef("item");
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        if (key.t == JV_STR) {
            struct jv *v = jinja_dict_get(obj.u.dict, key.u.str.s, key.u.str.n);
            if (v)
                *out = *v;
            else
                out->undef_name = "(a missing key)";
        }
        return 0;
    }
    if (obj.t == JV_LOOP && key.t == JV_STR) {
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)MIN(key.u.str.n, 31), key.u.str.s);
        return loop_attr(s, n, obj.u.loop, name, out);
    }
    if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
        long long i = key.t == JV_INT ? key.u.i : key.u.b;
        if (obj.t == JV_LIST) {
            /* a generator or a dict view has no [i]: Jinja gives undefined */
            if (obj.u.list->kind == JL_GEN || obj.u.list->kind >= JL_KEYS) return 0;
            long long len = (long long)obj.u.list->n;
            if (i < 0) i += len;
            if (i >= 0 && i < len) *out = obj.u.list->v[i];
            return 0;
        }
        size_t ncp, *off = cp_offsets(s, obj, &ncp);
        if (!off) return -1;
        if (i < 0) i += (long long)ncp;
        if (i >= 0 && i < (long long)ncp)
            *out = jinja_v_str(obj.u.str.s + off[i], off[i + 1] - off[i]);
        return 0;
    }
    if (obj.t == JV_LIST || obj.t == JV_STR) {
        if (key.t == JV_STR)
            return 0; /* 'abc'['x']: Jinja tries the attribute: undefined */
        return jinja_err(s, n, ENG_EINVAL, "%s indices must be integers, not %s",
                         jinja_v_type_name(obj), jinja_v_type_name(key));
    }
    return jinja_err(s, n, ENG_EINVAL, "'%s' object is not subscriptable",
                     jinja_v_type_name(obj));
}

/* Python's slice.indices(): clamp start / stop for the step's direction. */
static void slice_bounds(long long len, const struct jv *b, long long *start,
                         long long *stop, long long step)
{
    long long lo = step < 0 ? -1 : 0, hi = step < 0 ? len - 1 : len;
    for (int k = 0; k < 2; k++) {
        long long *x = k ? stop : start;
        if (b[k].t == JV_NONE) {
            *x = k ? (step < 0 ? lo : hi) : (step < 0 ? hi : lo);
            continue;
        }
        *x = b[k].u.i;
        if (*x < 0)
            *x = MAX(*x + len, lo);
        else
            *x = MIN(*x, hi);
    }
}

static int get_slice(struct jinja_state *s, const struct jnode *n, struct jv obj,
                     struct jv *out)
{
    struct jv b[3];
    for (int k = 0; k < 3; k++) {
        b[k] = jinja_v_none();
        if (n->args[k] && jinja_eval(s, n->args[k], &b[k])) return -1;
        if (b[k].t == JV_BOOL) b[k] = jinja_v_int(b[k].u.b);
        if (b[k].t != JV_NONE && b[k].t != JV_INT)
            return jinja_err(s, n, ENG_EINVAL, "slice indices must be integers or none");
    }
    long long st = b[2].t == JV_INT ? b[2].u.i : 1, start, stop;
    if (st == 0) return jinja_err(s, n, ENG_EINVAL, "slice step cannot be zero");
    if (obj.t == JV_UNDEF) return undefined_err(s, n->a, obj);
    if (obj.t == JV_LIST) {
        int kind = obj.u.list->kind;
        if (kind == JL_GEN || kind >= JL_KEYS) { /* not subscriptable: undefined */
            *out = jinja_v_undef("(a slice)");
            return 0;
        }
        slice_bounds((long long)obj.u.list->n, b, &start, &stop, st);
        struct jlist *l = jinja_list_new(s);
        if (!l) return -1;
        l->kind = kind; /* a tuple's slice is a tuple, a range's a range */
        for (long long i = start; st > 0 ? i < stop : i > stop; i += st)
            if (jinja_list_push(s, l, obj.u.list->v[i])) return -1;
        *out = (struct jv){.t = JV_LIST, .u.list = l};
        return 0;
    }
    if (obj.t == JV_STR) {
        size_t ncp, *off = cp_offsets(s, obj, &ncp);
        if (!off) return -1;
        slice_bounds((long long)ncp, b, &start, &stop, st);
        struct jbuf buf = {0};
        for (long long i = start; st > 0 ? i < stop : i > stop; i += st)
            if (jinja_buf_add(s, &buf, obj.u.str.s + off[i], off[i + 1] - off[i]))
                return -1;
        *out = jinja_v_str(buf.p ? buf.p : "", buf.n);
        return 0;
    }
    return jinja_err(s, n, ENG_EINVAL, "'%s' object is not subscriptable",
                     jinja_v_type_name(obj));
}

/* ---- operators ---- */

static int is_num(struct jv v)
{
    return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}
static int is_intlike(struct jv v)
{
    return v.t == JV_INT || v.t == JV_BOOL;
}
static long long as_int(struct jv v)
{
    return v.t == JV_INT ? v.u.i : v.u.b;
}
static double as_f(struct jv v)
{
    return v.t == JV_FLOAT ? v.u.f : (double)as_int(v);
}

static int optype_err(struct jinja_state *s, const struct jnode *n, const char *op,
                      struct jv a, struct jv b)
{
    if (a.t == JV_UNDEF) return undefined_err(s, n, a);
    if (b.t == JV_UNDEF) return undefined_err(s, n, b);
    return jinja_err(s, n, ENG_EINVAL, "unsupported operand types for %s: '%s' and '%s'",
                     op, jinja_v_type_name(a), jinja_v_type_name(b));
}

static int contains(struct jinja_state *s, const struct jnode *n, struct jv needle,
                    struct jv hay, int *out)
{
    *out = 0;
    if (hay.t == JV_STR) {
        if (needle.t != JV_STR)
            return jinja_err(s, n, ENG_EINVAL,
                             "'in <string>' requires a string on the left");
        if (!needle.u.str.n) return *out = 1, 0;
        for (size_t i = 0; i + needle.u.str.n <= hay.u.str.n; i++)
            if (!memcmp(hay.u.str.s + i, needle.u.str.s, needle.u.str.n))
                return *out = 1, 0;
        return 0;
    }
    if (hay.t == JV_LIST) {
        if (jinja_list_walk(s, n, hay.u.list)) return -1;
        for (size_t i = 0; i < hay.u.list->n; i++)
            if (jinja_v_equal(s, needle, hay.u.list->v[i])) return *out = 1, 0;
        return 0;
    }
    if (hay.t == JV_DICT || hay.t == JV_NS) {
        if (needle.t == JV_STR)
            *out = jinja_dict_get(hay.u.dict, needle.u.str.s, needle.u.str.n) != NULL;
        return 0;
    }
    if (hay.t == JV_UNDEF) return 0; /* iterating an Undefined gives nothing */
    return jinja_err(s, n, ENG_EINVAL, "argument of type '%s' is not iterable",
                     jinja_v_type_name(hay));
}

static int compare(struct jinja_state *s, const struct jnode *n, struct jv a, struct jv b,
                   int *cmp)
{
    if (is_num(a) && is_num(b)) {
        if (is_intlike(a) && is_intlike(b))
            *cmp = as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b);
        else
            *cmp = as_f(a) < as_f(b) ? -1 : as_f(a) > as_f(b);
        return 0;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t m = MIN(a.u.str.n, b.u.str.n);
        int c = memcmp(a.u.str.s, b.u.str.s, m);
        *cmp = c ? (c < 0 ? -1 : 1) : (a.u.str.n < b.u.str.n ? -1 : a.u.str.n > b.u.str.n);
        return 0;
    }
    return optype_err(s, n, "comparison", a, b);
}

static int arith(struct jinja_state *s, const struct jnode *n, struct jv a, struct jv b,
                 struct jv *out)
{
    static const char *const opname[] = {"+", "-", "*", "/", "//", "%", "**"};
    const char *op = opname[n->op];
    if (is_intlike(a) && is_intlike(b) && n->op != JO_DIV && n->op != JO_POW) {
        long long x = as_int(a), y = as_int(b), r = 0;
        int ovf = 0;
        switch (n->op) {
        case JO_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
        case JO_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
        case JO_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
        case JO_FLOORDIV:
        case JO_MOD:
            if (y == 0)
                return jinja_err(s, n, ENG_EINVAL, "integer division or modulo by zero");
            if (x == LLONG_MIN && y == -1) {
                ovf = 1;
                break;
            }
            r = n->op == JO_MOD ? x % y : x / y;
            /* Python floors: the remainder takes the divisor's sign */
            if (n->op == JO_MOD && r != 0 && ((r < 0) != (y < 0))) r += y;
            if (n->op == JO_FLOORDIV && (x % y != 0) && ((x < 0) != (y < 0))) r -= 1;
            break;
        default: break;
        }
        if (ovf) return jinja_err(s, n, ENG_EUNSUPPORTED, "integer overflow in '%s'", op);
        *out = jinja_v_int(r);
        return 0;
    }
    if (is_num(a) && is_num(b)) {
        double x = as_f(a), y = as_f(b), r;
        switch (n->op) {
        case JO_ADD: r = x + y; break;
        case JO_SUB: r = x - y; break;
        case JO_MUL: r = x * y; break;
        case JO_DIV:
        case JO_FLOORDIV:
        case JO_MOD:
            if (y == 0) return jinja_err(s, n, ENG_EINVAL, "division by zero");
            r = n->op == JO_DIV        ? x / y
                : n->op == JO_FLOORDIV ? floor(x / y)
                                       : x - floor(x / y) * y;
            break;
        default: /* JO_POW */
            if (is_intlike(a) && is_intlike(b) && as_int(b) >= 0) {
                long long acc = 1, base = as_int(a);
                for (long long e = as_int(b); e > 0; e--)
                    if (__builtin_mul_overflow(acc, base, &acc))
                        return jinja_err(s, n, ENG_EUNSUPPORTED,
                                         "integer overflow in '**'");
                *out = jinja_v_int(acc);
                return 0;
            }
            r = pow(x, y);
        }
        *out = jinja_v_float(r);
        return 0;
    }
    if (n->op == JO_ADD && a.t == JV_STR && b.t == JV_STR) {
        struct jbuf buf = {0};
        if (jinja_buf_add(s, &buf, a.u.str.s, a.u.str.n) ||
            jinja_buf_add(s, &buf, b.u.str.s, b.u.str.n))
            return -1;
        *out = jinja_v_str(buf.p ? buf.p : "", buf.n);
        return 0;
    }
    if (n->op == JO_ADD && a.t == JV_LIST && b.t == JV_LIST &&
        a.u.list->kind == b.u.list->kind &&
        (a.u.list->kind == JL_LIST || a.u.list->kind == JL_TUPLE)) {
        struct jlist *l = jinja_list_new(s);
        if (!l) return -1;
        l->kind = a.u.list->kind;
        for (size_t i = 0; i < a.u.list->n; i++)
            if (jinja_list_push(s, l, a.u.list->v[i])) return -1;
        for (size_t i = 0; i < b.u.list->n; i++)
            if (jinja_list_push(s, l, b.u.list->v[i])) return -1;
        *out = (struct jv){.t = JV_LIST, .u.list = l};
        return 0;
    }
    if (n->op == JO_MUL &&
        ((a.t == JV_STR && is_intlike(b)) || (b.t == JV_STR && is_intlike(a)))) {
        struct jv str = a.t == JV_STR ? a : b;
        long long times = as_int(a.t == JV_STR ? b : a);
        struct jbuf buf = {0};
        for (long long i = 0; i < times; i++) {
            if (step(s, n) || jinja_buf_add(s, &buf, str.u.str.s, str.u.str.n)) return -1;
        }
        *out = jinja_v_str(buf.p ? buf.p : "", buf.n);
        return 0;
    }
    if (n->op == JO_MOD && a.t == JV_STR)
        return jinja_err(s, n, ENG_EUNSUPPORTED,
                         "string formatting with '%%' is not supported");
    return optype_err(s, n, op, a, b);
}

static int binop(struct jinja_state *s, const struct jnode *n, struct jv *out)
{
    struct jv a, b;
    if (jinja_eval(s, n->a, &a) || jinja_eval(s, n->b, &b)) return -1;
    int r, c = 0;
    switch (n->op) {
    case JO_EQ: *out = jinja_v_bool(jinja_v_equal(s, a, b)); return 0;
    case JO_NE: *out = jinja_v_bool(!jinja_v_equal(s, a, b)); return 0;
    case JO_IN:
    case JO_NOTIN:
        if (contains(s, n, a, b, &r)) return -1;
        *out = jinja_v_bool(n->op == JO_IN ? r : !r);
        return 0;
    case JO_LT:
    case JO_LE:
    case JO_GT:
    case JO_GE:
        if (compare(s, n, a, b, &c)) return -1;
        *out = jinja_v_bool(n->op == JO_LT   ? c < 0
                            : n->op == JO_LE ? c <= 0
                            : n->op == JO_GT ? c > 0
                                             : c >= 0);
        return 0;
    case JO_CONCAT: {
        struct jbuf buf = {0};
        if (jinja_v_to_str(s, &buf, a) || jinja_v_to_str(s, &buf, b)) return -1;
        *out = jinja_v_str(buf.p ? buf.p : "", buf.n);
        return 0;
    }
    default: return arith(s, n, a, b, out);
    }
}

/* Render `body` and give its output as a string instead of writing it (a macro call's
 * value, a block set): the output buffer is cut back to where it was. */
static int capture(struct jinja_state *s, struct jnode *const *body, int n, struct jv *out)
{
    size_t start = s->out_n;
    if (exec_body(s, body, n)) return -1;
    if (jinja_v_str_dup(s, s->out ? s->out + start : "", s->out_n - start, out)) return -1;
    s->out_n = start;
    if (s->out) s->out[start] = 0;
    return 0;
}

/* ---- calls ---- */

struct jargs {
    struct jv *pos, *kw;
    int n_pos, n_kw;
};

static int eval_args(struct jinja_state *s, const struct jnode *n, struct jargs *a)
{
    a->n_pos = n->n_args;
    a->n_kw = n->n_kwargs;
    a->pos = jinja_alloc(&s->ar, sizeof *a->pos * (size_t)(n->n_args + 1));
    a->kw = jinja_alloc(&s->ar, sizeof *a->kw * (size_t)(n->n_kwargs + 1));
    if (!a->pos || !a->kw)
        return jinja_err(s, n, ENG_ENOSPC, "the chat template used too much memory");
    for (int i = 0; i < n->n_args; i++)
        if (jinja_eval(s, n->args[i], &a->pos[i])) return -1;
    for (int i = 0; i < n->n_kwargs; i++)
        if (jinja_eval(s, n->kwargs[i], &a->kw[i])) return -1;
    return 0;
}

/*
 * Call macro `m` (or a {% call %} body: m is the JN_CALLBLOCK) with `a`. Its scope sits
 * on `parent` (the template's for a macro, the call site's for a caller()); `caller`, when
 * not NULL, is bound as the macro's `caller`.
 */
static int call_macro(struct jinja_state *s, const struct jnode *at, const struct jnode *m,
                      const struct jargs *a, struct jframe *parent, const struct jv *caller,
                      struct jv *out)
{
    if (a->n_pos > m->n_args)
        return jinja_err(s, at, ENG_EINVAL, "macro '%s' takes %d arguments, %d given",
                         m->name, m->n_args, a->n_pos);
    if (++s->depth > s->o->limits.max_depth)
        return jinja_err(s, at, ENG_ENOSPC, "macro calls nested deeper than %d",
                         s->o->limits.max_depth);
    struct jframe *f = jinja_alloc(&s->ar, sizeof *f), *saved = s->frame;
    if (!f) return jinja_err(s, at, ENG_ENOSPC, "the chat template used too much memory");
    f->parent = parent ? parent : s->top;
    if (caller && set_var(s, f, "caller", *caller)) return -1;
    for (int i = 0; i < m->n_args; i++) {
        struct jv v = jinja_v_undef(m->kwnames[i]);
        int found = 0;
        if (i < a->n_pos) v = a->pos[i], found = 1;
        for (int k = 0; k < a->n_kw; k++)
            if (!strcmp(at->kwnames[k], m->kwnames[i])) v = a->kw[k], found = 1;
        if (!found && m->args[i]) {
            s->frame = f; /* a default may use the arguments before it */
            int rc = jinja_eval(s, m->args[i], &v);
            s->frame = saved;
            if (rc) return -1;
        }
        if (set_var(s, f, m->kwnames[i], v)) return -1;
    }
    for (int k = 0; k < a->n_kw; k++) {
        int known = 0;
        for (int i = 0; i < m->n_args; i++)
            known |= !strcmp(at->kwnames[k], m->kwnames[i]);
        if (!known)
            return jinja_err(s, at, ENG_EINVAL, "macro '%s' has no argument '%s'", m->name,
                             at->kwnames[k]);
    }
    /* The macro's output is its value. */
    s->frame = f;
    int rc = capture(s, m->body, m->n_body, out);
    s->frame = saved;
    s->depth--;
    return rc;
}

static int eval_call(struct jinja_state *s, const struct jnode *n, struct jv *out)
{
    struct jargs a;
    if (n->a->kind == JN_ATTR) {
        struct jv obj;
        if (jinja_eval(s, n->a->a, &obj)) return -1;
        if (jinja_is_method(obj, n->a->name)) {
            if (eval_args(s, n, &a)) return -1;
            return jinja_method(s, n, obj, n->a->name, a.pos, a.n_pos, n->kwnames, a.kw,
                                a.n_kw, out);
        }
        if (obj.t != JV_DICT && obj.t != JV_NS && obj.t != JV_UNDEF)
            return jinja_err(s, n->a, ENG_EUNSUPPORTED,
                             "method '%s' of a %s is not supported", n->a->name,
                             jinja_v_type_name(obj));
    }
    struct jv f;
    if (jinja_eval(s, n->a, &f)) return -1;
    if (f.t == JV_UNDEF) return undefined_err(s, n->a, f);
    if (f.t != JV_MACRO && f.t != JV_FUNC && f.t != JV_CALLER)
        return jinja_err(s, n, ENG_EINVAL, "a %s is not callable", jinja_v_type_name(f));
    if (eval_args(s, n, &a)) return -1;
    if (f.t == JV_MACRO) return call_macro(s, n, f.u.macro, &a, NULL, NULL, out);
    if (f.t == JV_CALLER)
        return call_macro(s, n, f.u.caller->node, &a, f.u.caller->frame, NULL, out);
    return jinja_call_func(s, n, f.u.func, a.pos, a.n_pos, n->kwnames, a.kw, a.n_kw, out);
}

int jinja_eval(struct jinja_state *s, const struct jnode *n, struct jv *out)
{
    if (step(s, n)) return -1;
    struct jv a, b;
    switch (n->kind) {
    case JN_CONST: *out = n->val; return 0;
    case JN_NAME: *out = lookup(s, n->name); return 0;
    case JN_LIST: {
        struct jlist *l = jinja_list_new(s);
        if (!l) return -1;
        l->kind = n->tuple ? JL_TUPLE : JL_LIST;
        for (int i = 0; i < n->n_args; i++)
            if (jinja_eval(s, n->args[i], &a) || jinja_list_push(s, l, a)) return -1;
        *out = (struct jv){.t = JV_LIST, .u.list = l};
        return 0;
    }
    case JN_DICT: {
        struct jdict *d = jinja_dict_new(s);
        if (!d) return -1;
        for (int i = 0; i + 1 < n->n_args; i += 2) {
            if (jinja_eval(s, n->args[i], &a) || jinja_eval(s, n->args[i + 1], &b))
                return -1;
            if (a.t != JV_STR)
                return jinja_err(s, n->args[i], ENG_EUNSUPPORTED,
                                 "dict keys other than strings");
            if (jinja_dict_set(s, d, a, b)) return -1;
        }
        *out = (struct jv){.t = JV_DICT, .u.dict = d};
        return 0;
    }
    case JN_ATTR:
        if (jinja_eval(s, n->a, &a)) return -1;
        return get_attr(s, n, a, n->name, out);
    case JN_ITEM:
        if (jinja_eval(s, n->a, &a) || jinja_eval(s, n->b, &b)) return -1;
        return get_item(s, n, a, b, out);
    case JN_SLICE:
        if (jinja_eval(s, n->a, &a)) return -1;
        return get_slice(s, n, a, out);
    case JN_CALL: return eval_call(s, n, out);
    case JN_FILTER: {
        struct jargs x;
        if (jinja_eval(s, n->a, &a) || eval_args(s, n, &x)) return -1;
        return jinja_filter(s, n, n->name, a, x.pos, x.n_pos, n->kwnames, x.kw, x.n_kw,
                            out);
    }
    case JN_TEST: {
        struct jargs x;
        int r;
        if (jinja_eval(s, n->a, &a) || eval_args(s, n, &x)) return -1;
        if (jinja_test(s, n, n->name, a, x.pos, x.n_pos, &r)) return -1;
        *out = jinja_v_bool(n->negated ? !r : r);
        return 0;
    }
    case JN_NOT:
        if (jinja_eval(s, n->a, &a)) return -1;
        *out = jinja_v_bool(!jinja_v_truthy(a));
        return 0;
    case JN_NEG:
        if (jinja_eval(s, n->a, &a)) return -1;
        if (a.t == JV_INT && a.u.i != LLONG_MIN)
            *out = jinja_v_int(-a.u.i);
        else if (a.t == JV_FLOAT)
            *out = jinja_v_float(-a.u.f);
        else if (a.t == JV_BOOL)
            *out = jinja_v_int(-a.u.b);
        else
            return jinja_err(s, n, ENG_EINVAL, "bad operand type for unary -: '%s'",
                             jinja_v_type_name(a));
        return 0;
    case JN_AND:
    case JN_OR:
        /* Python returns the operand that decided: `a or b` is a when a is true */
        if (jinja_eval(s, n->a, &a)) return -1;
        if (jinja_v_truthy(a) == (n->kind == JN_OR)) {
            *out = a;
            return 0;
        }
        return jinja_eval(s, n->b, out);
    case JN_COND:
        if (jinja_eval(s, n->b, &b)) return -1;
        if (jinja_v_truthy(b)) return jinja_eval(s, n->a, out);
        if (n->c) return jinja_eval(s, n->c, out);
        *out = jinja_v_undef("(an if without else)");
        return 0;
    case JN_BINOP: return binop(s, n, out);
    default: return jinja_err(s, n, ENG_EFORMAT, "a statement where an expression belongs");
    }
}

/* ---- statements ---- */

/* What a for loop walks: a list's items, a dict's keys, a string's characters. */
static int iter_items(struct jinja_state *s, const struct jnode *n, struct jv v,
                      struct jlist **out)
{
    if (v.t == JV_LIST) {
        *out = v.u.list;
        return jinja_list_walk(s, n, v.u.list);
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
        size_t ncp, *off = cp_offsets(s, v, &ncp);
        if (!off) return -1;
        for (size_t i = 0; i < ncp; i++)
            if (jinja_list_push(s, l, jinja_v_str(v.u.str.s + off[i], off[i + 1] - off[i])))
                return -1;
        return 0;
    }
    return jinja_err(s, n, ENG_EINVAL, "'%s' object is not iterable", jinja_v_type_name(v));
}

static int bind_loop_vars(struct jinja_state *s, const struct jnode *n, struct jframe *f,
                          struct jv item)
{
    if (!n->name2) return set_var(s, f, n->name, item);
    if (item.t != JV_LIST || item.u.list->n != 2)
        return jinja_err(s, n, ENG_EINVAL, "cannot unpack a %s into two names",
                         jinja_v_type_name(item));
    return set_var(s, f, n->name, item.u.list->v[0]) ||
           set_var(s, f, n->name2, item.u.list->v[1]);
}

static int exec_for(struct jinja_state *s, const struct jnode *n)
{
    struct jv it;
    struct jlist *items;
    if (jinja_eval(s, n->a, &it) || iter_items(s, n->a, it, &items)) return -1;
    struct jframe *f = jinja_alloc(&s->ar, sizeof *f), *saved = s->frame;
    struct jloop *lp = jinja_alloc(&s->ar, sizeof *lp);
    if (!f || !lp)
        return jinja_err(s, n, ENG_ENOSPC, "the chat template used too much memory");
    f->parent = saved;
    s->frame = f;
    int rc = 0;
    if (n->b) { /* `for x in xs if cond`: the loop (and loop.length) sees the kept ones */
        struct jlist *kept = jinja_list_new(s);
        if (!kept) rc = -1;
        for (size_t i = 0; !rc && i < items->n; i++) {
            struct jv c;
            rc = bind_loop_vars(s, n, f, items->v[i]) || jinja_eval(s, n->b, &c);
            if (!rc && jinja_v_truthy(c)) rc = jinja_list_push(s, kept, items->v[i]);
        }
        items = kept;
    }
    lp->items = items;
    struct jv loopv = {.t = JV_LOOP, .u.loop = lp};
    for (size_t i = 0; !rc && items && i < items->n; i++) {
        /* each iteration starts from the outer scope again: a `set` in the body lasts
         * until the end of its iteration (Jinja: x = x + i reads the outer x each time) */
        lp->index0 = i;
        f->vars.n = 0;
        rc = set_var(s, f, "loop", loopv) || bind_loop_vars(s, n, f, items->v[i]);
        if (!rc) rc = exec_body(s, n->body, n->n_body);
        if (s->loop_ctl == 1) {
            s->loop_ctl = 0;
            break;
        }
        s->loop_ctl = 0;
    }
    if (!rc && items && items->n == 0 && n->n_orelse) {
        s->frame = saved;
        rc = exec_body(s, n->orelse, n->n_orelse);
    }
    s->frame = saved;
    return rc ? -1 : 0;
}

static int exec_stmt(struct jinja_state *s, const struct jnode *n)
{
    struct jv v;
    if (step(s, n)) return -1;
    switch (n->kind) {
    case JN_TEXT: return out_add(s, n, n->val.u.str.s, n->val.u.str.n);
    case JN_OUTPUT: {
        if (jinja_eval(s, n->a, &v)) return -1;
        if (v.t == JV_STR) return out_add(s, n, v.u.str.s, v.u.str.n);
        struct jbuf b = {0};
        if (jinja_v_to_str(s, &b, v))
            return jinja_err(s, n, ENG_EUNSUPPORTED, "cannot print this value");
        return out_add(s, n, b.p ? b.p : "", b.n);
    }
    case JN_IF:
        if (jinja_eval(s, n->a, &v)) return -1;
        return jinja_v_truthy(v) ? exec_body(s, n->body, n->n_body)
                                 : exec_body(s, n->orelse, n->n_orelse);
    case JN_FOR: return exec_for(s, n);
    case JN_SET:
        if (n->a ? jinja_eval(s, n->a, &v) : capture(s, n->body, n->n_body, &v)) return -1;
        if (n->attr) {
            struct jv ns = lookup(s, n->name);
            if (ns.t != JV_NS)
                return jinja_err(s, n, ENG_EINVAL,
                                 "cannot assign attribute on a %s (only on a "
                                 "namespace())",
                                 jinja_v_type_name(ns));
            return jinja_dict_set(s, ns.u.dict, jinja_v_str(n->attr, strlen(n->attr)), v);
        }
        return set_var(s, s->frame, n->name, v);
    case JN_MACRO:
        return set_var(s, s->frame, n->name, (struct jv){.t = JV_MACRO, .u.macro = n});
    case JN_BREAK: s->loop_ctl = 1; return 0;
    case JN_CONTINUE: s->loop_ctl = 2; return 0;
    case JN_BLOCKSEQ: return exec_body(s, n->body, n->n_body);
    case JN_CALLBLOCK: {
        /* {% call m(args) %}body{% endcall %}: m runs with `caller` rendering the body
         * in this scope; what m renders is the output */
        struct jv f;
        struct jargs a;
        struct jcaller *c = jinja_alloc(&s->ar, sizeof *c);
        if (!c)
            return jinja_err(s, n, ENG_ENOSPC, "the chat template used too much memory");
        c->node = n;
        c->frame = s->frame;
        struct jv cv = {.t = JV_CALLER, .u.caller = c};
        if (jinja_eval(s, n->a->a, &f)) return -1;
        if (f.t != JV_MACRO)
            return jinja_err(s, n->a, ENG_EUNSUPPORTED,
                             "{%% call %%} needs a macro, not %s", jinja_v_type_name(f));
        if (eval_args(s, n->a, &a) || call_macro(s, n->a, f.u.macro, &a, NULL, &cv, &v))
            return -1;
        return out_add(s, n, v.u.str.s, v.u.str.n);
    }
    default: return jinja_err(s, n, ENG_EFORMAT, "an expression where a statement belongs");
    }
}

static int exec_body(struct jinja_state *s, struct jnode *const *body, int n)
{
    if (++s->depth > s->o->limits.max_depth)
        return jinja_err(s, n ? body[0] : NULL, ENG_ENOSPC, "blocks nested deeper than %d",
                         s->o->limits.max_depth);
    for (int i = 0; i < n && !s->loop_ctl; i++)
        if (exec_stmt(s, body[i])) return -1;
    s->depth--;
    return 0;
}

int jinja_render(const struct jinja_template *t, const cJSON *vars,
                 const struct jinja_render_opts *o, char **out, size_t *len, char **err)
{
    struct jinja_render_opts opts = o ? *o : (struct jinja_render_opts){0};
    if (!opts.limits.max_output) opts.limits.max_output = (size_t)8 << 20;
    if (!opts.limits.max_memory) opts.limits.max_memory = (size_t)256 << 20;
    if (!opts.limits.max_steps) opts.limits.max_steps = 10 * 1000 * 1000;
    if (!opts.limits.max_depth) opts.limits.max_depth = 200;
    if (!opts.now) opts.now = (int64_t)time(NULL);
    struct jinja_state s = {.o = &opts};
    s.ar.limit = opts.limits.max_memory;
    *out = NULL;
    *err = NULL;
    if (len) *len = 0;
    struct jframe *g = jinja_alloc(&s.ar, sizeof *g),
                  *top = jinja_alloc(&s.ar, sizeof *top);
    CHECK(g && top);
    top->parent = g;
    s.globals = g;
    s.top = s.frame = top;
    int rc = 0;
    if (vars && !cJSON_IsObject(vars))
        rc = jinja_err(&s, NULL, ENG_EINVAL, "variables must be an object");
    for (const cJSON *c = vars ? vars->child : NULL; !rc && c; c = c->next) {
        struct jv v;
        rc = jinja_v_from_cjson(&s, c, &v) || set_var(&s, g, c->string, v);
    }
    if (!rc) rc = exec_body(&s, t->root->body, t->root->n_body);
    jinja_arena_free(&s.ar);
    if (rc || s.err) {
        free(s.out);
        *err = s.err_msg ? s.err_msg : xstrdup("chat template error");
        return s.err ? s.err : ENG_EINVAL;
    }
    *out = s.out ? s.out : xstrdup("");
    if (len) *len = s.out_n;
    return 0;
}
