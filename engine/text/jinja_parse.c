/*
 * jinja_parse.c - tokens to expression trees, with Jinja2's grammar and precedence, and
 * the helpers jinja_parse_stmt.c shares (jinja_parse.h).
 *
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
#include "jinja_parse.h"

#include "err.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int jinja_parse_err(struct parser *P, const struct jtok *t, int code, const char *fmt, ...)
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

struct jtok *jinja_parse_cur(struct parser *P)
{
    return &P->t[P->i];
}
struct jtok *jinja_parse_peek(struct parser *P, size_t k)
{
    return &P->t[P->i + k < P->n ? P->i + k : P->n - 1];
}
struct jtok *jinja_parse_next(struct parser *P)
{
    struct jtok *t = jinja_parse_cur(P);
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

int jinja_parse_is_op(const struct jtok *t, const char *op)
{
    return t->kind == JT_OP && !strcmp(t->op, op);
}
int jinja_parse_is_name(const struct jtok *t, const char *name)
{
    return t->kind == JT_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}

int jinja_parse_expect_op(struct parser *P, const char *op)
{
    if (!jinja_parse_is_op(jinja_parse_cur(P), op))
        return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT, "expected '%s'", op);
    jinja_parse_next(P);
    return 0;
}

char *jinja_parse_tok_str(struct parser *P, const struct jtok *t)
{
    char *s = jinja_alloc(P->ar, t->n + 1);
    memcpy(s, t->s, t->n);
    return s;
}

struct jnode *jinja_parse_node(struct parser *P, enum jnode_kind k, const struct jtok *at)
{
    struct jnode *n = jinja_alloc(P->ar, sizeof *n);
    n->kind = k;
    n->line = at->line;
    n->col = at->col;
    return n;
}

/* A growable array of node pointers in the arena (copied on growth: compile-time only). */
void jinja_parse_push_node(struct parser *P, struct jnode ***arr, int *n, struct jnode *x)
{
    if ((*n & (*n - 1)) == 0) { /* 0, 1, 2, 4, ...: grow to the next power of two */
        struct jnode **g = jinja_alloc(P->ar, sizeof *g * (size_t)(*n ? *n * 2 : 1));
        if (*n) memcpy(g, *arr, sizeof *g * (size_t)*n);
        *arr = g;
    }
    (*arr)[(*n)++] = x;
}

void jinja_parse_push_name(struct parser *P, const char ***arr, int n, const char *s)
{
    if ((n & (n - 1)) == 0) {
        const char **g = jinja_alloc(P->ar, sizeof *g * (size_t)(n ? n * 2 : 1));
        if (n) memcpy(g, *arr, sizeof *g * (size_t)n);
        *arr = g;
    }
    (*arr)[n] = s;
}

static struct jnode *parse_unary(struct parser *P);

int jinja_parse_enter(struct parser *P)
{
    if (++P->nest > JINJA_MAX_NEST)
        return jinja_parse_err(P, jinja_parse_cur(P), ENG_EUNSUPPORTED,
                               "nesting deeper than %d", JINJA_MAX_NEST);
    return 0;
}

/* `(a, b, k=v)`: the opening parenthesis is current. */
static int parse_args(struct parser *P, struct jnode *n)
{
    jinja_parse_next(P);
    while (!jinja_parse_is_op(jinja_parse_cur(P), ")")) {
        if (jinja_parse_is_op(jinja_parse_cur(P), "*") ||
            jinja_parse_is_op(jinja_parse_cur(P), "**"))
            return jinja_parse_err(P, jinja_parse_cur(P), ENG_EUNSUPPORTED,
                                   "*args and **kwargs are not supported");
        if (jinja_parse_cur(P)->kind == JT_NAME &&
            jinja_parse_is_op(jinja_parse_peek(P, 1), "=")) {
            const char *k = jinja_parse_tok_str(P, jinja_parse_next(P));
            jinja_parse_next(P);
            struct jnode *v = jinja_parse_expr(P);
            if (!v) return -1;
            jinja_parse_push_name(P, &n->kwnames, n->n_kwargs, k);
            jinja_parse_push_node(P, &n->kwargs, &n->n_kwargs, v);
        } else {
            if (n->n_kwargs)
                return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT,
                                       "positional argument after a keyword");
            struct jnode *v = jinja_parse_expr(P);
            if (!v) return -1;
            jinja_parse_push_node(P, &n->args, &n->n_args, v);
        }
        if (jinja_parse_is_op(jinja_parse_cur(P), ","))
            jinja_parse_next(P);
        else if (!jinja_parse_is_op(jinja_parse_cur(P), ")"))
            return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT,
                                   "expected ',' or ')'");
    }
    jinja_parse_next(P);
    return 0;
}

static struct jnode *parse_primary(struct parser *P)
{
    struct jtok *t = jinja_parse_cur(P);
    struct jnode *n;
    if (t->kind == JT_NAME) {
        jinja_parse_next(P);
        n = jinja_parse_node(P, JN_CONST, t);
        if (jinja_parse_is_name(t, "true") || jinja_parse_is_name(t, "True"))
            n->val = jinja_v_bool(1);
        else if (jinja_parse_is_name(t, "false") || jinja_parse_is_name(t, "False"))
            n->val = jinja_v_bool(0);
        else if (jinja_parse_is_name(t, "none") || jinja_parse_is_name(t, "None"))
            n->val = jinja_v_none();
        else {
            n->kind = JN_NAME;
            n->name = jinja_parse_tok_str(P, t);
        }
        return n;
    }
    if (t->kind == JT_STR) {
        /* adjacent literals join, as in Python: 'a' 'b' */
        size_t len = 0, k = P->i;
        while (P->t[k].kind == JT_STR)
            len += P->t[k++].n;
        char *s = jinja_alloc(P->ar, len + 1), *o = s;
        while (jinja_parse_cur(P)->kind == JT_STR) {
            memcpy(o, jinja_parse_cur(P)->s, jinja_parse_cur(P)->n);
            o += jinja_parse_cur(P)->n;
            jinja_parse_next(P);
        }
        n = jinja_parse_node(P, JN_CONST, t);
        n->val = jinja_v_str(s, len);
        return n;
    }
    if (t->kind == JT_INT || t->kind == JT_FLOAT) {
        char buf[64];
        size_t k = 0;
        for (size_t i = 0; i < t->n && k + 1 < sizeof buf; i++)
            if (t->s[i] != '_') buf[k++] = t->s[i];
        buf[k] = 0;
        jinja_parse_next(P);
        n = jinja_parse_node(P, JN_CONST, t);
        errno = 0;
        if (t->kind == JT_INT)
            n->val = jinja_v_int(strtoll(buf, NULL, 10));
        else
            n->val = jinja_v_float(strtod(buf, NULL));
        if (errno)
            return jinja_parse_err(P, t, ENG_EUNSUPPORTED, "number out of range"), NULL;
        return n;
    }
    if (jinja_parse_is_op(t, "(")) {
        jinja_parse_next(P);
        if (jinja_parse_is_op(jinja_parse_cur(P), ")")) { /* () : the empty tuple */
            jinja_parse_next(P);
            n = jinja_parse_node(P, JN_LIST, t);
            n->tuple = 1;
            return n;
        }
        struct jnode *e = jinja_parse_expr(P);
        if (!e) return NULL;
        if (jinja_parse_is_op(jinja_parse_cur(P), ",")) {
            /* a tuple: a list that prints as (a, b) ('in' and tojson's separators use
             * them) */
            n = jinja_parse_node(P, JN_LIST, t);
            n->tuple = 1;
            jinja_parse_push_node(P, &n->args, &n->n_args, e);
            while (jinja_parse_is_op(jinja_parse_cur(P), ",")) {
                jinja_parse_next(P);
                if (jinja_parse_is_op(jinja_parse_cur(P), ")")) break;
                struct jnode *x = jinja_parse_expr(P);
                if (!x) return NULL;
                jinja_parse_push_node(P, &n->args, &n->n_args, x);
            }
            e = n;
        }
        if (jinja_parse_expect_op(P, ")")) return NULL;
        return e;
    }
    if (jinja_parse_is_op(t, "[")) {
        jinja_parse_next(P);
        n = jinja_parse_node(P, JN_LIST, t);
        while (!jinja_parse_is_op(jinja_parse_cur(P), "]")) {
            struct jnode *e = jinja_parse_expr(P);
            if (!e) return NULL;
            jinja_parse_push_node(P, &n->args, &n->n_args, e);
            if (jinja_parse_is_op(jinja_parse_cur(P), ","))
                jinja_parse_next(P);
            else if (!jinja_parse_is_op(jinja_parse_cur(P), "]"))
                return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT,
                                       "expected ',' or ']'"),
                       NULL;
        }
        jinja_parse_next(P);
        return n;
    }
    if (jinja_parse_is_op(t, "{")) {
        jinja_parse_next(P);
        n = jinja_parse_node(P, JN_DICT, t);
        while (!jinja_parse_is_op(jinja_parse_cur(P), "}")) {
            struct jnode *k = jinja_parse_expr(P);
            if (!k || jinja_parse_expect_op(P, ":")) return NULL;
            struct jnode *v = jinja_parse_expr(P);
            if (!v) return NULL;
            jinja_parse_push_node(P, &n->args, &n->n_args, k);
            jinja_parse_push_node(P, &n->args, &n->n_args, v);
            if (jinja_parse_is_op(jinja_parse_cur(P), ","))
                jinja_parse_next(P);
            else if (!jinja_parse_is_op(jinja_parse_cur(P), "}"))
                return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT,
                                       "expected ',' or '}'"),
                       NULL;
        }
        jinja_parse_next(P);
        return n;
    }
    if (t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || t->kind == JT_EOF)
        return jinja_parse_err(P, t, ENG_EFORMAT, "expected an expression"), NULL;
    return jinja_parse_err(P, t, ENG_EFORMAT, "unexpected '%s'",
                           t->kind == JT_OP ? t->op : "token"),
           NULL;
}

static struct jnode *parse_postfix(struct parser *P, struct jnode *n)
{
    for (;;) {
        struct jtok *t = jinja_parse_cur(P);
        if (jinja_parse_is_op(t, ".") && (jinja_parse_peek(P, 1)->kind == JT_INT ||
                                          jinja_parse_peek(P, 1)->kind == JT_FLOAT)) {
            /* x.0 is x[0] in Jinja; x.0.1 lexes as x . 0.1: two subscripts */
            jinja_parse_next(P);
            struct jtok *nt = jinja_parse_next(P);
            char *end;
            long long i0 = strtoll(nt->s, &end, 10);
            for (int k = 0; k < 2; k++) {
                struct jnode *it = jinja_parse_node(P, JN_ITEM, nt),
                             *key = jinja_parse_node(P, JN_CONST, nt);
                key->val = jinja_v_int(i0);
                it->a = n;
                it->b = key;
                n = it;
                if (nt->kind != JT_FLOAT) break;
                if (*end != '.' || !is_digit_str(end + 1, nt->s + nt->n))
                    return jinja_parse_err(P, nt, ENG_EFORMAT, "bad subscript after '.'"),
                           NULL;
                i0 = strtoll(end + 1, NULL, 10);
            }
        } else if (jinja_parse_is_op(t, ".")) {
            jinja_parse_next(P);
            if (jinja_parse_cur(P)->kind != JT_NAME)
                return jinja_parse_err(P, jinja_parse_cur(P), ENG_EUNSUPPORTED,
                                       "expected a name after '.'"),
                       NULL;
            struct jnode *a = jinja_parse_node(
                P, JN_ATTR, jinja_parse_cur(P)); /* errors point at the name */
            a->a = n;
            a->name = jinja_parse_tok_str(P, jinja_parse_next(P));
            n = a;
        } else if (jinja_parse_is_op(t, "[")) {
            jinja_parse_next(P);
            struct jnode *parts[3] = {NULL, NULL, NULL};
            int k = 0, slice = 0;
            for (;;) {
                if (!jinja_parse_is_op(jinja_parse_cur(P), ":") &&
                    !jinja_parse_is_op(jinja_parse_cur(P), "]")) {
                    parts[k] = jinja_parse_expr(P);
                    if (!parts[k]) return NULL;
                }
                if (jinja_parse_is_op(jinja_parse_cur(P), ":") && k < 2) {
                    slice = 1;
                    k++;
                    jinja_parse_next(P);
                    continue;
                }
                break;
            }
            if (jinja_parse_expect_op(P, "]")) return NULL;
            struct jnode *s = jinja_parse_node(P, slice ? JN_SLICE : JN_ITEM, t);
            s->a = n;
            if (slice) {
                s->args = jinja_alloc(P->ar, 3 * sizeof *s->args);
                memcpy(s->args, parts, sizeof parts);
                s->n_args = 3;
            } else {
                if (!parts[0])
                    return jinja_parse_err(P, t, ENG_EFORMAT, "empty subscript"), NULL;
                s->b = parts[0];
            }
            n = s;
        } else if (jinja_parse_is_op(t, "(")) {
            struct jnode *c = jinja_parse_node(P, JN_CALL, t);
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
    struct jtok *t = jinja_parse_cur(P);
    if (t->kind == JT_STR || t->kind == JT_INT || t->kind == JT_FLOAT) return 1;
    if (jinja_parse_is_op(t, "[") || jinja_parse_is_op(t, "{")) return 1;
    if (t->kind != JT_NAME) return 0;
    static const char *const stop[] = {"and", "or", "else", "if", "in", "not", "is"};
    for (size_t i = 0; i < ARRAY_LEN(stop); i++)
        if (jinja_parse_is_name(t, stop[i])) return 0;
    return 1;
}

static struct jnode *parse_filters(struct parser *P, struct jnode *n)
{
    for (;;) {
        struct jtok *t = jinja_parse_cur(P);
        if (jinja_parse_is_op(t, "|")) {
            jinja_parse_next(P);
            if (jinja_parse_cur(P)->kind != JT_NAME)
                return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT,
                                       "expected a filter name"),
                       NULL;
            struct jtok *nt = jinja_parse_next(P);
            struct jnode *f = jinja_parse_node(P, JN_FILTER, nt);
            f->a = n;
            f->name = jinja_parse_tok_str(P, nt);
            if (!jinja_has_filter(f->name))
                return jinja_parse_err(P, nt, ENG_EUNSUPPORTED,
                                       "filter '%s' is not supported", f->name),
                       NULL;
            if (jinja_parse_is_op(jinja_parse_cur(P), "(") && parse_args(P, f)) return NULL;
            n = f;
        } else if (jinja_parse_is_name(t, "is")) {
            jinja_parse_next(P);
            struct jnode *f = jinja_parse_node(P, JN_TEST, t);
            if (jinja_parse_is_name(jinja_parse_cur(P), "not")) {
                jinja_parse_next(P);
                f->negated = 1;
            }
            struct jtok *nt = jinja_parse_cur(P);
            if (nt->kind != JT_NAME && !jinja_parse_is_op(nt, "==") &&
                !jinja_parse_is_op(nt, "!="))
                return jinja_parse_err(P, nt, ENG_EFORMAT, "expected a test name"), NULL;
            jinja_parse_next(P);
            f->a = n;
            f->name = nt->kind == JT_NAME ? jinja_parse_tok_str(P, nt)
                                          : (nt->op[0] == '=' ? "eq" : "ne");
            if (!jinja_has_test(f->name))
                return jinja_parse_err(P, nt, ENG_EUNSUPPORTED,
                                       "test '%s' is not supported", f->name),
                       NULL;
            if (jinja_parse_is_op(jinja_parse_cur(P), "(")) {
                if (parse_args(P, f)) return NULL;
            } else if (starts_test_arg(P)) {
                struct jnode *arg = parse_primary(P);
                if (arg) arg = parse_postfix(P, arg);
                if (!arg) return NULL;
                jinja_parse_push_node(P, &f->args, &f->n_args, arg);
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
    struct jtok *t = jinja_parse_cur(P);
    if (jinja_parse_enter(P)) return NULL;
    struct jnode *n;
    if (jinja_parse_is_op(t, "-") || jinja_parse_is_op(t, "+")) {
        jinja_parse_next(P);
        struct jnode *x = parse_unary_f(P, 0);
        if (!x) return NULL;
        if (t->op[0] == '-') {
            n = jinja_parse_node(P, JN_NEG, t);
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
    struct jnode *n = jinja_parse_node(P, JN_BINOP, t);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static struct jnode *parse_pow(struct parser *P)
{
    struct jnode *a = parse_unary(P);
    while (a && jinja_parse_is_op(jinja_parse_cur(P), "**")) {
        struct jtok *t = jinja_parse_next(P);
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
        struct jtok *t = jinja_parse_cur(P);
        enum jop op;
        if (jinja_parse_is_op(t, "*"))
            op = JO_MUL;
        else if (jinja_parse_is_op(t, "/"))
            op = JO_DIV;
        else if (jinja_parse_is_op(t, "//"))
            op = JO_FLOORDIV;
        else if (jinja_parse_is_op(t, "%"))
            op = JO_MOD;
        else
            return a;
        jinja_parse_next(P);
        struct jnode *b = parse_pow(P);
        if (!b) return NULL;
        a = binop(P, t, op, a, b);
    }
}

static struct jnode *parse_concat(struct parser *P)
{
    struct jnode *a = parse_math2(P);
    while (a && jinja_parse_is_op(jinja_parse_cur(P), "~")) {
        struct jtok *t = jinja_parse_next(P);
        struct jnode *b = parse_math2(P);
        if (!b) return NULL;
        a = binop(P, t, JO_CONCAT, a, b);
    }
    return a;
}

static struct jnode *parse_math1(struct parser *P)
{
    struct jnode *a = parse_concat(P);
    while (a && (jinja_parse_is_op(jinja_parse_cur(P), "+") ||
                 jinja_parse_is_op(jinja_parse_cur(P), "-"))) {
        struct jtok *t = jinja_parse_next(P);
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
        struct jtok *t = jinja_parse_cur(P);
        enum jop op;
        if (jinja_parse_is_op(t, "=="))
            op = JO_EQ;
        else if (jinja_parse_is_op(t, "!="))
            op = JO_NE;
        else if (jinja_parse_is_op(t, "<"))
            op = JO_LT;
        else if (jinja_parse_is_op(t, "<="))
            op = JO_LE;
        else if (jinja_parse_is_op(t, ">"))
            op = JO_GT;
        else if (jinja_parse_is_op(t, ">="))
            op = JO_GE;
        else if (jinja_parse_is_name(t, "in"))
            op = JO_IN;
        else if (jinja_parse_is_name(t, "not") &&
                 jinja_parse_is_name(jinja_parse_peek(P, 1), "in"))
            op = JO_NOTIN, jinja_parse_next(P);
        else
            return chain ? chain : a;
        jinja_parse_next(P);
        struct jnode *b = parse_math1(P);
        if (!b) return NULL;
        /* a < b < c is (a < b) and (b < c), as in Python */
        struct jnode *cmp = binop(P, t, op, a, b);
        if (chain) {
            struct jnode *x = jinja_parse_node(P, JN_AND, t);
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
    if (jinja_parse_is_name(jinja_parse_cur(P), "not")) {
        struct jtok *t = jinja_parse_next(P);
        if (jinja_parse_enter(P)) return NULL;
        struct jnode *x = parse_not(P);
        P->nest--;
        if (!x) return NULL;
        struct jnode *n = jinja_parse_node(P, JN_NOT, t);
        n->a = x;
        return n;
    }
    return parse_compare(P);
}

static struct jnode *parse_and(struct parser *P)
{
    struct jnode *a = parse_not(P);
    while (a && jinja_parse_is_name(jinja_parse_cur(P), "and")) {
        struct jtok *t = jinja_parse_next(P);
        struct jnode *b = parse_not(P);
        if (!b) return NULL;
        struct jnode *n = jinja_parse_node(P, JN_AND, t);
        n->a = a;
        n->b = b;
        a = n;
    }
    return a;
}

struct jnode *jinja_parse_or(struct parser *P)
{
    struct jnode *a = parse_and(P);
    while (a && jinja_parse_is_name(jinja_parse_cur(P), "or")) {
        struct jtok *t = jinja_parse_next(P);
        struct jnode *b = parse_and(P);
        if (!b) return NULL;
        struct jnode *n = jinja_parse_node(P, JN_OR, t);
        n->a = a;
        n->b = b;
        a = n;
    }
    return a;
}

struct jnode *jinja_parse_expr(struct parser *P)
{
    if (jinja_parse_enter(P)) return NULL;
    struct jnode *a = jinja_parse_or(P);
    while (a && jinja_parse_is_name(jinja_parse_cur(P), "if")) {
        struct jtok *t = jinja_parse_next(P);
        struct jnode *n = jinja_parse_node(P, JN_COND, t);
        n->a = a;
        n->b = jinja_parse_or(P);
        if (!n->b) return NULL;
        if (jinja_parse_is_name(jinja_parse_cur(P), "else")) {
            jinja_parse_next(P);
            n->c = jinja_parse_expr(P);
            if (!n->c) return NULL;
        }
        a = n;
    }
    P->nest--;
    return a;
}
