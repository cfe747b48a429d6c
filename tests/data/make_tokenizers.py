#!/usr/bin/env python3
"""make_tokenizers.py - tiny tokenizer.json folders and the ids Hugging Face gives.

Trains four small BPE tokenizers with the `tokenizers` package, each configured the way
the real files of a model family are (normalizer, pre-tokenizer, model options,
decoder, post-processor, added tokens), writes them with hand-written
tokenizer_config.json / generation_config.json under tests/data/tokenizers/<kind>/,
and records the ids `tokenizers` gives for a few thousand generated strings:

  llama3  byte-level BPE, Split(Llama 3 regex) + ByteLevel(use_regex=false),
          ignore_merges, <|begin_of_text|> added by TemplateProcessing, three EOS ids
  qwen2   NFC, Split(Qwen2 regex) + ByteLevel(use_regex=false), no BOS
  neox    NFC, ByteLevel(use_regex=true) (the GPT-2 regex), as Pythia / GPT-NeoX
  llama2  SentencePiece-style BPE: Prepend + Replace normalizers, byte_fallback,
          fuse_unk, <0xXX> byte tokens, <s> added by TemplateProcessing
  llama2-metaspace  the same model with a Metaspace pre-tokenizer (prepend_scheme
                    first, no split) and no normalizer: Mistral's newer files
  llama2-metaspace-old  Metaspace as files before tokenizers 0.14 wrote it
                    (add_prefix_space, split at every "▁")
  neox-prefix       neox with ByteLevel(add_prefix_space=true)

The strings are in tests/data/tokenizers/texts.jsonl (one JSON string per line, shared
by every kind); each kind's ids.bin holds, per string, the ids of encode(text) with
special strings as plain text (encode_special_tokens = True) and, for strings that
contain '<', the ids with special tokens parsed (the default). Format: per record
u16 count then count u16 ids, little endian; plain record then (if '<' in text) the
special record; the variants cover the first 600 (400) strings only. Every encode uses add_special_tokens=True (the BOS the template adds).

Run in a venv (requirements-tokenizers.txt):
  /usr/bin/python3 -m venv /tmp/tokvenv
  /tmp/tokvenv/bin/pip install -r tests/data/requirements-tokenizers.txt
  /tmp/tokvenv/bin/python tests/data/make_tokenizers.py
The trainer breaks ties in no fixed order, so a rerun may train slightly different
(but self-consistent) folders; the committed ones are the reference.
"""
import json
import os
import random
import struct
import sys
import unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizers")

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

WORDS = ("the of and to in is it that was for on are with as his they at be this from "
         "have or by one had not but what all were when we there can an your which their "
         "said if do will each about how up out them then she many some so these would "
         "other into has more her two like him see time could no make than first been "
         "its who now people my made over did down only way find use may water long "
         "little very after words called just where most know get through back much "
         "before go good new write our used me man too any day same right look think "
         "also around another came come work three word must because does part even "
         "place well such here take why things help put years different away again off "
         "went old number great tell men say small every found still between name should "
         "home big give air line set own under read last never us left end along while "
         "might next sound below saw something thought both few those always looked show "
         "large often together asked house don't world going want school important until "
         "form food keep children feet land side without boy once animals life enough "
         "took sometimes four head above kind began almost live page got earth need far "
         "hand high year mother light parts country father let night following picture "
         "being study second eyes soon times story boys since white days ever paper hard "
         "near sentence better best across during today others however sure means knew "
         "it's try told young miles sun ways thing whole hear example heard several change "
         "answer room sea against top turned learn point city play toward five using "
         "himself usually money seen car morning I'm body upon family later turn move "
         "face door cut done group true leave color red friends pulled walked").split()
CODE = [
    "def main(argv):\n    return 0\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i] * b[i];\n}\n",
    "if x == None: raise ValueError('bad')\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }\n",
    "const f = (a, b) => a + b; // add\n",
    "SELECT id, name FROM users WHERE age >= 18;\r\n",
    "    x = [1, 2, 3]\n    y = {k: v for k, v in d.items()}\n",
    "fn parse(s: &str) -> Result<u32, Error> { s.parse() }\n",
    "<div class=\"a\">Hello &amp; bye</div>\n",
    "$ ls -la /usr/lib | grep -E '^d' && echo ok\n",
]
CJK = ("的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生"
       "日本語のテキストです。東京は大きい都市。한국어 문장입니다. 中文标点，句号。")
EMOJI = ["😀", "🎉", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "🚀", "✨", "🤖", "🙂"]
ACCENTS = ["café", "cafe\u0301", "naïve", "nai\u0308ve", "Ångström", "A\u030angstro\u0308m",
           "résumé", "ﬁ", "Ω", "Å", "Ḍ̇", "ǅ", "Straße", "İstanbul", "ſ", "ΣΑΣ", "ǰ"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u3000",
          "\u2003", "\u200b", "\u180e", "\u0085", "\u2028", " \t "]
SPECIALS = ["<|sep|>", "<s>", "</s>", "<unk>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>",
            "<|im_start|>", "<|im_end|>", "<|padding|>", "<|start_header_id|>",
            "<|reserved_special_token_3|>", "<0x41>", "<|end_of_text|>"]
# Letters with combining marks (\p{M} is neither \p{L} nor \p{N}), other number kinds
# (\p{N}: superscripts, Roman numerals, fullwidth and Arabic-Indic digits), scripts
# without spaces, and the case-insensitive contractions of the split regexes.
SCRIPTS = ["नमस्ते दुनिया", "مرحبا بالعالم", "สวัสดีครับ", "각", "x²+y³", "Ⅻ", "１２３４",
           "٣٤٥", "Ꭰ", "ǈ", "'S", "'LL", "'rE", "'ſ", "don'T", "Ça va", "ﬀ", "e\u0301\u0301",
           "\U0001F600\u200d", "a\u034fb", "\ufeffBOM"]
PUNCT = list(".,;:!?'\"()[]{}-_/\\@#$%^&*+=<>|~`") + ["...", "--", "'s", "'LL", "'Re",
                                                     "n't", "’s", "…", "«", "»", "—"]


def corpus(rng):
    """A small built-in training corpus: English-like prose, code, CJK, emoji."""
    lines = []
    for _ in range(3000):
        n = rng.randint(4, 18)
        ws = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3: ws[0] = ws[0].capitalize()
        s = " ".join(ws)
        if rng.random() < 0.2: s += " " + str(rng.randint(0, 99999))
        s += rng.choice([".", ",", "!", "?", ";", ""])
        lines.append(s)
    for _ in range(200):
        lines.append(rng.choice(CODE))
        lines.append("".join(rng.choice(CJK) for _ in range(rng.randint(3, 20))))
        lines.append(" ".join(rng.choice(ACCENTS) for _ in range(3)))
    # Only some emoji make it into training, so that others need byte fallback.
    lines += [" ".join(EMOJI[:4])] * 20
    return lines


def piece(rng):
    r = rng.random()
    if r < 0.30: return rng.choice(WORDS) if rng.random() < 0.8 else rng.choice(WORDS).upper()
    if r < 0.38: return str(rng.randint(0, 10 ** rng.randint(1, 8)))
    if r < 0.48: return rng.choice(SPACES)
    if r < 0.58: return rng.choice(PUNCT)
    if r < 0.64: return rng.choice(CODE)
    if r < 0.72: return "".join(rng.choice(CJK) for _ in range(rng.randint(1, 6)))
    if r < 0.78: return rng.choice(EMOJI)
    if r < 0.81: return rng.choice(ACCENTS)
    if r < 0.84: return rng.choice(SCRIPTS)
    if r < 0.90: return rng.choice(SPECIALS)
    if r < 0.95:  # any code point, skipping surrogates (tokenizers takes str -> Rust str)
        cp = rng.choice([rng.randint(0x20, 0x7FF), rng.randint(0x800, 0xD7FF),
                         rng.randint(0xE000, 0xFFFD), rng.randint(0x10000, 0x10FFFF)])
        return chr(cp)
    return chr(rng.randint(1, 31))


def texts(rng, n):
    out = ["", " ", "Hello world", " Hello world", "Hello  world\n\n", "I'm here, aren't you?",
           "<s>Hello</s>", "<|begin_of_text|>Hi<|eot_id|>", "<|im_start|>user\nhi<|im_end|>\n",
           "a<|endoftext|>b", "日本語", "😀😀", "cafe\u0301 café", "   leading", "trailing   ",
           "12345678901", "\n", "\t\t", "x" * 300, "ab" * 200 + " " + "9" * 50]
    while len(out) < n:
        k = rng.randint(1, 6)
        out.append("".join(piece(rng) for _ in range(k)))
    return out


def byte_level_added(tok, specials):
    tok.add_special_tokens(specials)


def train(tok, trainer, lines):
    tok.train_from_iterator(lines, trainer=trainer)


def make_llama3(lines):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_1|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|reserved_special_token_2|>", "<|eom_id|>", "<|eot_id|>",
                "<|reserved_special_token_3|>"]
    trainer = trainers.BpeTrainer(vocab_size=1500, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    train(tok, trainer, lines)
    tok.add_special_tokens(specials)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    eos = [tok.token_to_id(s) for s in ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"]]
    cfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
           "tokenizer_class": "PreTrainedTokenizerFast"}
    gen = {"bos_token_id": bos, "eos_token_id": eos, "do_sample": True}
    return tok, cfg, gen


def make_qwen2(lines):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=1500, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    train(tok, trainer, lines)
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    cfg = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
           "add_bos_token": False, "tokenizer_class": "Qwen2Tokenizer"}
    gen = {"bos_token_id": eot, "eos_token_id": [im_end, eot]}
    return tok, cfg, gen


def make_neox(lines):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                 use_regex=True)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                              use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=1200, show_progress=False,
                                  special_tokens=["<|endoftext|>", "<|padding|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    train(tok, trainer, lines)
    # Pythia's added tokens also hold runs of spaces, not special and normalized, which
    # Hugging Face matches in any text; and one not normalized, for the other path.
    tok.add_tokens([AddedToken(" " * k, normalized=True, special=False) for k in (2, 3, 4, 8)]
                   + [AddedToken("<|sep|>", normalized=False, special=False)])
    cfg = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
           "unk_token": "<|endoftext|>", "add_bos_token": False, "add_eos_token": False,
           "tokenizer_class": "GPTNeoXTokenizer"}
    gen = {"bos_token_id": 0, "eos_token_id": 0}
    return tok, cfg, gen


def make_llama2(lines):
    byte_toks = ["<0x%02X>" % b for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    # Training needs words; the real files have no pre-tokenizer, so it goes after.
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never",
                                                 split=True)
    trainer = trainers.BpeTrainer(vocab_size=1800, show_progress=False, limit_alphabet=150,
                                  special_tokens=["<unk>", "<s>", "</s>"] + byte_toks)
    train(tok, trainer, lines)
    j = json.loads(tok.to_str())
    j["pre_tokenizer"] = None
    # <0xXX> are ordinary vocabulary entries in Llama 2, not added tokens.
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] not in byte_toks]
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    tok = Tokenizer.from_str(json.dumps(j))
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
           "add_bos_token": True, "add_eos_token": False,
           "tokenizer_class": "LlamaTokenizer"}
    gen = {"bos_token_id": 1, "eos_token_id": 2}
    return tok, cfg, gen


def make_llama2_metaspace(lines):
    """Newer SentencePiece files (transformers' LlamaConverter with legacy=False, as
    Mistral's newer files are): no normalizer, a Metaspace pre-tokenizer that prepends
    before the first piece only and does not split; llama2's decoder."""
    tok, cfg, gen = make_llama2(lines)
    j = json.loads(tok.to_str())
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                          "split": False}
    return Tokenizer.from_str(json.dumps(j)), cfg, gen


def make_llama2_metaspace_old(lines):
    """Files written before tokenizers 0.14: Metaspace with add_prefix_space instead of
    prepend_scheme, and no split field (so every "▁" starts a word), as pre-tokenizer
    and as decoder (which prints <0xXX> tokens as their names)."""
    tok, cfg, gen = make_llama2(lines)
    j = json.loads(tok.to_str())
    meta = {"type": "Metaspace", "replacement": "▁", "add_prefix_space": True}
    j["normalizer"] = None
    j["pre_tokenizer"] = meta
    j["decoder"] = dict(meta)
    return Tokenizer.from_str(json.dumps(j)), cfg, gen, j


def make_neox_prefix(lines):
    """GPT-NeoX's pipeline with ByteLevel(add_prefix_space=true), as GPT-2-style files
    that want a space before the first word have it."""
    tok, cfg, gen = make_neox(lines)
    j = json.loads(tok.to_str())
    j["pre_tokenizer"]["add_prefix_space"] = True
    # Only the special tokens: the prefix space goes before every piece between added
    # tokens, and the test's round-trip rule knows only the text's start.
    j["added_tokens"] = [a for a in j["added_tokens"] if a["special"]]
    j["decoder"]["add_prefix_space"] = True
    return Tokenizer.from_str(json.dumps(j)), cfg, gen


def encode(tok, text, parse_special):
    tok.encode_special_tokens = not parse_special
    return tok.encode(text, add_special_tokens=True).ids


def main():
    rng = random.Random(19)
    lines = corpus(rng)
    cases = texts(random.Random(20), 2000)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "texts.jsonl"), "w", encoding="utf-8") as f:
        for s in cases:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    # The variants cover the first strings only, to keep the data small.
    for name, make, n_cases in [("llama3", make_llama3, 2000), ("qwen2", make_qwen2, 2000),
                                ("neox", make_neox, 2000), ("llama2", make_llama2, 2000),
                                ("llama2-metaspace", make_llama2_metaspace, 600),
                                ("llama2-metaspace-old", make_llama2_metaspace_old, 400),
                                ("neox-prefix", make_neox_prefix, 600)]:
        made = make(lines)
        tok, cfg, gen = made[:3]
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        # A file in an old form is written as it was given; to_str would rewrite it.
        j = made[3] if len(made) > 3 else json.loads(tok.to_str())
        if name in ("llama3", "neox", "neox-prefix"):
            # The older spelling of merges, "left right" strings, which byte-level
            # tokens allow (they hold no space); the others keep [left, right] arrays.
            j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
            tok = Tokenizer.from_str(json.dumps(j))
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(json.dumps(j, ensure_ascii=False, separators=(",", ":")))
        for fn, obj in [("tokenizer_config.json", cfg), ("generation_config.json", gen)]:
            with open(os.path.join(d, fn), "w", encoding="utf-8") as f:
                json.dump(obj, f, indent=1, ensure_ascii=False)
                f.write("\n")
        out = bytearray()
        n_ids = 0
        for s in cases[:n_cases]:
            modes = [False, True] if "<" in s else [False]
            for m in modes:
                ids = encode(tok, s, m)
                assert len(ids) < 65536 and all(i < 65536 for i in ids)
                out += struct.pack("<H", len(ids)) + struct.pack("<%dH" % len(ids), *ids)
                n_ids += len(ids)
            tok.encode_special_tokens = False
        with open(os.path.join(d, "ids.bin"), "wb") as f:
            f.write(out)
        print("%s: vocab %d, %d strings, %d ids" % (name, tok.get_vocab_size(), n_cases,
                                                   n_ids), file=sys.stderr)


if __name__ == "__main__":
    main()
