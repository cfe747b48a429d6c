/*
 * tokenizer.c - encoding and decoding with a built tokenizer (GPT-2 byte-level BPE,
 * OPT's tokenizer, or the dummy byte tokenizer), and the lookups of tokenizer.h.
 * tokenizer_load.c builds the tables this file reads.
 *
 * Encoding is Hugging Face's: the regex cuts the text into words, each word's bytes
 * become byte tokens, and the merge of lowest rank is applied until none applies. The
 * merge loop keeps candidate pairs in a binary heap ordered by (rank, position), which
 * is the order GPT-2's "merge the best bigram everywhere" loop applies them in, but
 * costs O(k log k) for a word of k bytes instead of O(k^2), so a megabyte of one
 * letter encodes in a fraction of a second. Invalid UTF-8, which Hugging Face never
 * sees (Python strings cannot hold it), is skipped by the regex; each run of it becomes
 * a word of its own, so it still encodes byte-level and round-trips.
 * Owns: nothing; encode's scratch is allocated and freed within each call.
 * Invariant: the tokenizer is only read here, so every function may run on any thread
 * at once.
 */
#include "tokenizer.h"

#include "err.h"
#include "tokenizer_impl.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 ---- */

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

/* ---- encoding ---- */

/* The merge of the pair (left, right), or NULL when the merges have none. */
static const struct tokenizer_merge *tokenizer_find_merge(const struct tokenizer *t,
                                                          int32_t left, int32_t right)
{
    uint64_t key = tokenizer_merge_key(left, right);
    uint32_t mask = t->merge_cap - 1;
    for (uint32_t i = (uint32_t)tokenizer_hash_u64(key) & mask;; i = (i + 1) & mask) {
        const struct tokenizer_merge *m = &t->merges[i];
        if (m->key == key) return m;
        if (m->key == TOKENIZER_NO_KEY) return NULL;
    }
}

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

const char *tokenizer_token_name(const struct tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->vocab_size) return t->pool;
    const struct tokenizer_tok *tok = &t->toks[id];
    return t->pool + (tok->named ? tok->name_off : tok->str_off);
}
