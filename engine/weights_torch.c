/*
 * weights_torch.c - read the state dict of a torch.save archive (pytorch_model.bin).
 *
 * The archive (weights_zip.c) holds `<archive>/data.pkl`, a pickle of an
 * OrderedDict {name: tensor}, and the raw bytes of each storage as
 * `<archive>/data/<key>`. Rather than run Python, this file interprets the small
 * subset of pickle that torch.save emits for a state dict: containers, ints, strings,
 * the globals torch._utils._rebuild_tensor_v2/_v3 and _rebuild_parameter, storage
 * types (torch.HalfStorage ...) and dtypes (torch.float16 ...), and persistent ids
 * naming storages. Any other opcode or callable is a format error: the interpreter
 * only ever builds inert records, so a hostile file cannot make it do anything but
 * fail.
 * Owns: every object of one interpretation, freed together when it ends; the tensors
 * it adds point into the mapping that weights.c owns.
 * Invariant: all reads of data.pkl are bounds-checked; the value stack, mark stack
 * and memo are capped, and nothing recurses, so a malicious pickle costs at most
 * memory proportional to its size.
 */
#include "err.h"
#include "util.h"
#include "weights_impl.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PK_MAX_STACK (1 << 20)
#define PK_MAX_MARKS 1024
#define PK_MAX_NAME 1024 /* a GLOBAL's module or name, a tensor name */

enum pk_kind {
    PK_NONE,
    PK_BOOL,
    PK_INT,
    PK_FLOAT,
    PK_STR,
    PK_TUPLE,
    PK_LIST,
    PK_DICT,    /* items hold key, value, key, value, ... */
    PK_GLOBAL,  /* s = module, s2 = name */
    PK_STORAGE, /* a persistent id resolved to an archive entry */
    PK_TENSOR,
};

struct pk_obj {
    enum pk_kind kind;
    int64_t i;             /* PK_INT, PK_BOOL */
    char *s, *s2;          /* PK_STR (s), PK_GLOBAL (module, name), PK_STORAGE (key) */
    size_t len;            /* PK_STR byte length */
    struct pk_obj **items; /* PK_TUPLE, PK_LIST, PK_DICT */
    size_t n, cap;
    /* PK_STORAGE and PK_TENSOR: the element type; dtype_name says which when unknown. */
    int dtype; /* enum dtype, or -1 */
    const char *dtype_name;
    const uint8_t *data; /* PK_STORAGE: the archive entry */
    uint64_t nbytes;
    /* PK_TENSOR */
    struct pk_obj *storage;
    int64_t offset; /* in elements of the tensor's dtype */
    int ndim;
    int64_t shape[WEIGHTS_MAX_DIM], stride[WEIGHTS_MAX_DIM];
};

struct pk {
    const char *path;   /* the .bin file, for messages */
    const uint8_t *buf; /* data.pkl */
    size_t len, pos, op_pos;
    struct pk_obj **stack;
    size_t sp, stack_cap;
    size_t marks[PK_MAX_MARKS];
    size_t n_marks;
    struct pk_obj **memo;
    size_t memo_cap, memo_count;
    struct pk_obj **all; /* every object, for freeing */
    size_t n_all, all_cap;
    struct weights_zip_entry *ents;
    size_t n_ents;
    const char *prefix; /* "<archive>/" */
    size_t prefix_len;
};

static int fail(struct pk *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct pk *p, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(ENG_EFORMAT, "%s: data.pkl byte %zu: %s", p->path, p->op_pos, msg);
}

static struct pk_obj *new_obj(struct pk *p, enum pk_kind kind)
{
    if (p->n_all == p->all_cap) {
        p->all_cap = p->all_cap ? p->all_cap * 2 : 256;
        p->all = xrealloc(p->all, p->all_cap * sizeof *p->all);
    }
    struct pk_obj *o = xcalloc(1, sizeof *o);
    o->kind = kind;
    o->dtype = -1;
    p->all[p->n_all++] = o;
    return o;
}

static void add_item(struct pk_obj *o, struct pk_obj *item)
{
    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 4;
        o->items = xrealloc(o->items, o->cap * sizeof *o->items);
    }
    o->items[o->n++] = item;
}

static int push(struct pk *p, struct pk_obj *o)
{
    if (p->sp == PK_MAX_STACK) return fail(p, "value stack deeper than %d", PK_MAX_STACK);
    if (p->sp == p->stack_cap) {
        p->stack_cap = p->stack_cap ? p->stack_cap * 2 : 64;
        p->stack = xrealloc(p->stack, p->stack_cap * sizeof *p->stack);
    }
    p->stack[p->sp++] = o;
    return 0;
}

/* The floor of the stack for the current opcode: the last MARK, or the bottom. */
static size_t floor_sp(const struct pk *p)
{
    return p->n_marks ? p->marks[p->n_marks - 1] : 0;
}

/* The out-parameters below are set even on failure, which callers never read, only so
 * that the compiler can see they are never used uninitialised. */
static int pop(struct pk *p, struct pk_obj **out)
{
    *out = NULL;
    if (p->sp <= floor_sp(p)) return fail(p, "stack underflow");
    *out = p->stack[--p->sp];
    return 0;
}

static int top(struct pk *p, struct pk_obj **out)
{
    *out = NULL;
    if (p->sp <= floor_sp(p)) return fail(p, "stack underflow");
    *out = p->stack[p->sp - 1];
    return 0;
}

/* Pop everything above the last MARK into the items of `o`, and drop the mark. */
static int pop_mark(struct pk *p, struct pk_obj *o)
{
    if (!p->n_marks) return fail(p, "no MARK on the stack");
    size_t m = p->marks[--p->n_marks];
    for (size_t i = m; i < p->sp; i++)
        if (o) add_item(o, p->stack[i]);
    p->sp = m;
    return 0;
}

static int need(struct pk *p, size_t n, const uint8_t **out)
{
    *out = p->buf + p->pos;
    if (n > p->len - p->pos) return fail(p, "truncated (%zu more bytes needed)", n);
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

static int push_int(struct pk *p, enum pk_kind kind, int64_t v)
{
    struct pk_obj *o = new_obj(p, kind);
    o->i = v;
    return push(p, o);
}

static int push_str(struct pk *p, size_t len_bytes)
{
    const uint8_t *b;
    int err = need(p, (size_t)len_bytes, &b);
    if (err) return err;
    size_t n = (size_t)le(b, (int)len_bytes);
    if ((err = need(p, n, &b))) return err;
    struct pk_obj *o = new_obj(p, PK_STR);
    o->s = xstrndup((const char *)b, n);
    o->len = n;
    return push(p, o);
}

/* GLOBAL's argument: "module\nname\n". */
static int read_line(struct pk *p, char **out)
{
    const uint8_t *start = p->buf + p->pos;
    size_t max = MIN(p->len - p->pos, (size_t)PK_MAX_NAME);
    const uint8_t *nl = memchr(start, '\n', max);
    if (!nl) return fail(p, "GLOBAL argument is not a short line");
    *out = xstrndup((const char *)start, (size_t)(nl - start));
    p->pos += (size_t)(nl - start) + 1;
    return 0;
}

static int memo_put(struct pk *p, uint64_t idx)
{
    /* Pickle numbers memo slots from 0 upwards, each BINPUT taking at least two bytes,
     * so a real index is below the pickle's length; a larger one is garbage and must
     * not make us allocate. */
    if (idx >= p->len) return fail(p, "memo index %" PRIu64 " out of range", idx);
    if (p->sp <= floor_sp(p)) return fail(p, "stack underflow");
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

static int memo_get(struct pk *p, uint64_t idx)
{
    if (idx >= p->memo_cap || !p->memo[idx])
        return fail(p, "memo index %" PRIu64 " was never set", idx);
    return push(p, p->memo[idx]);
}

static int is_global(const struct pk_obj *o, const char *mod, const char *name)
{
    return o->kind == PK_GLOBAL && strcmp(o->s, mod) == 0 && strcmp(o->s2, name) == 0;
}

/* The element type named by a torch storage class or dtype global; -1 when unknown. */
static int global_dtype(const struct pk_obj *g)
{
    static const struct {
        const char *name;
        enum dtype dtype;
    } names[] = {
        {"FloatStorage", DTYPE_F32},
        {"HalfStorage", DTYPE_F16},
        {"BFloat16Storage", DTYPE_BF16},
        {"float32", DTYPE_F32},
        {"float", DTYPE_F32},
        {"float16", DTYPE_F16},
        {"half", DTYPE_F16},
        {"bfloat16", DTYPE_BF16},
    };
    if (g->kind != PK_GLOBAL || strcmp(g->s, "torch") != 0) return -1;
    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        if (strcmp(g->s2, names[i].name) == 0) return (int)names[i].dtype;
    return -1;
}

/*
 * BINPERSID: ('storage', storage_type, key, location, numel) names the archive entry
 * `<archive>/data/<key>`. torch.UntypedStorage (numel in bytes) carries no element
 * type; _rebuild_tensor_v3 then supplies the tensor's dtype.
 */
static int persistent_load(struct pk *p)
{
    struct pk_obj *t;
    int err = pop(p, &t);
    if (err) return err;
    if (t->kind != PK_TUPLE || t->n != 5 || t->items[0]->kind != PK_STR ||
        strcmp(t->items[0]->s, "storage") != 0 || t->items[1]->kind != PK_GLOBAL ||
        t->items[2]->kind != PK_STR || t->items[4]->kind != PK_INT || t->items[4]->i < 0)
        return fail(p, "persistent id is not ('storage', type, key, location, numel)");
    struct pk_obj *st = new_obj(p, PK_STORAGE), *type = t->items[1];
    const char *key = t->items[2]->s;
    st->s = xstrdup(key);
    st->dtype = global_dtype(type);
    st->dtype_name = type->s2;
    if (strcmp(type->s2, "UntypedStorage") == 0 || strcmp(type->s2, "_UntypedStorage") == 0)
        st->dtype_name = "uint8";
    size_t klen = strlen(key);
    for (size_t i = 0; i < p->n_ents; i++) {
        const struct weights_zip_entry *e = &p->ents[i];
        if (e->name_len == p->prefix_len + 5 + klen &&
            memcmp(e->name, p->prefix, p->prefix_len) == 0 &&
            memcmp(e->name + p->prefix_len, "data/", 5) == 0 &&
            memcmp(e->name + p->prefix_len + 5, key, klen) == 0) {
            st->data = e->data;
            st->nbytes = e->size;
            break;
        }
    }
    if (!st->data) return fail(p, "storage %s has no entry %sdata/%s", key, p->prefix, key);
    uint64_t numel = (uint64_t)t->items[4]->i;
    uint64_t esize = st->dtype >= 0 ? (uint64_t)dtype_size(st->dtype) : 1;
    if (numel > st->nbytes / esize)
        return fail(p,
                    "storage %s declares %" PRIu64 " elements but its entry holds %" PRIu64
                    " bytes (truncated?)",
                    key, numel, st->nbytes);
    return push(p, st);
}

/* A tuple of `ndim` ints into out[]. */
static int int_tuple(struct pk *p, const struct pk_obj *o, const char *what, int64_t *out)
{
    if (o->kind != PK_TUPLE || o->n > WEIGHTS_MAX_DIM)
        return fail(p, "tensor %s is not a tuple of at most %d ints", what,
                    WEIGHTS_MAX_DIM);
    for (size_t i = 0; i < o->n; i++) {
        if (o->items[i]->kind != PK_INT)
            return fail(p, "tensor %s is not a tuple of ints", what);
        out[i] = o->items[i]->i;
    }
    return 0;
}

/*
 * _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
 * and _rebuild_tensor_v3(... hooks, dtype[, metadata]). Only the layout is recorded
 * here; it is checked against the storage once the tensor's name is known.
 */
static int rebuild_tensor(struct pk *p, const struct pk_obj *args, int v3)
{
    size_t min = v3 ? 7 : 6;
    if (args->n < min || args->n > min + 1)
        return fail(p, "_rebuild_tensor_v%d takes %zu or %zu arguments, not %zu",
                    v3 ? 3 : 2, min, min + 1, args->n);
    struct pk_obj *st = args->items[0], *off = args->items[1];
    if (st->kind != PK_STORAGE || off->kind != PK_INT || off->i < 0)
        return fail(p, "tensor storage or offset has the wrong type");
    struct pk_obj *t = new_obj(p, PK_TENSOR);
    t->storage = st;
    t->offset = off->i;
    t->ndim = (int)args->items[2]->n;
    int err = int_tuple(p, args->items[2], "size", t->shape);
    if (!err) err = int_tuple(p, args->items[3], "stride", t->stride);
    if (err) return err;
    if (args->items[3]->n != args->items[2]->n)
        return fail(p, "tensor size and stride differ in length");
    t->dtype = st->dtype;
    t->dtype_name = st->dtype_name;
    if (v3) {
        const struct pk_obj *d = args->items[6];
        if (d->kind != PK_GLOBAL)
            return fail(p, "_rebuild_tensor_v3 dtype is not a global");
        t->dtype = global_dtype(d);
        t->dtype_name = d->s2;
    }
    return push(p, t);
}

static int reduce(struct pk *p)
{
    struct pk_obj *args, *fn;
    int err = pop(p, &args);
    if (!err) err = pop(p, &fn);
    if (err) return err;
    if (fn->kind != PK_GLOBAL || args->kind != PK_TUPLE)
        return fail(p, "REDUCE of something other than a global and a tuple");
    if (is_global(fn, "collections", "OrderedDict")) {
        if (args->n) return fail(p, "OrderedDict with constructor arguments");
        return push(p, new_obj(p, PK_DICT));
    }
    if (is_global(fn, "torch._utils", "_rebuild_tensor_v2"))
        return rebuild_tensor(p, args, 0);
    if (is_global(fn, "torch._utils", "_rebuild_tensor_v3"))
        return rebuild_tensor(p, args, 1);
    if (is_global(fn, "torch._utils", "_rebuild_parameter") ||
        is_global(fn, "torch._utils", "_rebuild_parameter_with_state")) {
        /* A Parameter is its data tensor plus requires_grad, which inference ignores. */
        if (args->n < 1 || args->items[0]->kind != PK_TENSOR)
            return fail(p, "%s without a tensor", fn->s2);
        return push(p, args->items[0]);
    }
    return fail(p, "unsupported callable %s.%s", fn->s, fn->s2);
}

/* Pair up the items of `src` (key, value, ...) into the dict on top of the stack. */
static int set_items(struct pk *p, const struct pk_obj *src)
{
    struct pk_obj *d;
    int err = top(p, &d);
    if (err) return err;
    if (d->kind != PK_DICT) return fail(p, "SETITEM(S) on something that is not a dict");
    if (src->n % 2) return fail(p, "SETITEMS with an odd number of items");
    for (size_t i = 0; i < src->n; i++)
        add_item(d, src->items[i]);
    return 0;
}

static int append_items(struct pk *p, const struct pk_obj *src)
{
    struct pk_obj *l;
    int err = top(p, &l);
    if (err) return err;
    if (l->kind != PK_LIST) return fail(p, "APPEND(S) on something that is not a list");
    for (size_t i = 0; i < src->n; i++)
        add_item(l, src->items[i]);
    return 0;
}

/* Run one opcode. Returns 0, 1 after STOP, or an error. */
static int step(struct pk *p, struct pk_obj **result)
{
    const uint8_t *b;
    struct pk_obj *o, *tmp;
    p->op_pos = p->pos;
    int err = need(p, 1, &b);
    if (err) return err;
    uint8_t op = *b;
    switch (op) {
    case 0x80: /* PROTO */
        if ((err = need(p, 1, &b))) return err;
        if (*b < 2 || *b > 5) return fail(p, "pickle protocol %d", *b);
        return 0;
    case 0x95: /* FRAME (protocol 4): a length prefix with no meaning for us */
        return need(p, 8, &b);
    case '}': return push(p, new_obj(p, PK_DICT));
    case ']': return push(p, new_obj(p, PK_LIST));
    case ')': return push(p, new_obj(p, PK_TUPLE));
    case '(': /* MARK */
        if (p->n_marks == PK_MAX_MARKS)
            return fail(p, "MARKs nested deeper than %d", PK_MAX_MARKS);
        p->marks[p->n_marks++] = p->sp;
        return 0;
    case 'X': return push_str(p, 4);  /* BINUNICODE */
    case 0x8c: return push_str(p, 1); /* SHORT_BINUNICODE */
    case 'J':                         /* BININT: signed 32-bit */
        if ((err = need(p, 4, &b))) return err;
        return push_int(p, PK_INT, (int32_t)(uint32_t)le(b, 4));
    case 'K': /* BININT1 */
        if ((err = need(p, 1, &b))) return err;
        return push_int(p, PK_INT, b[0]);
    case 'M': /* BININT2 */
        if ((err = need(p, 2, &b))) return err;
        return push_int(p, PK_INT, (int64_t)le(b, 2));
    case 0x8a: { /* LONG1: n-byte two's complement, little-endian */
        if ((err = need(p, 1, &b))) return err;
        int n = b[0];
        if (n > 8) return fail(p, "integer of %d bytes", n);
        if ((err = need(p, (size_t)n, &b))) return err;
        uint64_t v = le(b, n);
        if (n && n < 8 && (b[n - 1] & 0x80)) v |= ~(uint64_t)0 << (8 * n);
        return push_int(p, PK_INT, (int64_t)v);
    }
    case 'G': /* BINFLOAT: big-endian double; only ever metadata, so kept opaque */
        if ((err = need(p, 8, &b))) return err;
        return push(p, new_obj(p, PK_FLOAT));
    case 0x88: return push_int(p, PK_BOOL, 1); /* NEWTRUE */
    case 0x89: return push_int(p, PK_BOOL, 0); /* NEWFALSE */
    case 'N': return push(p, new_obj(p, PK_NONE));
    case 't': /* TUPLE */
        o = new_obj(p, PK_TUPLE);
        if ((err = pop_mark(p, o))) return err;
        return push(p, o);
    case 0x85:
    case 0x86:
    case 0x87: { /* TUPLE1..3 */
        size_t n = (size_t)(op - 0x84);
        if (p->sp < floor_sp(p) + n) return fail(p, "stack underflow");
        o = new_obj(p, PK_TUPLE);
        for (size_t i = p->sp - n; i < p->sp; i++)
            add_item(o, p->stack[i]);
        p->sp -= n;
        return push(p, o);
    }
    case 'c': /* GLOBAL */
        o = new_obj(p, PK_GLOBAL);
        if ((err = read_line(p, &o->s)) || (err = read_line(p, &o->s2))) return err;
        return push(p, o);
    case 0x93: { /* STACK_GLOBAL (protocol 4) */
        struct pk_obj *mod, *name;
        if ((err = pop(p, &name)) || (err = pop(p, &mod))) return err;
        if (mod->kind != PK_STR || name->kind != PK_STR)
            return fail(p, "STACK_GLOBAL of non-strings");
        o = new_obj(p, PK_GLOBAL);
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
        struct pk_obj *key, *value;
        if ((err = pop(p, &value)) || (err = pop(p, &key))) return err;
        o = new_obj(p, PK_TUPLE);
        add_item(o, key);
        add_item(o, value);
        return set_items(p, o);
    }
    case 'u': /* SETITEMS */
        o = new_obj(p, PK_TUPLE);
        if ((err = pop_mark(p, o))) return err;
        return set_items(p, o);
    case 'a': /* APPEND */
        o = new_obj(p, PK_TUPLE);
        if ((err = pop(p, &tmp))) return err;
        add_item(o, tmp);
        return append_items(p, o);
    case 'e': /* APPENDS */
        o = new_obj(p, PK_TUPLE);
        if ((err = pop_mark(p, o))) return err;
        return append_items(p, o);
    case 'b': /* BUILD: object state such as a state dict's _metadata; not needed */
        if ((err = pop(p, &tmp))) return err;
        return top(p, &tmp);
    case '0': /* POP */ return pop(p, &tmp);
    case '.': /* STOP */
        if ((err = pop(p, result))) return err;
        return 1;
    default: return fail(p, "unsupported pickle opcode 0x%02x", op);
    }
}

/* Check a tensor of the state dict against its storage and add it to the table. */
static int add_tensor(struct weights *w, int32_t file, const struct pk_obj *key,
                      const struct pk_obj *t)
{
    const char *path = w->files[file].path, *name = key->s;
    if (key->len > PK_MAX_NAME || strlen(name) != key->len)
        return err_set(ENG_EFORMAT, "%s: a tensor name is too long or holds a NUL byte",
                       path);
    if (t->dtype < 0)
        return err_set(
            ENG_EUNSUPPORTED,
            "%s: tensor %s: unsupported dtype %s (float32, float16 and bfloat16 are "
            "read)",
            path, name, t->dtype_name ? t->dtype_name : "?");
    int64_t numel = weights_numel(t->ndim, t->shape);
    if (numel < 0) return err_set(ENG_EFORMAT, "%s: tensor %s: bad size", path, name);
    /* Contiguous row-major: each stride is the product of the later sizes, except that
     * a dimension of size 1 may carry any stride (torch does not normalise those). */
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0 && numel > 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != want) {
            char buf[160];
            return err_set(ENG_EUNSUPPORTED,
                           "%s: tensor %s: non-contiguous strides %s (save it contiguous)",
                           path, name,
                           weights_shape_str(buf, sizeof buf, t->ndim, t->stride));
        }
        want *= t->shape[i];
    }
    uint64_t esize = (uint64_t)dtype_size(t->dtype), avail = t->storage->nbytes / esize;
    if ((uint64_t)t->offset > avail || (uint64_t)numel > avail - (uint64_t)t->offset)
        return err_set(ENG_EFORMAT,
                       "%s: tensor %s: elements [%" PRId64 ", %" PRId64 ") pass the end of "
                       "storage %s (%" PRIu64 " elements)",
                       path, name, t->offset, t->offset + numel, t->storage->s, avail);
    return weights_add(w, name, key->len, t->dtype, WEIGHTS_FILL_DATA, t->ndim, t->shape,
                       t->storage->data + (uint64_t)t->offset * esize, file);
}

/* Find `<archive>/data.pkl`: the archive folder name is whatever the saver chose. */
static const struct weights_zip_entry *find_pickle(const struct weights_zip_entry *e,
                                                   size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *slash = memchr(e[i].name, '/', e[i].name_len);
        size_t rest = slash ? e[i].name_len - (size_t)(slash - e[i].name) : 0;
        if (slash && rest == 9 && memcmp(slash, "/data.pkl", 9) == 0) return &e[i];
    }
    return NULL;
}

int weights_torch_load(struct weights *w, int32_t file)
{
    const struct weights_file *f = &w->files[file];
    struct pk p = {.path = f->path};
    struct pk_obj *result = NULL;
    int err = weights_zip_read(f->path, f->map, f->len, &p.ents, &p.n_ents);
    if (err) return err;
    const struct weights_zip_entry *pkl = find_pickle(p.ents, p.n_ents);
    if (!pkl) {
        err = err_set(ENG_EFORMAT,
                      "%s: no <archive>/data.pkl entry (not a torch.save file?)", f->path);
        goto out;
    }
    p.buf = pkl->data;
    p.len = (size_t)pkl->size;
    p.prefix = pkl->name;
    p.prefix_len = pkl->name_len - 8; /* keep the slash */
    /* torch >= 2.1 records the byte order of the storages; older files are little-endian.
     */
    for (size_t i = 0; i < p.n_ents; i++) {
        const struct weights_zip_entry *e = &p.ents[i];
        if (e->name_len == p.prefix_len + 9 &&
            memcmp(e->name, p.prefix, p.prefix_len) == 0 &&
            memcmp(e->name + p.prefix_len, "byteorder", 9) == 0 &&
            !(e->size == 6 && memcmp(e->data, "little", 6) == 0)) {
            err = err_set(ENG_EUNSUPPORTED,
                          "%s: storages are not little-endian (%.*sbyteorder)", f->path,
                          (int)p.prefix_len, p.prefix);
            goto out;
        }
    }
    while (!(err = step(&p, &result))) {
    }
    if (err < 0) goto out;
    if (result->kind != PK_DICT) {
        err = err_set(ENG_EFORMAT, "%s: data.pkl does not hold a state dict", f->path);
        goto out;
    }
    err = 0;
    /* Entries that are not tensors (a training step counter, say) are not weights. */
    for (size_t i = 0; i + 1 < result->n && !err; i += 2) {
        const struct pk_obj *k = result->items[i], *v = result->items[i + 1];
        if (k->kind == PK_STR && v->kind == PK_TENSOR) err = add_tensor(w, file, k, v);
    }
out:
    for (size_t i = 0; i < p.n_all; i++) {
        struct pk_obj *o = p.all[i];
        free(o->s);
        free(o->s2);
        free(o->items);
        free(o);
    }
    free(p.all);
    free(p.stack);
    free(p.memo);
    free(p.ents);
    return err;
}
