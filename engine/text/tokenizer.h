/*
 * tokenizer.h - GPT-2 byte-level BPE as OPT uses it, and the byte tokenizer of the
 * built-in dummy models.
 *
 * A tokenizer is immutable once built: every function that takes a const pointer may
 * run on any thread at the same time as any other (encode keeps its scratch state on
 * the caller's stack and heap). It owns the vocabulary, the merge ranks, the compiled
 * pre-tokenizer regex and, per id, the raw bytes and the display string of the token.
 *
 * Ids: OPT's vocab.json numbers tokens 0..50264 (<s>, <pad>, </s>, <unk> first,
 * <mask> last); the model's embedding has a few more rows than that. Every id in
 * 0..vocab_size-1 is valid; ids that no token string names decode to nothing.
 * Special tokens (<s>, <pad>, </s>, <unk>, <mask>) stand for no bytes of text.
 */
#ifndef H2O_TOKENIZER_H
#define H2O_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;

/*
 * Load a byte-level BPE tokenizer from a Hugging Face vocab.json (token string -> id)
 * and merges.txt (one "left right" merge per line, ranked by line; an optional first
 * line "#version ..."). BOS and EOS are the id of "</s>" (2 for OPT).
 * Returns 0 and a new tokenizer in *out (caller destroys), or ENG_EIO (a file cannot be
 * read) / ENG_EFORMAT (a file is malformed), with a one-line err_msg naming the file.
 * Thread: any.
 */
int tokenizer_load(struct tokenizer **out, const char *vocab_json_path,
                   const char *merges_txt_path);

/*
 * The tokenizer of the dummy models: byte b is id 4 + b, ids 0..3 are <s>, <pad>, </s>,
 * <unk>, BOS = EOS = 2, and ids 260..vocab_size-1 decode to nothing.
 * Returns a new tokenizer (caller destroys), or NULL when vocab_size < 260.
 * Thread: any.
 */
struct tokenizer *tokenizer_create_bytes(int32_t vocab_size);

/* Free a tokenizer; NULL is a no-op. Thread: any, once nothing else uses it. */
void tokenizer_destroy(struct tokenizer *t);

/*
 * Encode `len` bytes of `text` (any bytes: NULs and invalid UTF-8 are fine and
 * round-trip through tokenizer_decode). With add_bos the ids start with the BOS id, as
 * OPT's Hugging Face tokenizer does. Special-token strings in the text ("</s>") are
 * encoded as ordinary text, never as the special id, so a prompt cannot forge one.
 * Returns 0 with a new array in *ids (caller frees, never NULL) and its length in
 * *n_ids, or ENG_EINVAL for text == NULL with len > 0.
 * Thread: any.
 */
int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, bool add_bos,
                     int32_t **ids, int32_t *n_ids);

/*
 * Decode `n` ids into the raw bytes they stand for (not necessarily valid UTF-8; the
 * incremental detokenizer in detok.h makes text for users). Special tokens are left out
 * with skip_special, else written as their name ("</s>").
 * Returns 0 with a new NUL-terminated buffer in *out (caller frees) and its length, not
 * counting the NUL, in *out_len; or ENG_EINVAL when an id is outside 0..vocab_size-1.
 * Thread: any.
 */
int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, int32_t n,
                     bool skip_special, char **out, size_t *out_len);

/* The number of valid ids (largest id + 1). Thread: any. */
int32_t tokenizer_vocab_size(const struct tokenizer *t);

/* The id put in front of a prompt (</s> = 2 for OPT). Thread: any. */
int32_t tokenizer_bos(const struct tokenizer *t);

/* The id that ends a generation (</s> = 2 for OPT). Thread: any. */
int32_t tokenizer_eos(const struct tokenizer *t);

/* Whether `id` is a special token (<s>, <pad>, </s>, <unk>, <mask>). Thread: any. */
bool tokenizer_is_special(const struct tokenizer *t, int32_t id);

/*
 * The raw bytes token `id` stands for, with the byte-level mapping undone; *len gets
 * their count. Special tokens and ids outside the vocabulary give "" and 0. The
 * pointer (NUL-terminated) lives as long as the tokenizer.
 * Thread: any.
 */
const char *tokenizer_token_bytes(const struct tokenizer *t, int32_t id, size_t *len);

/*
 * The token's text for display (OpenAI logprobs "tokens", top_logprobs keys): its raw
 * bytes made valid UTF-8, every invalid or incomplete sequence replaced by U+FFFD (what
 * decoding the single token with Hugging Face gives); special tokens give their name
 * ("</s>"), unknown ids give "". Always valid UTF-8 and NUL-terminated; a token for the
 * byte 0x00 gives "" because the string stops at its NUL. Lives as long as the
 * tokenizer.
 * Thread: any.
 */
const char *tokenizer_token_str(const struct tokenizer *t, int32_t id);

/*
 * The token as the vocabulary spells it: its vocab.json string, in GPT-2's byte-level
 * alphabet ("\xC4\xA0Linux", i.e. "ĠLinux", for " Linux"; "Ċ" for "\n"), which is what
 * Hugging Face's convert_ids_to_tokens returns; special tokens give their name
 * ("</s>"). Ids that no vocabulary string names (the byte tokenizer's bytes and
 * made-up words) give their display string, tokenizer_token_str; ids outside the
 * vocabulary give "". The bytes are vocab.json's (valid UTF-8 in every real
 * vocabulary; a caller that needs the guarantee checks). Lives as long as the
 * tokenizer.
 * Thread: any.
 */
const char *tokenizer_token_name(const struct tokenizer *t, int32_t id);

/* What tokenizer_utf8_next found at the start of its input. */
enum tokenizer_utf8 {
    TOKENIZER_UTF8_CHAR,       /* one complete, valid character */
    TOKENIZER_UTF8_INVALID,    /* a maximal invalid subpart: one U+FFFD replaces it */
    TOKENIZER_UTF8_INCOMPLETE, /* a valid start that the input ends before completing */
};

/*
 * Classify the UTF-8 sequence at the start of s[0..n) (n >= 1) and store its length in
 * *len (for INCOMPLETE: n). Invalid input is cut into "maximal subparts" as Unicode
 * recommends (section 3.9, U+FFFD substitution), which is also what Python's
 * errors="replace" does, so replacing each INVALID run by one U+FFFD reproduces
 * Hugging Face's decode. Shared by the tokenizer and the incremental detokenizer.
 * Thread: any.
 */
enum tokenizer_utf8 tokenizer_utf8_next(const unsigned char *s, size_t n, size_t *len);

#endif
