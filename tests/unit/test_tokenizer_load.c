/*
 * test_tokenizer_load.c - building a tokenizer from vocab.json and merges.txt
 * (engine/text/tokenizer_load.c), on small hand-made files written to a temporary
 * folder: the merges' ranks are their order in merges.txt (CRLF line ends and the
 * version header accepted), and every broken file (missing, truncated, not an object,
 * bad ids, duplicate ids, bytes without a token, a merge of unknown tokens or of
 * three, random junk) fails cleanly with a message that names the file, and the line
 * for merges.txt. Encoding with the real OPT files is test_tokenizer.c's.
 */
#include "err.h"
#include "test.h"
#include "tokenizer.h"
#include "util.h"

#include "rnd.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

/* The UTF-8 of a byte token's code point: GPT-2's byte map puts every byte below
 * U+0144, so one or two bytes. */
static void append_cp(char *buf, size_t *k, uint32_t cp)
{
    CHECK(cp < 0x800);
    if (cp < 0x80) {
        buf[(*k)++] = (char)cp;
        return;
    }
    buf[(*k)++] = (char)(0xC0 | cp >> 6);
    buf[(*k)++] = (char)(0x80 | (cp & 0x3F));
}


static char tmp_dir[64];

static const char *tmp_path(const char *name)
{
    static char buf[2][128];
    static int which;
    which ^= 1;
    snprintf(buf[which], sizeof buf[which], "%s/%s", tmp_dir, name);
    return buf[which];
}

static void write_file(const char *name, const char *body, size_t len)
{
    FILE *f = fopen(tmp_path(name), "wb");
    if (!f) {
        TEST_FAIL("cannot write %s", tmp_path(name));
        return;
    }
    fwrite(body, 1, len, f);
    fclose(f);
}

static void put(char *buf, size_t *k, const char *s)
{
    size_t n = strlen(s);
    memcpy(buf + *k, s, n);
    *k += n;
}

/* A JSON vocab of the 256 byte tokens (ids 4..259) plus `extra` ("\"x\": 260, ..."). */
static void write_vocab(const char *name, const char *extra)
{
    static char buf[16384]; /* 256 byte tokens take about 3 kB */
    char num[32];
    size_t k = 0;
    put(buf, &k, "{\"<s>\": 0, \"<pad>\": 1, \"</s>\": 2, \"<unk>\": 3");
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        uint32_t cp = printable ? (uint32_t)b : 256u + (uint32_t)n++;
        put(buf, &k, ", \"");
        if (cp == '"' || cp == '\\') buf[k++] = '\\';
        append_cp(buf, &k, cp);
        snprintf(num, sizeof num, "\": %d", 4 + b);
        put(buf, &k, num);
    }
    if (extra[0]) put(buf, &k, ", ");
    put(buf, &k, extra);
    put(buf, &k, "}");
    write_file(name, buf, k);
}

static int load_tmp(struct tokenizer **t, const char *vocab, const char *merges)
{
    char v[128], m[128];
    snprintf(v, sizeof v, "%s", tmp_path(vocab));
    snprintf(m, sizeof m, "%s", tmp_path(merges));
    return tokenizer_load(t, v, m);
}

TEST(merge_ranks_decide)
{
    /* "ab" (rank 1) beats "bc" (rank 2) in "abc"; "aa" pairs up from the left in "aaa",
     * as GPT-2's bigram loop does. CRLF line ends and the header are accepted. */
    write_vocab("v.json",
                "\"ab\": 260, \"bc\": 261, \"aa\": 262, \"abc\": 263, \"Ġab\": 264");
    const char merges[] = "#version: 0.2\r\na a\r\na b\r\nb c\r\nab c\r\nĠ ab\r\n";
    write_file("m.txt", merges, sizeof merges - 1);
    struct tokenizer *t = NULL;
    EXPECT_EQ(load_tmp(&t, "v.json", "m.txt"), 0);
    if (!t) {
        TEST_FAIL("%s", err_msg());
        return;
    }
    int32_t *ids, n;
    EXPECT_EQ(tokenizer_encode(t, "abc", 3, false, &ids, &n), 0);
    EXPECT_EQ(n, 1);
    EXPECT_EQ(ids[0], 263);
    free(ids);
    EXPECT_EQ(tokenizer_encode(t, "aaa bc", 6, false, &ids, &n), 0);
    EXPECT_EQ(n, 4); /* "aaa" -> aa a; " bc" -> Ġ bc */
    EXPECT_EQ(ids[0], 262);
    EXPECT_EQ(ids[1], 4 + 'a');
    EXPECT_EQ(ids[2], 4 + ' ');
    EXPECT_EQ(ids[3], 261);
    free(ids);
    /* " abc": ab first; then "ab c" (rank 3) beats "Ġ ab" (rank 4). */
    EXPECT_EQ(tokenizer_encode(t, " abc", 4, false, &ids, &n), 0);
    EXPECT_EQ(n, 2);
    EXPECT_EQ(ids[0], 4 + ' ');
    EXPECT_EQ(ids[1], 263);
    free(ids);
    /* " abx": with no "ab x", "Ġ ab" applies. */
    EXPECT_EQ(tokenizer_encode(t, " abx", 4, false, &ids, &n), 0);
    EXPECT_EQ(n, 2);
    EXPECT_EQ(ids[0], 264);
    EXPECT_EQ(ids[1], 4 + 'x');
    free(ids);
    tokenizer_destroy(t);
}

static void expect_load_error(const char *vocab, const char *merges, int code,
                              const char *must_name)
{
    struct tokenizer *t = NULL;
    err_clear();
    int err = load_tmp(&t, vocab, merges);
    if (err != code)
        TEST_FAIL("%s + %s: got %s, expected %s", vocab, merges, err_name(err),
                  err_name(code));
    if (t) tokenizer_destroy(t);
    if (!strstr(err_msg(), must_name))
        TEST_FAIL("message \"%s\" does not name %s", err_msg(), must_name);
    else
        printf("#   %s\n", err_msg());
}

TEST(bad_files_fail_cleanly)
{
    write_vocab("good.json", "\"ab\": 260");
    write_file("good.txt", "#version: 0.2\na b\n", 18);
    struct tokenizer *t = NULL;
    EXPECT_EQ(load_tmp(&t, "good.json", "good.txt"), 0);
    tokenizer_destroy(t);

    expect_load_error("missing.json", "good.txt", ENG_EIO, "missing.json");
    expect_load_error("good.json", "missing.txt", ENG_EIO, "missing.txt");
    write_file("trunc.json", "{\"a\": 4, \"b\": ", 14);
    expect_load_error("trunc.json", "good.txt", ENG_EFORMAT, "trunc.json");
    write_file("array.json", "[1, 2, 3]", 9);
    expect_load_error("array.json", "good.txt", ENG_EFORMAT, "array.json");
    write_file("empty.json", "", 0);
    expect_load_error("empty.json", "good.txt", ENG_EFORMAT, "empty.json");
    write_file("strid.json", "{\"a\": \"4\"}", 10);
    expect_load_error("strid.json", "good.txt", ENG_EFORMAT, "strid.json");
    write_file("negid.json", "{\"a\": -4}", 9);
    expect_load_error("negid.json", "good.txt", ENG_EFORMAT, "negid.json");
    write_file("hugeid.json", "{\"a\": 1e300}", 12);
    expect_load_error("hugeid.json", "good.txt", ENG_EFORMAT, "hugeid.json");
    write_file("nobytes.json", "{\"</s>\": 2, \"a\": 4}", 19);
    expect_load_error("nobytes.json", "good.txt", ENG_EFORMAT, "nobytes.json");
    write_vocab("dupid.json", "\"ab\": 4");
    expect_load_error("dupid.json", "good.txt", ENG_EFORMAT, "dupid.json");

    write_file("three.txt", "#version: 0.2\na b c\n", 20);
    expect_load_error("good.json", "three.txt", ENG_EFORMAT, "three.txt:2");
    write_file("unknown.txt", "a b\nb q\n", 8);
    expect_load_error("good.json", "unknown.txt", ENG_EFORMAT, "unknown.txt:2");
    char junk[4096];
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)lcg_below(&seed, 256);
    write_file("junk.txt", junk, sizeof junk);
    expect_load_error("good.json", "junk.txt", ENG_EFORMAT, "junk.txt");
    write_file("junk.json", junk, sizeof junk);
    expect_load_error("junk.json", "good.txt", ENG_EFORMAT, "junk.json");
    expect_load_error(".", "good.txt", ENG_EIO, tmp_dir);
}

int main(void)
{
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/test_tokenizer_load.XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        printf("Bail out! mkdtemp failed\n");
        return 1;
    }

    RUN(merge_ranks_decide);
    RUN(bad_files_fail_cleanly);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", tmp_dir);
    return test_done();
}
