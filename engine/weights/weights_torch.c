/*
 * weights_torch.c - read the state dict of a torch.save archive (pytorch_model.bin).
 *
 * The archive (weights_zip.c) holds `<archive>/data.pkl`, a pickle of an
 * OrderedDict {name: tensor}, and the raw bytes of each storage as
 * `<archive>/data/<key>`. Rather than run Python, the pickle interpreter (pickle.c)
 * runs data.pkl, and this file gives meaning to the only things it may call: the
 * globals torch._utils._rebuild_tensor_v2/_v3 and _rebuild_parameter and
 * collections.OrderedDict, storage types (torch.HalfStorage ...) and dtypes
 * (torch.float16 ...), and persistent ids naming storages. Any other callable is a
 * format error.
 * Owns: nothing past weights_torch_load; the storage and tensor records live in the
 * interpretation and die with it, and the tensors added to the table point into the
 * mapping that weights.c owns.
 * Invariant: a tensor is added only after its layout is checked against its storage,
 * so every read of its data stays inside the archive entry.
 */
#include "err.h"
#include "pickle.h"
#include "util.h"
#include "weights_impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define TORCH_MAX_NAME 1024 /* a tensor name */

/* What the hooks make: the record of a PICKLE_HOST object of this file. */
enum torch_kind {
    TORCH_STORAGE, /* a persistent id resolved to an archive entry */
    TORCH_TENSOR,
};

struct torch_obj {
    enum torch_kind kind;
    /* The element type; dtype_name says which when unknown. */
    int dtype; /* enum dtype, or -1 */
    const char *dtype_name;
    /* TORCH_STORAGE: the archive entry `<archive>/data/<key>` */
    const char *key;
    const uint8_t *data;
    uint64_t nbytes;
    /* TORCH_TENSOR */
    const struct torch_obj *storage;
    int64_t offset; /* in elements of the tensor's dtype */
    int ndim;
    int64_t shape[WEIGHTS_MAX_DIM], stride[WEIGHTS_MAX_DIM];
};

/* Where persistent ids find their storages: the archive's entries. */
struct torch_ctx {
    struct weights_zip_entry *ents;
    size_t n_ents;
    const char *prefix; /* "<archive>/" */
    size_t prefix_len;
};

static struct pickle_obj *torch_new(struct pickle *p, enum torch_kind kind,
                                    struct torch_obj **rec)
{
    struct pickle_obj *o = pickle_new(p, PICKLE_HOST);
    struct torch_obj *t = xcalloc(1, sizeof *t);
    t->kind = kind;
    t->dtype = -1;
    o->host = t;
    *rec = t;
    return o;
}

/* The record of `o` when it is a `kind` made here, else NULL. */
static const struct torch_obj *torch_of(const struct pickle_obj *o, enum torch_kind kind)
{
    const struct torch_obj *t = o->kind == PICKLE_HOST ? o->host : NULL;
    return t && t->kind == kind ? t : NULL;
}

static int is_global(const struct pickle_obj *o, const char *mod, const char *name)
{
    return o->kind == PICKLE_GLOBAL && strcmp(o->s, mod) == 0 && strcmp(o->s2, name) == 0;
}

/* The element type named by a torch storage class or dtype global; -1 when unknown. */
static int global_dtype(const struct pickle_obj *g)
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
    if (g->kind != PICKLE_GLOBAL || strcmp(g->s, "torch") != 0) return -1;
    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        if (strcmp(g->s2, names[i].name) == 0) return (int)names[i].dtype;
    return -1;
}

/*
 * The BINPERSID hook: ('storage', storage_type, key, location, numel) names the archive
 * entry `<archive>/data/<key>`. torch.UntypedStorage (numel in bytes) carries no
 * element type; _rebuild_tensor_v3 then supplies the tensor's dtype.
 */
static int persistent_load(struct pickle *p, void *ctx, const struct pickle_obj *t,
                           struct pickle_obj **out)
{
    const struct torch_ctx *c = ctx;
    if (t->kind != PICKLE_TUPLE || t->n != 5 || t->items[0]->kind != PICKLE_STR ||
        strcmp(t->items[0]->s, "storage") != 0 || t->items[1]->kind != PICKLE_GLOBAL ||
        t->items[2]->kind != PICKLE_STR || t->items[4]->kind != PICKLE_INT ||
        t->items[4]->i < 0)
        return pickle_fail(p,
                           "persistent id is not ('storage', type, key, location, numel)");
    struct torch_obj *st;
    struct pickle_obj *o = torch_new(p, TORCH_STORAGE, &st);
    const struct pickle_obj *type = t->items[1];
    const char *key = t->items[2]->s; /* lives as long as the interpretation */
    st->key = key;
    st->dtype = global_dtype(type);
    st->dtype_name = type->s2;
    if (strcmp(type->s2, "UntypedStorage") == 0 || strcmp(type->s2, "_UntypedStorage") == 0)
        st->dtype_name = "uint8";
    size_t klen = strlen(key);
    for (size_t i = 0; i < c->n_ents; i++) {
        const struct weights_zip_entry *e = &c->ents[i];
        if (e->name_len == c->prefix_len + 5 + klen &&
            memcmp(e->name, c->prefix, c->prefix_len) == 0 &&
            memcmp(e->name + c->prefix_len, "data/", 5) == 0 &&
            memcmp(e->name + c->prefix_len + 5, key, klen) == 0) {
            st->data = e->data;
            st->nbytes = e->size;
            break;
        }
    }
    if (!st->data)
        return pickle_fail(p, "storage %s has no entry %.*sdata/%s", key, (int)c->prefix_len,
                           c->prefix, key);
    uint64_t numel = (uint64_t)t->items[4]->i;
    uint64_t esize = st->dtype >= 0 ? (uint64_t)dtype_size(st->dtype) : 1;
    if (numel > st->nbytes / esize)
        return pickle_fail(p,
                           "storage %s declares %" PRIu64
                           " elements but its entry holds %" PRIu64 " bytes (truncated?)",
                           key, numel, st->nbytes);
    *out = o;
    return 0;
}

/* A tuple of `ndim` ints into out[]. */
static int int_tuple(struct pickle *p, const struct pickle_obj *o, const char *what,
                     int64_t *out)
{
    if (o->kind != PICKLE_TUPLE || o->n > WEIGHTS_MAX_DIM)
        return pickle_fail(p, "tensor %s is not a tuple of at most %d ints", what,
                           WEIGHTS_MAX_DIM);
    for (size_t i = 0; i < o->n; i++) {
        if (o->items[i]->kind != PICKLE_INT)
            return pickle_fail(p, "tensor %s is not a tuple of ints", what);
        out[i] = o->items[i]->i;
    }
    return 0;
}

/*
 * _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
 * and _rebuild_tensor_v3(... hooks, dtype[, metadata]). Only the layout is recorded
 * here; it is checked against the storage once the tensor's name is known.
 */
static int rebuild_tensor(struct pickle *p, const struct pickle_obj *args, int v3,
                          struct pickle_obj **out)
{
    size_t min = v3 ? 7 : 6;
    if (args->n < min || args->n > min + 1)
        return pickle_fail(p, "_rebuild_tensor_v%d takes %zu or %zu arguments, not %zu",
                           v3 ? 3 : 2, min, min + 1, args->n);
    const struct torch_obj *st = torch_of(args->items[0], TORCH_STORAGE);
    const struct pickle_obj *off = args->items[1];
    if (!st || off->kind != PICKLE_INT || off->i < 0)
        return pickle_fail(p, "tensor storage or offset has the wrong type");
    struct torch_obj *t;
    struct pickle_obj *o = torch_new(p, TORCH_TENSOR, &t);
    t->storage = st;
    t->offset = off->i;
    t->ndim = (int)args->items[2]->n;
    int err = int_tuple(p, args->items[2], "size", t->shape);
    if (!err) err = int_tuple(p, args->items[3], "stride", t->stride);
    if (err) return err;
    if (args->items[3]->n != args->items[2]->n)
        return pickle_fail(p, "tensor size and stride differ in length");
    t->dtype = st->dtype;
    t->dtype_name = st->dtype_name;
    if (v3) {
        const struct pickle_obj *d = args->items[6];
        if (d->kind != PICKLE_GLOBAL)
            return pickle_fail(p, "_rebuild_tensor_v3 dtype is not a global");
        t->dtype = global_dtype(d);
        t->dtype_name = d->s2;
    }
    *out = o;
    return 0;
}

/* The REDUCE hook (pickle.c has checked that `fn` is a global and `args` a tuple). */
static int reduce(struct pickle *p, void *ctx, const struct pickle_obj *fn,
                  const struct pickle_obj *args, struct pickle_obj **out)
{
    (void)ctx;
    if (is_global(fn, "collections", "OrderedDict")) {
        if (args->n) return pickle_fail(p, "OrderedDict with constructor arguments");
        *out = pickle_new(p, PICKLE_DICT);
        return 0;
    }
    if (is_global(fn, "torch._utils", "_rebuild_tensor_v2"))
        return rebuild_tensor(p, args, 0, out);
    if (is_global(fn, "torch._utils", "_rebuild_tensor_v3"))
        return rebuild_tensor(p, args, 1, out);
    if (is_global(fn, "torch._utils", "_rebuild_parameter") ||
        is_global(fn, "torch._utils", "_rebuild_parameter_with_state")) {
        /* A Parameter is its data tensor plus requires_grad, which inference ignores. */
        if (args->n < 1 || !torch_of(args->items[0], TORCH_TENSOR))
            return pickle_fail(p, "%s without a tensor", fn->s2);
        *out = args->items[0];
        return 0;
    }
    return pickle_fail(p, "unsupported callable %s.%s", fn->s, fn->s2);
}

/* Check a tensor of the state dict against its storage and add it to the table. */
static int add_tensor(struct weights *w, int32_t file, const struct pickle_obj *key,
                      const struct torch_obj *t)
{
    const char *path = w->files[file].path, *name = key->s;
    if (key->len > TORCH_MAX_NAME || strlen(name) != key->len)
        return err_set(ENG_EFORMAT, "%s: a tensor name is too long or holds a NUL byte",
                       path);
    if (t->dtype < 0 && weights_is_mask_buffer(name)) return 0;
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
                       path, name, t->offset, t->offset + numel, t->storage->key, avail);
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
    static const struct pickle_hooks hooks = {persistent_load, reduce};
    const struct weights_file *f = &w->files[file];
    struct torch_ctx c = {0};
    struct pickle *p = NULL;
    struct pickle_obj *result = NULL;
    int err = weights_zip_read(f->path, f->map, f->len, &c.ents, &c.n_ents);
    if (err) return err;
    const struct weights_zip_entry *pkl = find_pickle(c.ents, c.n_ents);
    if (!pkl) {
        err = err_set(ENG_EFORMAT,
                      "%s: no <archive>/data.pkl entry (not a torch.save file?)", f->path);
        goto out;
    }
    c.prefix = pkl->name;
    c.prefix_len = pkl->name_len - 8; /* keep the slash */
    /* torch >= 2.1 records the byte order of the storages; older files are little-endian.
     */
    for (size_t i = 0; i < c.n_ents; i++) {
        const struct weights_zip_entry *e = &c.ents[i];
        if (e->name_len == c.prefix_len + 9 &&
            memcmp(e->name, c.prefix, c.prefix_len) == 0 &&
            memcmp(e->name + c.prefix_len, "byteorder", 9) == 0 &&
            !(e->size == 6 && memcmp(e->data, "little", 6) == 0)) {
            err = err_set(ENG_EUNSUPPORTED,
                          "%s: storages are not little-endian (%.*sbyteorder)", f->path,
                          (int)c.prefix_len, c.prefix);
            goto out;
        }
    }
    p = pickle_create(f->path, "data.pkl", pkl->data, (size_t)pkl->size, &hooks, &c);
    err = pickle_run(p, &result);
    if (err) goto out;
    if (result->kind != PICKLE_DICT) {
        err = err_set(ENG_EFORMAT, "%s: data.pkl does not hold a state dict", f->path);
        goto out;
    }
    /* Entries that are not tensors (a training step counter, say) are not weights. */
    for (size_t i = 0; i + 1 < result->n && !err; i += 2) {
        const struct pickle_obj *k = result->items[i];
        const struct torch_obj *v = torch_of(result->items[i + 1], TORCH_TENSOR);
        if (k->kind == PICKLE_STR && v) err = add_tensor(w, file, k, v);
    }
out:
    pickle_destroy(p);
    free(c.ents);
    return err;
}
