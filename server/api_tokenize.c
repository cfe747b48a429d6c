/*
 * api_tokenize.c - POST /tokenize and POST /detokenize bodies (see api_tokenize.h).
 *
 * Owns: nothing between calls; each call's cJSON tree, id array and output buffer
 * are freed before it returns (the output is handed to the caller).
 * Validation order, as in cmpl.c: the body must be a UTF-8 JSON object;
 * then each known field's type; then the model (404); then what the fields ask
 * for together (prompt or messages; the ids in range). The first problem found is
 * the one reported. Unknown fields are ignored, as vLLM and OpenAI do.
 * Thread: any (no state).
 */
#include "api_tokenize.h"

#include "chat.h"

#include "tokenizer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the response, written as it goes ---- */

struct out {
    char *buf; /* NUL-terminated */
    size_t len, cap;
    char *tmp; /* scratch for one string made valid UTF-8 */
    size_t tmp_len, tmp_cap;
};

static void out_put(struct out *o, const char *s, size_t n)
{
    json_buf_reserve(&o->buf, &o->cap, o->len + n + 1);
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
}

static void out_lit(struct out *o, const char *s)
{
    out_put(o, s, strlen(s));
}

static void out_int(struct out *o, long long v)
{
    char b[24];
    const int n = snprintf(b, sizeof b, "%lld", v);
    out_put(o, b, (size_t)n);
}

/* s[0..n) as a JSON string: made valid UTF-8 first (token bytes need not be, and
 * vocab.json's are not checked; a NUL becomes U+FFFD, as in every text we return),
 * then quoted with the escapes RFC 8259 requires (", \\ and U+0000..U+001F; cJSON
 * writes the same). Not cJSON's printer: it takes an int size, and a detokenized
 * text of 16 M long tokens may pass 2 GiB once escaped. */
static void out_string(struct out *o, const char *s, size_t n)
{
    o->tmp_len = 0;
    json_utf8_append(&o->tmp, &o->tmp_len, &o->tmp_cap, s, n, NULL);
    const unsigned char *t = (const unsigned char *)o->tmp;
    out_put(o, "\"", 1);
    size_t run = 0; /* start of the bytes not written yet, which need no escape */
    for (size_t i = 0; i < o->tmp_len; i++) {
        if (t[i] >= 0x20 && t[i] != '"' && t[i] != '\\') continue;
        out_put(o, o->tmp + run, i - run);
        char esc[8];
        int k = 2;
        esc[0] = '\\';
        switch (t[i]) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default: k = snprintf(esc, sizeof esc, "\\u%04x", t[i]); break;
        }
        out_put(o, esc, (size_t)k);
        run = i + 1;
    }
    out_put(o, o->tmp + run, o->tmp_len - run);
    out_put(o, "\"", 1);
}

static char *out_take(struct out *o, size_t *out_len)
{
    free(o->tmp);
    *out_len = o->len;
    return o->buf;
}

/* ---- POST /tokenize ---- */

/* {"count","max_model_len","tokens","token_strs"}, vLLM's field order. */
static char *tokenize_body(const struct api_model *m, const int32_t *ids, int32_t n,
                           bool strs, size_t *out_len)
{
    struct out o = {0};
    out_lit(&o, "{\"count\":");
    out_int(&o, n);
    out_lit(&o, ",\"max_model_len\":");
    out_int(&o, m->max_model_len);
    out_lit(&o, ",\"tokens\":[");
    for (int32_t i = 0; i < n; i++) {
        if (i) out_put(&o, ",", 1);
        out_int(&o, ids[i]);
    }
    out_lit(&o, "],\"token_strs\":");
    if (!strs) {
        out_lit(&o, "null");
    } else {
        out_put(&o, "[", 1);
        for (int32_t i = 0; i < n; i++) {
            if (i) out_put(&o, ",", 1);
            const char *name = tokenizer_token_name(m->tok, ids[i]);
            out_string(&o, name, strlen(name));
        }
        out_put(&o, "]", 1);
    }
    out_put(&o, "}", 1);
    return out_take(&o, out_len);
}

char *api_tokenize(const char *body, size_t len, const struct api_model *m, size_t *out_len,
                   struct api_error *err)
{
    cJSON *root = json_parse_object(body, len, err);
    if (!root) return NULL;
    char *res = NULL;
    int32_t *ids = NULL, n = 0;
    bool add_special = true, strs = false;
    const cJSON *prompt = json_field(root, "prompt");
    const cJSON *messages = json_field(root, "messages");
    if (prompt && !cJSON_IsString(prompt)) {
        json_type_error(err, "prompt", "a string", prompt);
        goto done;
    }
    if (messages && !cJSON_IsArray(messages)) {
        json_type_error(err, "messages", "an array of messages", messages);
        goto done;
    }
    if (json_read_bool(json_field(root, "add_special_tokens"), "add_special_tokens",
                  &add_special, err) ||
        json_read_bool(json_field(root, "return_token_strs"), "return_token_strs", &strs, err))
        goto done;
    if (json_model_check(json_field(root, "model"), m->id, err)) goto done;
    if (prompt && messages) {
        API_BAD_VALUE(err, "messages",
                  "Give either 'prompt' (text) or 'messages' (a chat), not both.");
        goto done;
    }
    if (messages) {
        /* vLLM's chat form: the messages through the model's chat template, as
         * /v1/chat/completions renders them (the template writes its own special
         * tokens, so add_special_tokens adds nothing here). */
        if (!m->chat)
            chat_no_template(err, m->id);
        else if (!chat_prompt_ids(root, m->chat, &ids, &n, err))
            res = tokenize_body(m, ids, n, strs, out_len);
        goto done;
    }
    if (!prompt) {
        API_BAD_VALUE(err, "prompt", "You must provide a prompt parameter.");
        goto done;
    }
    if (!tokenizer_has_text(m->tok)) {
        API_BAD_VALUE(
            err, "prompt",
            "The model '%s' has no tokenizer (its folder has no tokenizer.json or "
            "vocab.json + merges.txt).",
            m->id);
        goto done;
    }
    /* The body has no raw NUL and no \u0000, so the C string is all of the prompt. */
    if (tokenizer_encode(m->tok, prompt->valuestring, strlen(prompt->valuestring),
                         add_special, &ids, &n)) {
        api_error_set(err, 500, API_ERR_SERVER, NULL, NULL, "tokenizing the prompt failed");
        goto done;
    }
    res = tokenize_body(m, ids, n, strs, out_len);
done:
    free(ids);
    cJSON_Delete(root);
    return res;
}

/* ---- POST /detokenize ---- */

/* The ids of "tokens" that stand for text (ids past the tokenizer's vocabulary are
 * valid and left out); -1 with err set at the first element that is not a valid id. */
static int read_ids(const cJSON *tokens, const struct api_model *m, int32_t **out,
                    int32_t *n_out, struct api_error *err)
{
    size_t n = 0;
    for (const cJSON *c = tokens->child; c; c = c->next)
        n++;
    if (n > INT32_MAX)
        return API_BAD_VALUE(err, "tokens", "Too many tokens: at most %d per request.",
                         INT32_MAX);
    const int32_t tok_vocab = tokenizer_vocab_size(m->tok);
    int32_t *ids = xmalloc((n ? n : 1) * sizeof *ids);
    const int32_t got = json_read_token_ids(tokens, m->vocab_size, "tokens", "tokens", ids, err);
    if (got < 0) {
        free(ids);
        return -1;
    }
    int32_t k = 0;
    for (int32_t i = 0; i < got; i++)
        if (ids[i] < tok_vocab) ids[k++] = ids[i];
    *out = ids;
    *n_out = k;
    return 0;
}

char *api_tokenize_detokenize(const char *body, size_t len, const struct api_model *m,
                              size_t *out_len, struct api_error *err)
{
    cJSON *root = json_parse_object(body, len, err);
    if (!root) return NULL;
    char *res = NULL, *raw = NULL;
    size_t raw_len = 0;
    int32_t *ids = NULL, n = 0;
    struct out o = {0};
    const cJSON *tokens = json_field(root, "tokens");
    if (tokens && !cJSON_IsArray(tokens)) {
        json_type_error(err, "tokens", "an array of token ids", tokens);
        goto done;
    }
    if (json_model_check(json_field(root, "model"), m->id, err)) goto done;
    if (!tokens) {
        API_BAD_VALUE(err, "tokens", "You must provide a tokens parameter.");
        goto done;
    }
    if (!tokenizer_has_text(m->tok)) {
        API_BAD_VALUE(
            err, "tokens",
            "The model '%s' has no tokenizer (its folder has no tokenizer.json or "
            "vocab.json + merges.txt): its tokens have no text.",
            m->id);
        goto done;
    }
    if (read_ids(tokens, m, &ids, &n, err)) goto done;
    cJSON_Delete(root); /* the ids are copied: free the tree before the text grows */
    root = NULL;
    /* Special tokens as their names, like Hugging Face's decode by default. */
    if (tokenizer_decode(m->tok, ids, n, false, &raw, &raw_len)) {
        api_error_set(err, 500, API_ERR_SERVER, NULL, NULL, "decoding the tokens failed");
        goto done;
    }
    out_lit(&o, "{\"prompt\":");
    out_string(&o, raw, raw_len);
    out_put(&o, "}", 1);
    res = out_take(&o, out_len);
done:
    free(raw);
    free(ids);
    cJSON_Delete(root);
    return res;
}
