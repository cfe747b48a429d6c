/*
 * test_tokenizer_json.c - tokenizers from tokenizer.json folders
 * (engine/text/tokenizer_json.c, encoded by engine/text/tokenizer.c) against the ids
 * Hugging Face's `tokenizers` gives.
 *
 * tests/data/tokenizers/ holds four tiny trained tokenizers configured like Llama 3,
 * Qwen2, GPT-NeoX and Llama 2 (SentencePiece BPE with byte fallback), 2000 strings and
 * the ids tokenizers 0.23.3 gives for each (README.md there; make_tokenizers.py made
 * them). Every string's ids must be identical, with special strings as text and, where
 * the string has a '<', with specials parsed; decode must give the (NFC-normalized) text
 * back. Then: invalid UTF-8 encodes and round-trips, a prompt never yields a special
 * id, the EOS / BOS rules of the config files, the per-token lookups, the incremental
 * detokenizer over byte-fallback tokens, and the loader's refusals.
 */
#include "detok.h"
#include "err.h"
#include "test.h"
#include "tokenizer.h"
#include "util.h"

#include "rnd.h"

#include <cJSON.h>
#include <utf8proc.h>

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static char **texts;
static size_t n_texts;

static void load_texts(void)
{
    char *buf;
    size_t len;
    CHECK(util_read_file(test_data("tokenizers/texts.jsonl"), &buf, &len) == 0);
    for (char *line = buf; line < buf + len;) {
        char *nl = memchr(line, '\n', (size_t)(buf + len - line));
        CHECK(nl);
        cJSON *s = cJSON_ParseWithLength(line, (size_t)(nl - line));
        CHECK(cJSON_IsString(s));
        texts = xrealloc(texts, (n_texts + 1) * sizeof *texts);
        texts[n_texts++] = xstrdup(s->valuestring);
        cJSON_Delete(s);
        line = nl + 1;
    }
    free(buf);
}

static struct tokenizer *load_kind(const char *kind)
{
    char rel[64];
    snprintf(rel, sizeof rel, "tokenizers/%s", kind);
    struct tokenizer *t = NULL;
    int err = tokenizer_load_dir(&t, test_data(rel));
    if (err) TEST_FAIL("%s: %s", kind, err_msg());
    return t;
}

/* NFC of valid UTF-8 (what the NFC normalizer makes of the text before anything). */
static char *nfc(const char *s)
{
    return (char *)utf8proc_NFC((const utf8proc_uint8_t *)s);
}

/* How a kind's decoder changes plain text that went through encode. */
enum rt {
    RT_EXACT,      /* decode(encode(s)) == s (after NFC where the kind has it) */
    RT_PREFIX,     /* ByteLevel(add_prefix_space): " " + s unless s starts with one */
    RT_META,       /* Metaspace: s less one leading space */
    RT_META_NAMES, /* and a Metaspace decoder prints <0xXX> as their names */
};

/* What Hugging Face's decode gives back for s[0..n) (valid UTF-8 and NFC already), and
 * its length in *len. */
static char *round_trip(enum rt rt, const char *s, size_t n, size_t *len)
{
    char *out = xmalloc(n + 2);
    if (rt == RT_PREFIX && n && s[0] != ' ') {
        out[0] = ' ';
        memcpy(out + 1, s, n + 1);
        *len = n + 1;
    } else if ((rt == RT_META || rt == RT_META_NAMES) && n && s[0] == ' ') {
        memcpy(out, s + 1, n);
        *len = n - 1;
    } else {
        memcpy(out, s, n + 1);
        *len = n;
    }
    return out;
}

/* Whether any id is a <0xXX> byte token. */
static bool has_byte_token(const struct tokenizer *t, const int32_t *ids, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        if (strncmp(tokenizer_token_name(t, ids[i]), "<0x", 3) == 0) return true;
    return false;
}

/*
 * Every string against the recorded ids, and the decode round trip. Returns the number
 * of strings checked.
 */
static size_t check_kind(const char *kind, bool has_nfc, enum rt rt)
{
    struct tokenizer *t = load_kind(kind);
    if (!t) return 0;
    char rel[64];
    snprintf(rel, sizeof rel, "tokenizers/%s/ids.bin", kind);
    char *bin;
    size_t bin_len, at = 0;
    CHECK(util_read_file(test_data(rel), &bin, &bin_len) == 0);
    const unsigned char *u = (const unsigned char *)bin;
    int bad = 0, bad_rt = 0;
    size_t i = 0;
    for (; i < n_texts && at < bin_len; i++) { /* a variant's ids cover a prefix */
        const char *s = texts[i];
        for (int mode = 0; mode < (strchr(s, '<') ? 2 : 1); mode++) {
            CHECK(at + 2 <= bin_len);
            size_t n = (size_t)(u[at] | u[at + 1] << 8);
            at += 2;
            CHECK(at + 2 * n <= bin_len);
            int32_t *ids, n_ids;
            unsigned flags = TOKENIZER_ENCODE_BOS | (mode ? TOKENIZER_ENCODE_SPECIAL : 0);
            CHECK(tokenizer_encode_flags(t, s, strlen(s), flags, &ids, &n_ids) == 0);
            bool same = (size_t)n_ids == n;
            for (size_t k = 0; same && k < n; k++)
                same = ids[k] == (int32_t)(u[at + 2 * k] | u[at + 2 * k + 1] << 8);
            if (!same && bad++ < 5) {
                TEST_FAIL("%s string %zu (mode %d) \"%.60s\": %d ids, expected %zu", kind,
                          i, mode, s, n_ids, n);
                for (size_t k = 0; k < MAX((size_t)n_ids, n) && k < 40; k++)
                    printf("#   [%zu] %d %d\n", k, k < (size_t)n_ids ? ids[k] : -1,
                           k < n ? u[at + 2 * k] | u[at + 2 * k + 1] << 8 : -1);
            }
            at += 2 * n;
            if (mode == 0) {
                char *out;
                size_t out_len;
                CHECK(tokenizer_decode(t, ids, n_ids, true, &out, &out_len) == 0);
                char *norm = has_nfc ? nfc(s) : xstrdup(s);
                size_t want_len;
                char *want = round_trip(rt, norm, strlen(norm), &want_len);
                free(norm);
                bool skip = rt == RT_META_NAMES && has_byte_token(t, ids, n_ids);
                if (!skip && (out_len != want_len || memcmp(out, want, out_len) != 0) &&
                    bad_rt++ < 5)
                    TEST_FAIL("%s string %zu \"%.60s\" decodes to \"%.60s\"", kind, i, s,
                              out);
                /* A prompt cannot forge a special token: plain text never gives one
                 * (the first id is the BOS the template adds). */
                for (int32_t k =
                         tokenizer_bos(t) >= 0 && n_ids && ids[0] == tokenizer_bos(t);
                     k < n_ids; k++)
                    if (tokenizer_is_special(t, ids[k]) && bad++ < 5)
                        TEST_FAIL("%s string %zu: special id %d from plain text", kind, i,
                                  ids[k]);
                free(want);
                free(out);
            }
            free(ids);
        }
    }
    EXPECT_EQ(at, bin_len);
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(bad_rt, 0);
    free(bin);
    tokenizer_destroy(t);
    printf("# %s: %zu strings, %d differ from tokenizers 0.23.3\n", kind, i, bad);
    return i;
}

TEST(llama3_matches_hugging_face)
{
    EXPECT_EQ(check_kind("llama3", false, RT_EXACT), n_texts);
}

TEST(qwen2_matches_hugging_face)
{
    EXPECT_EQ(check_kind("qwen2", true, RT_EXACT), n_texts);
}

TEST(neox_matches_hugging_face)
{
    EXPECT_EQ(check_kind("neox", true, RT_EXACT), n_texts);
}

TEST(llama2_matches_hugging_face)
{
    EXPECT_EQ(check_kind("llama2", false, RT_EXACT), n_texts);
}

TEST(llama2_metaspace_matches_hugging_face)
{
    EXPECT_EQ(check_kind("llama2-metaspace", false, RT_META), 600);
}

TEST(llama2_metaspace_old_matches_hugging_face)
{
    EXPECT_EQ(check_kind("llama2-metaspace-old", false, RT_META_NAMES), 400);
}

TEST(neox_prefix_space_matches_hugging_face)
{
    EXPECT_EQ(check_kind("neox-prefix", true, RT_PREFIX), 600);
}

TEST(invalid_utf8_round_trips)
{
    /* Bytes that never form a multi-byte character (ASCII with NUL and controls, lone
     * continuation bytes, bytes that start nothing, a truncated sequence at the end),
     * so NFC leaves the text alone and decode must give back exactly the bytes (as each
     * kind's decoder changes plain text). Hugging Face cannot see such text. */
    static const char *const kinds[] = {
        "llama3",     "qwen2", "neox", "llama2", "llama2-metaspace", "llama2-metaspace-old",
        "neox-prefix"};
    static const enum rt rts[] = {RT_EXACT, RT_EXACT,      RT_EXACT, RT_EXACT,
                                  RT_META,  RT_META_NAMES, RT_PREFIX};
    uint64_t r = 19;
    for (size_t ki = 0; ki < ARRAY_LEN(kinds); ki++) {
        struct tokenizer *t = load_kind(kinds[ki]);
        if (!t) continue;
        int bad = 0;
        for (int iter = 0; iter < 300; iter++) {
            char s[65];
            size_t n = 1 + (size_t)lcg_below(&r, 64);
            for (size_t i = 0; i < n; i++) {
                int32_t c = lcg_below(&r, 6);
                s[i] = (char)(c == 0   ? 0x80 + lcg_below(&r, 0x40)
                              : c == 1 ? 0xF5 + lcg_below(&r, 11)
                              : c == 2 ? 0xC0 + lcg_below(&r, 2)
                              : c == 3 ? lcg_below(&r, 0x20) /* NUL and controls */
                                       : 0x20 + lcg_below(&r, 0x5F));
            }
            int32_t *ids, n_ids;
            CHECK(tokenizer_encode_flags(t, s, n, TOKENIZER_ENCODE_SPECIAL, &ids, &n_ids) ==
                  0);
            char *out;
            size_t out_len;
            CHECK(tokenizer_decode(t, ids, n_ids, true, &out, &out_len) == 0);
            s[n] = '\0';
            size_t want_len;
            char *want = round_trip(rts[ki], s, n, &want_len);
            bool skip = rts[ki] == RT_META_NAMES && has_byte_token(t, ids, n_ids);
            if (!skip && (out_len != want_len || memcmp(out, want, out_len) != 0) &&
                bad++ < 3)
                TEST_FAIL("%s: %zu random bytes come back as %zu", kinds[ki], n, out_len);
            free(want);
            free(out);
            free(ids);
        }
        tokenizer_destroy(t);
    }
}

TEST(eos_and_bos_from_the_config_files)
{
    /* llama3: generation_config's three EOS ids, then tokenizer_config's eos_token
     * (<|eot_id|>, already among them); the template adds <|begin_of_text|>. */
    struct tokenizer *t = load_kind("llama3");
    if (t) {
        int32_t n;
        const int32_t *eos = tokenizer_eos_ids(t, &n);
        EXPECT_EQ(n, 3);
        const char *names[] = {"<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"};
        for (int32_t i = 0; i < 3 && i < n; i++) {
            EXPECT_STR(tokenizer_token_name(t, eos[i]), names[i]);
            EXPECT(tokenizer_is_eos(t, eos[i]));
            EXPECT(tokenizer_is_special(t, eos[i]));
        }
        EXPECT_EQ(tokenizer_eos(t), eos[0]);
        EXPECT_STR(tokenizer_token_name(t, tokenizer_bos(t)), "<|begin_of_text|>");
        EXPECT(!tokenizer_is_eos(t, tokenizer_bos(t)));
        int32_t *ids, n_ids;
        CHECK(tokenizer_encode(t, "Hi", 2, true, &ids, &n_ids) == 0);
        EXPECT(n_ids >= 2 && ids[0] == tokenizer_bos(t));
        free(ids);
        /* Special strings parse only when asked. */
        const char *chat = "<|start_header_id|>user<|end_header_id|>";
        CHECK(tokenizer_encode_flags(t, chat, strlen(chat), TOKENIZER_ENCODE_SPECIAL, &ids,
                                     &n_ids) == 0);
        EXPECT(n_ids >= 3);
        EXPECT_STR(tokenizer_token_name(t, ids[0]), "<|start_header_id|>");
        EXPECT_STR(tokenizer_token_name(t, ids[n_ids - 1]), "<|end_header_id|>");
        for (int32_t i = 1; i + 1 < n_ids; i++)
            EXPECT(!tokenizer_is_special(t, ids[i]));
        free(ids);
        tokenizer_destroy(t);
    }
    /* qwen2: no BOS added (add_bos_token false), bos_token_id still known; two EOS. */
    t = load_kind("qwen2");
    if (t) {
        int32_t *ids, n_ids, n;
        CHECK(tokenizer_encode(t, "Hi", 2, true, &ids, &n_ids) == 0);
        EXPECT(n_ids >= 1 && !tokenizer_is_special(t, ids[0]));
        free(ids);
        const int32_t *eos = tokenizer_eos_ids(t, &n);
        EXPECT_EQ(n, 2);
        if (n == 2) {
            EXPECT_STR(tokenizer_token_name(t, eos[0]), "<|im_end|>");
            EXPECT_STR(tokenizer_token_name(t, eos[1]), "<|endoftext|>");
        }
        EXPECT_STR(tokenizer_token_name(t, tokenizer_bos(t)), "<|endoftext|>");
        tokenizer_destroy(t);
    }
    /* llama2: <s> = 1 first, </s> = 2 ends. */
    t = load_kind("llama2");
    if (t) {
        EXPECT_EQ(tokenizer_bos(t), 1);
        EXPECT_EQ(tokenizer_eos(t), 2);
        int32_t n;
        tokenizer_eos_ids(t, &n);
        EXPECT_EQ(n, 1);
        tokenizer_destroy(t);
    }
}

TEST(token_lookups)
{
    struct tokenizer *t = load_kind("llama2");
    if (t) {
        /* A byte-fallback token is its byte; a "▁" token starts with a space. */
        int32_t *ids, n_ids;
        /* U+1F916 is not in the training set: four byte tokens. */
        CHECK(tokenizer_encode(t, "\xF0\x9F\xA4\x96 the", 8, false, &ids, &n_ids) == 0);
        EXPECT(n_ids >= 6);
        size_t len;
        const char *b = tokenizer_token_bytes(t, ids[0], &len);
        EXPECT_STR(tokenizer_token_name(t, ids[0]), "\xE2\x96\x81"); /* Prepend's "▁" */
        EXPECT(len == 1 && b[0] == ' ');
        b = tokenizer_token_bytes(t, ids[1], &len);
        EXPECT_STR(tokenizer_token_name(t, ids[1]), "<0xF0>");
        EXPECT(len == 1 && (unsigned char)b[0] == 0xF0);
        EXPECT_STR(tokenizer_token_str(t, ids[1]), "\xEF\xBF\xBD"); /* alone: U+FFFD */
        EXPECT_STR(tokenizer_token_str(t, ids[n_ids - 1]), " the");
        EXPECT_STR(tokenizer_token_name(t, ids[n_ids - 1]), "\xE2\x96\x81the");
        free(ids);
        /* Hugging Face's decode strips the leading space of the whole output only. */
        char *out;
        CHECK(tokenizer_encode(t, "a b", 3, true, &ids, &n_ids) == 0);
        CHECK(tokenizer_decode(t, ids, n_ids, true, &out, &len) == 0);
        EXPECT_STR(out, "a b");
        free(out);
        CHECK(tokenizer_decode(t, ids, n_ids, false, &out, &len) == 0);
        EXPECT_STR(out, "<s> a b");
        free(out);
        free(ids);
        tokenizer_destroy(t);
    }
    t = load_kind("llama3");
    if (t) {
        int32_t *ids, n_ids;
        CHECK(tokenizer_encode(t, " the", 4, false, &ids, &n_ids) == 0);
        EXPECT_EQ(n_ids, 1);
        EXPECT_STR(tokenizer_token_name(t, ids[0]), "\xC4\xA0the"); /* "Ġthe" */
        EXPECT_STR(tokenizer_token_str(t, ids[0]), " the");
        free(ids);
        tokenizer_destroy(t);
    }
}

TEST(detok_over_byte_fallback)
{
    /* Generated tokens continue a prompt, so the detokenizer keeps the "▁" of the first
     * one as a space (the Strip of a whole decode is not applied), and an emoji spelled
     * by four <0xXX> tokens comes out once, whole. */
    struct tokenizer *t = load_kind("llama2");
    if (!t) return;
    const char *text = "Hi \xF0\x9F\xA4\x96 ok"; /* U+1F916, not in the training set */
    int32_t *ids, n_ids;
    CHECK(tokenizer_encode(t, text, strlen(text), false, &ids, &n_ids) == 0);
    struct detok d;
    detok_init(&d, t, NULL, 0);
    char got[64] = "";
    size_t k = 0;
    for (int32_t i = 0; i < n_ids; i++) {
        char *delta;
        size_t len;
        bool stopped;
        detok_push(&d, ids[i], &delta, &len, &stopped);
        CHECK(k + len < sizeof got);
        memcpy(got + k, delta, len);
        k += len;
    }
    got[k] = '\0';
    EXPECT_STR(got, " Hi \xF0\x9F\xA4\x96 ok");
    detok_deinit(&d);
    free(ids);
    tokenizer_destroy(t);
}

TEST(folder_without_tokenizer_json_is_opt)
{
    /* vocab.json + merges.txt and no config files: OPT's tokenizer as tokenizer_load
     * makes it, </s> = 2 the BOS and the one EOS; special strings stay text. */
    struct tokenizer *t = NULL;
    if (tokenizer_load_dir(&t, test_data("opt-tokenizer"))) {
        TEST_FAIL("opt-tokenizer: %s", err_msg());
        return;
    }
    EXPECT_EQ(tokenizer_bos(t), 2);
    int32_t n;
    const int32_t *eos = tokenizer_eos_ids(t, &n);
    EXPECT(n == 1 && eos[0] == 2);
    int32_t *ids, n_ids;
    const char *text = "Hello</s> world";
    CHECK(tokenizer_encode_flags(t, text, strlen(text),
                                 TOKENIZER_ENCODE_BOS | TOKENIZER_ENCODE_SPECIAL, &ids,
                                 &n_ids) == 0);
    EXPECT(n_ids > 3 && ids[0] == 2);
    for (int32_t i = 1; i < n_ids; i++)
        EXPECT(ids[i] != 2);
    free(ids);
    tokenizer_destroy(t);

    /* The built-in model's folder, with its tokenizer_config.json (bos_token and
     * eos_token "</s>", add_bos_token): the same rules, nothing refused. */
    t = NULL;
    if (tokenizer_load_dir(&t, test_data("../../models/default"))) {
        TEST_FAIL("models/default: %s", err_msg());
        return;
    }
    EXPECT_EQ(tokenizer_bos(t), 2);
    eos = tokenizer_eos_ids(t, &n);
    EXPECT(n == 1 && eos[0] == 2);
    CHECK(tokenizer_encode(t, "Hi", 2, true, &ids, &n_ids) == 0);
    EXPECT(n_ids >= 2 && ids[0] == 2);
    free(ids);
    tokenizer_destroy(t);
}

TEST(encode_speed)
{
    /* All the strings, over and over, to a megabyte: one text with every kind of
     * piece. SentencePiece BPE has no pre-tokenizer, so each piece between special
     * tokens is a single word of up to a megabyte; the heap keeps that O(n log n). */
    static const char *const kinds[] = {"llama3", "llama2"};
    size_t len = 0, cap = (1 << 20) + 4096;
    char *text = xmalloc(cap);
    for (size_t i = 0; len < (1 << 20); i = (i + 1) % n_texts) {
        size_t n = strlen(texts[i]);
        memcpy(text + len, texts[i], n);
        len += n;
    }
    for (size_t ki = 0; ki < ARRAY_LEN(kinds); ki++) {
        struct tokenizer *t = load_kind(kinds[ki]);
        if (!t) continue;
        int32_t *ids, n;
        double t0 = time_now();
        EXPECT_EQ(tokenizer_encode(t, text, len, false, &ids, &n), 0);
        double dt = time_now() - t0;
        printf("# %s encode: %.2f MB in %.3f s = %.1f MB/s, %d tokens\n", kinds[ki],
               (double)len / 1e6, dt, (double)len / 1e6 / dt, n);
        char *back;
        size_t back_len;
        EXPECT_EQ(tokenizer_decode(t, ids, n, true, &back, &back_len), 0);
        EXPECT(back_len == len && memcmp(back, text, len) == 0);
        free(back);
        free(ids);
        tokenizer_destroy(t);
    }
    free(text);
}

/* ---- the loader's refusals ---- */

static char tmp_dir[64];

static void write_tmp(const char *name, const char *body)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f);
    fputs(body, f);
    fclose(f);
}

static void rm_tmp(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    unlink(path);
}

#define SP_DECODER                                                                         \
    "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"  \
    "\"\xE2\x96\x81\"},\"content\":\" "                                                    \
    "\"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"                                 \
    "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}"

/* A small SentencePiece-style tokenizer.json with one part replaced. */
static void write_json(const char *model_extra, const char *normalizer, const char *pre,
                       const char *decoder, const char *added)
{
    char body[4096];
    snprintf(body, sizeof body,
             "{\"version\":\"1.0\",\"added_tokens\":%s,\"normalizer\":%s,"
             "\"pre_tokenizer\":%s,\"post_processor\":null,\"decoder\":%s,"
             "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"byte_fallback\":true,"
             "\"vocab\":{\"<unk>\":0,\"a\":1,\"b\":2,\"ab\":3,\"\xE2\x96\x81\":4}"
             ",\"merges\":[\"a b\"]%s}}",
             added, normalizer, pre, decoder, model_extra);
    write_tmp("tokenizer.json", body);
}

static void expect_refused(int want, const char *needle)
{
    struct tokenizer *t = NULL;
    int err = tokenizer_load_dir(&t, tmp_dir);
    EXPECT_EQ(err, want);
    EXPECT(!t);
    if (err && !strstr(err_msg(), needle))
        TEST_FAIL("message \"%s\" does not name \"%s\"", err_msg(), needle);
    tokenizer_destroy(t);
}

TEST(loader_refusals)
{
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/test_tokenizer_json.XXXXXX");
    CHECK(mkdtemp(tmp_dir));
    expect_refused(ENG_ENOTFOUND, "no tokenizer.json");

    /* The base file loads: "ab" is one token, an unknown byte falls back to <unk>. */
    write_json("", "null", "null", SP_DECODER, "[]");
    struct tokenizer *t = NULL;
    if (tokenizer_load_dir(&t, tmp_dir)) TEST_FAIL("base: %s", err_msg());
    if (t) {
        int32_t *ids, n_ids;
        CHECK(tokenizer_encode(t, "abz", 3, true, &ids, &n_ids) == 0);
        EXPECT_EQ(n_ids, 2);
        EXPECT_EQ(ids[0], 3);
        EXPECT_EQ(ids[n_ids - 1], 0);
        free(ids);
        tokenizer_destroy(t);
    }

    /* Metaspace's split makes every "▁" start a word, wherever it is: "a b" is "a" and
     * "▁b", though the merge "a" + "▁" ranks first. */
    write_tmp(
        "tokenizer.json",
        "{\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xE2\x96\x81\","
        "\"prepend_scheme\":\"never\",\"split\":true},\"decoder\":{\"type\":"
        "\"Metaspace\",\"replacement\":\"\xE2\x96\x81\",\"prepend_scheme\":\"never\"},"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"\xE2\x96\x81\":2,"
        "\"a\xE2\x96\x81\":3,\"\xE2\x96\x81\x62\":4},\"merges\":[[\"a\",\"\xE2\x96\x81\"],"
        "[\"\xE2\x96\x81\",\"b\"]]}}");
    t = NULL;
    if (tokenizer_load_dir(&t, tmp_dir)) TEST_FAIL("metaspace: %s", err_msg());
    if (t) {
        int32_t *ids, n_ids;
        CHECK(tokenizer_encode(t, "a b", 3, true, &ids, &n_ids) == 0);
        EXPECT_EQ(n_ids, 2);
        EXPECT_EQ(ids[0], 0);
        EXPECT_EQ(ids[n_ids - 1], 4);
        free(ids);
        tokenizer_destroy(t);
    }

    write_tmp("tokenizer.json", "{\"model\": {\"type\": \"BPE\", ");
    expect_refused(ENG_EFORMAT, "not valid JSON");
    write_tmp("tokenizer.json", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}");
    expect_refused(ENG_EFORMAT, "model WordPiece");
    write_tmp("tokenizer.json", "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}");
    expect_refused(ENG_EFORMAT, "model Unigram");
    write_json("", "{\"type\":\"NFKC\"}", "null", SP_DECODER, "[]");
    expect_refused(ENG_EFORMAT, "normalizer NFKC");
    write_json("",
               "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},"
               "{\"type\":\"Lowercase\"}]}",
               "null", SP_DECODER, "[]");
    expect_refused(ENG_EFORMAT, "normalizer Lowercase");
    write_json("", "null", "{\"type\":\"Digits\",\"individual_digits\":true}", SP_DECODER,
               "[]");
    expect_refused(ENG_EFORMAT, "pre_tokenizer Digits");
    write_json("", "null", "null", "{\"type\":\"WordPiece\"}", "[]");
    expect_refused(ENG_EFORMAT, "decoder (SentencePiece) WordPiece");
    write_json(",\"continuing_subword_prefix\":\"##\"", "null", "null", SP_DECODER, "[]");
    expect_refused(ENG_EFORMAT, "continuing_subword_prefix");
    write_json(",\"dropout\":0.1", "null", "null", SP_DECODER, "[]");
    expect_refused(ENG_EFORMAT, "dropout");
    write_json("", "null", "null", SP_DECODER,
               "[{\"id\":5,\"content\":\"<x>\",\"lstrip\":true,\"special\":true}]");
    expect_refused(ENG_EFORMAT, "lstrip");
    /* A byte-level pre-tokenizer needs a token for each of the 256 bytes. */
    write_json("", "null", "{\"type\":\"ByteLevel\"}", "{\"type\":\"ByteLevel\"}", "[]");
    expect_refused(ENG_EFORMAT, "no token for byte");
    write_tmp(
        "tokenizer.json",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]},"
        "\"decoder\":" SP_DECODER "}");
    expect_refused(ENG_EFORMAT, "leaves the vocab");
    write_tmp("tokenizer.json",
              "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":-3},\"merges\":[]}}");
    expect_refused(ENG_EFORMAT, "no valid id");

    /* The config files: a token that is not in the vocab, an EOS that is not an id. */
    write_json("", "null", "null", SP_DECODER, "[]");
    write_tmp("tokenizer_config.json", "{\"eos_token\": \"</s>\"}");
    expect_refused(ENG_EFORMAT, "eos_token \"</s>\" is not in the vocabulary");
    write_tmp("tokenizer_config.json", "{\"bos_token\": {\"content\": \"ab\"}, "
                                       "\"add_bos_token\": true}");
    write_tmp("generation_config.json", "{\"eos_token_id\": [3, \"x\"]}");
    expect_refused(ENG_EFORMAT, "eos_token_id");
    write_tmp("generation_config.json", "{\"eos_token_id\": [2, 1]}");
    t = NULL;
    if (tokenizer_load_dir(&t, tmp_dir)) TEST_FAIL("configs: %s", err_msg());
    if (t) {
        EXPECT_EQ(tokenizer_bos(t), 3);
        EXPECT_EQ(tokenizer_eos(t), 2);
        EXPECT(tokenizer_is_eos(t, 1) && tokenizer_is_eos(t, 2) && !tokenizer_is_eos(t, 3));
        tokenizer_destroy(t);
    }
    write_tmp("generation_config.json", "not json");
    expect_refused(ENG_EFORMAT, "generation_config.json");
    rm_tmp("generation_config.json");
    rm_tmp("tokenizer_config.json");
    rm_tmp("tokenizer.json");
    CHECK(rmdir(tmp_dir) == 0);

    /* A missing file named directly is an I/O error. */
    t = NULL;
    EXPECT_EQ(tokenizer_load_json(&t, "/nonexistent/tokenizer.json"), ENG_EIO);
}

TEST(mutated_files_fail_cleanly)
{
    /* 300 copies of the llama3 and llama2 files, each with a few bytes changed or a
     * span cut out: each loads (and then encodes) or fails with ENG_EFORMAT, never
     * crashes (run under ASan too). */
    static const char *const kinds[] = {"llama3/tokenizer.json", "llama2/tokenizer.json"};
    char path[128];
    snprintf(path, sizeof path, "/tmp/test_tokenizer_json.%d.json", (int)getpid());
    uint64_t r = 7;
    int n_ok = 0, n_fail = 0;
    for (size_t ki = 0; ki < ARRAY_LEN(kinds); ki++) {
        char rel[64], *orig;
        size_t len;
        snprintf(rel, sizeof rel, "tokenizers/%s", kinds[ki]);
        CHECK(util_read_file(test_data(rel), &orig, &len) == 0);
        char *buf = xmalloc(len);
        for (int iter = 0; iter < 150; iter++) {
            memcpy(buf, orig, len);
            size_t n = len;
            for (int k = 1 + lcg_below(&r, 3); k > 0; k--) {
                size_t at = (size_t)lcg_below(&r, (int32_t)n);
                if (lcg_below(&r, 2)) {
                    static const char junk[] = "{}[]\":,0119 -tfn\\ab";
                    buf[at] = junk[lcg_below(&r, (int32_t)sizeof junk - 1)];
                } else {
                    size_t cut = MIN(n - at, (size_t)lcg_below(&r, 40));
                    memmove(buf + at, buf + at + cut, n - at - cut);
                    n -= cut;
                }
            }
            FILE *f = fopen(path, "wb");
            CHECK(f);
            fwrite(buf, 1, n, f);
            fclose(f);
            struct tokenizer *t = NULL;
            int err = tokenizer_load_json(&t, path);
            if (err == 0) {
                int32_t *ids, n_ids;
                const char *s = "Hello, wörld 😀";
                EXPECT_EQ(tokenizer_encode(t, s, strlen(s), true, &ids, &n_ids), 0);
                free(ids);
                tokenizer_destroy(t);
                n_ok++;
            } else {
                if (err != ENG_EFORMAT) TEST_FAIL("%s: %d (%s)", kinds[ki], err, err_msg());
                n_fail++;
            }
        }
        free(buf);
        free(orig);
    }
    unlink(path);
    printf("# %d mutated files loaded, %d refused\n", n_ok, n_fail);
}

int main(void)
{
    load_texts();
    printf("# %zu strings\n", n_texts);
    RUN(llama3_matches_hugging_face);
    RUN(qwen2_matches_hugging_face);
    RUN(neox_matches_hugging_face);
    RUN(llama2_matches_hugging_face);
    RUN(llama2_metaspace_matches_hugging_face);
    RUN(llama2_metaspace_old_matches_hugging_face);
    RUN(neox_prefix_space_matches_hugging_face);
    RUN(invalid_utf8_round_trips);
    RUN(eos_and_bos_from_the_config_files);
    RUN(token_lookups);
    RUN(detok_over_byte_fallback);
    RUN(encode_speed);
    RUN(folder_without_tokenizer_json_is_opt);
    RUN(loader_refusals);
    RUN(mutated_files_fail_cleanly);
    for (size_t i = 0; i < n_texts; i++)
        free(texts[i]);
    free(texts);
    return test_done();
}
