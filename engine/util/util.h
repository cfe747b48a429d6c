/*
 * util.h - always-on invariant checks, aborting small allocations, logging, time.
 *
 * CHECK is for invariants of our own code, never for client or file input: those get
 * an error code and a message (err.h). Small allocations abort on OOM because no
 * caller could do anything useful; large ones (weights, KV pool) use plain malloc and
 * fail start-up with a clear message instead.
 */
#ifndef H2O_UTIL_H
#define H2O_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) util_check_failed(__FILE__, __LINE__, #cond);                      \
    } while (0)

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* <sys/param.h> (pulled in by uv.h) defines the same two macros. */
#ifndef MIN
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#endif
#ifndef MAX
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#endif
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* Print "file:line: CHECK(expr) failed" and abort. Thread: any. */
_Noreturn void util_check_failed(const char *file, int line, const char *expr);

/* malloc/calloc/realloc/strdup that abort on failure. Caller frees. Thread: any. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

/* Log a line to stderr: "2026-12-01T16:03:16.123Z [info] text" (RFC 3339, UTC), then
 * the level tag. Thread: any (one fprintf per line). */
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Monotonic time in seconds. Thread: any. */
double time_now(void);

/*
 * Read a whole file into a NUL-terminated heap buffer (caller frees). Returns 0, or
 * ENG_EIO with the message naming the path. Thread: any.
 */
int util_read_file(const char *path, char **out, size_t *len);

/* Join a directory and a file name into a new heap string. Thread: any. */
char *util_path_join(const char *dir, const char *name);

#endif
