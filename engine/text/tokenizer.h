/*
 * tokenizer.h - BPE tokenizers: GPT-2 byte-level BPE from vocab.json + merges.txt (OPT),
 * Hugging Face tokenizer.json files (byte-level BPE with the model's own split regex:
 * Llama 3, Qwen2, GPT-NeoX; SentencePiece-style BPE with byte fallback: Llama 2,
 * Mistral, TinyLlama; docs/tokenizers.md says what is supported and what is refused),
 * and the byte tokenizer of the built-in dummy models.
 *
 * A tokenizer is immutable once built: every function that takes a const pointer may
 * run on any thread at the same time as any other (encode keeps its scratch state on
 * the caller's stack and heap). It owns the vocabulary, the merge ranks, the compiled
 * pre-tokenizer regex and, per id, the raw bytes and the display string of the token.
 *
 * Ids: OPT's vocab.json numbers tokens 0..50264 (<s>, <pad>, </s>, <unk> first,
 * <mask> last); the model's embedding has a few more rows than that. Every id in
 * 0..vocab_size-1 is valid; ids that no token string names decode to nothing.
 * Special tokens (<s>, <pad>, </s>, <unk>, <mask>; in a tokenizer.json the added tokens
 * marked special) stand for no bytes of text.
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
 * Load the tokenizer of a model folder: tokenizer.json when the folder has one (with
 * tokenizer_config.json and generation_config.json when present: bos_token, eos_token,
 * add_bos_token, bos_token_id, eos_token_id as an int or a list), else vocab.json +
 * merges.txt as tokenizer_load does (generation_config.json's EOS ids then join
 * "</s>"). A tokenizer.json with a component this code does not implement is refused
 * with ENG_EFORMAT naming it, never tokenized differently.
 * Returns 0 and a new tokenizer in *out (caller destroys), ENG_ENOTFOUND when the folder
 * has neither tokenizer.json nor vocab.json + merges.txt, or ENG_EIO / ENG_EFORMAT
 * with a one-line err_msg naming the file.
 * Thread: any.
 */
int tokenizer_load_dir(struct tokenizer **out, const char *dir);

/*
 * Load one tokenizer.json, with no config files beside it: the BOS is the one its
 * TemplateProcessing adds (none without one), the EOS the first of "</s>",
 * "<|endoftext|>", "<|end_of_text|>" that is a special token, if any.
 * Returns as tokenizer_load_dir (ENG_EIO for a missing file). Thread: any.
 */
int tokenizer_load_json(struct tokenizer **out, const char *path);

/*
 * The tokenizer of the dummy models: byte b is id 4 + b, ids 0..3 are <s>, <pad>, </s>,
 * <unk>, BOS = EOS = 2, and ids 260..vocab_size-1 decode to nothing.
 * Returns a new tokenizer (caller destroys), or NULL when vocab_size < 260.
 * Thread: any.
 */
struct tokenizer *tokenizer_create_bytes(int32_t vocab_size);

/*
 * The tokenizer of a model folder that has no tokenizer files, for id-only use (what
 * vLLM calls skip_tokenizer_init): every id in 0..vocab_size-1 is valid and stands
 * for no text, and encoding any text fails with ENG_EINVAL saying the model has no
 * tokenizer. bos and eos are config.json's (-1: none); tokenizer_has_text says
 * false, so what needs text can say so before it tries.
 * Returns a new tokenizer (caller destroys), or NULL when vocab_size < 1.
 * Thread: any.
 */
struct tokenizer *tokenizer_create_none(int32_t vocab_size, int32_t bos, int32_t eos);

/* Whether t turns text into ids and back: false only for tokenizer_create_none's.
 * Thread: any. */
bool tokenizer_has_text(const struct tokenizer *t);

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

/* Flags of tokenizer_encode_flags. */
enum tokenizer_encode_flag {
    /* Put the BOS in front when the model's files say a prompt gets one (OPT and the
     * byte tokenizer always; a tokenizer.json by its TemplateProcessing or
     * tokenizer_config.json's add_bos_token; Qwen2's none). */
    TOKENIZER_ENCODE_BOS = 1,
    /* Match special added tokens ("<|eot_id|>") in the text and give their ids, as a chat
     * template needs; without it they are plain text. Added tokens that are not special
     * are always matched, as Hugging Face does. The vocab.json tokenizers have no added
     * tokens, so for them the flag changes nothing. */
    TOKENIZER_ENCODE_SPECIAL = 2,
};

/*
 * tokenizer_encode with flags (enum tokenizer_encode_flag, or-ed): what
 * tokenizer_encode(t, text, len, add_bos, ...) does is tokenizer_encode_flags(t, text,
 * len, add_bos ? TOKENIZER_ENCODE_BOS : 0, ...). Invalid UTF-8 is encoded byte by byte
 * (byte tokens, or <0xXX> byte fallback) and round-trips; a SentencePiece vocabulary
 * without byte fallback gives <unk> for what it cannot spell, as Hugging Face does.
 * Returns as tokenizer_encode. Thread: any.
 */
int tokenizer_encode_flags(const struct tokenizer *t, const char *text, size_t len,
                           unsigned flags, int32_t **ids, int32_t *n_ids);

/*
 * Decode `n` ids into the raw bytes they stand for (not necessarily valid UTF-8; the
 * incremental detokenizer in detok.h makes text for users). Special tokens are left out
 * with skip_special, else written as their name ("</s>").
 * A SentencePiece tokenizer whose decoder strips one leading space (Llama 2's Strip)
 * drops it here, at the start of the whole output, as Hugging Face's decode does; the
 * per-token lookups below never strip.
 * Returns 0 with a new NUL-terminated buffer in *out (caller frees) and its length, not
 * counting the NUL, in *out_len; or ENG_EINVAL when an id is outside 0..vocab_size-1.
 * Thread: any.
 */
int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, int32_t n,
                     bool skip_special, char **out, size_t *out_len);

/* The number of valid ids (largest id + 1). Thread: any. */
int32_t tokenizer_vocab_size(const struct tokenizer *t);

/* The id put in front of a prompt (</s> = 2 for OPT), or -1 when the model has none
 * (Qwen2). Thread: any. */
int32_t tokenizer_bos(const struct tokenizer *t);

/* The first id that ends a generation (</s> = 2 for OPT), or -1 when the files name
 * none. Thread: any. */
int32_t tokenizer_eos(const struct tokenizer *t);

/*
 * Every id that ends a generation (Llama 3 Instruct: <|end_of_text|>, <|eom_id|>,
 * <|eot_id|>), in the files' order, the first being tokenizer_eos; *n gets the count
 * (0 when none). The array lives as long as the tokenizer. Thread: any.
 */
const int32_t *tokenizer_eos_ids(const struct tokenizer *t, int32_t *n);

/* Whether `id` is one of tokenizer_eos_ids. Thread: any. */
bool tokenizer_is_eos(const struct tokenizer *t, int32_t id);

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
