/*
 * jinja_parse_stmt.c - the statements of a template (if, for, set, macro, call, break,
 * continue, generation) on top of jinja_parse.c's expressions, and jinja_compile.
 *
 * Owns: the compiled template (its arena holds every node and string).
 * Anything outside the subset is refused here with its line and column; so is break or
 * continue outside a loop. A tag without its end tag names the one it misses.
 * Thread: any.
 */
#include "jinja_impl.h"
#include "jinja_lex.h"
#include "jinja_parse.h"

#include "err.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int expect_end(struct parser *P)
{
    if (jinja_parse_cur(P)->kind != JT_BLOCK_END)
        return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT, "expected '%%}'");
    jinja_parse_next(P);
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
    if (jinja_parse_enter(P)) return -1;
    for (;;) {
        struct jtok *t = jinja_parse_cur(P);
        if (t->kind == JT_EOF) {
            P->nest--;
            if (!ends) return 0;
            return jinja_parse_err(P, open, ENG_EFORMAT, "this tag has no {%% %s %%}",
                                   ends[0][0] == 'e' ? ends[0] : "end");
        }
        if (t->kind == JT_TEXT) {
            struct jnode *n = jinja_parse_node(P, JN_TEXT, t);
            n->val = jinja_v_str(t->s, t->n);
            jinja_parse_push_node(P, body, n_body, n);
            jinja_parse_next(P);
        } else if (t->kind == JT_VAR_BEGIN) {
            jinja_parse_next(P);
            struct jnode *n = jinja_parse_node(P, JN_OUTPUT, t);
            n->a = jinja_parse_expr(P);
            if (!n->a) return -1;
            if (jinja_parse_cur(P)->kind != JT_VAR_END)
                return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT, "expected '}}'");
            jinja_parse_next(P);
            jinja_parse_push_node(P, body, n_body, n);
        } else if (t->kind == JT_BLOCK_BEGIN) {
            struct jtok *nt = jinja_parse_peek(P, 1);
            for (int k = 0; ends && ends[k]; k++)
                if (jinja_parse_is_name(nt, ends[k])) {
                    jinja_parse_next(P);
                    jinja_parse_next(P);
                    P->nest--;
                    return k;
                }
            jinja_parse_next(P);
            if (parse_stmt(P, body, n_body)) return -1;
        } else {
            return jinja_parse_err(P, t, ENG_EFORMAT, "unexpected token");
        }
    }
}

static int parse_if(struct parser *P, struct jtok *open, struct jnode *n)
{
    static const char *const ends[] = {"endif", "elif", "else", NULL};
    static const char *const endif[] = {"endif", NULL};
    struct jnode *c = n;
    for (;;) {
        c->a = jinja_parse_expr(P);
        if (!c->a || expect_end(P)) return -1;
        int r = parse_body(P, open, ends, &c->body, &c->n_body);
        if (r < 0) return -1;
        if (r == 0) return expect_end(P);
        if (r == 2) {
            if (expect_end(P) || parse_body(P, open, endif, &c->orelse, &c->n_orelse) < 0)
                return -1;
            return expect_end(P);
        }
        struct jnode *e = jinja_parse_node(P, JN_IF, jinja_parse_cur(P));
        jinja_parse_push_node(P, &c->orelse, &c->n_orelse, e);
        c = e;
    }
}

static int parse_for(struct parser *P, struct jtok *open, struct jnode *n)
{
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    if (jinja_parse_cur(P)->kind != JT_NAME)
        return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT, "expected a name");
    n->name = jinja_parse_tok_str(P, jinja_parse_next(P));
    if (jinja_parse_is_op(jinja_parse_cur(P), ",")) {
        jinja_parse_next(P);
        if (jinja_parse_cur(P)->kind != JT_NAME)
            return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT, "expected a name");
        n->name2 = jinja_parse_tok_str(P, jinja_parse_next(P));
        if (jinja_parse_is_op(jinja_parse_cur(P), ","))
            return jinja_parse_err(P, jinja_parse_cur(P), ENG_EUNSUPPORTED,
                                   "unpacking into more than two names");
    }
    if (!jinja_parse_is_name(jinja_parse_cur(P), "in"))
        return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT, "expected 'in'");
    jinja_parse_next(P);
    /* the iterable stops before `if`: that one filters the items (Jinja's grammar) */
    n->a = jinja_parse_or(P);
    if (!n->a) return -1;
    if (jinja_parse_is_name(jinja_parse_cur(P), "if")) {
        jinja_parse_next(P);
        n->b = jinja_parse_expr(P);
        if (!n->b) return -1;
    }
    if (jinja_parse_is_name(jinja_parse_cur(P), "recursive"))
        return jinja_parse_err(P, jinja_parse_cur(P), ENG_EUNSUPPORTED,
                               "recursive loops are not supported");
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
    if (jinja_parse_cur(P)->kind != JT_NAME)
        return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT, "expected a name");
    n->name = jinja_parse_tok_str(P, jinja_parse_next(P));
    if (jinja_parse_is_op(jinja_parse_cur(P), ".")) {
        jinja_parse_next(P);
        if (jinja_parse_cur(P)->kind != JT_NAME)
            return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT, "expected a name");
        n->attr = jinja_parse_tok_str(P, jinja_parse_next(P));
    }
    if (jinja_parse_is_op(jinja_parse_cur(P), ","))
        return jinja_parse_err(P, jinja_parse_cur(P), ENG_EUNSUPPORTED,
                               "set with several targets is not supported");
    if (jinja_parse_cur(P)->kind == JT_BLOCK_END) {
        /* {% set x %}...{% endset %}: x is what the body renders */
        static const char *const ends[] = {"endset", NULL};
        struct jtok *open = jinja_parse_cur(P);
        jinja_parse_next(P);
        if (parse_body(P, open, ends, &n->body, &n->n_body) < 0) return -1;
        return expect_end(P);
    }
    if (jinja_parse_expect_op(P, "=")) return -1;
    n->a = jinja_parse_expr(P);
    if (!n->a) return -1;
    return expect_end(P);
}

static int parse_macro(struct parser *P, struct jtok *open, struct jnode *n)
{
    static const char *const ends[] = {"endmacro", NULL};
    if (jinja_parse_cur(P)->kind != JT_NAME)
        return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT, "expected a name");
    n->name = jinja_parse_tok_str(P, jinja_parse_next(P));
    if (jinja_parse_expect_op(P, "(")) return -1;
    while (!jinja_parse_is_op(jinja_parse_cur(P), ")")) {
        if (jinja_parse_cur(P)->kind != JT_NAME)
            return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT, "expected a name");
        jinja_parse_push_name(P, &n->kwnames, n->n_args,
                              jinja_parse_tok_str(P, jinja_parse_next(P)));
        struct jnode *def = NULL;
        if (jinja_parse_is_op(jinja_parse_cur(P), "=")) {
            jinja_parse_next(P);
            def = jinja_parse_expr(P);
            if (!def) return -1;
        }
        jinja_parse_push_node(P, &n->args, &n->n_args, def);
        if (jinja_parse_is_op(jinja_parse_cur(P), ","))
            jinja_parse_next(P);
        else if (!jinja_parse_is_op(jinja_parse_cur(P), ")"))
            return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT,
                                   "expected ',' or ')'");
    }
    jinja_parse_next(P);
    if (expect_end(P) || parse_body(P, open, ends, &n->body, &n->n_body) < 0) return -1;
    if (jinja_parse_cur(P)->kind == JT_NAME) jinja_parse_next(P); /* {% endmacro name %} */
    return expect_end(P);
}

/* {% call(params) m(args) %}body{% endcall %}: params as a macro's, then a call. */
static int parse_callblock(struct parser *P, struct jtok *open, struct jnode *n)
{
    static const char *const ends[] = {"endcall", NULL};
    n->name = "caller";
    if (jinja_parse_is_op(jinja_parse_cur(P), "(")) {
        jinja_parse_next(P);
        while (!jinja_parse_is_op(jinja_parse_cur(P), ")")) {
            if (jinja_parse_cur(P)->kind != JT_NAME)
                return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT,
                                       "expected a name");
            jinja_parse_push_name(P, &n->kwnames, n->n_args,
                                  jinja_parse_tok_str(P, jinja_parse_next(P)));
            struct jnode *def = NULL;
            if (jinja_parse_is_op(jinja_parse_cur(P), "=")) {
                jinja_parse_next(P);
                if (!(def = jinja_parse_expr(P))) return -1;
            }
            jinja_parse_push_node(P, &n->args, &n->n_args, def);
            if (jinja_parse_is_op(jinja_parse_cur(P), ","))
                jinja_parse_next(P);
            else if (!jinja_parse_is_op(jinja_parse_cur(P), ")"))
                return jinja_parse_err(P, jinja_parse_cur(P), ENG_EFORMAT,
                                       "expected ',' or ')'");
        }
        jinja_parse_next(P);
    }
    n->a = jinja_parse_expr(P);
    if (!n->a) return -1;
    if (n->a->kind != JN_CALL)
        return jinja_parse_err(P, open, ENG_EFORMAT, "{%% call %%} needs a macro call");
    if (expect_end(P) || parse_body(P, open, ends, &n->body, &n->n_body) < 0) return -1;
    return expect_end(P);
}

/* One statement; the current token is its name (just past `{%`). */
static int parse_stmt(struct parser *P, struct jnode ***body, int *n_body)
{
    struct jtok *open = jinja_parse_cur(P);
    if (open->kind != JT_NAME)
        return jinja_parse_err(P, open, ENG_EFORMAT, "expected a statement name");
    jinja_parse_next(P);
    struct jnode *n = jinja_parse_node(P, JN_IF, open);
    int r;
    if (jinja_parse_is_name(open, "if")) {
        r = parse_if(P, open, n);
    } else if (jinja_parse_is_name(open, "for")) {
        n->kind = JN_FOR;
        r = parse_for(P, open, n);
    } else if (jinja_parse_is_name(open, "set")) {
        n->kind = JN_SET;
        r = parse_set(P, n);
    } else if (jinja_parse_is_name(open, "macro")) {
        n->kind = JN_MACRO;
        r = parse_macro(P, open, n);
    } else if (jinja_parse_is_name(open, "break") ||
               jinja_parse_is_name(open, "continue")) {
        n->kind = open->s[0] == 'b' ? JN_BREAK : JN_CONTINUE;
        r = expect_end(P);
    } else if (jinja_parse_is_name(open, "call")) {
        n->kind = JN_CALLBLOCK;
        r = parse_callblock(P, open, n);
    } else if (jinja_parse_is_name(open, "generation")) {
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
                return jinja_parse_err(P, open, ENG_EFORMAT, "unexpected {%% %s %%}", name);
        return jinja_parse_err(P, open, ENG_EUNSUPPORTED, "statement '%s' is not supported",
                               name);
    }
    if (r) return -1;
    jinja_parse_push_node(P, body, n_body, n);
    return 0;
}

/* Whether break / continue stand inside a loop (checked after parsing: a macro body
 * resets the count, as Jinja does). */
static int check_loops(struct parser *P, const struct jnode *n, int in_loop)
{
    if (!n) return 0;
    if ((n->kind == JN_BREAK || n->kind == JN_CONTINUE) && !in_loop) {
        struct jtok t = {.line = n->line, .col = n->col};
        return jinja_parse_err(P, &t, ENG_EFORMAT, "'%s' outside a loop",
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
    t->root = jinja_parse_node(&P, JN_BLOCKSEQ, &toks[0]);
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
