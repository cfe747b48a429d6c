/*
 * pickle.h - a bounded interpreter for the subset of Python's pickle format that
 * torch.save emits for a state dict.
 *
 * The interpreter builds inert records only: containers, ints, strings, opaque floats
 * and globals (a module and a name, never looked up). What a persistent id names
 * (BINPERSID) and what calling a global means (REDUCE) is left to the host's hooks
 * (weights_torch.c gives them torch's meaning), so a pickle can do nothing the host
 * did not write a hook for; everything else is a format error.
 *
 * Every object of one interpretation lives until pickle_destroy, which frees them all
 * together; objects may therefore point at each other freely, and the result of
 * pickle_run stays valid until then.
 * Thread: one interpretation belongs to one thread; separate ones share nothing.
 */
#ifndef H2O_PICKLE_H
#define H2O_PICKLE_H

#include <stddef.h>
#include <stdint.h>

enum pickle_kind {
    PICKLE_NONE,
    PICKLE_BOOL,
    PICKLE_INT,
    PICKLE_FLOAT,
    PICKLE_STR,
    PICKLE_TUPLE,
    PICKLE_LIST,
    PICKLE_DICT,   /* items hold key, value, key, value, ... */
    PICKLE_GLOBAL, /* s = module, s2 = name */
    PICKLE_HOST,   /* made by a hook; `host` is the hook's record */
};

struct pickle_obj {
    enum pickle_kind kind;
    int64_t i;                 /* PICKLE_INT, PICKLE_BOOL */
    char *s, *s2;              /* PICKLE_STR (s), PICKLE_GLOBAL (module, name) */
    size_t len;                /* PICKLE_STR byte length */
    struct pickle_obj **items; /* PICKLE_TUPLE, PICKLE_LIST, PICKLE_DICT */
    size_t n, cap;
    void *host; /* PICKLE_HOST: set by the hook, freed with free() by pickle_destroy */
};

struct pickle;

/*
 * What the host gives meaning to. Each hook stores the object to push in *out and
 * returns 0, or returns an error from pickle_fail. A NULL hook makes its opcode
 * unsupported. The hooks run on the thread that calls pickle_run.
 */
struct pickle_hooks {
    /* BINPERSID: resolve the persistent id `pid`. */
    int (*persistent_load)(struct pickle *p, void *ctx, const struct pickle_obj *pid,
                           struct pickle_obj **out);
    /* REDUCE: call the global `fn` with the tuple `args`. */
    int (*reduce)(struct pickle *p, void *ctx, const struct pickle_obj *fn,
                  const struct pickle_obj *args, struct pickle_obj **out);
};

/*
 * Start interpreting the `len` bytes at `buf`, the pickle `name` inside the file
 * `path` (both only for messages, as "<path>: <name> byte <n>: ..."). Borrows buf,
 * path, name, hooks and ctx until pickle_destroy; `hooks` may be NULL (no hooks).
 * Returns a new interpreter (caller destroys).
 * Thread: any.
 */
struct pickle *pickle_create(const char *path, const char *name, const uint8_t *buf,
                             size_t len, const struct pickle_hooks *hooks, void *ctx);

/* Free the interpreter and every object it made; NULL is a no-op. Thread: its own. */
void pickle_destroy(struct pickle *p);

/*
 * Run the pickle up to its STOP. Returns 0 with the value STOP returned in *result
 * (owned by `p`), or ENG_EFORMAT with a one-line err_msg, or a hook's error.
 * Thread: its own.
 */
int pickle_run(struct pickle *p, struct pickle_obj **result);

/*
 * A new object of `kind` (zeroed otherwise), owned by `p`. For hooks, which set
 * `host` on a PICKLE_HOST object. Thread: its own.
 */
struct pickle_obj *pickle_new(struct pickle *p, enum pickle_kind kind);

/*
 * Set err_msg to "<path>: <name> byte <n>: <message>", n being the offset of the
 * opcode being run, and return ENG_EFORMAT. For hooks and the interpreter alike.
 * Thread: its own.
 */
int pickle_fail(struct pickle *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
