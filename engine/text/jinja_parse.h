/*
 * jinja_parse.h - the parser's state and helpers, shared by jinja_parse.c (expressions)
 * and jinja_parse_stmt.c (statements). Nothing else includes it.
 * Thread: one compile at a time per parser.
 */
#ifndef H2O_JINJA_PARSE_H
#define H2O_JINJA_PARSE_H

#include "jinja_impl.h"
#include "jinja_lex.h"

/* How deep statements, brackets and operators may nest: recursion stays bounded. */
#define JINJA_MAX_NEST 100

struct parser {
    struct jtok *t;
    size_t i, n;
    struct jinja_arena *ar;
    int nest;
    int code;
    char *err;
};

/* Set the compile error (the first one wins) at token `t`; returns -1. */
int jinja_parse_err(struct parser *P, const struct jtok *t, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The current token, the one k ahead, and the current one while moving past it. */
struct jtok *jinja_parse_cur(struct parser *P);
struct jtok *jinja_parse_peek(struct parser *P, size_t k);
struct jtok *jinja_parse_next(struct parser *P);
int jinja_parse_is_op(const struct jtok *t, const char *op);
int jinja_parse_is_name(const struct jtok *t, const char *name);
/* Move past operator `op`, or set an error; 0 or -1. */
int jinja_parse_expect_op(struct parser *P, const char *op);
/* A token's text as a NUL-terminated string in the template's arena. */
char *jinja_parse_tok_str(struct parser *P, const struct jtok *t);
/* A zeroed node at token `at`'s position, in the arena. */
struct jnode *jinja_parse_node(struct parser *P, enum jnode_kind k, const struct jtok *at);
/* Append to a growable array of nodes / of names in the arena. */
void jinja_parse_push_node(struct parser *P, struct jnode ***arr, int *n, struct jnode *x);
void jinja_parse_push_name(struct parser *P, const char ***arr, int n, const char *s);
/* One more level of nesting, or an error past JINJA_MAX_NEST; 0 or -1. */
int jinja_parse_enter(struct parser *P);
/* An expression (with `x if c else y`), or one that stops before `if` (a for loop's
 * iterable); NULL with the error set. */
struct jnode *jinja_parse_expr(struct parser *P);
struct jnode *jinja_parse_or(struct parser *P);

#endif
