/*
 * tokenizer_load.c - building a tokenizer: from a Hugging Face vocab.json and
 * merges.txt (GPT-2 byte-level BPE, as OPT uses it), or the dummy byte tokenizer;
 * and freeing one. tokenizer.c encodes and decodes with what is built here.
 *
 * Owns: the per-id token table (vocab name, raw bytes, display string, all in one
 * string pool), a string -> id hash, a (left id, right id) -> (rank, merged id) hash
 * for the merges, and the compiled GPT-2 pre-tokenizer regex; all freed by
 * tokenizer_destroy.
 * Invariants: the table is immutable once tokenizer_load / tokenizer_create_bytes
 * returns it, so every reader may run on any thread; every one of the 256 bytes has a
 * non-special single-byte token (load fails otherwise), which is what makes every byte
 * string encodable and lets decode(encode(x)) return x exactly.
 */
#include "tokenizer.h"

#include "err.h"
#include "tokenizer_impl.h"
#include "util.h"

#include <cJSON.h>

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
const char tokenizer_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" TOKENIZER_WS "\\p{L}\\p{N}]+"
    "|[" TOKENIZER_WS "]+(?![^" TOKENIZER_WS "])|[" TOKENIZER_WS "]+";

/* Vocabulary entries that stand for no text. "<|endoftext|>" is GPT-2's own. */
static const char *const tokenizer_special_names[] = {"<s>",   "<pad>",  "</s>",
                                                      "<unk>", "<mask>", "<|endoftext|>"};

/* ---- the GPT-2 byte <-> code point mapping ---- */

/*
 * GPT-2 gives every byte a printable code point so that vocab strings are readable:
 * the printable Latin-1 bytes map to themselves, the 68 others to 256, 257, ... in
 * byte order. A space (0x20) becomes U+0120 "Ġ", a newline U+010A "Ċ".
 */
void tokenizer_byte_map(uint16_t byte_cp[256], int16_t cp_byte[TOKENIZER_N_CP])
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

size_t tokenizer_put_utf8(char *dst, uint32_t cp)
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

/* ---- the string pool and the name hash ---- */

/* Append n bytes plus a NUL and return their offset in the pool. */
uint32_t tokenizer_pool_add(struct tokenizer *t, const char *s, size_t n)
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
uint32_t tokenizer_pool_add_display(struct tokenizer *t, const char *s, size_t n)
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

uint32_t tokenizer_pow2_above(size_t n)
{
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap *= 2; /* load factor at most 1/2 keeps probes short */
    return cap;
}

/* The id whose vocab string is s[0..n), or -1. */
int32_t tokenizer_find_name(const struct tokenizer *t, const char *s, size_t n)
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
bool tokenizer_add_name(struct tokenizer *t, int32_t id)
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

/* ---- building ---- */

struct tokenizer *tokenizer_alloc(int32_t vocab_size)
{
    struct tokenizer *t = xcalloc(1, sizeof *t);
    t->vocab_size = vocab_size;
    t->toks = xcalloc((size_t)vocab_size, sizeof *t->toks);
    t->pool_cap = 1 << 16;
    t->pool = xmalloc(t->pool_cap);
    tokenizer_pool_add(t, "", 0); /* offset 0 is the empty string for unnamed ids */
    for (int32_t i = 0; i < vocab_size; i++)
        t->toks[i].split_left = t->toks[i].split_right = -1;
    for (int b = 0; b < 256; b++)
        t->byte_tok[b] = -1;
    tokenizer_byte_map(t->byte_cp, (int16_t[TOKENIZER_N_CP]){0});
    t->bos = t->eos = t->unk = -1;
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
bool tokenizer_unmap(const int16_t cp_byte[TOKENIZER_N_CP], const char *name, size_t n,
                     char *raw, size_t *n_raw)
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

void tokenizer_set_eos(struct tokenizer *t, const int32_t *ids, int32_t n)
{
    free(t->eos_ids);
    t->eos_ids = xmalloc((size_t)MAX(n, 1) * sizeof *t->eos_ids);
    t->n_eos = 0;
    for (int32_t i = 0; i < n; i++) {
        bool dup = false;
        for (int32_t j = 0; j < t->n_eos; j++)
            dup |= t->eos_ids[j] == ids[i];
        if (!dup && ids[i] >= 0) t->eos_ids[t->n_eos++] = ids[i];
    }
    t->eos = t->n_eos ? t->eos_ids[0] : -1;
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
    tokenizer_set_eos(t, &eos, 1);
    return 0;
}

void tokenizer_merges_init(struct tokenizer *t, size_t n)
{
    t->merge_cap = tokenizer_pow2_above(n);
    t->merges = xmalloc(t->merge_cap * sizeof *t->merges);
    for (uint32_t i = 0; i < t->merge_cap; i++)
        t->merges[i].key = TOKENIZER_NO_KEY;
}

void tokenizer_add_merge(struct tokenizer *t, int32_t a, int32_t b, int32_t ab,
                         int32_t rank)
{
    uint64_t key = tokenizer_merge_key(a, b);
    uint32_t mask = t->merge_cap - 1;
    uint32_t i = (uint32_t)tokenizer_hash_u64(key) & mask;
    while (t->merges[i].key != TOKENIZER_NO_KEY && t->merges[i].key != key)
        i = (i + 1) & mask;
    if (t->merges[i].key != TOKENIZER_NO_KEY) return; /* a repeated merge keeps its rank */
    t->merges[i] = (struct tokenizer_merge){key, rank, ab};
    if (t->toks[ab].split_left < 0) {
        t->toks[ab].split_left = a;
        t->toks[ab].split_right = b;
    }
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
    tokenizer_merges_init(t, n_lines);

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
        tokenizer_add_merge(t, a, b, ab, rank);
        rank++;
        line = next;
    }
out:
    free(joined);
    free(buf);
    return err;
}

int tokenizer_compile(struct tokenizer *t, const char *pattern)
{
    int code;
    PCRE2_SIZE where;
    if (!pattern) pattern = tokenizer_pattern;
    /* MATCH_INVALID_UTF makes invalid bytes unmatchable instead of an error; encode
     * turns each run of them into a word of its own. */
    t->re =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &where, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return err_set(ENG_EUNSUPPORTED,
                       "tokenizer: PCRE2 rejects the pre-tokenizer pattern at %zu: %s",
                       (size_t)where, (const char *)msg);
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
    err = tokenizer_compile(t, NULL);
    if (err) goto fail;
    t->add_bos = t->split_specials = true;
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
        for (uint32_t v = (uint32_t)id * 2654435761u, k = 2 + (uint32_t)id % 4; k > 0;
             k--) {
            word[n++] = (char)('a' + v % 26);
            v /= 26;
        }
        struct tokenizer_tok *tok = &t->toks[id];
        tok->bytes_off = tokenizer_pool_add(t, word, (size_t)n);
        tok->n_bytes = n;
        tok->str_off = tokenizer_pool_add_display(t, word, (size_t)n);
    }
    t->bos = 2;
    tokenizer_set_eos(t, &(int32_t){2}, 1);
    t->add_bos = t->split_specials = true;
    return t;
}

struct tokenizer *tokenizer_create_none(int32_t vocab_size, int32_t bos, int32_t eos)
{
    if (vocab_size < 1 || vocab_size > TOKENIZER_MAX_ID) return NULL;
    struct tokenizer *t = tokenizer_alloc(vocab_size);
    t->kind = TOKENIZER_KIND_NONE;
    t->bos = bos >= 0 && bos < vocab_size ? bos : -1;
    if (eos >= 0 && eos < vocab_size) tokenizer_set_eos(t, &eos, 1);
    /* Ids given by the caller are the prompt as is: nothing is added to them. */
    t->add_bos = false;
    return t;
}

bool tokenizer_has_text(const struct tokenizer *t)
{
    return t->kind != TOKENIZER_KIND_NONE;
}

void tokenizer_destroy(struct tokenizer *t)
{
    if (!t) return;
    pcre2_code_free(t->re);
    for (int32_t i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
    }
    free(t->norm);
    free(t->added);
    free(t->eos_ids);
    free(t->merges);
    free(t->name_slots);
    free(t->pool);
    free(t->toks);
    free(t);
}
