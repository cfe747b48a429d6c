/*
 * tokenizer.c - encoding and decoding with a built tokenizer (GPT-2 byte-level BPE from
 * vocab.json or tokenizer.json, SentencePiece-style BPE from tokenizer.json, or the
 * dummy byte tokenizer), and the lookups of tokenizer.h. tokenizer_load.c and
 * tokenizer_json.c build the tables this file reads.
 *
 * Encoding is Hugging Face's pipeline: added tokens are cut out first (leftmost, then
 * longest); each piece between them is normalized (NFC, Prepend, Replace), cut into
 * words (the byte-level regex, or Metaspace), and each word's symbols (its bytes in
 * the byte-level alphabet, or its characters with <0xXX> byte fallback) are merged,
 * the merge of lowest rank first, until none applies. The
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

#include <utf8proc.h>

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
    char *name; /* a word in the byte alphabet, for ignore_merges */
    size_t name_cap;
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
    if (t->split_specials && tok->special && tok->split_left >= 0) {
        tokenizer_emit(t, tok->split_left, out);
        tokenizer_emit(t, tok->split_right, out);
        return;
    }
    tokenizer_ids_push(out, id);
}

static void tokenizer_work_grow(struct tokenizer_work *w, size_t k)
{
    CHECK(k < INT32_MAX / 2);
    if (k <= w->cap) return;
    w->cap = MAX(k, 2 * w->cap);
    w->sym = xrealloc(w->sym, w->cap * sizeof *w->sym);
    w->next = xrealloc(w->next, w->cap * sizeof *w->next);
    w->prev = xrealloc(w->prev, w->cap * sizeof *w->prev);
}

/* Apply the merges to the n symbols in w->sym and emit the result. */
static void tokenizer_bpe_merge(const struct tokenizer *t, struct tokenizer_work *w,
                                int32_t n, struct tokenizer_ids *out)
{
    if (n == 0) return;
    for (int32_t i = 0; i < n; i++) {
        w->prev[i] = i - 1;
        w->next[i] = i + 1 < n ? i + 1 : -1;
    }
    w->heap_n = 0;
    if (t->merge_cap)
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

/* A byte-level word: its bytes are the symbols. */
static void tokenizer_bpe_word(const struct tokenizer *t, const unsigned char *s, size_t k,
                               struct tokenizer_work *w, struct tokenizer_ids *out)
{
    if (k == 1 || !t->merge_cap) {
        for (size_t i = 0; i < k; i++)
            tokenizer_ids_push(out, t->byte_tok[s[i]]);
        return;
    }
    if (t->ignore_merges) {
        /* Llama 3: a word the vocabulary spells whole is that token, whatever the merges
         * would make of it. The vocabulary spells it in the byte alphabet. */
        if (2 * k > w->name_cap) w->name = xrealloc(w->name, w->name_cap = 2 * k + 16);
        size_t m = 0;
        for (size_t i = 0; i < k; i++)
            m += tokenizer_put_utf8(w->name + m, t->byte_cp[s[i]]);
        int32_t id = tokenizer_find_name(t, w->name, m);
        if (id >= 0 && !t->toks[id].added) {
            tokenizer_ids_push(out, id);
            return;
        }
    }
    tokenizer_work_grow(w, k);
    for (size_t i = 0; i < k; i++)
        w->sym[i] = t->byte_tok[s[i]];
    tokenizer_bpe_merge(t, w, (int32_t)k, out);
}

/*
 * A SentencePiece-style word: its characters are the symbols, and a character the
 * vocabulary lacks becomes its bytes' <0xXX> tokens (byte_fallback), else <unk>, one
 * for a run of them with fuse_unk, else nothing (Hugging Face's BPE drops it). Bytes of
 * invalid UTF-8, which Hugging Face never sees, take the same way, so they round-trip
 * through the byte tokens.
 */
static void tokenizer_sp_word(const struct tokenizer *t, const unsigned char *s, size_t k,
                              struct tokenizer_work *w, struct tokenizer_ids *out)
{
    tokenizer_work_grow(w, k);
    int32_t n = 0;
    for (size_t i = 0; i < k;) {
        size_t len;
        enum tokenizer_utf8 kind = tokenizer_utf8_next(s + i, k - i, &len);
        int32_t id = -1;
        if (kind == TOKENIZER_UTF8_CHAR) {
            id = tokenizer_find_name(t, (const char *)s + i, len);
            if (id >= 0 && t->toks[id].added) id = -1;
        }
        if (id >= 0) {
            w->sym[n++] = id;
        } else {
            bool bytes = t->byte_fallback;
            for (size_t j = 0; j < len; j++)
                bytes &= t->byte_tok[s[i + j]] >= 0;
            if (bytes) {
                for (size_t j = 0; j < len; j++)
                    w->sym[n++] = t->byte_tok[s[i + j]];
            } else if (t->unk >= 0 && !(t->fuse_unk && n > 0 && w->sym[n - 1] == t->unk)) {
                w->sym[n++] = t->unk;
            }
        }
        i += len;
    }
    tokenizer_bpe_merge(t, w, n, out);
}

/* Per-call state of an encode. */
struct tokenizer_enc {
    const struct tokenizer *t;
    struct tokenizer_work w;
    struct tokenizer_ids out;
    pcre2_match_data *md;
    char *buf[2]; /* normalizer scratch, used in turn */
    size_t cap[2];
};

static char *tokenizer_enc_buf(struct tokenizer_enc *e, int which, size_t n)
{
    if (n + 1 > e->cap[which])
        e->buf[which] = xrealloc(e->buf[which], e->cap[which] = 2 * n + 64);
    return e->buf[which];
}

/*
 * NFC of s[0..n) into dst's buffer: each valid run through utf8proc, invalid bytes as
 * they are (Hugging Face never sees them; keeping them keeps the round trip).
 */
static size_t tokenizer_nfc(struct tokenizer_enc *e, int dst, const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t run = i, len;
        while (run < n && tokenizer_utf8_next((const unsigned char *)s + run, n - run,
                                              &len) == TOKENIZER_UTF8_CHAR)
            run += len;
        if (run > i) {
            utf8proc_uint8_t *nfc = NULL;
            utf8proc_ssize_t m =
                utf8proc_map((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(run - i),
                             &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            CHECK(m >= 0); /* the run is valid UTF-8, and small allocations abort */
            char *d = tokenizer_enc_buf(e, dst, k + (size_t)m);
            memcpy(d + k, nfc, (size_t)m);
            k += (size_t)m;
            free(nfc);
            i = run;
        }
        if (i < n) {
            tokenizer_utf8_next((const unsigned char *)s + i, n - i, &len);
            char *d = tokenizer_enc_buf(e, dst, k + len);
            memcpy(d + k, s + i, len);
            k += len;
            i += len;
        }
    }
    return k;
}

/* Every a in s[0..n) replaced by b, into dst's buffer; a prefix b when a is NULL. */
static size_t tokenizer_replace(struct tokenizer_enc *e, int dst, const char *s, size_t n,
                                const char *a, size_t na, const char *b, size_t nb)
{
    size_t k = 0;
    char *d = tokenizer_enc_buf(e, dst, nb + n);
    if (!a) {
        memcpy(d, b, nb);
        memcpy(d + nb, s, n);
        return nb + n;
    }
    for (size_t i = 0; i < n;) {
        if (i + na <= n && memcmp(s + i, a, na) == 0) {
            d = tokenizer_enc_buf(e, dst, k + nb + (n - i));
            memcpy(d + k, b, nb);
            k += nb;
            i += na;
        } else {
            d[k++] = s[i++];
        }
    }
    return k;
}

/* Cut bytes into words with the regex, or take them whole without one. */
static int tokenizer_bytes_words(struct tokenizer_enc *e, const unsigned char *u,
                                 size_t len)
{
    const struct tokenizer *t = e->t;
    if (!t->re) {
        /* ByteLevel(use_regex=false) alone: the whole piece is one word; the byte
         * tokenizer has no merges, so there each byte is its token. */
        tokenizer_bpe_word(t, u, len, &e->w, &e->out);
        return 0;
    }
    size_t pos = 0;
    while (pos < len) {
        size_t start = len, end = len;
        int rc = pcre2_match(t->re, u, len, pos, 0, e->md, NULL);
        if (rc >= 0) {
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
            start = ov[0];
            end = ov[1];
            /* Every alternative of the patterns we accept consumes a character; an empty
             * match would loop, so it takes the next character as a word instead. */
            CHECK(start >= pos);
            if (end == start) {
                size_t l;
                tokenizer_utf8_next(u + start, len - start, &l);
                end = start + l;
            }
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return err_set(ENG_EINVAL, "tokenizer_encode: PCRE2 failed at byte %zu: %s",
                           pos, (const char *)msg);
        }
        /* Bytes the regex skipped are invalid UTF-8 or (Split's Isolated behaviour)
         * text between matches; either way they form one word. */
        if (start > pos) tokenizer_bpe_word(t, u + pos, start - pos, &e->w, &e->out);
        if (end > start) tokenizer_bpe_word(t, u + start, end - start, &e->w, &e->out);
        pos = end;
    }
    return 0;
}

#define TOKENIZER_META_CH "\xE2\x96\x81" /* U+2581, SentencePiece's space */

/*
 * One piece of text between added tokens (at_start: it begins the input): normalize,
 * pre-tokenize, BPE. Hugging Face normalizes each such piece on its own, which is why
 * Llama 2's Prepend puts a "▁" after every special token too.
 */
static int tokenizer_piece(struct tokenizer_enc *e, const char *s, size_t n, bool at_start)
{
    const struct tokenizer *t = e->t;
    int cur = 0;
    for (int32_t i = 0; i < t->n_norm; i++) {
        const struct tokenizer_norm *nm = &t->norm[i];
        if (nm->op == TOKENIZER_NORM_OP_NFC)
            n = tokenizer_nfc(e, cur, s, n);
        else if (nm->op == TOKENIZER_NORM_OP_PREPEND && n == 0)
            continue;
        else if (nm->op == TOKENIZER_NORM_OP_PREPEND)
            n = tokenizer_replace(e, cur, s, n, NULL, 0, nm->a, nm->na);
        else
            n = tokenizer_replace(e, cur, s, n, nm->a, nm->na, nm->b, nm->nb);
        s = e->buf[cur];
        cur ^= 1;
    }
    if (n == 0) return 0;
    if (t->kind == TOKENIZER_KIND_BYTE_LEVEL) {
        if (t->prefix_space && s[0] != ' ') {
            n = tokenizer_replace(e, cur, s, n, NULL, 0, " ", 1);
            s = e->buf[cur];
        }
        return tokenizer_bytes_words(e, (const unsigned char *)s, n);
    }
    if (t->meta != TOKENIZER_META_NONE) {
        n = tokenizer_replace(e, cur, s, n, " ", 1, TOKENIZER_META_CH, 3);
        s = e->buf[cur];
        cur ^= 1;
        bool pre = t->meta == TOKENIZER_META_ALWAYS ||
                   (t->meta == TOKENIZER_META_FIRST && at_start);
        if (pre && !(n >= 3 && memcmp(s, TOKENIZER_META_CH, 3) == 0)) {
            n = tokenizer_replace(e, cur, s, n, NULL, 0, TOKENIZER_META_CH, 3);
            s = e->buf[cur];
        }
    }
    const unsigned char *u = (const unsigned char *)s;
    if (!t->meta_split) {
        tokenizer_sp_word(t, u, n, &e->w, &e->out);
        return 0;
    }
    /* Metaspace's split: each "▁" begins a word (merged with what follows it). */
    size_t w0 = 0;
    for (size_t i = 1; i + 3 <= n; i++)
        if (memcmp(u + i, TOKENIZER_META_CH, 3) == 0) {
            tokenizer_sp_word(t, u + w0, i - w0, &e->w, &e->out);
            w0 = i;
        }
    tokenizer_sp_word(t, u + w0, n - w0, &e->w, &e->out);
    return 0;
}

/* The longest added token at u[0..n) that the flags allow, or -1; its length in *len. */
static int32_t tokenizer_added_at(const struct tokenizer *t, const unsigned char *u,
                                  size_t n, bool specials, size_t *len)
{
    for (int32_t i = 0; i < t->n_added; i++) {
        const struct tokenizer_tok *tok = &t->toks[t->added[i]];
        if (tok->special && !specials) continue;
        if (tok->name_len <= n && memcmp(u, t->pool + tok->name_off, tok->name_len) == 0) {
            *len = tok->name_len;
            return t->added[i];
        }
    }
    return -1;
}

int tokenizer_encode_flags(const struct tokenizer *t, const char *text, size_t len,
                           unsigned flags, int32_t **ids, int32_t *n_ids)
{
    if (!text && len) return err_set(ENG_EINVAL, "tokenizer_encode: NULL text");
    if (t->kind == TOKENIZER_KIND_NONE)
        return err_set(ENG_EINVAL, "the model has no tokenizer (its folder has no "
                                   "tokenizer.json or vocab.json + merges.txt): give token "
                                   "ids instead of text");
    if (len >= INT32_MAX / 4)
        return err_set(ENG_EINVAL, "tokenizer_encode: text of %zu bytes is too long", len);
    struct tokenizer_enc e = {.t = t, .out = {xmalloc(64 * sizeof(int32_t)), 0, 64}};
    if ((flags & TOKENIZER_ENCODE_BOS) && t->add_bos && t->bos >= 0)
        tokenizer_ids_push(&e.out, t->bos);
    const unsigned char *u = (const unsigned char *)text;
    if (t->re) {
        e.md = pcre2_match_data_create_from_pattern(t->re, NULL);
        CHECK(e.md);
    }
    /* Added tokens are found first, leftmost and then longest, as Hugging Face's
     * added vocabulary does; the text between them is encoded piece by piece. */
    bool specials = flags & TOKENIZER_ENCODE_SPECIAL;
    int err = 0;
    size_t piece = 0;
    for (size_t i = 0; i < len && !err;) {
        size_t alen;
        int32_t id = t->added_first[u[i]]
                         ? tokenizer_added_at(t, u + i, len - i, specials, &alen)
                         : -1;
        if (id < 0) {
            i++;
            continue;
        }
        err = tokenizer_piece(&e, text + piece, i - piece, piece == 0);
        tokenizer_ids_push(&e.out, id);
        i += alen;
        piece = i;
    }
    if (!err && len) err = tokenizer_piece(&e, text + piece, len - piece, piece == 0);
    pcre2_match_data_free(e.md);
    free(e.w.sym);
    free(e.w.next);
    free(e.w.prev);
    free(e.w.heap);
    free(e.w.name);
    free(e.buf[0]);
    free(e.buf[1]);
    if (err) {
        free(e.out.v);
        return err;
    }
    CHECK(e.out.n <= INT32_MAX);
    *ids = e.out.v;
    *n_ids = (int32_t)e.out.n;
    return 0;
}

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, bool add_bos,
                     int32_t **ids, int32_t *n_ids)
{
    return tokenizer_encode_flags(t, text, len, add_bos ? TOKENIZER_ENCODE_BOS : 0, ids,
                                  n_ids);
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
    /* SentencePiece's Strip decoder drops one leading space of the fused output: the
     * "▁" that Prepend put before the first word. */
    if (t->strip_lead && k > 0 && buf[0] == ' ') memmove(buf, buf + 1, --k);
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

const int32_t *tokenizer_eos_ids(const struct tokenizer *t, int32_t *n)
{
    *n = t->n_eos;
    return t->eos_ids;
}

bool tokenizer_is_eos(const struct tokenizer *t, int32_t id)
{
    for (int32_t i = 0; i < t->n_eos; i++)
        if (t->eos_ids[i] == id) return true;
    return false;
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
