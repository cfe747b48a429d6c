/*
 * json.c - the shared cJSON helpers (see json.h).
 */
#include "json.h"

#include "tokenizer.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int json_type_error(struct api_error *e, const char *param, const char *expected,
                    const cJSON *got)
{
    return api_error_set(e, 400, API_ERR_INVALID, param, NULL,
                         "Invalid type for '%s': expected %s, but got %s instead.", param,
                         expected, json_type_name(got));
}

int json_read_bool(const cJSON *item, const char *param, bool *out, struct api_error *e)
{
    if (!item || cJSON_IsNull(item)) return 0;
    if (!cJSON_IsBool(item)) return json_type_error(e, param, "a boolean", item);
    *out = cJSON_IsTrue(item);
    return 0;
}

int json_model_check(const cJSON *item, const char *served_id, struct api_error *e)
{
    if (!item || cJSON_IsNull(item)) return 0;
    if (!cJSON_IsString(item)) return json_type_error(e, "model", "a string", item);
    if (strcmp(item->valuestring, served_id) == 0) return 0;
    return api_error_set(e, 404, API_ERR_INVALID, "model", "model_not_found",
                         "The model `%.*s` does not exist.",
                         json_clip_len(item->valuestring, 256), item->valuestring);
}

int json_read_token_ids(const cJSON *arr, int32_t vocab, const char *param, const char *name,
                       int32_t *ids, struct api_error *e)
{
    int32_t n = 0;
    for (const cJSON *c = arr->child; c; c = c->next, n++) {
        int64_t v = 0;
        if (!cJSON_IsNumber(c))
            return API_BAD_VALUE(e, param,
                                 "Invalid type for '%s[%d]': expected a token id "
                                 "(integer), but got %s instead.",
                                 name, n, json_type_name(c));
        if (!json_int_in(c, 0, vocab - 1, &v))
            return API_BAD_VALUE(e, param,
                                 "Invalid value for '%s[%d]': %.15g is not a token id in "
                                 "0..%d.",
                                 name, n, c->valuedouble, vocab - 1);
        ids[n] = (int32_t)v;
    }
    return n;
}

char *json_print(const cJSON *item, size_t *len)
{
    char *s = cJSON_PrintUnformatted(item);
    CHECK(s != NULL); /* cJSON fails only when malloc does */
    if (len) *len = strlen(s);
    return s;
}

char *json_sse(const cJSON *item, size_t *len)
{
    size_t n;
    char *body = json_print(item, &n);
    static const char pre[] = "data: ", post[] = "\n\n";
    const size_t total = sizeof pre - 1 + n + sizeof post - 1;
    char *out = xmalloc(total + 1);
    memcpy(out, pre, sizeof pre - 1);
    memcpy(out + sizeof pre - 1, body, n);
    memcpy(out + sizeof pre - 1 + n, post, sizeof post); /* with the NUL */
    free(body);
    if (len) *len = total;
    return out;
}

const cJSON *json_field(const cJSON *obj, const char *key)
{
    const cJSON *found = NULL;
    for (const cJSON *c = obj ? obj->child : NULL; c; c = c->next)
        if (c->string && strcmp(c->string, key) == 0) found = c;
    return found && !cJSON_IsNull(found) ? found : NULL;
}

const char *json_type_name(const cJSON *item)
{
    if (!item || cJSON_IsNull(item)) return "null";
    if (cJSON_IsBool(item)) return "a boolean";
    if (cJSON_IsNumber(item)) return "a number";
    if (cJSON_IsString(item)) return "a string";
    if (cJSON_IsArray(item)) return "an array";
    if (cJSON_IsObject(item)) return "an object";
    return "an unknown value";
}

bool json_int_in(const cJSON *item, int64_t lo, int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(item)) return false;
    const double d = item->valuedouble;
    if (!isfinite(d) || d != floor(d)) return false;
    /* Doubles cannot hold every int64: 9223372036854775807 parses as 2^63, so 2^63
     * reads as INT64_MAX; anything further out is out of range for every caller. */
    const double two63 = 9223372036854775808.0;
    if (d < -two63 || d > two63) return false;
    const int64_t v = d >= two63 ? INT64_MAX : (int64_t)d;
    if (v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool json_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) { /* the common case: ASCII */
            i++;
            continue;
        }
        size_t len;
        if (tokenizer_utf8_next(p + i, n - i, &len) != TOKENIZER_UTF8_CHAR) return false;
        i += len;
    }
    return true;
}

cJSON *json_parse_object(const char *body, size_t len, struct api_error *e)
{
    if (len == 0) {
        api_error_set(e, 400, API_ERR_INVALID, NULL, NULL,
                      "The request body is empty; expected a JSON object.");
        return NULL;
    }
    /* RFC 8259 JSON is UTF-8 and never holds a raw NUL. cJSON would accept both, and
     * echoing invalid bytes back would make our response invalid JSON. */
    if (memchr(body, 0, len) || !json_utf8_valid(body, len)) {
        api_error_set(e, 400, API_ERR_INVALID, NULL, NULL,
                      "The request body is not valid UTF-8 JSON.");
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (root) { /* cJSON stops after the value: anything but whitespace may follow */
        for (const char *c = end; c < body + len; c++)
            if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r') {
                cJSON_Delete(root);
                root = NULL;
                end = c;
                break;
            }
    }
    if (!root) {
        const size_t at =
            end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        api_error_set(e, 400, API_ERR_INVALID, NULL, NULL,
                      "We could not parse the JSON body of your request (error near byte "
                      "%zu).",
                      at);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        api_error_set(e, 400, API_ERR_INVALID, NULL, NULL,
                      "The request body must be a JSON object, not %s.",
                      json_type_name(root));
        cJSON_Delete(root);
        return NULL;
    }
    if (json_has_nul_escape(body, len)) {
        api_error_set(e, 400, API_ERR_INVALID, NULL, NULL,
                      "Strings in the request must not contain U+0000.");
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int json_clip_len(const char *s, int max)
{
    int n = (int)strnlen(s, (size_t)max + 1);
    if (n <= max) return n;
    n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

void json_buf_reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    *buf = xrealloc(*buf, c);
    *cap = c;
}

void json_utf8_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n,
                      int64_t *n_chars)
{
    static const char repl[] = "\xEF\xBF\xBD";
    json_buf_reserve(buf, cap, *len + 3 * n + 1); /* a byte becomes at most U+FFFD */
    const unsigned char *u = (const unsigned char *)s;
    int64_t chars = 0;
    size_t i = 0;
    while (i < n) {
        size_t l = 1;
        if (u[i] >= 0x80 && tokenizer_utf8_next(u + i, n - i, &l) == TOKENIZER_UTF8_CHAR) {
            memcpy(*buf + *len, s + i, l);
            *len += l;
        } else if (u[i] >= 0x80 || u[i] == 0) {
            memcpy(*buf + *len, repl, 3);
            *len += 3;
        } else {
            (*buf)[(*len)++] = s[i];
        }
        i += l;
        chars++;
    }
    (*buf)[*len] = '\0';
    if (n_chars) *n_chars += chars;
}

bool json_has_nul_escape(const char *s, size_t n)
{
    /* Backslashes occur only inside strings in valid JSON, and each escape is a
     * backslash plus one character, so skipping that character keeps "\\u0000" (an
     * escaped backslash, then text) from matching. */
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0) return true;
        i++;
    }
    return false;
}

cJSON *json_float(float f)
{
    if (!isfinite(f)) return cJSON_CreateNumber((double)f); /* printed as null */
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) { /* 9 significant digits always round-trip */
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f) break;
    }
    return cJSON_CreateNumber(strtod(buf, NULL));
}
