/*
 * test_tokenizer.c - encoding and decoding (engine/text/tokenizer.c) with the OPT
 * (GPT-2 byte-level BPE) tokenizer and the byte tokenizer.
 *
 * The reference is Hugging Face's OPT tokenizer: the shared test vectors must come out
 * id for id. Everything else checks properties that hold for any input: decode undoes
 * encode for arbitrary bytes (NULs and invalid UTF-8 included), long degenerate words
 * encode in linear-ish time, and display strings are valid UTF-8. Reading vocab.json
 * and merges.txt (tokenizer_load.c: hand-made files, broken ones) is
 * test_tokenizer_load.c's.
 */
#include "err.h"
#include "test.h"
#include "opt_tokenizer.h"
#include "tokenizer.h"
#include "util.h"

#include <cJSON.h>

#include <stdint.h>

static struct tokenizer *opt_tok;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint32_t rng_below(uint32_t n)
{
    return (uint32_t)(rng_next() % n);
}

/* decode(encode(text)) must give the same bytes back; report the first failure only. */
static int round_trips(const struct tokenizer *t, const char *text, size_t len)
{
    int32_t *ids;
    int32_t n;
    if (tokenizer_encode(t, text, len, true, &ids, &n) != 0) return 0;
    char *back;
    size_t back_len;
    int ok = n >= 1 && ids[0] == tokenizer_bos(t) &&
             tokenizer_decode(t, ids, n, true, &back, &back_len) == 0;
    if (ok) {
        ok = back_len == len && memcmp(back, text, len) == 0;
        free(back);
    }
    free(ids);
    return ok;
}

static void append_utf8(char *buf, size_t *k, uint32_t cp)
{
    if (cp < 0x80) {
        buf[(*k)++] = (char)cp;
    } else if (cp < 0x800) {
        buf[(*k)++] = (char)(0xC0 | cp >> 6);
        buf[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        buf[(*k)++] = (char)(0xE0 | cp >> 12);
        buf[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        buf[(*k)++] = (char)(0xF0 | cp >> 18);
        buf[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        buf[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[(*k)++] = (char)(0x80 | (cp & 0x3F));
    }
}

/* A code point from a mix of scripts, whitespace, digits, emoji and apostrophes. */
static uint32_t random_code_point(void)
{
    static const uint32_t pool[] = {' ',    ' ',     '\n',    '\t', '\'',   '.',    ',',
                                    '3',    '0',     0xA0,    0x85, 0x3000, 0x2028, 0x200D,
                                    0xFE0F, 0x1F999, 0x1F600, 0xE9, 0x44F,  0x6211, 0x17A2};
    switch (rng_below(4)) {
    case 0: return pool[rng_below(ARRAY_LEN(pool))];
    case 1: return 'a' + rng_below(26);
    case 2: return 0x20 + rng_below(0x5F);
    default: {
        uint32_t cp = 0x80 + rng_below(0x10FFFF - 0x80);
        return (cp >= 0xD800 && cp <= 0xDFFF) ? 'x' : cp;
    }
    }
}

TEST(cases_match_hugging_face)
{
    char *buf;
    size_t len;
    if (util_read_file(test_data("opt-tokenizer/cases.json"), &buf, &len) != 0) {
        TEST_FAIL("%s", err_msg());
        return;
    }
    cJSON *root = cJSON_ParseWithLength(buf, len);
    free(buf);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    EXPECT(cJSON_IsArray(cases) && cJSON_GetArraySize(cases) >= 30);
    const cJSON *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cases)
    {
        const char *text =
            cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "text"));
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(c, "ids");
        int32_t *ids, n;
        EXPECT_EQ(tokenizer_encode(opt_tok, text, strlen(text), true, &ids, &n), 0);
        int same = n == cJSON_GetArraySize(want);
        for (int32_t i = 0; same && i < n; i++)
            same = ids[i] == cJSON_GetArrayItem(want, i)->valueint;
        if (!same) {
            TEST_FAIL("\"%.60s\": %d ids, expected %d", text, n, cJSON_GetArraySize(want));
            for (int32_t i = 0; i < n; i++)
                printf("#  got[%d] = %d\n", i, ids[i]);
        }
        EXPECT(round_trips(opt_tok, text, strlen(text)));
        free(ids);
        n_cases++;
    }
    printf("# %d Hugging Face cases\n", n_cases);
    cJSON_Delete(root);
}

TEST(opt_ids_and_special_tokens)
{
    EXPECT_EQ(tokenizer_vocab_size(opt_tok), 50265);
    EXPECT_EQ(tokenizer_bos(opt_tok), 2);
    EXPECT_EQ(tokenizer_eos(opt_tok), 2);
    EXPECT(tokenizer_is_special(opt_tok, 0) && tokenizer_is_special(opt_tok, 2));
    EXPECT(tokenizer_is_special(opt_tok, 50264)); /* <mask> */
    EXPECT(!tokenizer_is_special(opt_tok, 4) && !tokenizer_is_special(opt_tok, 50265));

    size_t len;
    EXPECT_STR(tokenizer_token_bytes(opt_tok, 2, &len), "");
    EXPECT_EQ(len, 0);
    EXPECT_STR(tokenizer_token_bytes(opt_tok, 20920, &len), " Hello");
    EXPECT_EQ(len, 6);
    EXPECT_STR(tokenizer_token_bytes(opt_tok, 50118, &len), "\n");
    EXPECT_STR(tokenizer_token_bytes(opt_tok, 99999, &len), "");
    EXPECT_STR(tokenizer_token_bytes(opt_tok, -1, &len), "");
    EXPECT_STR(tokenizer_token_str(opt_tok, 2), "</s>");
    EXPECT_STR(tokenizer_token_str(opt_tok, 20920), " Hello");
    EXPECT_STR(tokenizer_token_str(opt_tok, 99999), "");
    /* The vocabulary's own spelling, as convert_ids_to_tokens gives it (POST /tokenize's
     * token_strs): U+0120 for the space, U+010A for the newline. */
    EXPECT_STR(tokenizer_token_name(opt_tok, 20920), "\xC4\xA0Hello");
    EXPECT_STR(tokenizer_token_name(opt_tok, 50118), "\xC4\x8A");
    EXPECT_STR(tokenizer_token_name(opt_tok, 31414), "Hello");
    EXPECT_STR(tokenizer_token_name(opt_tok, 2), "</s>");
    EXPECT_STR(tokenizer_token_name(opt_tok, 50264), "<mask>");
    EXPECT_STR(tokenizer_token_name(opt_tok, 99999), "");
    EXPECT_STR(tokenizer_token_name(opt_tok, -1), "");

    /* Special tokens are names, not text: kept only when asked. */
    int32_t ids[] = {2, 31414, 6, 232, 2};
    char *out;
    EXPECT_EQ(tokenizer_decode(opt_tok, ids, 5, false, &out, &len), 0);
    EXPECT_STR(out, "</s>Hello, world</s>");
    free(out);
    EXPECT_EQ(tokenizer_decode(opt_tok, ids, 5, true, &out, &len), 0);
    EXPECT_STR(out, "Hello, world");
    EXPECT_EQ(len, 12);
    free(out);

    int32_t bad[] = {31414, 50265};
    EXPECT_EQ(tokenizer_decode(opt_tok, bad, 2, true, &out, &len), ENG_EINVAL);
    bad[1] = -3;
    EXPECT_EQ(tokenizer_decode(opt_tok, bad, 2, true, &out, &len), ENG_EINVAL);
    EXPECT_EQ(tokenizer_decode(opt_tok, bad, 0, true, &out, &len), 0);
    EXPECT_EQ(len, 0);
    free(out);
}

TEST(special_strings_in_text_stay_text)
{
    /* A prompt that spells "</s>" must not be able to end itself early. */
    const char *text = "a</s>b<pad><s>";
    int32_t *ids, n;
    EXPECT_EQ(tokenizer_encode(opt_tok, text, strlen(text), false, &ids, &n), 0);
    for (int32_t i = 0; i < n; i++)
        EXPECT(!tokenizer_is_special(opt_tok, ids[i]));
    free(ids);
    EXPECT(round_trips(opt_tok, text, strlen(text)));
    EXPECT_EQ(tokenizer_encode(opt_tok, NULL, 0, false, &ids, &n), 0);
    EXPECT_EQ(n, 0);
    free(ids);
    EXPECT_EQ(tokenizer_encode(opt_tok, NULL, 3, false, &ids, &n), ENG_EINVAL);
}

TEST(unicode_whitespace_is_whitespace)
{
    /* \s is Unicode White_Space, as in GPT-2's regex and Hugging Face's: U+0085, U+00A0,
     * U+2028, U+3000 are spaces; U+001C and U+180E (a space before Unicode 6.3, and
     * still one for PCRE2's own \s) are not. Expected ids from Hugging Face's
     * GPT2TokenizerFast on the same files. */
    static const struct {
        const char *text;
        int32_t n;
        int32_t ids[8];
    } cases[] = {
        {"a \302\205b", 5, {102, 1437, 4056, 5782, 428}},
        {"a  \x1c", 4, {102, 1437, 1437, 50136}},
        {"a\xE1\xA0\x8E's", 6, {102, 1376, 21402, 12736, 108, 29}},
        {"x\xE3\x80\x80\xE3\x80\x80 y", 6, {1178, 48516, 7471, 48516, 7471, 1423}},
        {"\xE2\x80\xA8 \xC2\xA0z\t\t\n",
         8,
         {17, 11423, 1437, 50141, 329, 50117, 50117, 50118}},
        {"I'm 3\xC2\xBD ok\xE2\x80\x89!", 8, {100, 437, 155, 14989, 15983, 17, 23171, 328}},
    };
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        int32_t *ids, n;
        EXPECT_EQ(tokenizer_encode(opt_tok, cases[c].text, strlen(cases[c].text), false,
                                   &ids, &n),
                  0);
        int same = n == cases[c].n;
        for (int32_t i = 0; same && i < n; i++)
            same = ids[i] == cases[c].ids[i];
        if (!same) TEST_FAIL("case %zu: wrong ids (%d of them)", c, n);
        free(ids);
    }
}

TEST(round_trip_random_bytes)
{
    /* Short strings of raw bytes with UTF-8 fragments, invalid bytes and NULs. */
    char buf[512];
    int failures = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = rng_below(200);
        for (size_t i = 0; i < len; i++) {
            uint32_t r = rng_below(10);
            buf[i] = r < 4   ? (char)(' ' + rng_below(95))
                     : r < 5 ? ' '
                     : r < 6 ? '\0'
                     : r < 8 ? (char)(0x80 + rng_below(0x40))
                             : (char)(0xC0 + rng_below(0x40));
        }
        if (!round_trips(opt_tok, buf, len) && failures++ < 3)
            TEST_FAIL("random bytes #%d (len %zu) do not round-trip", iter, len);
    }
    EXPECT_EQ(failures, 0);
}

TEST(round_trip_random_text)
{
    char buf[2048];
    int failures = 0;
    for (int iter = 0; iter < 2000; iter++) {
        size_t k = 0, n_cp = rng_below(300);
        for (size_t i = 0; i < n_cp; i++)
            append_utf8(buf, &k, random_code_point());
        if (!round_trips(opt_tok, buf, k) && failures++ < 3)
            TEST_FAIL("random text #%d (len %zu) does not round-trip", iter, k);
    }
    EXPECT_EQ(failures, 0);
}

TEST(long_degenerate_words)
{
    /* One word of 200k letters, 200k spaces and 200k invalid bytes: the merge heap keeps
     * each linear-ish; a quadratic BPE would take minutes. */
    size_t len = 200000;
    char *buf = xmalloc(len);
    const char fill[] = {'a', ' ', '\xff', '\n'};
    for (size_t f = 0; f < ARRAY_LEN(fill); f++) {
        memset(buf, fill[f], len);
        double t0 = time_now();
        EXPECT(round_trips(opt_tok, buf, len));
        double dt = time_now() - t0;
        printf("# 200k x 0x%02x: %.3f s\n", (unsigned char)fill[f], dt);
        EXPECT(dt < 10);
    }
    /* Many tokens from one word: "333..." merges into 3-digit groups. */
    memset(buf, '3', 9);
    int32_t *ids, n;
    EXPECT_EQ(tokenizer_encode(opt_tok, buf, 9, false, &ids, &n), 0);
    EXPECT_EQ(n, 3);
    free(ids);
    free(buf);
}

/* About 1 MB of English-like text with punctuation, numbers and line breaks. */
static char *make_prose(size_t want, size_t *len)
{
    static const char *const words[] = {
        "the",        "of",        "and",       "to",    "in",     "is",     "that",
        "it",         "was",       "for",       "on",    "are",    "with",   "as",
        "I",          "his",       "they",      "be",    "at",     "one",    "have",
        "this",       "from",      "attention", "heavy", "hitter", "oracle", "cache",
        "throughput", "tokenizer", "don't",     "we're", "Hello",  "World",  "2023",
        "3.14",       "naïve",     "café",      "Zürich"};
    char *buf = xmalloc(want + 64);
    size_t k = 0;
    while (k < want) {
        const char *w = words[rng_below(ARRAY_LEN(words))];
        size_t n = strlen(w);
        memcpy(buf + k, w, n);
        k += n;
        uint32_t r = rng_below(20);
        const char *sep = r == 0 ? ". " : r == 1 ? ", " : r == 2 ? ".\n\n" : " ";
        memcpy(buf + k, sep, strlen(sep));
        k += strlen(sep);
    }
    *len = k;
    return buf;
}

TEST(encode_speed)
{
    size_t len;
    char *text = make_prose(1 << 20, &len);
    int32_t *ids, n;
    double t0 = time_now();
    EXPECT_EQ(tokenizer_encode(opt_tok, text, len, false, &ids, &n), 0);
    double dt = time_now() - t0;
    printf("# encode: %.2f MB in %.3f s = %.1f MB/s, %d tokens (%.0f tokens/s)\n",
           (double)len / 1e6, dt, (double)len / 1e6 / dt, n, n / dt);
    char *back;
    size_t back_len;
    t0 = time_now();
    EXPECT_EQ(tokenizer_decode(opt_tok, ids, n, true, &back, &back_len), 0);
    printf("# decode: %.1f MB/s\n", (double)len / 1e6 / (time_now() - t0));
    EXPECT(back_len == len && memcmp(back, text, len) == 0);
    free(back);
    free(ids);
    free(text);
}

TEST(token_str_is_valid_utf8)
{
    /* Tokens that hold part of a character ("我" is two tokens) show U+FFFD. */
    int n_partial = 0;
    for (int32_t id = 0; id < tokenizer_vocab_size(opt_tok); id++) {
        const unsigned char *s = (const unsigned char *)tokenizer_token_str(opt_tok, id);
        size_t n = strlen((const char *)s), len;
        for (size_t i = 0; i < n; i += len) {
            if (tokenizer_utf8_next(s + i, n - i, &len) != TOKENIZER_UTF8_CHAR) {
                TEST_FAIL("token %d's display string is not valid UTF-8", id);
                return;
            }
        }
        n_partial += strstr((const char *)s, "\xEF\xBF\xBD") != NULL;
    }
    EXPECT(n_partial > 100);
    int32_t *ids, n;
    EXPECT_EQ(tokenizer_encode(opt_tok, "\xE6\x88\x91", 3, false, &ids, &n), 0);
    EXPECT_EQ(n, 2);
    EXPECT_EQ(ids[0], 47876);
    EXPECT_STR(tokenizer_token_str(opt_tok, ids[0]), "\xEF\xBF\xBD");
    EXPECT_STR(tokenizer_token_str(opt_tok, ids[1]), "\xEF\xBF\xBD");
    free(ids);
}

TEST(utf8_maximal_subparts)
{
    /* The example of Unicode 15, section 3.9 (U+FFFD substitution of maximal subparts):
     * 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d. */
    const unsigned char s[] = {0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2,
                               0x62, 0x80, 0x63, 0x80, 0xBF, 0x64};
    const size_t want_len[] = {1, 3, 2, 1, 1, 1, 1, 1, 1, 1};
    const int want_char[] = {1, 0, 0, 0, 1, 0, 1, 0, 0, 1};
    size_t i = 0, k = 0, len;
    while (i < sizeof s && k < ARRAY_LEN(want_len)) {
        enum tokenizer_utf8 kind = tokenizer_utf8_next(s + i, sizeof s - i, &len);
        EXPECT_EQ(len, want_len[k]);
        EXPECT_EQ(kind == TOKENIZER_UTF8_CHAR, want_char[k]);
        i += len;
        k++;
    }
    EXPECT_EQ(i, sizeof s);
    /* Overlong, surrogate and beyond-U+10FFFF forms break at their second byte. */
    EXPECT_EQ(tokenizer_utf8_next((const unsigned char *)"\xE0\x80\x80", 3, &len),
              TOKENIZER_UTF8_INVALID);
    EXPECT_EQ(len, 1);
    EXPECT_EQ(tokenizer_utf8_next((const unsigned char *)"\xED\xA0\x80", 3, &len),
              TOKENIZER_UTF8_INVALID);
    EXPECT_EQ(tokenizer_utf8_next((const unsigned char *)"\xF4\x90\x80\x80", 4, &len),
              TOKENIZER_UTF8_INVALID);
    EXPECT_EQ(tokenizer_utf8_next((const unsigned char *)"\xF0\x9F\x98", 3, &len),
              TOKENIZER_UTF8_INCOMPLETE);
    EXPECT_EQ(len, 3);
    EXPECT_EQ(tokenizer_utf8_next((const unsigned char *)"\xF0\x9F\x98\x81", 4, &len),
              TOKENIZER_UTF8_CHAR);
    EXPECT_EQ(len, 4);
}

TEST(byte_tokenizer)
{
    EXPECT(tokenizer_create_bytes(259) == NULL);
    struct tokenizer *t = tokenizer_create_bytes(50272);
    EXPECT_EQ(tokenizer_vocab_size(t), 50272);
    EXPECT_EQ(tokenizer_bos(t), 2);
    EXPECT_EQ(tokenizer_eos(t), 2);
    const char text[] = "h\0\xff\xc3\xa9 z";
    int32_t *ids, n;
    EXPECT_EQ(tokenizer_encode(t, text, sizeof text - 1, true, &ids, &n), 0);
    EXPECT_EQ(n, 8);
    EXPECT_EQ(ids[0], 2);
    EXPECT_EQ(ids[1], 4 + 'h');
    EXPECT_EQ(ids[2], 4);
    EXPECT_EQ(ids[3], 4 + 0xff);
    free(ids);
    EXPECT(round_trips(t, text, sizeof text - 1));
    char buf[256];
    for (int i = 0; i < 256; i++)
        buf[i] = (char)i;
    EXPECT(round_trips(t, buf, 256));

    size_t len;
    EXPECT_STR(tokenizer_token_bytes(t, 4 + 'A', &len), "A");
    EXPECT_EQ(len, 1);
    EXPECT_STR(tokenizer_token_bytes(t, 2, &len), "");
    /* Ids past the bytes decode to made-up words: a space and 2..5 lowercase letters,
     * so that a dummy model's output is visible. */
    for (int32_t id = 260; id < 50272; id += 997) {
        const char *w = tokenizer_token_bytes(t, id, &len);
        EXPECT(len >= 3 && len <= 6 && w[0] == ' ');
        for (size_t k = 1; k < len; k++) EXPECT(w[k] >= 'a' && w[k] <= 'z');
    }
    EXPECT_STR(tokenizer_token_str(t, 2), "</s>");
    EXPECT_STR(tokenizer_token_str(t, 4 + 0xC3), "\xEF\xBF\xBD");
    /* Bytes have no vocabulary string: their name is their display string. */
    EXPECT_STR(tokenizer_token_name(t, 2), "</s>");
    EXPECT_STR(tokenizer_token_name(t, 4 + 'A'), "A");
    EXPECT_STR(tokenizer_token_name(t, 4 + 0xC3), "\xEF\xBF\xBD");
    EXPECT_STR(tokenizer_token_name(t, 300), tokenizer_token_str(t, 300));
    EXPECT_STR(tokenizer_token_name(t, 50272), "");
    int32_t some[] = {0, 4 + 'o', 4 + 'k', 3};
    char *out;
    EXPECT_EQ(tokenizer_decode(t, some, 4, false, &out, &len), 0);
    EXPECT_STR(out, "<s>ok<unk>");
    free(out);
    EXPECT_EQ(tokenizer_decode(t, some, 4, true, &out, &len), 0);
    EXPECT_STR(out, "ok");
    free(out);
    some[0] = 50272;
    EXPECT_EQ(tokenizer_decode(t, some, 4, true, &out, &len), ENG_EINVAL);
    tokenizer_destroy(t);
}

int main(void)
{
    double t0 = time_now();
    if (opt_tokenizer_load(&opt_tok)) return 1;
    printf("# OPT tokenizer loaded in %.3f s\n", time_now() - t0);

    RUN(cases_match_hugging_face);
    RUN(opt_ids_and_special_tokens);
    RUN(special_strings_in_text_stay_text);
    RUN(unicode_whitespace_is_whitespace);
    RUN(round_trip_random_bytes);
    RUN(round_trip_random_text);
    RUN(long_degenerate_words);
    RUN(encode_speed);
    RUN(token_str_is_valid_utf8);
    RUN(utf8_maximal_subparts);
    RUN(byte_tokenizer);

    tokenizer_destroy(opt_tok);
    return test_done();
}
