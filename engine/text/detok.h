/*
 * detok.h - the incremental detokenizer of one sequence: token ids in, text deltas out,
 * with stop strings.
 *
 * Owns: copies of the stop strings with their KMP tables, the bytes of an unfinished
 * UTF-8 character, the text held back because it may begin a stop string, and the
 * buffer of the last delta.
 * Invariants: the concatenated deltas are always valid UTF-8 and never contain a stop
 * string; without stop strings they equal the sequence's decode with every invalid
 * UTF-8 run replaced by U+FFFD (Hugging Face's decode). Text is held back only while
 * it may still change: at most 3 bytes of an unfinished character plus the longest
 * tail that is a proper prefix of a stop string.
 * Thread: whichever thread owns the sequence (the engine); a detok is not shared.
 */
#ifndef H2O_DETOK_H
#define H2O_DETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;

/* One stop string and its matcher state. */
struct detok_stop {
    char *s;      /* owned copy */
    size_t len;   /* > 0 */
    size_t *fail; /* [len] KMP failure function: longest proper border of s[0..i] */
    size_t state; /* how many leading bytes of s the text currently ends with */
};

/* Embed in the sequence; all fields are private to detok.c. */
struct detok {
    const struct tokenizer *tok;
    struct detok_stop *stops;
    int n_stops;
    unsigned char raw[4]; /* an unfinished UTF-8 character (at most 3 bytes) */
    size_t n_raw;
    char *held; /* decoded, valid text not yet released: a possible stop prefix */
    size_t n_held, cap_held;
    char *in; /* scratch: raw bytes plus the new token's bytes */
    size_t cap_in;
    char *out; /* the last delta, NUL-terminated */
    size_t cap_out;
    size_t n_emitted; /* bytes released so far, over all deltas */
    bool stopped;
};

/*
 * Start a sequence's detokenizer over tokenizer t (which must outlive it). The n_stops
 * stop strings are copied; NULL and empty ones are ignored, and any number or length
 * works (the API layer limits them to OpenAI's 4).
 * Thread: any; the detok then belongs to the caller's thread.
 */
void detok_init(struct detok *d, const struct tokenizer *t, const char *const *stops,
                int n_stops);

/* Free what detok_init and the pushes allocated; d may be zero-filled. Thread: owner. */
void detok_deinit(struct detok *d);

/*
 * Append one generated token. *delta gets the text this token releases (possibly
 * empty), NUL-terminated, in a buffer of d valid until the next push, flush or deinit;
 * *delta_len its length (use it: a generated U+0000 is a NUL inside the text).
 * *stopped becomes true when a stop string completed: the delta then ends right before
 * the stop string, the sequence must finish, and later pushes and flushes release
 * nothing. Tokens without text (special tokens such as EOS, ids outside the vocabulary,
 * which the model's padded embedding can produce) are fine.
 * Returns 0 (an int so that a later failure mode does not change the signature).
 * Thread: owner.
 */
int detok_push(struct detok *d, int32_t token, char **delta, size_t *delta_len,
               bool *stopped);

/*
 * End the sequence (EOS, length limit, cancel): release everything held back. An
 * unfinished UTF-8 character becomes U+FFFD. If that U+FFFD completes a stop string the
 * text is cut there as in detok_push (detok_stopped then says so). The delta buffer is
 * as in detok_push.
 * Thread: owner.
 */
void detok_flush(struct detok *d, char **delta, size_t *delta_len);

/* Whether a stop string has ended the text. Thread: owner. */
bool detok_stopped(const struct detok *d);

/*
 * The length in bytes of the text decoded so far, released or held back (unfinished
 * characters not counted); after a stop, of the released text. Read it before pushing a
 * token to get that token's OpenAI logprobs "text_offset".
 * Thread: owner.
 */
size_t detok_text_len(const struct detok *d);

/* The bytes released so far: the sum of every delta's length. Thread: owner. */
size_t detok_emitted_len(const struct detok *d);

#endif
