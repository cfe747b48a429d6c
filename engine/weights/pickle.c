/*
 * pickle.c - the pickle interpreter: opcodes, the value stack, MARKs and the memo.
 *
 * It runs the subset of pickle that torch.save emits for a state dict: containers,
 * ints, strings, globals and persistent ids, protocols 2 to 5. Any other opcode is a
 * format error, and REDUCE and BINPERSID only ever call the host's hooks, so a hostile
 * file cannot make it do anything but build inert records or fail.
 * Owns: every object of one interpretation (the `all` list), freed together by
 * pickle_destroy.
 * Invariant: all reads of the pickle are bounds-checked; the value stack, mark stack
 * and memo are capped, and nothing recurses, so a malicious pickle costs at most
 * memory proportional to its size.
 * Thread: one interpretation per thread.
 */
#include "pickle.h"

#include "err.h"
#include "util.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PICKLE_MAX_STACK (1 << 20)
#define PICKLE_MAX_MARKS 1024
#define PICKLE_MAX_NAME 1024 /* a GLOBAL's module or name */

struct pickle {
    const char *path;   /* the file holding the pickle, for messages */
    const char *name;   /* the pickle inside it ("data.pkl"), for messages */
    const uint8_t *buf; /* the pickle */
    size_t len, pos, op_pos;
    struct pickle_obj **stack;
    size_t sp, stack_cap;
    size_t marks[PICKLE_MAX_MARKS];
    size_t n_marks;
    struct pickle_obj **memo;
    size_t memo_cap, memo_count;
    struct pickle_obj **all; /* every object, for freeing */
    size_t n_all, all_cap;
    const struct pickle_hooks *hooks;
    void *ctx;
};

int pickle_fail(struct pickle *p, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(ENG_EFORMAT, "%s: %s byte %zu: %s", p->path, p->name, p->op_pos, msg);
}

struct pickle_obj *pickle_new(struct pickle *p, enum pickle_kind kind)
{
    if (p->n_all == p->all_cap) {
        p->all_cap = p->all_cap ? p->all_cap * 2 : 256;
        p->all = xrealloc(p->all, p->all_cap * sizeof *p->all);
    }
    struct pickle_obj *o = xcalloc(1, sizeof *o);
    o->kind = kind;
    p->all[p->n_all++] = o;
    return o;
}

static void add_item(struct pickle_obj *o, struct pickle_obj *item)
{
    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 4;
        o->items = xrealloc(o->items, o->cap * sizeof *o->items);
    }
    o->items[o->n++] = item;
}

static int push(struct pickle *p, struct pickle_obj *o)
{
    if (p->sp == PICKLE_MAX_STACK)
        return pickle_fail(p, "value stack deeper than %d", PICKLE_MAX_STACK);
    if (p->sp == p->stack_cap) {
        p->stack_cap = p->stack_cap ? p->stack_cap * 2 : 64;
        p->stack = xrealloc(p->stack, p->stack_cap * sizeof *p->stack);
    }
    p->stack[p->sp++] = o;
    return 0;
}

/* The floor of the stack for the current opcode: the last MARK, or the bottom. */
static size_t floor_sp(const struct pickle *p)
{
    return p->n_marks ? p->marks[p->n_marks - 1] : 0;
}

/* The out-parameters below are set even on failure, which callers never read, only so
 * that the compiler can see they are never used uninitialised. */
static int pop(struct pickle *p, struct pickle_obj **out)
{
    *out = NULL;
    if (p->sp <= floor_sp(p)) return pickle_fail(p, "stack underflow");
    *out = p->stack[--p->sp];
    return 0;
}

static int top(struct pickle *p, struct pickle_obj **out)
{
    *out = NULL;
    if (p->sp <= floor_sp(p)) return pickle_fail(p, "stack underflow");
    *out = p->stack[p->sp - 1];
    return 0;
}

/* Pop everything above the last MARK into the items of `o`, and drop the mark. */
static int pop_mark(struct pickle *p, struct pickle_obj *o)
{
    if (!p->n_marks) return pickle_fail(p, "no MARK on the stack");
    size_t m = p->marks[--p->n_marks];
    for (size_t i = m; i < p->sp; i++)
        if (o) add_item(o, p->stack[i]);
    p->sp = m;
    return 0;
}

static int need(struct pickle *p, size_t n, const uint8_t **out)
{
    *out = p->buf + p->pos;
    if (n > p->len - p->pos) return pickle_fail(p, "truncated (%zu more bytes needed)", n);
    *out = p->buf + p->pos;
    p->pos += n;
    return 0;
}

static uint64_t le(const uint8_t *b, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

static int push_int(struct pickle *p, enum pickle_kind kind, int64_t v)
{
    struct pickle_obj *o = pickle_new(p, kind);
    o->i = v;
    return push(p, o);
}

static int push_str(struct pickle *p, size_t len_bytes)
{
    const uint8_t *b;
    int err = need(p, (size_t)len_bytes, &b);
    if (err) return err;
    size_t n = (size_t)le(b, (int)len_bytes);
    if ((err = need(p, n, &b))) return err;
    struct pickle_obj *o = pickle_new(p, PICKLE_STR);
    o->s = xstrndup((const char *)b, n);
    o->len = n;
    return push(p, o);
}

/* GLOBAL's argument: "module\nname\n". */
static int read_line(struct pickle *p, char **out)
{
    const uint8_t *start = p->buf + p->pos;
    size_t max = MIN(p->len - p->pos, (size_t)PICKLE_MAX_NAME);
    const uint8_t *nl = memchr(start, '\n', max);
    if (!nl) return pickle_fail(p, "GLOBAL argument is not a short line");
    *out = xstrndup((const char *)start, (size_t)(nl - start));
    p->pos += (size_t)(nl - start) + 1;
    return 0;
}

static int memo_put(struct pickle *p, uint64_t idx)
{
    /* Pickle numbers memo slots from 0 upwards, each BINPUT taking at least two bytes,
     * so a real index is below the pickle's length; a larger one is garbage and must
     * not make us allocate. */
    if (idx >= p->len) return pickle_fail(p, "memo index %" PRIu64 " out of range", idx);
    if (p->sp <= floor_sp(p)) return pickle_fail(p, "stack underflow");
    if (idx >= p->memo_cap) {
        size_t cap = MAX((size_t)idx + 1, p->memo_cap * 2);
        cap = MIN(cap, p->len);
        p->memo = xrealloc(p->memo, cap * sizeof *p->memo);
        memset(p->memo + p->memo_cap, 0, (cap - p->memo_cap) * sizeof *p->memo);
        p->memo_cap = cap;
    }
    if (!p->memo[idx]) p->memo_count++;
    p->memo[idx] = p->stack[p->sp - 1];
    return 0;
}

static int memo_get(struct pickle *p, uint64_t idx)
{
    if (idx >= p->memo_cap || !p->memo[idx])
        return pickle_fail(p, "memo index %" PRIu64 " was never set", idx);
    return push(p, p->memo[idx]);
}
/* BINPERSID: the host resolves the persistent id on top of the stack. */
static int persistent_load(struct pickle *p)
{
    struct pickle_obj *pid, *o;
    if (!p->hooks->persistent_load) return pickle_fail(p, "unsupported pickle opcode 0x51");
    int err = pop(p, &pid);
    if (err) return err;
    if ((err = p->hooks->persistent_load(p, p->ctx, pid, &o))) return err;
    return push(p, o);
}

/* REDUCE: the host calls a global with a tuple of arguments; nothing else is callable. */
static int reduce(struct pickle *p)
{
    struct pickle_obj *args, *fn, *o;
    if (!p->hooks->reduce) return pickle_fail(p, "unsupported pickle opcode 0x52");
    int err = pop(p, &args);
    if (!err) err = pop(p, &fn);
    if (err) return err;
    if (fn->kind != PICKLE_GLOBAL || args->kind != PICKLE_TUPLE)
        return pickle_fail(p, "REDUCE of something other than a global and a tuple");
    if ((err = p->hooks->reduce(p, p->ctx, fn, args, &o))) return err;
    return push(p, o);
}

/* Pair up the items of `src` (key, value, ...) into the dict on top of the stack. */
static int set_items(struct pickle *p, const struct pickle_obj *src)
{
    struct pickle_obj *d;
    int err = top(p, &d);
    if (err) return err;
    if (d->kind != PICKLE_DICT)
        return pickle_fail(p, "SETITEM(S) on something that is not a dict");
    if (src->n % 2) return pickle_fail(p, "SETITEMS with an odd number of items");
    for (size_t i = 0; i < src->n; i++)
        add_item(d, src->items[i]);
    return 0;
}

static int append_items(struct pickle *p, const struct pickle_obj *src)
{
    struct pickle_obj *l;
    int err = top(p, &l);
    if (err) return err;
    if (l->kind != PICKLE_LIST)
        return pickle_fail(p, "APPEND(S) on something that is not a list");
    for (size_t i = 0; i < src->n; i++)
        add_item(l, src->items[i]);
    return 0;
}

/* Run one opcode. Returns 0, 1 after STOP, or an error. */
static int step(struct pickle *p, struct pickle_obj **result)
{
    const uint8_t *b;
    struct pickle_obj *o, *tmp;
    p->op_pos = p->pos;
    int err = need(p, 1, &b);
    if (err) return err;
    uint8_t op = *b;
    switch (op) {
    case 0x80: /* PROTO */
        if ((err = need(p, 1, &b))) return err;
        if (*b < 2 || *b > 5) return pickle_fail(p, "pickle protocol %d", *b);
        return 0;
    case 0x95: /* FRAME (protocol 4): a length prefix with no meaning for us */
        return need(p, 8, &b);
    case '}': return push(p, pickle_new(p, PICKLE_DICT));
    case ']': return push(p, pickle_new(p, PICKLE_LIST));
    case ')': return push(p, pickle_new(p, PICKLE_TUPLE));
    case '(': /* MARK */
        if (p->n_marks == PICKLE_MAX_MARKS)
            return pickle_fail(p, "MARKs nested deeper than %d", PICKLE_MAX_MARKS);
        p->marks[p->n_marks++] = p->sp;
        return 0;
    case 'X': return push_str(p, 4);  /* BINUNICODE */
    case 0x8c: return push_str(p, 1); /* SHORT_BINUNICODE */
    case 'J':                         /* BININT: signed 32-bit */
        if ((err = need(p, 4, &b))) return err;
        return push_int(p, PICKLE_INT, (int32_t)(uint32_t)le(b, 4));
    case 'K': /* BININT1 */
        if ((err = need(p, 1, &b))) return err;
        return push_int(p, PICKLE_INT, b[0]);
    case 'M': /* BININT2 */
        if ((err = need(p, 2, &b))) return err;
        return push_int(p, PICKLE_INT, (int64_t)le(b, 2));
    case 0x8a: { /* LONG1: n-byte two's complement, little-endian */
        if ((err = need(p, 1, &b))) return err;
        int n = b[0];
        if (n > 8) return pickle_fail(p, "integer of %d bytes", n);
        if ((err = need(p, (size_t)n, &b))) return err;
        uint64_t v = le(b, n);
        if (n && n < 8 && (b[n - 1] & 0x80)) v |= ~(uint64_t)0 << (8 * n);
        return push_int(p, PICKLE_INT, (int64_t)v);
    }
    case 'G': /* BINFLOAT: big-endian double; only ever metadata, so kept opaque */
        if ((err = need(p, 8, &b))) return err;
        return push(p, pickle_new(p, PICKLE_FLOAT));
    case 0x88: return push_int(p, PICKLE_BOOL, 1); /* NEWTRUE */
    case 0x89: return push_int(p, PICKLE_BOOL, 0); /* NEWFALSE */
    case 'N': return push(p, pickle_new(p, PICKLE_NONE));
    case 't': /* TUPLE */
        o = pickle_new(p, PICKLE_TUPLE);
        if ((err = pop_mark(p, o))) return err;
        return push(p, o);
    case 0x85:
    case 0x86:
    case 0x87: { /* TUPLE1..3 */
        size_t n = (size_t)(op - 0x84);
        if (p->sp < floor_sp(p) + n) return pickle_fail(p, "stack underflow");
        o = pickle_new(p, PICKLE_TUPLE);
        for (size_t i = p->sp - n; i < p->sp; i++)
            add_item(o, p->stack[i]);
        p->sp -= n;
        return push(p, o);
    }
    case 'c': /* GLOBAL */
        o = pickle_new(p, PICKLE_GLOBAL);
        if ((err = read_line(p, &o->s)) || (err = read_line(p, &o->s2))) return err;
        return push(p, o);
    case 0x93: { /* STACK_GLOBAL (protocol 4) */
        struct pickle_obj *mod, *name;
        if ((err = pop(p, &name)) || (err = pop(p, &mod))) return err;
        if (mod->kind != PICKLE_STR || name->kind != PICKLE_STR)
            return pickle_fail(p, "STACK_GLOBAL of non-strings");
        o = pickle_new(p, PICKLE_GLOBAL);
        o->s = xstrdup(mod->s);
        o->s2 = xstrdup(name->s);
        return push(p, o);
    }
    case 'R': return reduce(p);
    case 'Q': return persistent_load(p);
    case 'q': /* BINPUT */
        if ((err = need(p, 1, &b))) return err;
        return memo_put(p, b[0]);
    case 'r': /* LONG_BINPUT */
        if ((err = need(p, 4, &b))) return err;
        return memo_put(p, le(b, 4));
    case 0x94: return memo_put(p, p->memo_count); /* MEMOIZE (protocol 4) */
    case 'h':                                     /* BINGET */
        if ((err = need(p, 1, &b))) return err;
        return memo_get(p, b[0]);
    case 'j': /* LONG_BINGET */
        if ((err = need(p, 4, &b))) return err;
        return memo_get(p, le(b, 4));
    case 's': { /* SETITEM */
        struct pickle_obj *key, *value;
        if ((err = pop(p, &value)) || (err = pop(p, &key))) return err;
        o = pickle_new(p, PICKLE_TUPLE);
        add_item(o, key);
        add_item(o, value);
        return set_items(p, o);
    }
    case 'u': /* SETITEMS */
        o = pickle_new(p, PICKLE_TUPLE);
        if ((err = pop_mark(p, o))) return err;
        return set_items(p, o);
    case 'a': /* APPEND */
        o = pickle_new(p, PICKLE_TUPLE);
        if ((err = pop(p, &tmp))) return err;
        add_item(o, tmp);
        return append_items(p, o);
    case 'e': /* APPENDS */
        o = pickle_new(p, PICKLE_TUPLE);
        if ((err = pop_mark(p, o))) return err;
        return append_items(p, o);
    case 'b': /* BUILD: object state such as a state dict's _metadata; not needed */
        if ((err = pop(p, &tmp))) return err;
        return top(p, &tmp);
    case '0': /* POP */ return pop(p, &tmp);
    case '.': /* STOP */
        if ((err = pop(p, result))) return err;
        return 1;
    default: return pickle_fail(p, "unsupported pickle opcode 0x%02x", op);
    }
}

struct pickle *pickle_create(const char *path, const char *name, const uint8_t *buf,
                             size_t len, const struct pickle_hooks *hooks, void *ctx)
{
    static const struct pickle_hooks no_hooks = {0};
    struct pickle *p = xcalloc(1, sizeof *p);
    p->path = path;
    p->name = name;
    p->buf = buf;
    p->len = len;
    p->hooks = hooks ? hooks : &no_hooks;
    p->ctx = ctx;
    return p;
}

void pickle_destroy(struct pickle *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n_all; i++) {
        struct pickle_obj *o = p->all[i];
        free(o->s);
        free(o->s2);
        free(o->items);
        free(o->host);
        free(o);
    }
    free(p->all);
    free(p->stack);
    free(p->memo);
    free(p);
}

int pickle_run(struct pickle *p, struct pickle_obj **result)
{
    int err;
    while (!(err = step(p, result))) {
    }
    return err < 0 ? err : 0;
}
