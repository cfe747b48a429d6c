/*
 * tokenizer.c - GPT-2 byte-level BPE (OPT's tokenizer) and the dummy byte tokenizer.
 *
 * Owns: the per-id token table (vocab name, raw bytes, display string, all in one
 * string pool), a string -> id hash, a (left id, right id) -> (rank, merged id) hash
 * for the merges, and the compiled GPT-2 pre-tokenizer regex.
 * Invariants: the table is immutable after load, so every reader may run on any
 * thread; every one of the 256 bytes has a non-special single-byte token (load fails
 * otherwise), which is what makes every byte string encodable and lets decode(encode(x))
 * return x exactly.
 *
 * Encoding is Hugging Face's: the regex cuts the text into words, each word's bytes
 * become byte tokens, and the merge of lowest rank is applied until none applies. The
 * merge loop keeps candidate pairs in a binary heap ordered by (rank, position), which
 * is the order GPT-2's "merge the best bigram everywhere" loop applies them in, but
 * costs O(k log k) for a word of k bytes instead of O(k^2), so a megabyte of one
 * letter encodes in a fraction of a second. Invalid UTF-8, which Hugging Face never
 * sees (Python strings cannot hold it), is skipped by the regex; each run of it becomes
 * a word of its own, so it still encodes byte-level and round-trips.
 */
#include "tokenizer.h"

#include "err.h"
#include "util.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cJSON.h>
#include <pcre2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * GPT-2's pre-tokenizer pattern,
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with \s spelled out as the Unicode White_Space set. That is what \s means in
 * Python's `regex` module (GPT-2's encoder) and in Oniguruma (Hugging Face tokenizers);
 * PCRE2's own \s also takes U+180E, which has not been a space since Unicode 6.3, and
 * would split "\u180e's" differently.
 */
#define TOKENIZER_WS                                                                       \
    "\\t\\n\\x{0B}\\f\\r "                                                                 \
    "\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"                \
    "\\x{205F}\\x{3000}"
static const char tokenizer_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" TOKENIZER_WS "\\p{L}\\p{N}]+"
    "|[" TOKENIZER_WS "]+(?![^" TOKENIZER_WS "])|[" TOKENIZER_WS "]+";

/* Vocabulary entries that stand for no text. "<|endoftext|>" is GPT-2's own. */
static const char *const tokenizer_special_names[] = {"<s>",   "<pad>",  "</s>",
                                                      "<unk>", "<mask>", "<|endoftext|>"};

/* Ids are kept below this so that id + 1 and pair keys never overflow. */
#define TOKENIZER_MAX_ID (1 << 24)

struct tokenizer_tok {
    uint32_t name_off, name_len; /* the vocab.json string (byte-level alphabet) */
    uint32_t bytes_off, n_bytes; /* raw bytes; "" for special and unnamed ids */
    uint32_t str_off;            /* display string, valid UTF-8 */
    int32_t split_left;          /* the merge that produced this token, or -1: lets a */
    int32_t split_right;         /* special token made by BPE fall back to its parts */
    bool special;
    bool named;
};

struct tokenizer_merge {
    uint64_t key; /* left id << 32 | right id; TOKENIZER_NO_KEY when empty */
    int32_t rank;
    int32_t result;
};
#define TOKENIZER_NO_KEY UINT64_MAX

/* The byte map's code points: 256 plus the 68 bytes moved past Latin-1. */
#define TOKENIZER_N_CP 324

struct tokenizer {
    int32_t vocab_size;
    int32_t bos, eos;
    struct tokenizer_tok *toks; /* [vocab_size] */
    char *pool;                 /* every string of toks, NUL-terminated; pool[0] = "" */
    size_t pool_len, pool_cap;

    uint32_t *name_slots; /* string -> id hash: id + 1, 0 = empty */
    uint32_t name_cap;    /* power of two */

    struct tokenizer_merge *merges; /* pair -> (rank, merged id) hash */
    uint32_t merge_cap;             /* power of two; 0 for the byte tokenizer */

    int32_t byte_tok[256]; /* the single-byte token of each byte */

    pcre2_code *re; /* NULL for the byte tokenizer, which needs no words */
};

/* ---- the GPT-2 byte <-> code point mapping ---- */

/*
 * GPT-2 gives every byte a printable code point so that vocab strings are readable:
 * the printable Latin-1 bytes map to themselves, the 68 others to 256, 257, ... in
 * byte order. A space (0x20) becomes U+0120 "Ġ", a newline U+010A "Ċ".
 */
static void tokenizer_byte_map(uint16_t byte_cp[256], int16_t cp_byte[TOKENIZER_N_CP])
{
    int n = 0;
    for (int i = 0; i < TOKENIZER_N_CP; i++)
        cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        byte_cp[b] = (uint16_t)(printable ? b : 256 + n++);
        cp_byte[byte_cp[b]] = (int16_t)b;
    }
}

static size_t tokenizer_put_utf8(char *dst, uint32_t cp)
{
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    /* The byte map only reaches U+0143, so two bytes always suffice here. */
    CHECK(cp < 0x800);
    dst[0] = (char)(0xC0 | (cp >> 6));
    dst[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

enum tokenizer_utf8 tokenizer_utf8_next(const unsigned char *s, size_t n, size_t *len)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    if (c < 0x80) {
        *len = 1;
        return TOKENIZER_UTF8_CHAR;
    } else if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        /* E0 would allow overlong forms and ED the UTF-16 surrogates. */
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        /* F0 would allow overlong forms and F4 code points above U+10FFFF. */
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *len = 1; /* 80..C1 and F5..FF never start a character */
        return TOKENIZER_UTF8_INVALID;
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= n) {
            *len = n;
            return TOKENIZER_UTF8_INCOMPLETE;
        }
        unsigned char b = s[i];
        bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) {
            /* The valid prefix is one maximal subpart; the bad byte starts afresh. */
            *len = i;
            return TOKENIZER_UTF8_INVALID;
        }
    }
    *len = need + 1;
    return TOKENIZER_UTF8_CHAR;
}

/* ---- the string pool and the two hashes ---- */

/* Append n bytes plus a NUL and return their offset in the pool. */
static uint32_t tokenizer_pool_add(struct tokenizer *t, const char *s, size_t n)
{
    if (t->pool_len + n + 1 > t->pool_cap) {
        while (t->pool_len + n + 1 > t->pool_cap)
            t->pool_cap *= 2;
        t->pool = xrealloc(t->pool, t->pool_cap);
    }
    CHECK(t->pool_len + n + 1 <= UINT32_MAX);
    uint32_t off = (uint32_t)t->pool_len;
    memcpy(t->pool + off, s, n);
    t->pool[off + n] = '\0';
    t->pool_len += n + 1;
    return off;
}

/* Append the display form of raw bytes: valid UTF-8 with U+FFFD for invalid runs. */
static uint32_t tokenizer_pool_add_display(struct tokenizer *t, const char *s, size_t n)
{
    char *tmp = xmalloc(n * 3 + 1); /* each bad byte may grow to 3 bytes of U+FFFD */
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t len;
        enum tokenizer_utf8 kind =
            tokenizer_utf8_next((const unsigned char *)s + i, n - i, &len);
        if (kind == TOKENIZER_UTF8_CHAR) {
            memcpy(tmp + k, s + i, len);
            k += len;
        } else {
            memcpy(tmp + k, "\xEF\xBF\xBD", 3);
            k += 3;
        }
        i += len;
    }
    uint32_t off = tokenizer_pool_add(t, tmp, k);
    free(tmp);
    return off;
}

static uint64_t tokenizer_hash_str(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t tokenizer_hash_u64(uint64_t x)
{
    x ^= x >> 33; /* the splitmix64 / murmur3 finaliser */
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static uint32_t tokenizer_pow2_above(size_t n)
{
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap *= 2; /* load factor at most 1/2 keeps probes short */
    return cap;
}

/* The id whose vocab string is s[0..n), or -1. */
static int32_t tokenizer_find_name(const struct tokenizer *t, const char *s, size_t n)
{
    uint32_t mask = t->name_cap - 1;
    for (uint32_t i = (uint32_t)tokenizer_hash_str(s, n) & mask;; i = (i + 1) & mask) {
        uint32_t slot = t->name_slots[i];
        if (!slot) return -1;
        const struct tokenizer_tok *tok = &t->toks[slot - 1];
        if (tok->name_len == n && memcmp(t->pool + tok->name_off, s, n) == 0)
            return (int32_t)(slot - 1);
    }
}

/* Insert id under its name; returns false when the name is already there. */
static bool tokenizer_add_name(struct tokenizer *t, int32_t id)
{
    const struct tokenizer_tok *tok = &t->toks[id];
    const char *s = t->pool + tok->name_off;
    if (tokenizer_find_name(t, s, tok->name_len) >= 0) return false;
    uint32_t mask = t->name_cap - 1;
    uint32_t i = (uint32_t)tokenizer_hash_str(s, tok->name_len) & mask;
    while (t->name_slots[i])
        i = (i + 1) & mask;
    t->name_slots[i] = (uint32_t)id + 1;
    return true;
}

static const struct tokenizer_merge *tokenizer_find_merge(const struct tokenizer *t,
                                                          int32_t left, int32_t right)
{
    uint64_t key = (uint64_t)left << 32 | (uint32_t)right;
    uint32_t mask = t->merge_cap - 1;
    for (uint32_t i = (uint32_t)tokenizer_hash_u64(key) & mask;; i = (i + 1) & mask) {
        const struct tokenizer_merge *m = &t->merges[i];
        if (m->key == key) return m;
        if (m->key == TOKENIZER_NO_KEY) return NULL;
    }
}

/* ---- building ---- */

static struct tokenizer *tokenizer_alloc(int32_t vocab_size)
{
    struct tokenizer *t = xcalloc(1, sizeof *t);
    t->vocab_size = vocab_size;
    t->toks = xcalloc((size_t)vocab_size, sizeof *t->toks);
    t->pool_cap = 1 << 16;
    t->pool = xmalloc(t->pool_cap);
    tokenizer_pool_add(t, "", 0); /* offset 0 is the empty string for unnamed ids */
    for (int32_t i = 0; i < vocab_size; i++)
        t->toks[i].split_left = t->toks[i].split_right = -1;
    t->name_cap = tokenizer_pow2_above((size_t)vocab_size);
    t->name_slots = xcalloc(t->name_cap, sizeof *t->name_slots);
    return t;
}

static bool tokenizer_special_name(const char *s)
{
    for (size_t i = 0; i < ARRAY_LEN(tokenizer_special_names); i++)
        if (strcmp(s, tokenizer_special_names[i]) == 0) return true;
    return false;
}

/*
 * Map a byte-level name back to raw bytes (raw has room for n bytes). Returns false
 * when a character lies outside the byte alphabet.
 */
static bool tokenizer_unmap(const int16_t cp_byte[TOKENIZER_N_CP], const char *name,
                            size_t n, char *raw, size_t *n_raw)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t len;
        const unsigned char *u = (const unsigned char *)name + i;
        if (tokenizer_utf8_next(u, n - i, &len) != TOKENIZER_UTF8_CHAR || len > 2)
            return false;
        uint32_t cp = len == 1 ? u[0] : (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
        if (cp >= TOKENIZER_N_CP || cp_byte[cp] < 0) return false;
        raw[k++] = (char)cp_byte[cp];
        i += len;
    }
    *n_raw = k;
    return true;
}

/*
 * Give id its name, raw bytes and display string. With cp_byte, names are in GPT-2's
 * byte alphabet and are mapped back to bytes; a name with a character outside that
 * alphabet stands for its own UTF-8, as in Hugging Face's ByteLevel decoder. Without
 * cp_byte (the byte tokenizer's specials) the name is its own text.
 */
static void tokenizer_set_token(struct tokenizer *t, int32_t id, const char *name,
                                const int16_t *cp_byte)
{
    struct tokenizer_tok *tok = &t->toks[id];
    size_t n = strlen(name);
    tok->named = true;
    tok->name_off = tokenizer_pool_add(t, name, n);
    tok->name_len = (uint32_t)n;
    tok->special = tokenizer_special_name(name);
    if (tok->special) {
        tok->bytes_off = 0;
        tok->n_bytes = 0;
        tok->str_off = tok->name_off;
        return;
    }
    char *raw = xmalloc(n + 1);
    size_t k;
    if (!cp_byte || !tokenizer_unmap(cp_byte, name, n, raw, &k)) {
        memcpy(raw, name, n);
        k = n;
    }
    tok->bytes_off = tokenizer_pool_add(t, raw, k);
    tok->n_bytes = (uint32_t)k;
    tok->str_off = tokenizer_pool_add_display(t, raw, k);
    free(raw);
}

static int tokenizer_read_vocab(struct tokenizer **out, const char *path)
{
    char *buf;
    size_t len;
    int err = util_read_file(path, &buf, &len);
    if (err) return err;
    struct tokenizer *t = NULL;
    cJSON *root = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!root) return err_set(ENG_EFORMAT, "%s: not valid JSON", path);
    if (!cJSON_IsObject(root) || !root->child) {
        err = err_set(ENG_EFORMAT, "%s: expected a non-empty JSON object of token -> id",
                      path);
        goto fail;
    }
    /* First pass: validate the ids and find the largest, which sets vocab_size. */
    int32_t max_id = -1;
    const cJSON *item;
    cJSON_ArrayForEach(item, root)
    {
        double v = item->valuedouble;
        if (!cJSON_IsNumber(item) || !(v >= 0 && v < TOKENIZER_MAX_ID) ||
            v != (double)(int32_t)v) {
            err = err_set(ENG_EFORMAT, "%s: token \"%.40s\" has no valid id", path,
                          item->string ? item->string : "");
            goto fail;
        }
        max_id = MAX(max_id, (int32_t)v);
    }
    t = tokenizer_alloc(max_id + 1);
    uint16_t byte_cp[256];
    int16_t cp_byte[TOKENIZER_N_CP];
    tokenizer_byte_map(byte_cp, cp_byte);
    cJSON_ArrayForEach(item, root)
    {
        int32_t id = (int32_t)item->valuedouble;
        if (t->toks[id].named) {
            err = err_set(ENG_EFORMAT, "%s: id %d is given to two tokens", path, id);
            goto fail;
        }
        tokenizer_set_token(t, id, item->string, cp_byte);
        if (!tokenizer_add_name(t, id)) {
            err = err_set(ENG_EFORMAT, "%s: token \"%.40s\" appears twice", path,
                          item->string);
            goto fail;
        }
    }
    cJSON_Delete(root);
    *out = t;
    return 0;
fail:
    cJSON_Delete(root);
    tokenizer_destroy(t);
    return err;
}

/* Find the single-byte token of every byte, and BOS/EOS. */
static int tokenizer_find_basics(struct tokenizer *t, const char *path)
{
    uint16_t byte_cp[256];
    int16_t cp_byte[TOKENIZER_N_CP];
    tokenizer_byte_map(byte_cp, cp_byte);
    for (int b = 0; b < 256; b++) {
        char s[2];
        size_t n = tokenizer_put_utf8(s, byte_cp[b]);
        int32_t id = tokenizer_find_name(t, s, n);
        if (id < 0 || t->toks[id].special)
            return err_set(ENG_EFORMAT,
                           "%s: no token for byte 0x%02x (not a byte-level BPE vocabulary)",
                           path, b);
        t->byte_tok[b] = id;
    }
    int32_t eos = tokenizer_find_name(t, "</s>", 4);
    if (eos < 0) eos = tokenizer_find_name(t, "<|endoftext|>", 13);
    if (eos < 0) return err_set(ENG_EFORMAT, "%s: no \"</s>\" token", path);
    t->bos = t->eos = eos;
    return 0;
}

static int tokenizer_read_merges(struct tokenizer *t, const char *path)
{
    char *buf;
    size_t len;
    int err = util_read_file(path, &buf, &len);
    if (err) return err;
    size_t n_lines = 1;
    for (size_t i = 0; i < len; i++)
        n_lines += buf[i] == '\n';
    t->merge_cap = tokenizer_pow2_above(n_lines);
    t->merges = xmalloc(t->merge_cap * sizeof *t->merges);
    for (uint32_t i = 0; i < t->merge_cap; i++)
        t->merges[i].key = TOKENIZER_NO_KEY;

    char *joined = NULL;
    size_t joined_cap = 0;
    int32_t rank = 0;
    size_t line_no = 0;
    for (char *line = buf; line < buf + len;) {
        char *nl = memchr(line, '\n', (size_t)(buf + len - line));
        char *end = nl ? nl : buf + len;
        char *next = nl ? nl + 1 : buf + len;
        line_no++;
        if (end > line && end[-1] == '\r') end--;
        size_t n = (size_t)(end - line);
        if (n == 0 || (line_no == 1 && n >= 8 && memcmp(line, "#version", 8) == 0)) {
            line = next;
            continue;
        }
        char *sp = memchr(line, ' ', n);
        if (!sp || sp == line || sp + 1 == end ||
            memchr(sp + 1, ' ', (size_t)(end - sp - 1))) {
            err = err_set(ENG_EFORMAT, "%s:%zu: expected two tokens separated by one space",
                          path, line_no);
            goto out;
        }
        size_t na = (size_t)(sp - line), nb = (size_t)(end - sp - 1);
        if (na + nb > joined_cap) joined = xrealloc(joined, joined_cap = 2 * (na + nb));
        memcpy(joined, line, na);
        memcpy(joined + na, sp + 1, nb);
        int32_t a = tokenizer_find_name(t, line, na);
        int32_t b = tokenizer_find_name(t, sp + 1, nb);
        int32_t ab = tokenizer_find_name(t, joined, na + nb);
        /* Hugging Face refuses such files too: a merge must stay inside the vocab. */
        if (a < 0 || b < 0 || ab < 0) {
            const char *what = a < 0 ? line : b < 0 ? sp + 1 : joined;
            size_t what_len = a < 0 ? na : b < 0 ? nb : na + nb;
            err = err_set(ENG_EFORMAT,
                          "%s:%zu: merge result or part \"%.*s\" is not in the vocab", path,
                          line_no, (int)MIN(what_len, 80), what);
            goto out;
        }
        uint64_t key = (uint64_t)a << 32 | (uint32_t)b;
        uint32_t mask = t->merge_cap - 1;
        uint32_t i = (uint32_t)tokenizer_hash_u64(key) & mask;
        while (t->merges[i].key != TOKENIZER_NO_KEY && t->merges[i].key != key)
            i = (i + 1) & mask;
        if (t->merges[i].key ==
            TOKENIZER_NO_KEY) { /* a repeated merge keeps its first rank */
            t->merges[i] = (struct tokenizer_merge){key, rank, ab};
            if (t->toks[ab].split_left < 0) {
                t->toks[ab].split_left = a;
                t->toks[ab].split_right = b;
            }
        }
        rank++;
        line = next;
    }
out:
    free(joined);
    free(buf);
    return err;
}

static int tokenizer_compile(struct tokenizer *t)
{
    int code;
    PCRE2_SIZE where;
    /* MATCH_INVALID_UTF makes invalid bytes unmatchable instead of an error; encode
     * turns each run of them into a word of its own. */
    t->re =
        pcre2_compile((PCRE2_SPTR)tokenizer_pattern, PCRE2_ZERO_TERMINATED,
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &where, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return err_set(ENG_EUNSUPPORTED, "tokenizer: PCRE2 rejects the GPT-2 pattern: %s",
                       (const char *)msg);
    }
    /* Without JIT (unsupported CPU or build) the interpreter gives the same words. */
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE);
    return 0;
}

int tokenizer_load(struct tokenizer **out, const char *vocab_json_path,
                   const char *merges_txt_path)
{
    struct tokenizer *t = NULL;
    int err = tokenizer_read_vocab(&t, vocab_json_path);
    if (err) return err;
    err = tokenizer_find_basics(t, vocab_json_path);
    if (err) goto fail;
    err = tokenizer_read_merges(t, merges_txt_path);
    if (err) goto fail;
    err = tokenizer_compile(t);
    if (err) goto fail;
    *out = t;
    return 0;
fail:
    tokenizer_destroy(t);
    return err;
}

struct tokenizer *tokenizer_create_bytes(int32_t vocab_size)
{
    if (vocab_size < 260 || vocab_size > TOKENIZER_MAX_ID) return NULL;
    struct tokenizer *t = tokenizer_alloc(vocab_size);
    static const char *const names[4] = {"<s>", "<pad>", "</s>", "<unk>"};
    for (int32_t i = 0; i < 4; i++) {
        tokenizer_set_token(t, i, names[i], NULL);
        CHECK(tokenizer_add_name(t, i));
    }
    for (int b = 0; b < 256; b++) {
        /* Byte tokens have no name: nothing looks them up by string. */
        char raw = (char)b;
        struct tokenizer_tok *tok = &t->toks[4 + b];
        tok->bytes_off = tokenizer_pool_add(t, &raw, 1);
        tok->n_bytes = 1;
        tok->str_off = tokenizer_pool_add_display(t, &raw, 1);
        t->byte_tok[b] = 4 + b;
    }
    /* The ids past the bytes (a dummy OPT has 50272) are never produced by encoding,
     * but a dummy model samples them all the time. They decode to short made-up
     * words (" ka", " tobe", ...) so that dummy output is visible text, not nothing. */
    for (int32_t id = 260; id < vocab_size; id++) {
        char word[8];
        int n = 0;
        word[n++] = ' ';
        for (uint32_t v = (uint32_t)id * 2654435761u, k = 2 + (uint32_t)id % 4; k > 0; k--) {
            word[n++] = (char)('a' + v % 26);
            v /= 26;
        }
        struct tokenizer_tok *tok = &t->toks[id];
        tok->bytes_off = tokenizer_pool_add(t, word, (size_t)n);
        tok->n_bytes = n;
        tok->str_off = tokenizer_pool_add_display(t, word, (size_t)n);
    }
    t->bos = t->eos = 2;
    return t;
}

void tokenizer_destroy(struct tokenizer *t)
{
    if (!t) return;
    pcre2_code_free(t->re);
    free(t->merges);
    free(t->name_slots);
    free(t->pool);
    free(t->toks);
    free(t);
}

/* ---- encoding ---- */

struct tokenizer_ids {
    int32_t *v;
    size_t n, cap;
};

static void tokenizer_ids_push(struct tokenizer_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) ids->v = xrealloc(ids->v, (ids->cap *= 2) * sizeof *ids->v);
    ids->v[ids->n++] = id;
}

/* A candidate merge of the symbols at left and right (positions in the word). */
struct tokenizer_cand {
    int32_t rank, left, right;
    int32_t left_id, right_id, result;
};

/* Per-call scratch for BPE, grown to the longest word seen. */
struct tokenizer_work {
    int32_t *sym;  /* [k] token id at each position, -1 once merged away */
    int32_t *next; /* [k] next live position, -1 at the end */
    int32_t *prev; /* [k] previous live position, -1 at the start */
    struct tokenizer_cand *heap;
    size_t cap, heap_n, heap_cap;
};

static bool tokenizer_cand_less(const struct tokenizer_cand *a,
                                const struct tokenizer_cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void tokenizer_heap_push(struct tokenizer_work *w, struct tokenizer_cand c)
{
    if (w->heap_n == w->heap_cap)
        w->heap = xrealloc(w->heap, (w->heap_cap = 2 * w->heap_cap + 16) * sizeof *w->heap);
    size_t i = w->heap_n++;
    while (i > 0 && tokenizer_cand_less(&c, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = c;
}

static struct tokenizer_cand tokenizer_heap_pop(struct tokenizer_work *w)
{
    struct tokenizer_cand top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->heap_n) break;
        if (c + 1 < w->heap_n && tokenizer_cand_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!tokenizer_cand_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->heap_n) w->heap[i] = last;
    return top;
}

static void tokenizer_try_pair(const struct tokenizer *t, struct tokenizer_work *w,
                               int32_t left, int32_t right)
{
    const struct tokenizer_merge *m = tokenizer_find_merge(t, w->sym[left], w->sym[right]);
    if (m)
        tokenizer_heap_push(w, (struct tokenizer_cand){m->rank, left, right, w->sym[left],
                                                       w->sym[right], m->result});
}

/*
 * Emit a token that BPE produced. A special token ("<s>") can only arise if the merges
 * spell it, and emitting its id would lose its text, so it is replaced by the two
 * tokens it was merged from.
 */
static void tokenizer_emit(const struct tokenizer *t, int32_t id, struct tokenizer_ids *out)
{
    const struct tokenizer_tok *tok = &t->toks[id];
    if (tok->special && tok->split_left >= 0) {
        tokenizer_emit(t, tok->split_left, out);
        tokenizer_emit(t, tok->split_right, out);
        return;
    }
    tokenizer_ids_push(out, id);
}

static void tokenizer_bpe_word(const struct tokenizer *t, const unsigned char *s, size_t k,
                               struct tokenizer_work *w, struct tokenizer_ids *out)
{
    if (k == 1 || !t->merge_cap) {
        for (size_t i = 0; i < k; i++)
            tokenizer_ids_push(out, t->byte_tok[s[i]]);
        return;
    }
    CHECK(k < INT32_MAX);
    if (k > w->cap) {
        w->cap = MAX(k, 2 * w->cap);
        w->sym = xrealloc(w->sym, w->cap * sizeof *w->sym);
        w->next = xrealloc(w->next, w->cap * sizeof *w->next);
        w->prev = xrealloc(w->prev, w->cap * sizeof *w->prev);
    }
    int32_t n = (int32_t)k;
    for (int32_t i = 0; i < n; i++) {
        w->sym[i] = t->byte_tok[s[i]];
        w->prev[i] = i - 1;
        w->next[i] = i + 1 < n ? i + 1 : -1;
    }
    w->heap_n = 0;
    for (int32_t i = 0; i + 1 < n; i++)
        tokenizer_try_pair(t, w, i, i + 1);
    while (w->heap_n) {
        struct tokenizer_cand c = tokenizer_heap_pop(w);
        /* Stale: one side was merged into something else since this was pushed. A
         * position's id only changes by growing, so equal ids mean an unchanged pair. */
        if (w->sym[c.left] != c.left_id || w->sym[c.right] != c.right_id ||
            w->next[c.left] != c.right)
            continue;
        w->sym[c.left] = c.result;
        w->sym[c.right] = -1;
        int32_t after = w->next[c.right];
        w->next[c.left] = after;
        if (after >= 0) w->prev[after] = c.left;
        if (w->prev[c.left] >= 0) tokenizer_try_pair(t, w, w->prev[c.left], c.left);
        if (after >= 0) tokenizer_try_pair(t, w, c.left, after);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i])
        tokenizer_emit(t, w->sym[i], out);
}

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, bool add_bos,
                     int32_t **ids, int32_t *n_ids)
{
    if (!text && len) return err_set(ENG_EINVAL, "tokenizer_encode: NULL text");
    if (len >= INT32_MAX - 1)
        return err_set(ENG_EINVAL, "tokenizer_encode: text of %zu bytes is too long", len);
    struct tokenizer_ids out = {xmalloc(64 * sizeof(int32_t)), 0, 64};
    if (add_bos) tokenizer_ids_push(&out, t->bos);
    const unsigned char *u = (const unsigned char *)text;
    int err = 0;
    if (!t->re) {
        for (size_t i = 0; i < len; i++)
            tokenizer_ids_push(&out, t->byte_tok[u[i]]);
    } else if (len) {
        struct tokenizer_work w = {0};
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->re, NULL);
        CHECK(md);
        size_t pos = 0;
        while (pos < len) {
            size_t start = len, end = len;
            int rc = pcre2_match(t->re, u, len, pos, 0, md, NULL);
            if (rc >= 0) {
                const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                start = ov[0];
                end = ov[1];
                /* Every alternative consumes a character, and no character escapes all
                 * of them, so a match is never empty. */
                CHECK(end > start && start >= pos);
            } else if (rc != PCRE2_ERROR_NOMATCH) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                err = err_set(ENG_EINVAL, "tokenizer_encode: PCRE2 failed at byte %zu: %s",
                              pos, (const char *)msg);
                break;
            }
            /* Bytes the regex skipped are invalid UTF-8; they form one word. */
            if (start > pos) tokenizer_bpe_word(t, u + pos, start - pos, &w, &out);
            if (end > start) tokenizer_bpe_word(t, u + start, end - start, &w, &out);
            pos = end;
        }
        pcre2_match_data_free(md);
        free(w.sym);
        free(w.next);
        free(w.prev);
        free(w.heap);
    }
    if (err) {
        free(out.v);
        return err;
    }
    CHECK(out.n <= INT32_MAX);
    *ids = out.v;
    *n_ids = (int32_t)out.n;
    return 0;
}

/* ---- decoding and lookups ---- */

int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, int32_t n,
                     bool skip_special, char **out, size_t *out_len)
{
    if (n < 0 || (n > 0 && !ids))
        return err_set(ENG_EINVAL, "tokenizer_decode: bad id list");
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return err_set(ENG_EINVAL, "tokenizer_decode: id %d is outside 0..%d", ids[i],
                           t->vocab_size - 1);
        const struct tokenizer_tok *tok = &t->toks[ids[i]];
        total += tok->special ? (skip_special ? 0 : tok->name_len) : tok->n_bytes;
    }
    char *buf = xmalloc(total + 1);
    size_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        const struct tokenizer_tok *tok = &t->toks[ids[i]];
        if (tok->special) {
            if (skip_special) continue;
            memcpy(buf + k, t->pool + tok->name_off, tok->name_len);
            k += tok->name_len;
        } else {
            memcpy(buf + k, t->pool + tok->bytes_off, tok->n_bytes);
            k += tok->n_bytes;
        }
    }
    buf[k] = '\0';
    *out = buf;
    *out_len = k;
    return 0;
}

int32_t tokenizer_vocab_size(const struct tokenizer *t)
{
    return t->vocab_size;
}

int32_t tokenizer_bos(const struct tokenizer *t)
{
    return t->bos;
}

int32_t tokenizer_eos(const struct tokenizer *t)
{
    return t->eos;
}

bool tokenizer_is_special(const struct tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->vocab_size && t->toks[id].special;
}

const char *tokenizer_token_bytes(const struct tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->vocab_size) {
        *len = 0;
        return t->pool;
    }
    *len = t->toks[id].n_bytes;
    return t->pool + t->toks[id].bytes_off;
}

const char *tokenizer_token_str(const struct tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->vocab_size) return t->pool;
    return t->pool + t->toks[id].str_off;
}
