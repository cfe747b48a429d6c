/*
 * jinja_lex.h - the token stream of a template (jinja_lex.c), read by jinja_parse.c.
 * Thread: any.
 */
#ifndef H2O_JINJA_LEX_H
#define H2O_JINJA_LEX_H

#include "jinja_impl.h"

enum jtok_kind {
    JT_TEXT,        /* s, n: literal text, whitespace rules already applied */
    JT_VAR_BEGIN,   /* {{ */
    JT_VAR_END,     /* }} */
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,   /* %} */
    JT_NAME,        /* s, n */
    JT_STR,         /* s, n: decoded (escapes applied), in the arena */
    JT_INT,         /* s, n: the digits */
    JT_FLOAT,
    JT_OP, /* op: one or two characters */
    JT_EOF,
};

struct jtok {
    enum jtok_kind kind;
    int line, col;
    const char *s;
    size_t n;
    char op[3];
};

/*
 * Tokenize src[0..n). Returns 0 with *toks (malloc'd; caller frees) pointing into the
 * arena `ar`, or ENG_EFORMAT with *err malloc'd ("line L, column C: ..."). Thread: any.
 */
int jinja_lex(struct jinja_arena *ar, const char *src, size_t n, struct jtok **toks,
              size_t *n_toks, char **err);

#endif
