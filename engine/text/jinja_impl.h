/*
 * jinja_impl.h - what the files of the Jinja subset share: the arena, values, the
 * syntax tree and the render state. Nothing outside engine/text/jinja*.c includes it.
 *
 * Memory: a compiled template's nodes live in its own arena; everything a render
 * creates (strings, lists, dicts, frames) lives in the render's arena, freed at once
 * when the render ends, so values are plain structs passed by value with no reference
 * counts (h2o's per-request pool). Values are immutable except a namespace's dict.
 */
#ifndef H2O_JINJA_IMPL_H
#define H2O_JINJA_IMPL_H

#include "jinja.h"

#include <stddef.h>
#include <stdint.h>

/* ---- arena ---- */

struct jinja_arena {
    struct jinja_chunk *head;
    size_t used;  /* bytes handed out, all chunks */
    size_t limit; /* 0: none; past it jinja_alloc returns NULL */
};

/* Zeroed memory from `a`, or NULL past a->limit. Thread: the arena's owner. */
void *jinja_alloc(struct jinja_arena *a, size_t n);
void jinja_arena_free(struct jinja_arena *a);

/* ---- values ---- */

enum jinja_v_type {
    JV_UNDEF, /* a name or key that does not exist: prints "", is false */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_NS,     /* namespace(): a dict whose attributes `set ns.x = ...` may assign */
    JV_MACRO,  /* a {% macro %} */
    JV_FUNC,   /* a built-in global: raise_exception, strftime_now, namespace, range */
    JV_LOOP,   /* a for loop's `loop` */
    JV_CALLER, /* `caller` inside a macro called by {% call %}: renders the call's body */
};

struct jlist;
struct jinja_state;
struct jdict;
struct jnode;
struct jloop;
struct jcaller;

struct jv {
    enum jinja_v_type t;
    union {
        int b;
        long long i;
        double f;
        struct {
            const char *s; /* not NUL-terminated in general */
            size_t n;
        } str;
        struct jlist *list;
        struct jdict *dict; /* JV_DICT and JV_NS */
        const struct jnode *macro;
        int func; /* enum jfunc */
        const struct jloop *loop;
        const struct jcaller *caller;
    } u;
    const char *undef_name; /* JV_UNDEF: the name that was looked up, for messages */
};

struct jlist {
    struct jv *v;
    size_t n, cap;
    int kind;     /* enum jlist_kind */
    int consumed; /* JL_GEN: walked once already */
};

/* What Python object a list stands for: it decides printing, len(), truthiness and
 * equality, which differ between them (a generator is always true and has no len()). */
enum jlist_kind {
    JL_LIST,
    JL_TUPLE,  /* (a, b), a dict's (key, value) pair */
    JL_GEN,    /* a generator or iterator: select, map, |items, reversed(); walked once */
    JL_RANGE,  /* range(): prints as range(0, 3), refused here */
    JL_KEYS,   /* dict.keys(): prints as dict_keys([...]) */
    JL_VALUES, /* dict.values() */
    JL_ITEMS,  /* dict.items() */
};

/* The items of list value `l` for walking them (a for loop, join, |list, `in`, ...).
 * A generator may be walked once: a second walk would see nothing in Python, which this
 * refuses (ENG_EUNSUPPORTED) rather than guess. Returns 0 or -1. */
int jinja_list_walk(struct jinja_state *s, const struct jnode *at, struct jlist *l);

struct jdict {
    struct jv *k; /* JV_STR keys (JSON objects and dict literals have only those) */
    struct jv *v;
    size_t n, cap;
};

struct jloop {
    const struct jlist *items; /* what the loop walks, after its `if` filter */
    size_t index0;
};

/* A {% call %} body with the scope it was written in, for the macro's caller(). */
struct jcaller {
    const struct jnode *node; /* the JN_CALLBLOCK */
    struct jframe *frame;
};

enum jfunc { JF_RAISE, JF_STRFTIME, JF_NAMESPACE, JF_RANGE, JF_DICT };

/* ---- syntax tree ---- */

enum jnode_kind {
    /* statements */
    JN_TEXT,   /* str */
    JN_OUTPUT, /* a */
    JN_IF,     /* a: cond, body, orelse */
    JN_FOR,    /* name, name2 (unpacking), a: iterable, b: filter, body, orelse */
    JN_SET,    /* name (or name.attr when attr), a: value; a NULL: the body's output */
    JN_MACRO,  /* name, params[n_args] with defaults args[], body */
    JN_BREAK,
    JN_CONTINUE,
    JN_BLOCKSEQ,  /* body: a list of statements (the template, a generation block) */
    JN_CALLBLOCK, /* {% call(params) m(args) %}body: a: the call, params as a macro's */
    /* expressions */
    JN_CONST,  /* val */
    JN_NAME,   /* name */
    JN_LIST,   /* args[n_args] */
    JN_DICT,   /* args: key, value, key, value ... */
    JN_ATTR,   /* a.name */
    JN_ITEM,   /* a[b] */
    JN_SLICE,  /* a[b:c:d] (args[0..2], NULL when left out) */
    JN_CALL,   /* a(args..., kwnames=kwargs...) */
    JN_FILTER, /* a | name(args..., kwargs) */
    JN_TEST,   /* a is [not] name(args) */
    JN_NOT,
    JN_NEG,
    JN_BINOP, /* op, a, b */
    JN_AND,
    JN_OR,
    JN_COND, /* a if b else c (c NULL: undefined) */
};

enum jop {
    JO_ADD,
    JO_SUB,
    JO_MUL,
    JO_DIV,
    JO_FLOORDIV,
    JO_MOD,
    JO_POW,
    JO_CONCAT,
    JO_EQ,
    JO_NE,
    JO_LT,
    JO_LE,
    JO_GT,
    JO_GE,
    JO_IN,
    JO_NOTIN,
};

struct jnode {
    enum jnode_kind kind;
    int line, col;
    enum jop op;
    int negated; /* JN_TEST: `is not` */
    int tuple;   /* JN_LIST: written (a, b): prints as a tuple */
    const char *name, *name2, *attr;
    struct jv val; /* JN_CONST; JN_TEXT's text in val.u.str */
    struct jnode *a, *b, *c;
    struct jnode **args;  /* positional arguments, list items, dict pairs, macro defaults */
    const char **kwnames; /* JN_CALL / JN_FILTER: names of kwargs[]; JN_MACRO: params */
    struct jnode **kwargs;
    int n_args, n_kwargs;
    struct jnode **body, **orelse;
    int n_body, n_orelse;
};

struct jinja_template {
    struct jinja_arena arena;
    struct jnode *root; /* JN_BLOCKSEQ */
};

/* ---- parsing (jinja_parse.c) ---- */

/* Whether `name` is a filter / test jinja_builtins.c implements (checked at compile
 * time, so that an unsupported one is refused before any render). */
int jinja_has_filter(const char *name);
int jinja_has_test(const char *name);

/* ---- rendering (jinja_eval.c, jinja_builtins.c, jinja_value.c) ---- */

struct jframe {
    struct jframe *parent;
    struct jdict vars;
};

struct jinja_state {
    struct jinja_arena ar;
    const struct jinja_render_opts *o;
    char *out; /* the rendered text, malloc'd */
    size_t out_n, out_cap;
    long steps;
    int depth;
    int err;                /* an ENG_* code once an error is set */
    char *err_msg;          /* malloc'd */
    struct jframe *globals; /* the variables passed in */
    struct jframe *top;     /* the template's own `set`s; macros see it */
    struct jframe *frame;   /* the innermost scope: a loop's or a macro call's */
    int loop_ctl;           /* 1: break, 2: continue pending */
};

/* Set the render's error (the first one wins) at node `n` (may be NULL). Returns -1 so
 * that callers can `return jinja_err(...)`. */
int jinja_err(struct jinja_state *s, const struct jnode *n, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

struct jv jinja_v_undef(const char *name);
struct jv jinja_v_none(void);
struct jv jinja_v_bool(int b);
struct jv jinja_v_int(long long i);
struct jv jinja_v_float(double f);
/* A string value that points at `p` (not copied: p must outlive the render). */
struct jv jinja_v_str(const char *p, size_t n);
/* A copy of p[0..n) in the render's arena; JV_UNDEF with an error set when full. */
int jinja_v_str_dup(struct jinja_state *s, const char *p, size_t n, struct jv *out);
struct jlist *jinja_list_new(struct jinja_state *s);
int jinja_list_push(struct jinja_state *s, struct jlist *l, struct jv v);
struct jdict *jinja_dict_new(struct jinja_state *s);
int jinja_dict_set(struct jinja_state *s, struct jdict *d, struct jv k, struct jv v);
/* The value of key k, or NULL. */
struct jv *jinja_dict_get(const struct jdict *d, const char *k, size_t kn);

int jinja_v_truthy(struct jv v);
/* Python's ==; values nested deeper than 100 levels set an error on the render. */
int jinja_v_equal(struct jinja_state *s, struct jv a, struct jv b);
const char *jinja_v_type_name(struct jv v);

/* A growable string in the render's arena, for str(), repr() and JSON. */
struct jbuf {
    char *p;
    size_t n, cap;
};
int jinja_buf_add(struct jinja_state *s, struct jbuf *b, const char *p, size_t n);

/* Append str(v) as Python prints it (None, True, 1.5, ['a', 1]); JV_UNDEF as "". */
int jinja_v_to_str(struct jinja_state *s, struct jbuf *b, struct jv v);
/* As a value: strings as they are, anything else through jinja_v_to_str. */
int jinja_v_stringify(struct jinja_state *s, struct jv v, struct jv *out);
/* json.dumps's layout: indent < 0 is None; the separators (NULL: Python's defaults,
 * ", " / ": ", or "," / ": " with an indent). */
struct jjson_fmt {
    int indent, sort_keys;
    const char *item_sep, *key_sep;
};
/* Append json.dumps(v, ensure_ascii=False, indent, separators, sort_keys). */
int jinja_v_to_json(struct jinja_state *s, const struct jnode *at, struct jbuf *b,
                    struct jv v, const struct jjson_fmt *f, int level);
/* A cJSON tree as values (copied into the arena). */
int jinja_v_from_cjson(struct jinja_state *s, const struct cJSON *j, struct jv *out);

/* Evaluate an expression (jinja_eval.c). */
int jinja_eval(struct jinja_state *s, const struct jnode *n, struct jv *out);

/* Filters, tests, methods and global functions (jinja_builtins.c). `at` is the node,
 * for messages; args are evaluated. */
int jinja_filter(struct jinja_state *s, const struct jnode *at, const char *name,
                 struct jv v, const struct jv *args, int n_args, const char **kwnames,
                 const struct jv *kwargs, int n_kwargs, struct jv *out);
int jinja_test(struct jinja_state *s, const struct jnode *at, const char *name, struct jv v,
               const struct jv *args, int n_args, int *out);
int jinja_method(struct jinja_state *s, const struct jnode *at, struct jv obj,
                 const char *name, const struct jv *args, int n_args, const char **kwnames,
                 const struct jv *kwargs, int n_kwargs, struct jv *out);
int jinja_call_func(struct jinja_state *s, const struct jnode *at, int func,
                    const struct jv *args, int n_args, const char **kwnames,
                    const struct jv *kwargs, int n_kwargs, struct jv *out);
/* Whether `obj.name(...)` is a method call jinja_method handles (dict.get, str.strip). */
int jinja_is_method(struct jv obj, const char *name);

#endif
