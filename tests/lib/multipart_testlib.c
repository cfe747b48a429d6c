/*
 * multipart_testlib.c - the multipart parsers' test helpers (multipart_testlib.h).
 */
#include "multipart_testlib.h"

#include "util.h"

#include <stdio.h>
#include <string.h>

const char mp_openai_body[] = "--" MP_B "\r\n"
                              "Content-Disposition: form-data; name=\"purpose\"\r\n"
                              "\r\n"
                              "batch\r\n"
                              "--" MP_B "\r\n"
                              "Content-Disposition: form-data; name=\"file\"; "
                              "filename=\"batch.jsonl\"\r\n"
                              "Content-Type: application/octet-stream\r\n"
                              "\r\n" MP_JSONL "\r\n"
                              "--" MP_B "--\r\n";

uint64_t mp_rng_state = 0x9e3779b97f4a7c15ull;

uint64_t mp_rng(void)
{
    mp_rng_state ^= mp_rng_state >> 12;
    mp_rng_state ^= mp_rng_state << 25;
    mp_rng_state ^= mp_rng_state >> 27;
    return mp_rng_state * 0x2545f4914f6cdd1dull;
}

char *mp_many_parts(int n, size_t *len)
{
    size_t cap = (size_t)n * 128 + 64, l = 0;
    char *body = xmalloc(cap);
    for (int i = 0; i < n; i++)
        l += (size_t)snprintf(
            body + l, cap - l,
            "--" MP_B "\r\nContent-Disposition: form-data; name=p%d\r\n\r\n%d\r\n", i, i);
    l += (size_t)snprintf(body + l, cap - l, "--" MP_B "--\r\n");
    *len = l;
    return body;
}

size_t mp_mutated(char *buf, size_t cap, const char *body, size_t len)
{
    static const char *pieces[] = {"\r\n",
                                   "\r",
                                   "\n",
                                   "--",
                                   "--" MP_B,
                                   "\r\n--" MP_B,
                                   "\"",
                                   "\\",
                                   ";",
                                   "=",
                                   ":",
                                   "\r\n\r\n",
                                   " ",
                                   "\0",
                                   "name=",
                                   "filename=\"",
                                   "Content-Disposition: form-data"};
    CHECK(len <= cap);
    memcpy(buf, body, len);
    int n_mut = 1 + (int)(mp_rng() % 8);
    for (int k = 0; k < n_mut; k++) {
        size_t at = len ? (size_t)(mp_rng() % (len + 1)) : 0;
        switch (mp_rng() % 5) {
        case 0: /* flip a byte */
            if (at < len) buf[at] = (char)mp_rng();
            break;
        case 1: /* delete a run */
            if (at < len) {
                size_t d = 1 + (size_t)(mp_rng() % 16);
                if (d > len - at) d = len - at;
                memmove(buf + at, buf + at + d, len - at - d);
                len -= d;
            }
            break;
        case 2: { /* insert a piece */
            const char *p = pieces[mp_rng() % ARRAY_LEN(pieces)];
            size_t pl = p[0] ? strlen(p) : 1;
            if (len + pl < cap) {
                memmove(buf + at + pl, buf + at, len - at);
                memcpy(buf + at, p, pl);
                len += pl;
            }
            break;
        }
        case 3: /* truncate */ len = at; break;
        case 4: { /* duplicate a slice (repeats parts and headers) */
            size_t s = len ? (size_t)(mp_rng() % len) : 0, d = (size_t)(mp_rng() % 200);
            if (d > len - s) d = len - s;
            if (len + d < cap) {
                memmove(buf + at + d, buf + at, len - at);
                memmove(buf + at, buf + (s < at ? s : s + d), d);
                len += d;
            }
            break;
        }
        }
    }
    return len;
}
