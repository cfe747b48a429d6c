/*
 * query.c - query-string parameters (application/x-www-form-urlencoded, as the
 * OpenAI SDK sends `?limit=2&after=file-abc`) for the list endpoints.
 * Thread: loop.
 */
#include "query.h"

#include "reply.h"

#include "jobstore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hex_val(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decode n bytes of s into buf (NUL-terminated). -1 when malformed, when it
 * would not fit, or when it decodes to a NUL (no parameter we read may hold one). */
static int decode(const char *s, size_t n, char *buf, size_t size)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            if (i + 2 >= n) return -1;
            int h = hex_val(s[i + 1]), l = hex_val(s[i + 2]);
            if (h < 0 || l < 0) return -1;
            c = (char)(h * 16 + l);
            i += 2;
        }
        if (c == '\0' || w + 1 >= size) return -1;
        buf[w++] = c;
    }
    buf[w] = '\0';
    return 0;
}

int query_get(const struct exch *x, const char *name, char *buf, size_t size)
{
    const char *q = x->req->query;
    const size_t nlen = strlen(name);
    while (q && *q) {
        size_t len = strcspn(q, "&");
        const char *eq = memchr(q, '=', len);
        size_t klen = eq ? (size_t)(eq - q) : len;
        if (klen == nlen && memcmp(q, name, nlen) == 0) {
            const char *v = eq ? eq + 1 : q + len;
            return decode(v, (size_t)(q + len - v), buf, size) ? -1 : 1;
        }
        q += len;
        if (*q == '&') q++;
    }
    return 0;
}

int query_list_params(struct exch *x, int default_limit, int max_limit, struct query_list *q)
{
    memset(q, 0, sizeof *q);
    q->limit = default_limit;
    char v[64];
    int got = query_get(x, "limit", v, sizeof v);
    if (got != 0) {
        char *end;
        long n = got > 0 ? strtol(v, &end, 10) : 0;
        if (got < 0 || !*v || *end || n < 1 || n > max_limit) {
            char msg[96];
            snprintf(msg, sizeof msg, "limit must be an integer from 1 to %d", max_limit);
            reply_error(x, 400, "invalid_limit", "%s", msg);
            return -1;
        }
        q->limit = (int)n;
    }
    if (query_get(x, "after", q->after, sizeof q->after) < 0) {
        reply_error(x, 400, NULL, "after is not a valid id%s", "");
        return -1;
    }
    got = query_get(x, "order", v, sizeof v);
    if (got < 0 || (got > 0 && strcmp(v, "asc") != 0 && strcmp(v, "desc") != 0)) {
        reply_error(x, 400, NULL, "order must be 'asc' or 'desc'%s", "");
        return -1;
    }
    q->ascending = got > 0 && strcmp(v, "asc") == 0;
    return 0;
}

bool query_id_ok(const char *id, size_t len)
{
    if (len == 0 || len >= JOBSTORE_ID_MAX) return false;
    for (size_t i = 0; i < len; i++) {
        const char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}
