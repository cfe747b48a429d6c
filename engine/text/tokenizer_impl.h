/*
 * tokenizer_impl.h - the tokenizer's tables, shared by the file that builds them
 * (tokenizer_load.c) and the file that reads them (tokenizer.c).
 *
 * Internal to tokenizer*.c; everything else includes tokenizer.h and sees struct
 * tokenizer as opaque.
 * Invariant: a tokenizer is only written by tokenizer_load.c, before tokenizer_load or
 * tokenizer_create_bytes returns it; from then on it is immutable, so tokenizer.c may
 * read it from any thread.
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
};

struct tokenizer_merge {
    uint64_t key; /* left id << 32 | right id; TOKENIZER_NO_KEY when empty */
    int32_t rank;
    int32_t result;
};
#define TOKENIZER_NO_KEY UINT64_MAX

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
