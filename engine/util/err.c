/*
 * err.c - the thread-local last error message (see err.h).
 */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char err_buf[1024];
static _Thread_local int err_code;

int err_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    err_code = code;
    return code;
}

const char *err_msg(void)
{
    if (err_buf[0]) return err_buf;
    return err_name(err_code);
}

void err_clear(void)
{
    err_buf[0] = '\0';
    err_code = 0;
}

const char *err_name(int code)
{
    switch (code) {
    case ENG_OK: return "ENG_OK";
    case ENG_EIO: return "ENG_EIO";
    case ENG_EFORMAT: return "ENG_EFORMAT";
    case ENG_ENOMEM: return "ENG_ENOMEM";
    case ENG_ENOSPC: return "ENG_ENOSPC";
    case ENG_EINVAL: return "ENG_EINVAL";
    case ENG_ENOTFOUND: return "ENG_ENOTFOUND";
    case ENG_EUNSUPPORTED: return "ENG_EUNSUPPORTED";
    case ENG_EUNAVAILABLE: return "ENG_EUNAVAILABLE";
    default: return "unknown error";
    }
}
