/*
 * test_detok.c - the incremental detokenizer: UTF-8 repair and stop strings.
 *
 * The specification in one line: the concatenated deltas equal the whole decode with
 * invalid UTF-8 replaced by U+FFFD, cut before the earliest stop string that has
 * completed by the end of some token, and every delta is valid UTF-8 on its own.
 * Random streams check that against a non-incremental reference written here; the
 * named cases pin the corners (split characters, split stops, false alarms, overlaps).
 */
#include "detok.h"
#include "err.h"
#include "test.h"
#include "opt_tokenizer.h"
#include "tokenizer.h"
#include "util.h"

#include <stdint.h>

static struct tokenizer *opt_tok, *byte_tok;

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint32_t rng_below(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static int valid_utf8(const char *s, size_t n)
{
    size_t len;
    for (size_t i = 0; i < n; i += len)
        if (tokenizer_utf8_next((const unsigned char *)s + i, n - i, &len) !=
            TOKENIZER_UTF8_CHAR)
            return 0;
    return 1;
}

/* The whole-text reference: raw bytes with each invalid run replaced by U+FFFD. */
static char *sanitize(const char *s, size_t n, size_t *out_len)
{
    char *out = xmalloc(3 * n + 1);
    size_t k = 0, len;
    for (size_t i = 0; i < n; i += len) {
        if (tokenizer_utf8_next((const unsigned char *)s + i, n - i, &len) ==
            TOKENIZER_UTF8_CHAR) {
            memcpy(out + k, s + i, len);
            k += len;
        } else {
            memcpy(out + k, "\xEF\xBF\xBD", 3);
            k += 3;
        }
    }
    out[k] = '\0';
    *out_len = k;
    return out;
}

/* What one stream produced: all deltas joined, and how it ended. */
struct run {
    char *text;
    size_t len;
    bool stopped;
    int stop_push;      /* index of the push that reported the stop, or -1 */
    int bad_delta;      /* a delta that was not valid UTF-8 */
    int after_stop;     /* bytes released after the stop */
    int offsets_broken; /* detok_text_len went backwards or below the emitted length */
};

static struct run run_stream(const struct tokenizer *t, const int32_t *ids, int n,
                             const char *const *stops, int n_stops)
{
    struct detok d;
    detok_init(&d, t, stops, n_stops);
    struct run r = {xmalloc(16), 0, false, -1, 0, 0, 0};
    size_t cap = 16, last_text_len = 0;
    for (int i = 0; i <= n; i++) {
        char *delta;
        size_t len;
        bool stopped = false;
        if (i < n) {
            EXPECT_EQ(detok_push(&d, ids[i], &delta, &len, &stopped), 0);
        } else {
            detok_flush(&d, &delta, &len);
            stopped = detok_stopped(&d);
        }
        EXPECT_EQ(delta[len], '\0');
        if (!valid_utf8(delta, len)) r.bad_delta++;
        if (r.stopped) r.after_stop += (int)len;
        if (len + r.len + 1 > cap) r.text = xrealloc(r.text, cap = 2 * (len + r.len + 1));
        memcpy(r.text + r.len, delta, len);
        r.len += len;
        if (stopped && !r.stopped) r.stop_push = i;
        r.stopped = r.stopped || stopped;
        if (detok_emitted_len(&d) != r.len || detok_text_len(&d) < r.len)
            r.offsets_broken++;
        if (!r.stopped && detok_text_len(&d) < last_text_len) r.offsets_broken++;
        last_text_len = detok_text_len(&d);
    }
    r.text[r.len] = '\0';
    detok_deinit(&d);
    return r;
}

static struct run run_bytes(const char *text, const char *const *stops, int n_stops)
{
    int n = (int)strlen(text);
    int32_t *ids = xmalloc((size_t)(n + 1) * sizeof *ids);
    for (int i = 0; i < n; i++)
        ids[i] = 4 + (unsigned char)text[i];
    struct run r = run_stream(byte_tok, ids, n, stops, n_stops);
    free(ids);
    return r;
}

static struct run run_opt(const char *text, const char *const *stops, int n_stops)
{
    int32_t *ids, n;
    CHECK(tokenizer_encode(opt_tok, text, strlen(text), false, &ids, &n) == 0);
    struct run r = run_stream(opt_tok, ids, n, stops, n_stops);
    free(ids);
    return r;
}

static void expect_clean(const struct run *r)
{
    EXPECT_EQ(r->bad_delta, 0);
    EXPECT_EQ(r->after_stop, 0);
    EXPECT_EQ(r->offsets_broken, 0);
}

TEST(random_streams_equal_decode)
{
    /* Random ids over the whole OPT vocabulary (specials and ids past its end
     * included) and random bytes through the byte tokenizer, which is mostly invalid
     * UTF-8: the joined deltas are the sanitised decode. */
    int32_t ids[80];
    int failures = 0;
    for (int iter = 0; iter < 4000; iter++) {
        const struct tokenizer *t = iter % 2 ? opt_tok : byte_tok;
        int n = (int)rng_below(80);
        int32_t vocab = tokenizer_vocab_size(t);
        for (int i = 0; i < n; i++) {
            if (t == byte_tok && rng_below(3))
                ids[i] = 4 + 0x80 + (int32_t)rng_below(0x80); /* UTF-8 fragments */
            else
                ids[i] = (int32_t)rng_below((uint32_t)vocab + 8);
        }
        int32_t valid[80];
        int n_valid = 0;
        for (int i = 0; i < n; i++)
            if (ids[i] < vocab) valid[n_valid++] = ids[i];
        char *raw;
        size_t raw_len, want_len;
        CHECK(tokenizer_decode(t, valid, n_valid, true, &raw, &raw_len) == 0);
        char *want = sanitize(raw, raw_len, &want_len);
        struct run r = run_stream(t, ids, n, NULL, 0);
        if ((r.len != want_len || memcmp(r.text, want, want_len) != 0 || r.stopped ||
             r.bad_delta || r.offsets_broken) &&
            failures++ < 3)
            TEST_FAIL("stream #%d: deltas \"%s\" != decode \"%s\"", iter, r.text, want);
        free(r.text);
        free(want);
        free(raw);
    }
    EXPECT_EQ(failures, 0);
}

TEST(multibyte_characters_split_across_tokens)
{
    struct detok d;
    detok_init(&d, byte_tok, NULL, 0);
    char *delta;
    size_t len;
    bool stopped;
    /* "é" = C3 A9: nothing until the second byte. */
    detok_push(&d, 4 + 0xC3, &delta, &len, &stopped);
    EXPECT_EQ(len, 0);
    EXPECT_EQ(detok_text_len(&d), 0);
    detok_push(&d, 4 + 0xA9, &delta, &len, &stopped);
    EXPECT_STR(delta, "\xC3\xA9");
    /* A four-byte emoji over four tokens. */
    const unsigned char emoji[] = {0xF0, 0x9F, 0xA6, 0x99};
    for (int i = 0; i < 4; i++) {
        detok_push(&d, 4 + emoji[i], &delta, &len, &stopped);
        EXPECT_EQ(len, i == 3 ? 4 : 0);
    }
    EXPECT_STR(delta, "\xF0\x9F\xA6\x99");
    /* C3 then 'a': C3 cannot complete, so it is replaced as soon as 'a' shows it. */
    detok_push(&d, 4 + 0xC3, &delta, &len, &stopped);
    EXPECT_EQ(len, 0);
    detok_push(&d, 4 + 'a', &delta, &len, &stopped);
    EXPECT_STR(delta, "\357\277\275a"); /* U+FFFD a */
    /* E0 80: E0 needs A0..BF next, so both bytes are invalid at once. */
    detok_push(&d, 4 + 0xE0, &delta, &len, &stopped);
    detok_push(&d, 4 + 0x80, &delta, &len, &stopped);
    EXPECT_STR(delta, "\xEF\xBF\xBD\xEF\xBF\xBD");
    /* A lone continuation byte is replaced immediately. */
    detok_push(&d, 4 + 0xBF, &delta, &len, &stopped);
    EXPECT_STR(delta, "\xEF\xBF\xBD");
    /* An unfinished character at the end is one U+FFFD. */
    detok_push(&d, 4 + 0xF0, &delta, &len, &stopped);
    detok_push(&d, 4 + 0x9F, &delta, &len, &stopped);
    EXPECT_EQ(len, 0);
    size_t before = detok_emitted_len(&d);
    detok_flush(&d, &delta, &len);
    EXPECT_STR(delta, "\xEF\xBF\xBD");
    EXPECT_EQ(detok_emitted_len(&d), before + 3);
    EXPECT(!stopped && !detok_stopped(&d));
    detok_deinit(&d);

    /* Through the real vocabulary: "我" and "😁" are two tokens each, the first of
     * them part of a character. */
    const char *text = "a\xE6\x88\x91z \xF0\x9F\x98\x81!";
    struct run r = run_opt(text, NULL, 0);
    EXPECT_STR(r.text, text);
    expect_clean(&r);
    free(r.text);
}

TEST(stop_split_across_tokens)
{
    const char *stops[] = {"STOP"};
    struct run r = run_bytes("Hello STOP world", stops, 1);
    EXPECT_STR(r.text, "Hello ");
    EXPECT(r.stopped);
    EXPECT_EQ(r.stop_push, 9); /* the push of the 'P' */
    expect_clean(&r);
    free(r.text);

    const char *qa[] = {"\n\nQuestion:"};
    r = run_opt("The answer is 42.\n\nQuestion: what next?", qa, 1);
    EXPECT_STR(r.text, "The answer is 42.");
    EXPECT(r.stopped);
    expect_clean(&r);
    free(r.text);

    /* Pushes after the stop release nothing and keep reporting it. */
    struct detok d;
    detok_init(&d, byte_tok, stops, 1);
    char *delta;
    size_t len;
    bool stopped;
    const char *s = "xSTOPyz";
    for (int i = 0; s[i]; i++)
        detok_push(&d, 4 + s[i], &delta, &len, &stopped);
    EXPECT(stopped);
    EXPECT_EQ(len, 0);
    EXPECT_EQ(detok_emitted_len(&d), 1);
    EXPECT_EQ(detok_text_len(&d), 1);
    detok_flush(&d, &delta, &len);
    EXPECT_EQ(len, 0);
    detok_deinit(&d);
}

TEST(held_prefix_released_when_not_a_stop)
{
    const char *stops[] = {"STOP"};
    struct detok d;
    detok_init(&d, byte_tok, stops, 1);
    char *delta;
    size_t len;
    bool stopped;
    detok_push(&d, 4 + 'a', &delta, &len, &stopped);
    EXPECT_STR(delta, "a");
    const char *held = "STO";
    for (int i = 0; held[i]; i++) {
        detok_push(&d, 4 + held[i], &delta, &len, &stopped);
        EXPECT_EQ(len, 0);
    }
    /* Held text still counts for text offsets. */
    EXPECT_EQ(detok_text_len(&d), 4);
    EXPECT_EQ(detok_emitted_len(&d), 1);
    detok_push(&d, 4 + 'r', &delta, &len, &stopped);
    EXPECT_STR(delta, "STOr");
    EXPECT(!stopped);
    /* At the end, a held prefix is released by the flush. */
    detok_push(&d, 4 + 'S', &delta, &len, &stopped);
    detok_push(&d, 4 + 'T', &delta, &len, &stopped);
    EXPECT_EQ(len, 0);
    detok_flush(&d, &delta, &len);
    EXPECT_STR(delta, "ST");
    EXPECT_EQ(detok_emitted_len(&d), 7);
    detok_deinit(&d);
}

TEST(stop_at_the_first_token)
{
    const char *stops[] = {"Hello"};
    int32_t ids[] = {31414, 6, 232}; /* "Hello", ",", " world" */
    struct run r = run_stream(opt_tok, ids, 3, stops, 1);
    EXPECT_STR(r.text, "");
    EXPECT(r.stopped);
    EXPECT_EQ(r.stop_push, 0);
    expect_clean(&r);
    free(r.text);
}

TEST(overlapping_stop_strings)
{
    /* "aab" in "aaab": the first 'a' is released, the match starting at the second is
     * cut. A naive matcher that restarts after "aa" + 'a' would miss it. */
    const char *stops[] = {"aab"};
    struct run r = run_bytes("aaab", stops, 1);
    EXPECT_STR(r.text, "a");
    EXPECT(r.stopped);
    expect_clean(&r);
    free(r.text);

    const char *abab[] = {"abac"};
    r = run_bytes("xabababac tail", abab, 1);
    EXPECT_STR(r.text, "xabab");
    EXPECT(r.stopped);
    free(r.text);
}

TEST(earliest_stop_wins)
{
    /* Whichever order the stops are listed in, the one that starts first is cut. */
    const char *stops[] = {"world", "lo"};
    struct run r = run_bytes("Hello world", stops, 2);
    EXPECT_STR(r.text, "Hel");
    free(r.text);
    /* Inside one token " Hello", "ell" ends first but " Hello" starts first. */
    const char *inner[] = {"ell", " Hello"};
    int32_t ids[] = {232, 20920}; /* " world", " Hello" */
    r = run_stream(opt_tok, ids, 2, inner, 2);
    EXPECT_STR(r.text, " world");
    EXPECT(r.stopped);
    free(r.text);
    /* Four stops, one of them empty (ignored) and a NULL. */
    const char *many[] = {"", "zzz", NULL, "o w", "d"};
    r = run_bytes("Hello world", many, 5);
    EXPECT_STR(r.text, "Hell");
    expect_clean(&r);
    free(r.text);
}

TEST(stop_strings_with_multibyte_characters)
{
    const char *stops[] = {"\xC3\xA9!"}; /* "é!" */
    struct run r = run_bytes("caf\xC3\xA9 caf\xC3\xA9!", stops, 1);
    EXPECT_STR(r.text, "caf\xC3\xA9 caf");
    expect_clean(&r);
    free(r.text);
    /* A stop made of U+FFFD matches replaced bytes, even the flush's. */
    const char *repl[] = {"\xEF\xBF\xBD"};
    r = run_bytes("ok\xF0\x9F", repl, 1);
    EXPECT_STR(r.text, "ok");
    EXPECT(r.stopped);
    free(r.text);
}

TEST(long_stop_strings)
{
    /* A 256-byte stop held back in full until its last byte, then cut. */
    char stop[257], text[1200];
    for (int i = 0; i < 256; i++)
        stop[i] = (char)('a' + i % 7);
    stop[256] = '\0';
    snprintf(text, sizeof text, "lead %s%s tail", stop, "");
    const char *stops[] = {stop, "never"};
    struct run r = run_bytes(text, stops, 2);
    EXPECT_STR(r.text, "lead ");
    EXPECT(r.stopped);
    expect_clean(&r);
    free(r.text);
    /* The same text without the last byte of the stop is released whole by the flush. */
    snprintf(text, sizeof text, "lead %.255s", stop);
    r = run_bytes(text, stops, 2);
    EXPECT_STR(r.text, text);
    EXPECT(!r.stopped);
    free(r.text);
}

TEST(random_stops_match_reference)
{
    /* Text over a tiny alphabet so that stops and near-misses are frequent; tokens from
     * the real vocabulary, so several bytes arrive at once. Reference: find the first
     * token after which some stop occurs in the text so far; cut at the earliest start. */
    const char alphabet[] = "ab ";
    int failures = 0;
    for (int iter = 0; iter < 3000; iter++) {
        char text[200], stop_buf[4][8];
        const char *stops[4];
        int len = 1 + (int)rng_below(150), n_stops = 1 + (int)rng_below(4);
        for (int i = 0; i < len; i++)
            text[i] = alphabet[rng_below(3)];
        text[len] = '\0';
        for (int s = 0; s < n_stops; s++) {
            int sl = 1 + (int)rng_below(6);
            for (int i = 0; i < sl; i++)
                stop_buf[s][i] = alphabet[rng_below(3)];
            stop_buf[s][sl] = '\0';
            stops[s] = stop_buf[s];
        }
        int32_t *ids, n;
        CHECK(tokenizer_encode(opt_tok, text, (size_t)len, false, &ids, &n) == 0);
        size_t end = 0, want = (size_t)len;
        bool want_stop = false;
        for (int i = 0; i < n && !want_stop; i++) {
            size_t tl;
            tokenizer_token_bytes(opt_tok, ids[i], &tl);
            end += tl;
            for (int s = 0; s < n_stops; s++) {
                size_t sl = strlen(stops[s]);
                for (size_t p = 0; p + sl <= end; p++) {
                    if (memcmp(text + p, stops[s], sl) == 0) {
                        want = MIN(want, p);
                        want_stop = true;
                        break;
                    }
                }
            }
        }
        struct run r = run_stream(opt_tok, ids, n, stops, n_stops);
        if ((r.len != want || memcmp(r.text, text, want) != 0 || r.stopped != want_stop ||
             r.after_stop || r.offsets_broken) &&
            failures++ < 3)
            TEST_FAIL("\"%s\" with %d stops (first \"%s\"): got \"%s\", expected %zu bytes",
                      text, n_stops, stops[0], r.text, want);
        free(r.text);
        free(ids);
    }
    EXPECT_EQ(failures, 0);
}

TEST(special_tokens_add_no_text)
{
    int32_t ids[] = {2, 31414, 1, 2, 0, 50264, 50270, 232};
    struct run r = run_stream(opt_tok, ids, 8, NULL, 0);
    EXPECT_STR(r.text, "Hello world");
    expect_clean(&r);
    free(r.text);
    /* A zero-filled detok can be deinitialised. */
    struct detok d;
    memset(&d, 0, sizeof d);
    detok_deinit(&d);
}

int main(void)
{
    if (opt_tokenizer_load(&opt_tok)) return 1;
    byte_tok = tokenizer_create_bytes(512);

    RUN(random_streams_equal_decode);
    RUN(multibyte_characters_split_across_tokens);
    RUN(stop_split_across_tokens);
    RUN(held_prefix_released_when_not_a_stop);
    RUN(stop_at_the_first_token);
    RUN(overlapping_stop_strings);
    RUN(earliest_stop_wins);
    RUN(stop_strings_with_multibyte_characters);
    RUN(long_stop_strings);
    RUN(random_stops_match_reference);
    RUN(special_tokens_add_no_text);

    tokenizer_destroy(byte_tok);
    tokenizer_destroy(opt_tok);
    return test_done();
}
