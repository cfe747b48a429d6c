/*
 * detok.c - the incremental detokenizer: UTF-8 repair and stop strings (see detok.h).
 *
 * Each push runs two stages over the new token's bytes. First a streaming UTF-8
 * decoder turns bytes into valid text: complete characters pass, invalid runs become
 * U+FFFD as soon as a byte proves they cannot complete, and the bytes of a character
 * that may still complete wait in `raw`. Then every byte of that text advances one
 * Knuth-Morris-Pratt matcher per stop string. A matcher's state is the length of the
 * longest tail of the text that is a prefix of its stop string, so the largest state
 * over all stops is exactly how much text must be held back: anything before it can no
 * longer become part of a stop, whatever tokens come next. KMP keeps a push linear in
 * the new bytes however long the stop strings are.
 */
#include "detok.h"

#include "tokenizer.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

static const char detok_replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */

void detok_init(struct detok *d, const struct tokenizer *t, const char *const *stops,
                int n_stops)
{
    memset(d, 0, sizeof *d);
    d->tok = t;
    if (n_stops > 0) d->stops = xcalloc((size_t)n_stops, sizeof *d->stops);
    for (int i = 0; i < n_stops; i++) {
        if (!stops[i] || !stops[i][0]) continue;
        struct detok_stop *st = &d->stops[d->n_stops++];
        st->len = strlen(stops[i]);
        st->s = xstrndup(stops[i], st->len);
        st->fail = xmalloc(st->len * sizeof *st->fail);
        st->fail[0] = 0;
        for (size_t j = 1, k = 0; j < st->len; j++) {
            while (k > 0 && st->s[j] != st->s[k])
                k = st->fail[k - 1];
            if (st->s[j] == st->s[k]) k++;
            st->fail[j] = k;
        }
    }
}

void detok_deinit(struct detok *d)
{
    for (int i = 0; i < d->n_stops; i++) {
        free(d->stops[i].s);
        free(d->stops[i].fail);
    }
    free(d->stops);
    free(d->held);
    free(d->in);
    free(d->out);
    memset(d, 0, sizeof *d);
}

/*
 * Append valid text to the held buffer and run the stop matchers over it. Returns the
 * held-buffer offset where the earliest completed stop string starts, or SIZE_MAX.
 * "Earliest" is by start: with stops "abcd" and "bc" and a token "abcd", the text is
 * cut before "a", so no stop survives in the output whichever of them ends first.
 */
static size_t detok_append(struct detok *d, const char *s, size_t n)
{
    if (d->n_held + n > d->cap_held) {
        d->cap_held = MAX(d->n_held + n, 2 * d->cap_held + 64);
        d->held = xrealloc(d->held, d->cap_held);
    }
    size_t base = d->n_held;
    memcpy(d->held + base, s, n);
    d->n_held += n;
    size_t best = SIZE_MAX;
    for (int i = 0; i < d->n_stops; i++) {
        struct detok_stop *st = &d->stops[i];
        size_t q = st->state;
        for (size_t j = 0; j < n; j++) {
            char c = s[j];
            while (q > 0 && st->s[q] != c)
                q = st->fail[q - 1];
            if (st->s[q] == c) q++;
            if (q == st->len) {
                /* The first match of this stop is the only one that can be earliest. */
                best = MIN(best, base + j + 1 - st->len);
                q = st->fail[q - 1];
                break;
            }
        }
        st->state = q;
    }
    return best;
}

/* Move held[0..n) into the delta buffer and drop it from the held text. */
static void detok_release(struct detok *d, size_t n, char **delta, size_t *delta_len)
{
    if (n + 1 > d->cap_out) {
        d->cap_out = MAX(n + 1, 2 * d->cap_out + 64);
        d->out = xrealloc(d->out, d->cap_out);
    }
    if (n) memcpy(d->out, d->held, n);
    d->out[n] = '\0';
    d->n_held -= n;
    if (d->n_held) memmove(d->held, d->held + n, d->n_held);
    d->n_emitted += n;
    *delta = d->out;
    *delta_len = n;
}

/* A stop string starts at held[cut]: release the text before it and end the text. */
static void detok_stop_at(struct detok *d, size_t cut, char **delta, size_t *delta_len)
{
    /* Held text always covers the longest partial match, so a stop starts inside it. */
    CHECK(cut <= d->n_held);
    detok_release(d, cut, delta, delta_len);
    d->n_held = 0;
    d->n_raw = 0;
    d->stopped = true;
}

static void detok_nothing(struct detok *d, char **delta, size_t *delta_len)
{
    detok_release(d, 0, delta, delta_len);
}

int detok_push(struct detok *d, int32_t token, char **delta, size_t *delta_len,
               bool *stopped)
{
    size_t n_bytes;
    const char *bytes = tokenizer_token_bytes(d->tok, token, &n_bytes);
    if (d->stopped || n_bytes == 0) {
        *stopped = d->stopped;
        detok_nothing(d, delta, delta_len);
        return 0;
    }
    /* The unfinished character of the last token continues with this token's bytes. */
    size_t n_in = d->n_raw + n_bytes;
    if (n_in > d->cap_in) {
        d->cap_in = MAX(n_in, 2 * d->cap_in + 64);
        d->in = xrealloc(d->in, d->cap_in);
    }
    memcpy(d->in, d->raw, d->n_raw);
    memcpy(d->in + d->n_raw, bytes, n_bytes);
    d->n_raw = 0;

    size_t cut = SIZE_MAX;
    const unsigned char *u = (const unsigned char *)d->in;
    for (size_t i = 0; i < n_in;) {
        size_t len;
        enum tokenizer_utf8 kind = tokenizer_utf8_next(u + i, n_in - i, &len);
        if (kind == TOKENIZER_UTF8_INCOMPLETE) {
            CHECK(len < sizeof d->raw);
            memcpy(d->raw, u + i, len);
            d->n_raw = len;
        } else {
            size_t at = kind == TOKENIZER_UTF8_CHAR ? detok_append(d, d->in + i, len)
                                                    : detok_append(d, detok_replacement, 3);
            cut = MIN(cut, at);
        }
        i += len;
    }
    if (cut != SIZE_MAX) {
        detok_stop_at(d, cut, delta, delta_len);
        *stopped = true;
        return 0;
    }
    size_t hold = 0;
    for (int i = 0; i < d->n_stops; i++)
        hold = MAX(hold, d->stops[i].state);
    size_t n = d->n_held - hold;
    /* Stop strings are valid UTF-8, so a held prefix starts on a character boundary;
     * stepping back over continuation bytes only guards against one that is not. */
    while (n > 0 && n < d->n_held && ((unsigned char)d->held[n] & 0xC0) == 0x80)
        n--;
    detok_release(d, n, delta, delta_len);
    *stopped = false;
    return 0;
}

void detok_flush(struct detok *d, char **delta, size_t *delta_len)
{
    if (d->stopped) {
        detok_nothing(d, delta, delta_len);
        return;
    }
    if (d->n_raw) {
        /* An unfinished character is one maximal subpart: one U+FFFD. */
        d->n_raw = 0;
        size_t cut = detok_append(d, detok_replacement, 3);
        if (cut != SIZE_MAX) {
            detok_stop_at(d, cut, delta, delta_len);
            return;
        }
    }
    detok_release(d, d->n_held, delta, delta_len);
}

bool detok_stopped(const struct detok *d)
{
    return d->stopped;
}

size_t detok_text_len(const struct detok *d)
{
    return d->n_emitted + d->n_held;
}

size_t detok_emitted_len(const struct detok *d)
{
    return d->n_emitted;
}
