/*
 * tokenizer_json.c - building a tokenizer from a Hugging Face tokenizer.json, and the
 * folder loader that reads it (or vocab.json + merges.txt) with the folder's
 * tokenizer_config.json and generation_config.json.
 *
 * A tokenizer.json is a pipeline: added tokens, normalizer, pre-tokenizer, model,
 * post-processor, decoder. This file maps the pipelines that Llama 2 / 3, Mistral,
 * TinyLlama, Qwen2 and GPT-NeoX ship onto the tables of tokenizer_impl.h and refuses
 * everything else with ENG_EFORMAT naming the component: a tokenizer that silently
 * splits text differently from the model's own would be worse than none.
 * Owns: nothing past the call; the tokenizer it builds goes to the caller.
 * Invariant: as tokenizer_load.c's: every byte has a token (byte-level) or the text
 * takes <0xXX> / <unk> (SentencePiece), so every byte string encodes.
 */
#include "tokenizer.h"

#include "err.h"
#include "tokenizer_impl.h"
#include "util.h"

#include <cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOKENIZER_JSON_META "\xE2\x96\x81" /* U+2581, SentencePiece's space */

static const cJSON *tj_get(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static bool tj_null(const cJSON *v)
{
    return !v || cJSON_IsNull(v);
}

/* A boolean member; `def` when absent or null. */
static bool tj_bool(const cJSON *o, const char *key, bool def)
{
    const cJSON *v = tj_get(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

/* A string member, or NULL. */
static const char *tj_str(const cJSON *o, const char *key)
{
    const cJSON *v = tj_get(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *tj_type(const cJSON *o)
{
    const char *s = tj_str(o, "type");
    return s ? s : "(no type)";
}

static int tj_refuse(const char *path, const char *what, const char *name)
{
    return err_set(ENG_EFORMAT, "%s: %s %.60s is not supported (docs/tokenizers.md)", path,
                   what, name);
}

/* An id: an integer in 0..TOKENIZER_MAX_ID-1, else -1. */
static int32_t tj_id(const cJSON *v)
{
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d < TOKENIZER_MAX_ID) || d != (double)(int32_t)d) return -1;
    return (int32_t)d;
}

/* What the pre-tokenizer and decoder said, checked against each other at the end. */
struct tj_pipe {
    bool byte_level, bl_regex, bl_prefix;
    char *split; /* the Split regex, rewritten for PCRE2 */
    bool metaspace, meta_split;
    enum tokenizer_meta meta;
    int32_t tmpl_bos; /* the TemplateProcessing's one special token before $A, or -1 */
    bool dec_bytes;   /* the decoder has ByteFallback: <0xXX> decodes to its byte */
};

/* ---- the regex dialect ---- */

/*
 * Hugging Face compiles Split patterns with Oniguruma, whose \s is the Unicode
 * White_Space set; PCRE2's \s with UCP also takes U+180E. Spell \s and \S out (inside a
 * class too, where \s becomes the set's members). \S inside a class has no such
 * spelling and is refused; the models' patterns never use it. Returns a new string or
 * NULL.
 */
static char *tj_regex(const char *re)
{
    static const char ws[] = TOKENIZER_WS;
    size_t n = strlen(re), cap = n * (sizeof ws + 4) + 1, k = 0;
    char *out = xmalloc(cap);
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = re[i];
        if (c == '\\' && i + 1 < n) {
            char d = re[++i];
            const char *put = NULL;
            char two[3] = {'\\', d, 0};
            if (d == 's')
                put = in_class ? ws : "[" TOKENIZER_WS "]";
            else if (d == 'S' && !in_class)
                put = "[^" TOKENIZER_WS "]";
            else if (d == 'S') {
                free(out);
                return NULL;
            } else
                put = two;
            size_t m = strlen(put);
            memcpy(out + k, put, m);
            k += m;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out[k++] = c;
            if (re[i + 1] == '^') out[k++] = re[++i];
            if (re[i + 1] == ']') out[k++] = re[++i]; /* a leading ] is literal */
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        out[k++] = c;
    }
    out[k] = '\0';
    return out;
}

/* ---- the components ---- */

static int tj_normalizer(struct tokenizer *t, const cJSON *n, const char *path)
{
    if (tj_null(n)) return 0;
    const char *type = tj_type(n);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *v, *list = tj_get(n, "normalizers");
        if (!cJSON_IsArray(list))
            return tj_refuse(path, "normalizer", "Sequence without a list");
        cJSON_ArrayForEach(v, list)
        {
            int err = tj_normalizer(t, v, path);
            if (err) return err;
        }
        return 0;
    }
    struct tokenizer_norm nm = {0};
    if (strcmp(type, "NFC") == 0) {
        nm.op = TOKENIZER_NORM_OP_NFC;
    } else if (strcmp(type, "Prepend") == 0 && tj_str(n, "prepend")) {
        nm.op = TOKENIZER_NORM_OP_PREPEND;
        nm.a = xstrdup(tj_str(n, "prepend"));
    } else if (strcmp(type, "Replace") == 0) {
        const char *from = tj_str(tj_get(n, "pattern"), "String"),
                   *to = tj_str(n, "content");
        if (!from || !*from || !to)
            return tj_refuse(path, "normalizer", "Replace with a regex pattern");
        nm.op = TOKENIZER_NORM_OP_REPLACE;
        nm.a = xstrdup(from);
        nm.b = xstrdup(to);
    } else {
        return tj_refuse(path, "normalizer", type);
    }
    nm.na = nm.a ? strlen(nm.a) : 0;
    nm.nb = nm.b ? strlen(nm.b) : 0;
    t->norm = xrealloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *t->norm);
    t->norm[t->n_norm++] = nm;
    return 0;
}

static int tj_pre_tokenizer(struct tj_pipe *p, const cJSON *n, const char *path)
{
    if (tj_null(n)) return 0;
    const char *type = tj_type(n);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *v, *list = tj_get(n, "pretokenizers");
        if (!cJSON_IsArray(list))
            return tj_refuse(path, "pre_tokenizer", "Sequence without a list");
        cJSON_ArrayForEach(v, list)
        {
            int err = tj_pre_tokenizer(p, v, path);
            if (err) return err;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        if (p->byte_level) return tj_refuse(path, "pre_tokenizer", "two ByteLevel steps");
        p->byte_level = true;
        p->bl_regex = tj_bool(n, "use_regex", true);
        p->bl_prefix = tj_bool(n, "add_prefix_space", true);
        /* Only ByteLevel may follow Split: a Split after it would cut byte-level text. */
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        const char *re = tj_str(tj_get(n, "pattern"), "Regex");
        const char *behavior = tj_str(n, "behavior");
        if (!re) return tj_refuse(path, "pre_tokenizer", "Split with a String pattern");
        if (!behavior || strcmp(behavior, "Isolated") != 0 || tj_bool(n, "invert", false))
            return tj_refuse(path, "pre_tokenizer",
                             "Split other than Isolated, not inverted");
        if (p->split || p->byte_level || p->metaspace)
            return tj_refuse(path, "pre_tokenizer", "Split after another step");
        p->split = tj_regex(re);
        if (!p->split)
            return tj_refuse(path, "pre_tokenizer", "Split regex with \\S in a class");
        return 0;
    }
    if (strcmp(type, "Metaspace") == 0) {
        const char *rep = tj_str(n, "replacement"), *scheme = tj_str(n, "prepend_scheme");
        if (!rep || strcmp(rep, TOKENIZER_JSON_META) != 0)
            return tj_refuse(path, "pre_tokenizer",
                             "Metaspace with a replacement other than U+2581");
        if (p->metaspace || p->split || p->byte_level)
            return tj_refuse(path, "pre_tokenizer", "Metaspace with other steps");
        p->metaspace = true;
        p->meta_split = tj_bool(n, "split", true);
        if (!scheme) /* older files: add_prefix_space */
            p->meta = tj_bool(n, "add_prefix_space", true) ? TOKENIZER_META_ALWAYS
                                                           : TOKENIZER_META_NEVER;
        else if (strcmp(scheme, "always") == 0)
            p->meta = TOKENIZER_META_ALWAYS;
        else if (strcmp(scheme, "first") == 0)
            p->meta = TOKENIZER_META_FIRST;
        else if (strcmp(scheme, "never") == 0)
            p->meta = TOKENIZER_META_NEVER;
        else
            return tj_refuse(path, "Metaspace prepend_scheme", scheme);
        return 0;
    }
    return tj_refuse(path, "pre_tokenizer", type);
}

/* The id of a TemplateProcessing special token, from its special_tokens map. */
static int32_t tj_tmpl_id(const cJSON *n, const char *name)
{
    const cJSON *ids = tj_get(tj_get(tj_get(n, "special_tokens"), name), "ids");
    if (!cJSON_IsArray(ids) || cJSON_GetArraySize(ids) != 1) return -1;
    return tj_id(cJSON_GetArrayItem(ids, 0));
}

static int tj_post_processor(struct tj_pipe *p, const cJSON *n, const char *path)
{
    if (tj_null(n)) return 0;
    const char *type = tj_type(n);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *v, *list = tj_get(n, "processors");
        if (!cJSON_IsArray(list))
            return tj_refuse(path, "post_processor", "Sequence without a list");
        cJSON_ArrayForEach(v, list)
        {
            int err = tj_post_processor(p, v, path);
            if (err) return err;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) return 0; /* offsets only: the ids are the same */
    if (strcmp(type, "TemplateProcessing") != 0)
        return tj_refuse(path, "post_processor", type);
    const cJSON *single = tj_get(n, "single"), *item;
    if (!cJSON_IsArray(single))
        return tj_refuse(path, "post_processor", "TemplateProcessing without single");
    bool seen_a = false;
    int n_before = 0;
    cJSON_ArrayForEach(item, single)
    {
        const cJSON *sp = tj_get(item, "SpecialToken");
        if (tj_get(item, "Sequence")) {
            seen_a = true;
        } else if (sp && !seen_a && n_before++ == 0) {
            const char *name = tj_str(sp, "id");
            p->tmpl_bos = name ? tj_tmpl_id(n, name) : -1;
            if (p->tmpl_bos < 0)
                return err_set(ENG_EFORMAT, "%s: TemplateProcessing names an unknown token",
                               path);
        } else {
            /* A second token before the text, or an EOS after it: prompts would need
             * them too, and nothing here adds them. */
            return tj_refuse(path, "post_processor",
                             "TemplateProcessing with tokens other than one BOS");
        }
    }
    return 0;
}

/* Whether the decoder undoes what the model and pre-tokenizer do; sets strip_lead. */
static int tj_decoder(struct tokenizer *t, struct tj_pipe *p, const cJSON *n,
                      const char *path)
{
    const char *type = tj_null(n) ? "null" : tj_type(n);
    if (t->kind == TOKENIZER_KIND_BYTE_LEVEL) {
        if (strcmp(type, "ByteLevel") != 0)
            return tj_refuse(path, "decoder (byte-level)", type);
        return 0;
    }
    if (strcmp(type, "Metaspace") == 0) {
        const char *scheme = tj_str(n, "prepend_scheme"), *rep = tj_str(n, "replacement");
        if (!rep || strcmp(rep, TOKENIZER_JSON_META) != 0)
            return tj_refuse(path, "decoder",
                             "Metaspace with a replacement other than U+2581");
        t->strip_lead =
            scheme ? strcmp(scheme, "never") != 0 : tj_bool(n, "add_prefix_space", true);
        return 0;
    }
    /* Llama 2's: Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0). */
    const cJSON *list = tj_get(n, "decoders"), *d;
    if (strcmp(type, "Sequence") != 0 || !cJSON_IsArray(list))
        return tj_refuse(path, "decoder (SentencePiece)", type);
    int step = 0;
    cJSON_ArrayForEach(d, list)
    {
        const char *dt = tj_type(d);
        bool ok = false;
        if (step == 0 && strcmp(dt, "Replace") == 0) {
            const char *from = tj_str(tj_get(d, "pattern"), "String"),
                       *to = tj_str(d, "content");
            ok = from && to && strcmp(from, TOKENIZER_JSON_META) == 0 &&
                 strcmp(to, " ") == 0;
        } else if (step == 1 && strcmp(dt, "ByteFallback") == 0) {
            ok = p->dec_bytes = true;
        } else if ((step == 1 || step == 2) && strcmp(dt, "Fuse") == 0) {
            ok = true;
            step = 2;
        } else if (step == 3 && strcmp(dt, "Strip") == 0) {
            const char *c = tj_str(d, "content");
            const cJSON *start = tj_get(d, "start"), *stop = tj_get(d, "stop");
            ok = c && strcmp(c, " ") == 0 && cJSON_IsNumber(start) &&
                 start->valuedouble == 1 && cJSON_IsNumber(stop) && stop->valuedouble == 0;
            t->strip_lead = ok;
        }
        if (!ok) return tj_refuse(path, "decoder step", dt);
        step++;
    }
    if (step < 3) return tj_refuse(path, "decoder", "Sequence without Replace and Fuse");
    return 0;
}

/* ---- the vocabulary ---- */

/* Name id and give it its raw bytes and display string for the kind. */
static void tj_set_token(struct tokenizer *t, int32_t id, const char *name, bool added,
                         bool special, bool dec_bytes, const int16_t *cp_byte)
{
    struct tokenizer_tok *tok = &t->toks[id];
    size_t n = strlen(name);
    tok->named = true;
    tok->added = added;
    tok->special = special;
    tok->name_off = tokenizer_pool_add(t, name, n);
    tok->name_len = (uint32_t)n;
    if (special) {
        tok->str_off = tok->name_off;
        return;
    }
    char *raw = xmalloc(n + 1);
    size_t k = 0;
    unsigned hex;
    int used = 0;
    if (added) {
        memcpy(raw, name, k = n); /* an added token's content is its text */
    } else if (t->kind == TOKENIZER_KIND_BYTE_LEVEL) {
        /* A character outside the byte alphabet stands for its own UTF-8, as in
         * Hugging Face's ByteLevel decoder. */
        if (!tokenizer_unmap(cp_byte, name, n, raw, &k)) memcpy(raw, name, k = n);
    } else if (dec_bytes && n == 6 && sscanf(name, "<0x%2X>%n", &hex, &used) == 1 &&
               used == 6) {
        /* ByteFallback: <0x0A> is the byte 0x0A. Without it in the decoder (Metaspace
         * alone) Hugging Face prints the name, and so does this. */
        raw[k++] = (char)hex;
    } else {
        for (size_t i = 0; i < n;) { /* Replace("▁", " ") */
            if (i + 3 <= n && memcmp(name + i, TOKENIZER_JSON_META, 3) == 0) {
                raw[k++] = ' ';
                i += 3;
            } else {
                raw[k++] = name[i++];
            }
        }
    }
    tok->bytes_off = tokenizer_pool_add(t, raw, k);
    tok->n_bytes = (uint32_t)k;
    tok->str_off = tokenizer_pool_add_display(t, raw, k);
    free(raw);
}

static int tj_vocab(struct tokenizer *t, const cJSON *vocab, const cJSON *added,
                    bool dec_bytes, const char *path)
{
    int16_t cp_byte[TOKENIZER_N_CP];
    uint16_t byte_cp[256];
    tokenizer_byte_map(byte_cp, cp_byte);
    const cJSON *item;
    cJSON_ArrayForEach(item, vocab)
    {
        int32_t id = tj_id(item);
        if (t->toks[id].named)
            return err_set(ENG_EFORMAT, "%s: id %d is given to two tokens", path, id);
        tj_set_token(t, id, item->string, false, false, dec_bytes, cp_byte);
        if (!tokenizer_add_name(t, id))
            return err_set(ENG_EFORMAT, "%s: token \"%.40s\" appears twice", path,
                           item->string);
    }
    cJSON_ArrayForEach(item, added)
    {
        int32_t id = tj_id(tj_get(item, "id"));
        const char *content = tj_str(item, "content");
        bool special = tj_bool(item, "special", false);
        struct tokenizer_tok *tok = &t->toks[id];
        if (tok->named && (tok->name_len != strlen(content) ||
                           memcmp(t->pool + tok->name_off, content, tok->name_len) != 0))
            return err_set(ENG_EFORMAT,
                           "%s: added token \"%.40s\" takes id %d from \"%.40s\"", path,
                           content, id, t->pool + tok->name_off);
        bool hashed = tok->named;
        tj_set_token(t, id, content, true, special, dec_bytes, cp_byte);
        if (!hashed && !tokenizer_add_name(t, id))
            return err_set(ENG_EFORMAT, "%s: added token \"%.40s\" is also another id",
                           path, content);
        t->added = xrealloc(t->added, (size_t)(t->n_added + 1) * sizeof *t->added);
        t->added[t->n_added++] = id;
        t->added_first[(unsigned char)content[0]] = true;
    }
    /* Longest first, so that the first match at a position is the longest one. */
    for (int32_t i = 1; i < t->n_added; i++)
        for (int32_t j = i;
             j > 0 && t->toks[t->added[j]].name_len > t->toks[t->added[j - 1]].name_len;
             j--) {
            int32_t x = t->added[j];
            t->added[j] = t->added[j - 1];
            t->added[j - 1] = x;
        }
    return 0;
}

static int tj_merges(struct tokenizer *t, const cJSON *merges, const char *path)
{
    tokenizer_merges_init(t, (size_t)cJSON_GetArraySize(merges));
    const cJSON *m;
    int32_t rank = 0;
    char *joined = NULL;
    size_t cap = 0;
    int err = 0;
    cJSON_ArrayForEach(m, merges)
    {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if (cJSON_IsString(m)) { /* "left right" */
            const char *sp = strchr(m->valuestring, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                a = m->valuestring;
                na = (size_t)(sp - a);
                b = sp + 1;
                nb = strlen(b);
            }
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1))) { /* [left, right] */
            a = cJSON_GetArrayItem(m, 0)->valuestring;
            b = cJSON_GetArrayItem(m, 1)->valuestring;
            na = strlen(a);
            nb = strlen(b);
        }
        if (!a || !na || !nb) {
            err = err_set(ENG_EFORMAT, "%s: merge %d is not \"a b\" or [a, b]", path, rank);
            break;
        }
        if (na + nb > cap) joined = xrealloc(joined, cap = 2 * (na + nb));
        memcpy(joined, a, na);
        memcpy(joined + na, b, nb);
        int32_t ia = tokenizer_find_name(t, a, na), ib = tokenizer_find_name(t, b, nb);
        int32_t iab = tokenizer_find_name(t, joined, na + nb);
        if (ia < 0 || ib < 0 || iab < 0) {
            err =
                err_set(ENG_EFORMAT, "%s: merge %d (\"%.*s\" + \"%.*s\") leaves the vocab",
                        path, rank, (int)MIN(na, 40), a, (int)MIN(nb, 40), b);
            break;
        }
        tokenizer_add_merge(t, ia, ib, iab, rank++);
    }
    free(joined);
    return err;
}

/* The single-byte tokens (byte-level) or <0xXX> tokens (SentencePiece). */
static int tj_bytes(struct tokenizer *t, const char *path)
{
    for (int b = 0; b < 256; b++) {
        char s[8];
        size_t n = t->kind == TOKENIZER_KIND_BYTE_LEVEL
                       ? tokenizer_put_utf8(s, t->byte_cp[b])
                       : (size_t)snprintf(s, sizeof s, "<0x%02X>", b);
        int32_t id = tokenizer_find_name(t, s, n);
        if (id >= 0 && t->toks[id].added) id = -1;
        if (id < 0 && t->kind == TOKENIZER_KIND_BYTE_LEVEL)
            return err_set(ENG_EFORMAT,
                           "%s: no token for byte 0x%02x (not a byte-level BPE "
                           "vocabulary)",
                           path, b);
        t->byte_tok[b] = id;
    }
    return 0;
}

/* Checks every id and content before anything is built; returns the vocab size. */
static int tj_sizes(const cJSON *vocab, const cJSON *added, const char *path, int32_t *size)
{
    int32_t max_id = -1;
    const cJSON *item;
    cJSON_ArrayForEach(item, vocab)
    {
        int32_t id = tj_id(item);
        if (id < 0)
            return err_set(ENG_EFORMAT, "%s: token \"%.40s\" has no valid id", path,
                           item->string ? item->string : "");
        max_id = MAX(max_id, id);
    }
    cJSON_ArrayForEach(item, added)
    {
        int32_t id = tj_id(tj_get(item, "id"));
        const char *content = tj_str(item, "content");
        if (id < 0 || !content || !*content)
            return err_set(ENG_EFORMAT, "%s: an added token has no id or content", path);
        const char *opt[] = {"lstrip", "rstrip", "single_word"};
        for (size_t i = 0; i < ARRAY_LEN(opt); i++)
            if (tj_bool(item, opt[i], false))
                return err_set(ENG_EFORMAT,
                               "%s: added token \"%.40s\" with %s is not "
                               "supported (docs/tokenizers.md)",
                               path, content, opt[i]);
        max_id = MAX(max_id, id);
    }
    if (max_id < 0) return err_set(ENG_EFORMAT, "%s: the vocabulary is empty", path);
    *size = max_id + 1;
    return 0;
}

static int tj_build(struct tokenizer **out, const cJSON *root, const char *path)
{
    struct tokenizer *t = NULL;
    struct tj_pipe p = {.tmpl_bos = -1};
    const cJSON *model = tj_get(root, "model"), *added = tj_get(root, "added_tokens");
    const cJSON *vocab = tj_get(model, "vocab"), *merges = tj_get(model, "merges");
    int err;
    if (!cJSON_IsObject(root) || !cJSON_IsObject(model))
        return err_set(ENG_EFORMAT, "%s: no \"model\" object", path);
    if (strcmp(tj_type(model), "BPE") != 0) return tj_refuse(path, "model", tj_type(model));
    const cJSON *dropout = tj_get(model, "dropout");
    const char *prefix = tj_str(model, "continuing_subword_prefix");
    const char *suffix = tj_str(model, "end_of_word_suffix");
    if (!tj_null(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return tj_refuse(path, "BPE option", "dropout");
    if ((prefix && *prefix) || (suffix && *suffix))
        return tj_refuse(path, "BPE option",
                         prefix && *prefix ? "continuing_subword_prefix"
                                           : "end_of_word_suffix");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return err_set(ENG_EFORMAT, "%s: the BPE model needs a vocab object and merges",
                       path);
    if (!tj_null(added) && !cJSON_IsArray(added))
        return err_set(ENG_EFORMAT, "%s: added_tokens is not a list", path);
    int32_t size = 0;
    if ((err = tj_sizes(vocab, added, path, &size))) return err;
    if ((err = tj_pre_tokenizer(&p, tj_get(root, "pre_tokenizer"), path))) goto fail;
    if (p.split && (!p.byte_level || p.bl_regex || p.bl_prefix)) {
        err =
            tj_refuse(path, "pre_tokenizer",
                      "Split not followed by ByteLevel(use_regex=false, no prefix space)");
        goto fail;
    }
    t = tokenizer_alloc(size);
    t->kind = p.byte_level ? TOKENIZER_KIND_BYTE_LEVEL : TOKENIZER_KIND_SENTENCEPIECE;
    t->prefix_space = p.byte_level && p.bl_prefix;
    t->meta = p.metaspace ? p.meta : TOKENIZER_META_NONE;
    t->meta_split = p.metaspace && p.meta_split;
    t->ignore_merges = tj_bool(model, "ignore_merges", false);
    t->byte_fallback = tj_bool(model, "byte_fallback", false);
    t->fuse_unk = tj_bool(model, "fuse_unk", false);
    /* The decoder first: whether <0xXX> stands for a byte depends on it. */
    if ((err = tj_decoder(t, &p, tj_get(root, "decoder"), path))) goto fail;
    if ((err = tj_vocab(t, vocab, added, p.dec_bytes, path))) goto fail;
    if ((err = tj_bytes(t, path))) goto fail;
    if ((err = tj_merges(t, merges, path))) goto fail;
    const char *unk = tj_str(model, "unk_token");
    if (unk && (t->unk = tokenizer_find_name(t, unk, strlen(unk))) < 0) {
        err =
            err_set(ENG_EFORMAT, "%s: unk_token \"%.40s\" is not in the vocab", path, unk);
        goto fail;
    }
    if ((err = tj_normalizer(t, tj_get(root, "normalizer"), path))) goto fail;
    /* A normalized added token is matched after normalization in Hugging Face; before
     * it here. The two agree when there is no normalizer, and for NFC on the tokens
     * models use (ASCII); a Replace or Prepend could change the token, so refuse. */
    const cJSON *a;
    bool only_nfc = true;
    for (int32_t i = 0; i < t->n_norm; i++)
        only_nfc &= t->norm[i].op == TOKENIZER_NORM_OP_NFC;
    cJSON_ArrayForEach(a, added)
    {
        if (tj_bool(a, "normalized", false) && !only_nfc) {
            err = tj_refuse(path, "added token",
                            "with normalized: true under this normalizer");
            goto fail;
        }
    }
    if ((err = tj_post_processor(&p, tj_get(root, "post_processor"), path))) goto fail;
    if (p.byte_level && (p.bl_regex || p.split) &&
        (err = tokenizer_compile(t, p.bl_regex ? NULL : p.split)))
        goto fail;
    t->bos = p.tmpl_bos;
    t->add_bos = p.tmpl_bos >= 0;
    static const char *const eos_names[] = {"</s>", "<|endoftext|>", "<|end_of_text|>"};
    int32_t eos = -1;
    for (size_t i = 0; i < ARRAY_LEN(eos_names) && eos < 0; i++) {
        eos = tokenizer_find_name(t, eos_names[i], strlen(eos_names[i]));
        if (eos >= 0 && !t->toks[eos].special) eos = -1;
    }
    tokenizer_set_eos(t, &eos, 1);
    free(p.split);
    *out = t;
    return 0;
fail:
    free(p.split);
    tokenizer_destroy(t);
    return err;
}

int tokenizer_load_json(struct tokenizer **out, const char *path)
{
    char *buf;
    size_t len;
    int err = util_read_file(path, &buf, &len);
    if (err) return err;
    cJSON *root = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!root) return err_set(ENG_EFORMAT, "%s: not valid JSON", path);
    err = tj_build(out, root, path);
    cJSON_Delete(root);
    return err;
}

/* ---- the folder: tokenizer_config.json and generation_config.json ---- */

static bool tj_exists(const char *dir, const char *name)
{
    char *p = util_path_join(dir, name);
    bool ok = access(p, R_OK) == 0;
    free(p);
    return ok;
}

/* A config file's JSON object, or *root = NULL when the folder has no such file. */
static int tj_read_config(const char *dir, const char *name, cJSON **root)
{
    *root = NULL;
    if (!tj_exists(dir, name)) return 0;
    char *path = util_path_join(dir, name), *buf;
    size_t len;
    int err = util_read_file(path, &buf, &len);
    if (!err) {
        *root = cJSON_ParseWithLength(buf, len);
        free(buf);
        if (!cJSON_IsObject(*root)) {
            cJSON_Delete(*root);
            *root = NULL;
            err = err_set(ENG_EFORMAT, "%s: not a JSON object", path);
        }
    }
    free(path);
    return err;
}

/*
 * A token named in tokenizer_config.json: a string or an AddedToken object
 * {"content": ...}. *id = -1 for null or absent; ENG_EFORMAT when the vocab lacks it.
 */
static int tj_config_token(const struct tokenizer *t, const cJSON *cfg, const char *key,
                           const char *dir, int32_t *id, bool *given)
{
    const cJSON *v = tj_get(cfg, key);
    *id = -1;
    *given = v != NULL;
    if (tj_null(v)) return 0;
    const char *s = cJSON_IsString(v) ? v->valuestring : tj_str(v, "content");
    if (!s)
        return err_set(ENG_EFORMAT, "%s/tokenizer_config.json: %s is not a token", dir,
                       key);
    *id = tokenizer_find_name(t, s, strlen(s));
    if (*id < 0)
        return err_set(ENG_EFORMAT,
                       "%s/tokenizer_config.json: %s \"%.40s\" is not in the "
                       "vocabulary",
                       dir, key, s);
    return 0;
}

static int tj_configs(struct tokenizer *t, const char *dir)
{
    cJSON *cfg = NULL, *gen = NULL;
    int err = tj_read_config(dir, "tokenizer_config.json", &cfg);
    if (!err) err = tj_read_config(dir, "generation_config.json", &gen);
    int32_t bos = -1, cfg_eos = -1, eos[64], n_eos = 0;
    bool bos_given = false, eos_given;
    if (!err && cfg) err = tj_config_token(t, cfg, "bos_token", dir, &bos, &bos_given);
    if (!err && cfg) err = tj_config_token(t, cfg, "eos_token", dir, &cfg_eos, &eos_given);
    if (err) goto out;
    const cJSON *ids = tj_get(gen, "eos_token_id"), *v;
    if (cJSON_IsNumber(ids)) {
        eos[n_eos++] = tj_id(ids);
    } else if (cJSON_IsArray(ids)) {
        cJSON_ArrayForEach(v, ids)
        {
            if (n_eos == (int32_t)ARRAY_LEN(eos)) break;
            eos[n_eos++] = tj_id(v);
        }
    } else if (!tj_null(ids)) {
        eos[n_eos++] = -1;
    }
    if (cfg_eos >= 0) eos[n_eos++] = cfg_eos;
    for (int32_t i = 0; i < n_eos; i++)
        if (eos[i] < 0 || eos[i] >= t->vocab_size) {
            err = err_set(ENG_EFORMAT,
                          "%s/generation_config.json: eos_token_id is not an id "
                          "(or a list of ids) in 0..%d",
                          dir, t->vocab_size - 1);
            goto out;
        }
    if (n_eos) tokenizer_set_eos(t, eos, n_eos);
    /* The BOS: the template's, else tokenizer_config's, else generation_config's id. */
    int32_t gen_bos = tj_id(tj_get(gen, "bos_token_id"));
    if (t->bos < 0) t->bos = bos >= 0 ? bos : gen_bos < t->vocab_size ? gen_bos : -1;
    const cJSON *add = tj_get(cfg, "add_bos_token");
    if (cJSON_IsBool(add)) t->add_bos = cJSON_IsTrue(add);
    if (t->add_bos && t->bos < 0) {
        err = err_set(ENG_EFORMAT, "%s: add_bos_token is true but no BOS token is named",
                      dir);
        goto out;
    }
out:
    cJSON_Delete(cfg);
    cJSON_Delete(gen);
    return err;
}

int tokenizer_load_dir(struct tokenizer **out, const char *dir)
{
    struct tokenizer *t = NULL;
    int err;
    if (tj_exists(dir, "tokenizer.json")) {
        char *p = util_path_join(dir, "tokenizer.json");
        err = tokenizer_load_json(&t, p);
        free(p);
    } else if (tj_exists(dir, "vocab.json") && tj_exists(dir, "merges.txt")) {
        char *v = util_path_join(dir, "vocab.json"), *m = util_path_join(dir, "merges.txt");
        err = tokenizer_load(&t, v, m);
        free(v);
        free(m);
    } else {
        return err_set(ENG_ENOTFOUND, "%s: no tokenizer.json, nor vocab.json + merges.txt",
                       dir);
    }
    if (!err) err = tj_configs(t, dir);
    if (err) {
        tokenizer_destroy(t);
        return err;
    }
    *out = t;
    return 0;
}
