/*
 * jinja_parse.c - tokens to a syntax tree, with Jinja2's grammar and precedence.
 *
 * Owns: the compiled template (its arena holds every node and string).
 * Precedence, loosest first, as jinja2/parser.py has it: `x if c else y`, or, and, not,
 * comparisons (==, !=, <, >, <=, >=, in, not in; chained), + and -, ~, * / // %, **,
 * unary - and +, then a primary with its postfixes (.name, [i], [a:b], (args)) and its
 * filters and tests (| f, is t), which bind tighter than any operator: `a + b | trim`
 * trims b only. Anything the subset lacks is refused here with its line and column.
 * Recursion is bounded (JINJA_MAX_NEST) so that a hostile template cannot overflow the
 * stack while compiling.
 * Thread: any.
 */
#include "jinja_impl.h"
#include "jinja_lex.h"

#include "err.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JINJA_MAX_NEST 100

struct parser {
    struct jtok *t;
    size_t i, n;
    struct jinja_arena *ar;
    int nest;
    int code;
    char *err;
};

static int perr(struct parser *P, const struct jtok *t, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int perr(struct parser *P, const struct jtok *t, int code, const char *fmt, ...)
{
    if (P->err) return -1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t need = strlen(msg) + 64;
    P->err = xmalloc(need);
    snprintf(P->err, need, "line %d, column %d: %s", t->line, t->col, msg);
    P->code = code;
    return -1;
}

static struct jtok *cur(struct parser *P)
{
    return &P->t[P->i];
}
static struct jtok *peek(struct parser *P, size_t k)
{
    return &P->t[P->i + k < P->n ? P->i + k : P->n - 1];
}
static struct jtok *next(struct parser *P)
{
    struct jtok *t = cur(P);
    if (P->i + 1 < P->n) P->i++;
    return t;
}

/* Whether [p, e) is all digits (and not empty). */
static int is_digit_str(const char *p, const char *e)
{
    if (p >= e) return 0;
    for (; p < e; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

static int is_op(const struct jtok *t, const char *op)
{
    return t->kind == JT_OP && !strcmp(t->op, op);
}
static int is_name(const struct jtok *t, const char *name)
{
    return t->kind == JT_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}

static int expect_op(struct parser *P, const char *op)
{
    if (!is_op(cur(P), op)) return perr(P, cur(P), ENG_EFORMAT, "expected '%s'", op);
    next(P);
    return 0;
}

static char *tok_str(struct parser *P, const struct jtok *t)
{
    char *s = jinja_alloc(P->ar, t->n + 1);
    memcpy(s, t->s, t->n);
    return s;
}

static struct jnode *node(struct parser *P, enum jnode_kind k, const struct jtok *at)
{
    struct jnode *n = jinja_alloc(P->ar, sizeof *n);
    n->kind = k;
    n->line = at->line;
    n->col = at->col;
    return n;
}

/* A growable array of node pointers in the arena (copied on growth: compile-time only). */
static void push_node(struct parser *P, struct jnode ***arr, int *n, struct jnode *x)
{
    if ((*n & (*n - 1)) == 0) { /* 0, 1, 2, 4, ...: grow to the next power of two */
        struct jnode **g = jinja_alloc(P->ar, sizeof *g * (size_t)(*n ? *n * 2 : 1));
        if (*n) memcpy(g, *arr, sizeof *g * (size_t)*n);
        *arr = g;
    }
    (*arr)[(*n)++] = x;
}

static void push_name(struct parser *P, const char ***arr, int n, const char *s)
{
    if ((n & (n - 1)) == 0) {
        const char **g = jinja_alloc(P->ar, sizeof *g * (size_t)(n ? n * 2 : 1));
        if (n) memcpy(g, *arr, sizeof *g * (size_t)n);
        *arr = g;
    }
    (*arr)[n] = s;
}

static struct jnode *parse_expr(struct parser *P);
static struct jnode *parse_or(struct parser *P);
static struct jnode *parse_unary(struct parser *P);

static int enter(struct parser *P)
{
    if (++P->nest > JINJA_MAX_NEST)
        return perr(P, cur(P), ENG_EUNSUPPORTED, "nesting deeper than %d", JINJA_MAX_NEST);
    return 0;
}

/* `(a, b, k=v)`: the opening parenthesis is current. */
static int parse_args(struct parser *P, struct jnode *n)
{
    next(P);
    while (!is_op(cur(P), ")")) {
        if (is_op(cur(P), "*") || is_op(cur(P), "**"))
            return perr(P, cur(P), ENG_EUNSUPPORTED,
                        "*args and **kwargs are not supported");
        if (cur(P)->kind == JT_NAME && is_op(peek(P, 1), "=")) {
            const char *k = tok_str(P, next(P));
            next(P);
            struct jnode *v = parse_expr(P);
            if (!v) return -1;
            push_name(P, &n->kwnames, n->n_kwargs, k);
            push_node(P, &n->kwargs, &n->n_kwargs, v);
        } else {
            if (n->n_kwargs)
                return perr(P, cur(P), ENG_EFORMAT, "positional argument after a keyword");
            struct jnode *v = parse_expr(P);
            if (!v) return -1;
            push_node(P, &n->args, &n->n_args, v);
        }
        if (is_op(cur(P), ","))
            next(P);
        else if (!is_op(cur(P), ")"))
            return perr(P, cur(P), ENG_EFORMAT, "expected ',' or ')'");
    }
    next(P);
    return 0;
}

static struct jnode *parse_primary(struct parser *P)
{
    struct jtok *t = cur(P);
    struct jnode *n;
    if (t->kind == JT_NAME) {
        next(P);
        n = node(P, JN_CONST, t);
        if (is_name(t, "true") || is_name(t, "True"))
            n->val = jinja_v_bool(1);
        else if (is_name(t, "false") || is_name(t, "False"))
            n->val = jinja_v_bool(0);
        else if (is_name(t, "none") || is_name(t, "None"))
            n->val = jinja_v_none();
        else {
            n->kind = JN_NAME;
            n->name = tok_str(P, t);
        }
        return n;
    }
    if (t->kind == JT_STR) {
        /* adjacent literals join, as in Python: 'a' 'b' */
        size_t len = 0, k = P->i;
        while (P->t[k].kind == JT_STR)
            len += P->t[k++].n;
        char *s = jinja_alloc(P->ar, len + 1), *o = s;
        while (cur(P)->kind == JT_STR) {
            memcpy(o, cur(P)->s, cur(P)->n);
            o += cur(P)->n;
            next(P);
        }
        n = node(P, JN_CONST, t);
        n->val = jinja_v_str(s, len);
        return n;
    }
    if (t->kind == JT_INT || t->kind == JT_FLOAT) {
        char buf[64];
        size_t k = 0;
        for (size_t i = 0; i < t->n && k + 1 < sizeof buf; i++)
            if (t->s[i] != '_') buf[k++] = t->s[i];
        buf[k] = 0;
        next(P);
        n = node(P, JN_CONST, t);
        errno = 0;
        if (t->kind == JT_INT)
            n->val = jinja_v_int(strtoll(buf, NULL, 10));
        else
            n->val = jinja_v_float(strtod(buf, NULL));
        if (errno) return perr(P, t, ENG_EUNSUPPORTED, "number out of range"), NULL;
        return n;
    }
    if (is_op(t, "(")) {
        next(P);
        if (is_op(cur(P), ")")) { /* () : the empty tuple */
            next(P);
            n = node(P, JN_LIST, t);
            n->tuple = 1;
            return n;
        }
        struct jnode *e = parse_expr(P);
        if (!e) return NULL;
        if (is_op(cur(P), ",")) {
            /* a tuple: a list that prints as (a, b) ('in' and tojson's separators use
             * them) */
            n = node(P, JN_LIST, t);
            n->tuple = 1;
            push_node(P, &n->args, &n->n_args, e);
            while (is_op(cur(P), ",")) {
                next(P);
                if (is_op(cur(P), ")")) break;
                struct jnode *x = parse_expr(P);
                if (!x) return NULL;
                push_node(P, &n->args, &n->n_args, x);
            }
            e = n;
        }
        if (expect_op(P, ")")) return NULL;
        return e;
    }
    if (is_op(t, "[")) {
        next(P);
        n = node(P, JN_LIST, t);
        while (!is_op(cur(P), "]")) {
            struct jnode *e = parse_expr(P);
            if (!e) return NULL;
            push_node(P, &n->args, &n->n_args, e);
            if (is_op(cur(P), ","))
                next(P);
            else if (!is_op(cur(P), "]"))
                return perr(P, cur(P), ENG_EFORMAT, "expected ',' or ']'"), NULL;
        }
        next(P);
        return n;
    }
    if (is_op(t, "{")) {
        next(P);
        n = node(P, JN_DICT, t);
        while (!is_op(cur(P), "}")) {
            struct jnode *k = parse_expr(P);
            if (!k || expect_op(P, ":")) return NULL;
            struct jnode *v = parse_expr(P);
            if (!v) return NULL;
            push_node(P, &n->args, &n->n_args, k);
            push_node(P, &n->args, &n->n_args, v);
            if (is_op(cur(P), ","))
                next(P);
            else if (!is_op(cur(P), "}"))
                return perr(P, cur(P), ENG_EFORMAT, "expected ',' or '}'"), NULL;
        }
        next(P);
        return n;
    }
    if (t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || t->kind == JT_EOF)
        return perr(P, t, ENG_EFORMAT, "expected an expression"), NULL;
    return perr(P, t, ENG_EFORMAT, "unexpected '%s'", t->kind == JT_OP ? t->op : "token"),
           NULL;
}

static struct jnode *parse_postfix(struct parser *P, struct jnode *n)
{
    for (;;) {
        struct jtok *t = cur(P);
        if (is_op(t, ".") && (peek(P, 1)->kind == JT_INT || peek(P, 1)->kind == JT_FLOAT)) {
            /* x.0 is x[0] in Jinja; x.0.1 lexes as x . 0.1: two subscripts */
            next(P);
            struct jtok *nt = next(P);
            char *end;
            long long i0 = strtoll(nt->s, &end, 10);
            for (int k = 0; k < 2; k++) {
                struct jnode *it = node(P, JN_ITEM, nt), *key = node(P, JN_CONST, nt);
                key->val = jinja_v_int(i0);
                it->a = n;
                it->b = key;
                n = it;
                if (nt->kind != JT_FLOAT) break;
                if (*end != '.' || !is_digit_str(end + 1, nt->s + nt->n))
                    return perr(P, nt, ENG_EFORMAT, "bad subscript after '.'"), NULL;
                i0 = strtoll(end + 1, NULL, 10);
            }
        } else if (is_op(t, ".")) {
            next(P);
            if (cur(P)->kind != JT_NAME)
                return perr(P, cur(P), ENG_EUNSUPPORTED, "expected a name after '.'"), NULL;
            struct jnode *a = node(P, JN_ATTR, cur(P)); /* errors point at the name */
            a->a = n;
            a->name = tok_str(P, next(P));
            n = a;
        } else if (is_op(t, "[")) {
            next(P);
            struct jnode *parts[3] = {NULL, NULL, NULL};
            int k = 0, slice = 0;
            for (;;) {
                if (!is_op(cur(P), ":") && !is_op(cur(P), "]")) {
                    parts[k] = parse_expr(P);
                    if (!parts[k]) return NULL;
                }
                if (is_op(cur(P), ":") && k < 2) {
                    slice = 1;
                    k++;
                    next(P);
                    continue;
                }
                break;
            }
            if (expect_op(P, "]")) return NULL;
            struct jnode *s = node(P, slice ? JN_SLICE : JN_ITEM, t);
            s->a = n;
            if (slice) {
                s->args = jinja_alloc(P->ar, 3 * sizeof *s->args);
                memcpy(s->args, parts, sizeof parts);
                s->n_args = 3;
            } else {
                if (!parts[0]) return perr(P, t, ENG_EFORMAT, "empty subscript"), NULL;
                s->b = parts[0];
            }
            n = s;
        } else if (is_op(t, "(")) {
            struct jnode *c = node(P, JN_CALL, t);
            c->a = n;
            if (parse_args(P, c)) return NULL;
            n = c;
        } else {
            return n;
        }
    }
}

/* Whether the current token may start the one argument of `is test arg` (no parens). */
static int starts_test_arg(struct parser *P)
{
    struct jtok *t = cur(P);
    if (t->kind == JT_STR || t->kind == JT_INT || t->kind == JT_FLOAT) return 1;
    if (is_op(t, "[") || is_op(t, "{")) return 1;
    if (t->kind != JT_NAME) return 0;
    static const char *const stop[] = {"and", "or", "else", "if", "in", "not", "is"};
    for (size_t i = 0; i < ARRAY_LEN(stop); i++)
        if (is_name(t, stop[i])) return 0;
    return 1;
}

static struct jnode *parse_filters(struct parser *P, struct jnode *n)
{
    for (;;) {
        struct jtok *t = cur(P);
        if (is_op(t, "|")) {
            next(P);
            if (cur(P)->kind != JT_NAME)
                return perr(P, cur(P), ENG_EFORMAT, "expected a filter name"), NULL;
            struct jtok *nt = next(P);
            struct jnode *f = node(P, JN_FILTER, nt);
            f->a = n;
            f->name = tok_str(P, nt);
            if (!jinja_has_filter(f->name))
                return perr(P, nt, ENG_EUNSUPPORTED, "filter '%s' is not supported",
                            f->name),
                       NULL;
            if (is_op(cur(P), "(") && parse_args(P, f)) return NULL;
            n = f;
        } else if (is_name(t, "is")) {
            next(P);
            struct jnode *f = node(P, JN_TEST, t);
            if (is_name(cur(P), "not")) {
                next(P);
                f->negated = 1;
            }
            struct jtok *nt = cur(P);
            if (nt->kind != JT_NAME && !is_op(nt, "==") && !is_op(nt, "!="))
                return perr(P, nt, ENG_EFORMAT, "expected a test name"), NULL;
            next(P);
            f->a = n;
            f->name =
                nt->kind == JT_NAME ? tok_str(P, nt) : (nt->op[0] == '=' ? "eq" : "ne");
            if (!jinja_has_test(f->name))
                return perr(P, nt, ENG_EUNSUPPORTED, "test '%s' is not supported", f->name),
                       NULL;
            if (is_op(cur(P), "(")) {
                if (parse_args(P, f)) return NULL;
            } else if (starts_test_arg(P)) {
                struct jnode *arg = parse_primary(P);
                if (arg) arg = parse_postfix(P, arg);
                if (!arg) return NULL;
                push_node(P, &f->args, &f->n_args, arg);
            }
            n = f;
        } else {
            return n;
        }
    }
}

/* with_filter 0: the operand of a unary minus, whose filters apply to the negated value
 * (-3|abs is 3), as in Jinja's parse_unary. */
static struct jnode *parse_unary_f(struct parser *P, int with_filter)
{
    struct jtok *t = cur(P);
    if (enter(P)) return NULL;
    struct jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        next(P);
        struct jnode *x = parse_unary_f(P, 0);
        if (!x) return NULL;
        if (t->op[0] == '-') {
            n = node(P, JN_NEG, t);
            n->a = x;
        } else {
            n = x;
        }
    } else {
        n = parse_primary(P);
        if (n) n = parse_postfix(P, n);
    }
    if (n && with_filter) n = parse_filters(P, n);
    P->nest--;
    return n;
}

static struct jnode *parse_unary(struct parser *P)
{
    return parse_unary_f(P, 1);
}

static struct jnode *binop(struct parser *P, const struct jtok *t, enum jop op,
                           struct jnode *a, struct jnode *b)
{
    struct jnode *n = node(P, JN_BINOP, t);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static struct jnode *parse_pow(struct parser *P)
{
    struct jnode *a = parse_unary(P);
    while (a && is_op(cur(P), "**")) {
        struct jtok *t = next(P);
        struct jnode *b = parse_unary(P);
        if (!b) return NULL;
        a = binop(P, t, JO_POW, a, b);
    }
    return a;
}

static struct jnode *parse_math2(struct parser *P)
{
    struct jnode *a = parse_pow(P);
    for (;;) {
        if (!a) return NULL;
        struct jtok *t = cur(P);
        enum jop op;
        if (is_op(t, "*"))
            op = JO_MUL;
        else if (is_op(t, "/"))
            op = JO_DIV;
        else if (is_op(t, "//"))
            op = JO_FLOORDIV;
        else if (is_op(t, "%"))
            op = JO_MOD;
        else
            return a;
        next(P);
        struct jnode *b = parse_pow(P);
        if (!b) return NULL;
        a = binop(P, t, op, a, b);
    }
}

static struct jnode *parse_concat(struct parser *P)
{
    struct jnode *a = parse_math2(P);
    while (a && is_op(cur(P), "~")) {
        struct jtok *t = next(P);
        struct jnode *b = parse_math2(P);
        if (!b) return NULL;
        a = binop(P, t, JO_CONCAT, a, b);
    }
    return a;
}

static struct jnode *parse_math1(struct parser *P)
{
    struct jnode *a = parse_concat(P);
    while (a && (is_op(cur(P), "+") || is_op(cur(P), "-"))) {
        struct jtok *t = next(P);
        struct jnode *b = parse_concat(P);
        if (!b) return NULL;
        a = binop(P, t, t->op[0] == '+' ? JO_ADD : JO_SUB, a, b);
    }
    return a;
}

static struct jnode *parse_compare(struct parser *P)
{
    struct jnode *a = parse_math1(P), *chain = NULL;
    for (;;) {
        if (!a) return NULL;
        struct jtok *t = cur(P);
        enum jop op;
        if (is_op(t, "=="))
            op = JO_EQ;
        else if (is_op(t, "!="))
            op = JO_NE;
        else if (is_op(t, "<"))
            op = JO_LT;
        else if (is_op(t, "<="))
            op = JO_LE;
        else if (is_op(t, ">"))
            op = JO_GT;
        else if (is_op(t, ">="))
            op = JO_GE;
        else if (is_name(t, "in"))
            op = JO_IN;
        else if (is_name(t, "not") && is_name(peek(P, 1), "in"))
            op = JO_NOTIN, next(P);
        else
            return chain ? chain : a;
        next(P);
        struct jnode *b = parse_math1(P);
        if (!b) return NULL;
        /* a < b < c is (a < b) and (b < c), as in Python */
        struct jnode *cmp = binop(P, t, op, a, b);
        if (chain) {
            struct jnode *x = node(P, JN_AND, t);
            x->a = chain;
            x->b = cmp;
            chain = x;
        } else {
            chain = cmp;
        }
        a = b;
    }
}

static struct jnode *parse_not(struct parser *P)
{
    if (is_name(cur(P), "not")) {
        struct jtok *t = next(P);
        if (enter(P)) return NULL;
        struct jnode *x = parse_not(P);
        P->nest--;
        if (!x) return NULL;
        struct jnode *n = node(P, JN_NOT, t);
        n->a = x;
        return n;
    }
    return parse_compare(P);
}

static struct jnode *parse_and(struct parser *P)
{
    struct jnode *a = parse_not(P);
    while (a && is_name(cur(P), "and")) {
        struct jtok *t = next(P);
        struct jnode *b = parse_not(P);
        if (!b) return NULL;
        struct jnode *n = node(P, JN_AND, t);
        n->a = a;
        n->b = b;
        a = n;
    }
    return a;
}

static struct jnode *parse_or(struct parser *P)
{
    struct jnode *a = parse_and(P);
    while (a && is_name(cur(P), "or")) {
        struct jtok *t = next(P);
        struct jnode *b = parse_and(P);
        if (!b) return NULL;
        struct jnode *n = node(P, JN_OR, t);
        n->a = a;
        n->b = b;
        a = n;
    }
    return a;
}

static struct jnode *parse_expr(struct parser *P)
{
    if (enter(P)) return NULL;
    struct jnode *a = parse_or(P);
    while (a && is_name(cur(P), "if")) {
        struct jtok *t = next(P);
        struct jnode *n = node(P, JN_COND, t);
        n->a = a;
        n->b = parse_or(P);
        if (!n->b) return NULL;
        if (is_name(cur(P), "else")) {
            next(P);
            n->c = parse_expr(P);
            if (!n->c) return NULL;
        }
        a = n;
    }
    P->nest--;
    return a;
}

/* ---- statements ---- */

static int expect_end(struct parser *P)
{
    if (cur(P)->kind != JT_BLOCK_END) return perr(P, cur(P), ENG_EFORMAT, "expected '%%}'");
    next(P);
    return 0;
}

static int parse_stmt(struct parser *P, struct jnode ***body, int *n_body);

/*
 * Statements up to `{% end %}` for one of `ends` (NULL-terminated; NULL: the end of the
 * template). Returns the index of the end tag found, the parser past its name, or -1.
 */
static int parse_body(struct parser *P, const struct jtok *open, const char *const *ends,
                      struct jnode ***body, int *n_body)
{
    if (enter(P)) return -1;
    for (;;) {
        struct jtok *t = cur(P);
        if (t->kind == JT_EOF) {
            P->nest--;
            if (!ends) return 0;
            return perr(P, open, ENG_EFORMAT, "this tag has no {%% %s %%}",
                        ends[0][0] == 'e' ? ends[0] : "end");
        }
        if (t->kind == JT_TEXT) {
            struct jnode *n = node(P, JN_TEXT, t);
            n->val = jinja_v_str(t->s, t->n);
            push_node(P, body, n_body, n);
            next(P);
        } else if (t->kind == JT_VAR_BEGIN) {
            next(P);
            struct jnode *n = node(P, JN_OUTPUT, t);
            n->a = parse_expr(P);
            if (!n->a) return -1;
            if (cur(P)->kind != JT_VAR_END)
                return perr(P, cur(P), ENG_EFORMAT, "expected '}}'");
            next(P);
            push_node(P, body, n_body, n);
        } else if (t->kind == JT_BLOCK_BEGIN) {
            struct jtok *nt = peek(P, 1);
            for (int k = 0; ends && ends[k]; k++)
                if (is_name(nt, ends[k])) {
                    next(P);
                    next(P);
                    P->nest--;
                    return k;
                }
            next(P);
            if (parse_stmt(P, body, n_body)) return -1;
        } else {
            return perr(P, t, ENG_EFORMAT, "unexpected token");
        }
    }
}

static int parse_if(struct parser *P, struct jtok *open, struct jnode *n)
{
    static const char *const ends[] = {"endif", "elif", "else", NULL};
    static const char *const endif[] = {"endif", NULL};
    struct jnode *c = n;
    for (;;) {
        c->a = parse_expr(P);
        if (!c->a || expect_end(P)) return -1;
        int r = parse_body(P, open, ends, &c->body, &c->n_body);
        if (r < 0) return -1;
        if (r == 0) return expect_end(P);
        if (r == 2) {
            if (expect_end(P) || parse_body(P, open, endif, &c->orelse, &c->n_orelse) < 0)
                return -1;
            return expect_end(P);
        }
        struct jnode *e = node(P, JN_IF, cur(P));
        push_node(P, &c->orelse, &c->n_orelse, e);
        c = e;
    }
}

static int parse_for(struct parser *P, struct jtok *open, struct jnode *n)
{
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    if (cur(P)->kind != JT_NAME) return perr(P, cur(P), ENG_EFORMAT, "expected a name");
    n->name = tok_str(P, next(P));
    if (is_op(cur(P), ",")) {
        next(P);
        if (cur(P)->kind != JT_NAME) return perr(P, cur(P), ENG_EFORMAT, "expected a name");
        n->name2 = tok_str(P, next(P));
        if (is_op(cur(P), ","))
            return perr(P, cur(P), ENG_EUNSUPPORTED, "unpacking into more than two names");
    }
    if (!is_name(cur(P), "in")) return perr(P, cur(P), ENG_EFORMAT, "expected 'in'");
    next(P);
    /* the iterable stops before `if`: that one filters the items (Jinja's grammar) */
    n->a = parse_or(P);
    if (!n->a) return -1;
    if (is_name(cur(P), "if")) {
        next(P);
        n->b = parse_expr(P);
        if (!n->b) return -1;
    }
    if (is_name(cur(P), "recursive"))
        return perr(P, cur(P), ENG_EUNSUPPORTED, "recursive loops are not supported");
    if (expect_end(P)) return -1;
    int r = parse_body(P, open, ends, &n->body, &n->n_body);
    if (r < 0) return -1;
    if (r == 1) {
        if (expect_end(P) || parse_body(P, open, endfor, &n->orelse, &n->n_orelse) < 0)
            return -1;
    }
    return expect_end(P);
}

static int parse_set(struct parser *P, struct jnode *n)
{
    if (cur(P)->kind != JT_NAME) return perr(P, cur(P), ENG_EFORMAT, "expected a name");
    n->name = tok_str(P, next(P));
    if (is_op(cur(P), ".")) {
        next(P);
        if (cur(P)->kind != JT_NAME) return perr(P, cur(P), ENG_EFORMAT, "expected a name");
        n->attr = tok_str(P, next(P));
    }
    if (is_op(cur(P), ","))
        return perr(P, cur(P), ENG_EUNSUPPORTED,
                    "set with several targets is not supported");
    if (cur(P)->kind == JT_BLOCK_END) {
        /* {% set x %}...{% endset %}: x is what the body renders */
        static const char *const ends[] = {"endset", NULL};
        struct jtok *open = cur(P);
        next(P);
        if (parse_body(P, open, ends, &n->body, &n->n_body) < 0) return -1;
        return expect_end(P);
    }
    if (expect_op(P, "=")) return -1;
    n->a = parse_expr(P);
    if (!n->a) return -1;
    return expect_end(P);
}

static int parse_macro(struct parser *P, struct jtok *open, struct jnode *n)
{
    static const char *const ends[] = {"endmacro", NULL};
    if (cur(P)->kind != JT_NAME) return perr(P, cur(P), ENG_EFORMAT, "expected a name");
    n->name = tok_str(P, next(P));
    if (expect_op(P, "(")) return -1;
    while (!is_op(cur(P), ")")) {
        if (cur(P)->kind != JT_NAME) return perr(P, cur(P), ENG_EFORMAT, "expected a name");
        push_name(P, &n->kwnames, n->n_args, tok_str(P, next(P)));
        struct jnode *def = NULL;
        if (is_op(cur(P), "=")) {
            next(P);
            def = parse_expr(P);
            if (!def) return -1;
        }
        push_node(P, &n->args, &n->n_args, def);
        if (is_op(cur(P), ","))
            next(P);
        else if (!is_op(cur(P), ")"))
            return perr(P, cur(P), ENG_EFORMAT, "expected ',' or ')'");
    }
    next(P);
    if (expect_end(P) || parse_body(P, open, ends, &n->body, &n->n_body) < 0) return -1;
    if (cur(P)->kind == JT_NAME) next(P); /* {% endmacro name %} */
    return expect_end(P);
}

/* {% call(params) m(args) %}body{% endcall %}: params as a macro's, then a call. */
static int parse_callblock(struct parser *P, struct jtok *open, struct jnode *n)
{
    static const char *const ends[] = {"endcall", NULL};
    n->name = "caller";
    if (is_op(cur(P), "(")) {
        next(P);
        while (!is_op(cur(P), ")")) {
            if (cur(P)->kind != JT_NAME)
                return perr(P, cur(P), ENG_EFORMAT, "expected a name");
            push_name(P, &n->kwnames, n->n_args, tok_str(P, next(P)));
            struct jnode *def = NULL;
            if (is_op(cur(P), "=")) {
                next(P);
                if (!(def = parse_expr(P))) return -1;
            }
            push_node(P, &n->args, &n->n_args, def);
            if (is_op(cur(P), ","))
                next(P);
            else if (!is_op(cur(P), ")"))
                return perr(P, cur(P), ENG_EFORMAT, "expected ',' or ')'");
        }
        next(P);
    }
    n->a = parse_expr(P);
    if (!n->a) return -1;
    if (n->a->kind != JN_CALL)
        return perr(P, open, ENG_EFORMAT, "{%% call %%} needs a macro call");
    if (expect_end(P) || parse_body(P, open, ends, &n->body, &n->n_body) < 0) return -1;
    return expect_end(P);
}

/* One statement; the current token is its name (just past `{%`). */
static int parse_stmt(struct parser *P, struct jnode ***body, int *n_body)
{
    struct jtok *open = cur(P);
    if (open->kind != JT_NAME)
        return perr(P, open, ENG_EFORMAT, "expected a statement name");
    next(P);
    struct jnode *n = node(P, JN_IF, open);
    int r;
    if (is_name(open, "if")) {
        r = parse_if(P, open, n);
    } else if (is_name(open, "for")) {
        n->kind = JN_FOR;
        r = parse_for(P, open, n);
    } else if (is_name(open, "set")) {
        n->kind = JN_SET;
        r = parse_set(P, n);
    } else if (is_name(open, "macro")) {
        n->kind = JN_MACRO;
        r = parse_macro(P, open, n);
    } else if (is_name(open, "break") || is_name(open, "continue")) {
        n->kind = open->s[0] == 'b' ? JN_BREAK : JN_CONTINUE;
        r = expect_end(P);
    } else if (is_name(open, "call")) {
        n->kind = JN_CALLBLOCK;
        r = parse_callblock(P, open, n);
    } else if (is_name(open, "generation")) {
        /* transformers' AssistantTracker tag: renders its body unchanged */
        static const char *const ends[] = {"endgeneration", NULL};
        n->kind = JN_BLOCKSEQ;
        r = expect_end(P);
        if (!r)
            r = parse_body(P, open, ends, &n->body, &n->n_body) < 0 ? -1 : expect_end(P);
    } else {
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)MIN(open->n, 31), open->s);
        static const char *const known[] = {"endif",         "endfor",   "elif",
                                            "else",          "endmacro", "endset",
                                            "endgeneration", "endcall",  NULL};
        for (int k = 0; known[k]; k++)
            if (!strcmp(name, known[k]))
                return perr(P, open, ENG_EFORMAT, "unexpected {%% %s %%}", name);
        return perr(P, open, ENG_EUNSUPPORTED, "statement '%s' is not supported", name);
    }
    if (r) return -1;
    push_node(P, body, n_body, n);
    return 0;
}

/* Whether break / continue stand inside a loop (checked after parsing: a macro body
 * resets the count, as Jinja does). */
static int check_loops(struct parser *P, const struct jnode *n, int in_loop)
{
    if (!n) return 0;
    if ((n->kind == JN_BREAK || n->kind == JN_CONTINUE) && !in_loop) {
        struct jtok t = {.line = n->line, .col = n->col};
        return perr(P, &t, ENG_EFORMAT, "'%s' outside a loop",
                    n->kind == JN_BREAK ? "break" : "continue");
    }
    int inner = n->kind == JN_FOR                                ? 1
                : n->kind == JN_MACRO || n->kind == JN_CALLBLOCK ? 0
                                                                 : in_loop;
    for (int i = 0; i < n->n_body; i++)
        if (check_loops(P, n->body[i], inner)) return -1;
    for (int i = 0; i < n->n_orelse; i++)
        if (check_loops(P, n->orelse[i], n->kind == JN_FOR ? in_loop : inner)) return -1;
    return 0;
}

int jinja_compile(const char *src, size_t len, struct jinja_template **out, char **err)
{
    struct jinja_template *t = xcalloc(1, sizeof *t);
    struct jtok *toks = NULL;
    size_t n_toks = 0;
    *out = NULL;
    *err = NULL;
    int rc = jinja_lex(&t->arena, src, len, &toks, &n_toks, err);
    if (rc) {
        jinja_free(t);
        return rc;
    }
    struct parser P = {.t = toks, .n = n_toks, .ar = &t->arena};
    t->root = node(&P, JN_BLOCKSEQ, &toks[0]);
    if (parse_body(&P, &toks[0], NULL, &t->root->body, &t->root->n_body) >= 0)
        check_loops(&P, t->root, 0);
    free(toks);
    if (P.err) {
        *err = P.err;
        jinja_free(t);
        return P.code;
    }
    *out = t;
    return 0;
}

void jinja_free(struct jinja_template *t)
{
    if (!t) return;
    jinja_arena_free(&t->arena);
    free(t);
}
