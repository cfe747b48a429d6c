/*
 * tokenizer_impl.h - the tokenizer's tables, shared by the files that build them
 * (tokenizer_load.c: vocab.json + merges.txt and the byte tokenizer; tokenizer_json.c:
 * tokenizer.json and the folder's config files) and the file that reads them
 * (tokenizer.c).
 *
 * Internal to tokenizer*.c; everything else includes tokenizer.h and sees struct
 * tokenizer as opaque.
 * Invariant: a tokenizer is only written by its loader, before the loader returns it; from
 * then on it is immutable, so tokenizer.c may read it from any thread.
 */
#ifndef H2O_TOKENIZER_IMPL_H
#define H2O_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

struct tokenizer_tok {
    uint32_t name_off, name_len; /* the vocab.json string (byte-level alphabet) */
    uint32_t bytes_off, n_bytes; /* raw bytes; "" for special and unnamed ids */
    uint32_t str_off;            /* display string, valid UTF-8 */
    int32_t split_left;          /* the merge that produced this token, or -1: lets a */
    int32_t split_right;         /* special token made by BPE fall back to its parts */
    bool special;
    bool named;
    bool added; /* an added token: never a word of the model (ignore_merges, SP chars) */
};

struct tokenizer_merge {
    uint64_t key; /* left id << 32 | right id; TOKENIZER_NO_KEY when empty */
    int32_t rank;
    int32_t result;
};
#define TOKENIZER_NO_KEY UINT64_MAX

/* How words become symbols before the merges, and how tokens spell their bytes. */
enum tokenizer_kind {
    /* GPT-2's byte-level alphabet (OPT, Llama 3, Qwen2, GPT-NeoX; the byte tokenizer):
     * a word's bytes are the symbols. */
    TOKENIZER_KIND_BYTE_LEVEL,
    /* SentencePiece-style BPE (Llama 2, Mistral): a word's characters are the symbols,
     * U+2581 stands for a space, <0xXX> tokens for bytes no character token covers. */
    TOKENIZER_KIND_SENTENCEPIECE,
    /* No tokenizer files (tokenizer_create_none): ids only, no text either way. */
    TOKENIZER_KIND_NONE,
};

/* One step of a normalizer, applied in order to each piece between added tokens. */
enum tokenizer_norm_op {
    TOKENIZER_NORM_OP_NFC,
    TOKENIZER_NORM_OP_PREPEND, /* a in front of a non-empty piece */
    TOKENIZER_NORM_OP_REPLACE, /* every a by b */
};
struct tokenizer_norm {
    enum tokenizer_norm_op op;
    char *a, *b;
    size_t na, nb;
};

/* Metaspace pre-tokenizer's prepend schemes; NONE = no Metaspace. */
enum tokenizer_meta {
    TOKENIZER_META_NONE,
    TOKENIZER_META_NEVER,
    TOKENIZER_META_FIRST,
    TOKENIZER_META_ALWAYS
};

struct tokenizer {
    enum tokenizer_kind kind;
    int32_t vocab_size;
    int32_t bos, eos; /* -1 when the files name none */
    bool add_bos;     /* whether a prompt gets the BOS (the template, add_bos_token) */
    int32_t *eos_ids; /* [n_eos] every id that ends a generation; eos is eos_ids[0] */
    int32_t n_eos;
    struct tokenizer_tok *toks; /* [vocab_size] */
    char *pool;                 /* every string of toks, NUL-terminated; pool[0] = "" */
    size_t pool_len, pool_cap;

    uint32_t *name_slots; /* string -> id hash: id + 1, 0 = empty */
    uint32_t name_cap;    /* power of two */

    struct tokenizer_merge *merges; /* pair -> (rank, merged id) hash */
    uint32_t merge_cap;             /* power of two; 0 for the byte tokenizer */

    int32_t byte_tok[256]; /* the single-byte token of each byte (SP: <0xXX>), or -1 */
    uint16_t byte_cp[256]; /* byte-level: each byte's code point in the alphabet */

    pcre2_code *re; /* NULL for the byte tokenizer and SP, which need no regex words */

    /* tokenizer.json's options; the vocab.json loader leaves them at zero / false. */
    bool split_specials; /* OPT: a special token that BPE spells is emitted as its parts */
    bool ignore_merges;  /* a word that is a vocabulary entry is that one token */
    bool prefix_space;   /* ByteLevel add_prefix_space: " " before each piece */
    enum tokenizer_meta meta;
    bool meta_split; /* Metaspace split: each U+2581 starts a word */
    bool byte_fallback, fuse_unk;
    int32_t unk;     /* -1 when none */
    bool strip_lead; /* decode drops one leading space (SentencePiece's Strip) */
    struct tokenizer_norm *norm;
    int32_t n_norm;
    int32_t *added; /* [n_added] ids of the added tokens, longest content first */
    int32_t n_added;
    bool added_first[256]; /* whether some added token starts with this byte */
};

/* ---- shared by the builders (tokenizer_load.c, tokenizer_json.c) ----
 * Each writes a tokenizer that is not shared yet, so each runs on the builder's thread
 * only; the tokenizer owns whatever they add (freed by tokenizer_destroy). */

/* Ids are kept below this so that id + 1 and pair keys never overflow. */
#define TOKENIZER_MAX_ID (1 << 24)

/* The byte map's code points: 256 plus the 68 bytes moved past Latin-1. */
#define TOKENIZER_N_CP 324

/* The Unicode White_Space set, for regex classes: what \s means in Oniguruma (Hugging
 * Face tokenizers) and Python's regex; PCRE2's own \s also takes U+180E. */
#define TOKENIZER_WS                                                                       \
    "\\t\\n\\x{0B}\\f\\r "                                                                 \
    "\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"                \
    "\\x{205F}\\x{3000}"

/* A tokenizer of vocab_size unnamed ids, empty pool and name hash. */
struct tokenizer *tokenizer_alloc(int32_t vocab_size);
/* GPT-2's byte <-> code point map (byte_cp[b]; cp_byte[cp] or -1). */
void tokenizer_byte_map(uint16_t byte_cp[256], int16_t cp_byte[TOKENIZER_N_CP]);
/* The UTF-8 of a code point below U+0800 into dst; returns its length. */
size_t tokenizer_put_utf8(char *dst, uint32_t cp);
/* Append n bytes + NUL to the pool; returns the offset. */
uint32_t tokenizer_pool_add(struct tokenizer *t, const char *s, size_t n);
/* Append bytes made valid UTF-8 (U+FFFD for invalid runs); returns the offset. */
uint32_t tokenizer_pool_add_display(struct tokenizer *t, const char *s, size_t n);
uint32_t tokenizer_pow2_above(size_t n);
/* The id whose name is s[0..n), or -1. */
int32_t tokenizer_find_name(const struct tokenizer *t, const char *s, size_t n);
/* Hash id under its name; false when the name is taken. */
bool tokenizer_add_name(struct tokenizer *t, int32_t id);
/* Byte-level name -> raw bytes (room for n); false outside the alphabet. */
bool tokenizer_unmap(const int16_t cp_byte[TOKENIZER_N_CP], const char *name, size_t n,
                     char *raw, size_t *n_raw);
/* An empty merge hash for up to n merges. */
void tokenizer_merges_init(struct tokenizer *t, size_t n);
/* Merge (a, b) -> ab at rank; a repeated pair keeps its first rank. */
void tokenizer_add_merge(struct tokenizer *t, int32_t a, int32_t b, int32_t ab,
                         int32_t rank);
/* Compile the pre-tokenizer regex into t->re (NULL: GPT-2's); ENG_EUNSUPPORTED. */
int tokenizer_compile(struct tokenizer *t, const char *pattern);
/* Set the EOS ids (duplicates and negatives dropped, order kept; eos = the first). */
void tokenizer_set_eos(struct tokenizer *t, const int32_t *ids, int32_t n);
/* GPT-2's pre-tokenizer pattern (ByteLevel with use_regex). */
extern const char tokenizer_pattern[];

/* The merge hash's key for the pair (left, right): left id << 32 | right id. */
static inline uint64_t tokenizer_merge_key(int32_t left, int32_t right)
{
    return (uint64_t)left << 32 | (uint32_t)right;
}

/* The merge hash's hash of a key. */
static inline uint64_t tokenizer_hash_u64(uint64_t x)
{
    x ^= x >> 33; /* the splitmix64 / murmur3 finaliser */
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

#endif
