/*
 * weights_testlib.c - the checkpoint reader tests' helpers (weights_testlib.h).
 */
#include "weights_testlib.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The folders tdir_new made, for tdir_cleanup. */
static char *tdir_list[256];
static int tdir_n;

void tbuf_add(struct tbuf *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = MAX(b->cap * 2, b->n + n + 64);
        b->p = xrealloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
}

void tbuf_byte(struct tbuf *b, int v)
{
    uint8_t c = (uint8_t)v;
    tbuf_add(b, &c, 1);
}

void tbuf_le(struct tbuf *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        tbuf_byte(b, (int)(v >> (8 * i)));
}

void tbuf_printf(struct tbuf *b, const char *fmt, ...)
{
    char tmp[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    tbuf_add(b, tmp, (size_t)MIN(n, (int)sizeof tmp - 1));
}

void st_build_raw(struct tbuf *out, const char *hdr, size_t len)
{
    tbuf_le(out, len, 8);
    tbuf_add(out, hdr, len);
}

const char *tdir_new(void)
{
    char *d = xstrdup("/tmp/h2o_test_weights_XXXXXX");
    if (!mkdtemp(d) || tdir_n == (int)ARRAY_LEN(tdir_list)) abort();
    tdir_list[tdir_n++] = d;
    return d;
}

static int tdir_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

void tdir_cleanup(void)
{
    for (int i = 0; i < tdir_n; i++) {
        nftw(tdir_list[i], tdir_rm, 8, FTW_DEPTH | FTW_PHYS);
        free(tdir_list[i]);
    }
    tdir_n = 0;
}

void tfile_write(const char *dir, const char *name, const void *data, size_t n)
{
    char *path = util_path_join(dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n)) abort();
    fclose(f);
    free(path);
}

void expect_open_fails(const char *dir, int code, const char *a, const char *b, int line)
{
    struct weights *w = (struct weights *)1;
    err_clear();
    int err = weights_open(&w, dir);
    if (err != code || w != NULL || !strstr(err_msg(), a) || !strstr(err_msg(), b))
        TEST_FAIL("line %d: %s (\"%s\"), expected %s naming \"%s\" and \"%s\"", line,
                  err_name(err), err_msg(), err_name(code), a, b);
    if (!err) weights_close(w);
}
