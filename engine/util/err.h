/*
 * err.h - engine error codes and the thread's last error message.
 *
 * Engine functions return 0 or a negative code in -1000..-1999. The code says what
 * kind of failure it was; the message (set with err_set) says which file, tensor or
 * field, in one line, for the user. The message lives in a thread-local buffer, like
 * dlerror(): the failing call sets it and the caller reads it before the next call.
 */
#ifndef H2O_ERR_H
#define H2O_ERR_H

enum eng_err {
    ENG_OK = 0,
    ENG_EIO = -1001,          /* a file could not be opened, read or mapped */
    ENG_EFORMAT = -1002,      /* a file is malformed, truncated or inconsistent */
    ENG_ENOMEM = -1003,       /* a large allocation (weights, KV pool) failed */
    ENG_ENOSPC = -1004,       /* not enough free KV blocks (not an error to log) */
    ENG_EINVAL = -1005,       /* an argument is out of range */
    ENG_ENOTFOUND = -1006,    /* a named model, file or tensor does not exist */
    ENG_EUNSUPPORTED = -1007, /* valid input that this build cannot handle */
    ENG_EUNAVAILABLE = -1008, /* the engine is loading, failed or shutting down (503) */
};

/*
 * Set the calling thread's last error message (printf format) and return `code`,
 * so a failure path reads `return err_set(ENG_EFORMAT, "%s: ...", path);`.
 * Thread: any.
 */
int err_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * The calling thread's last error message, or the code's generic name when none was
 * set. The pointer is valid until the thread's next err_set.
 * Thread: any.
 */
const char *err_msg(void);

/* Forget the calling thread's last message. Thread: any. */
void err_clear(void);

/* A static name for an engine error code ("ENG_EFORMAT"). Thread: any. */
const char *err_name(int code);

#endif
